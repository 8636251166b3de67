"""One module per ``healthd`` subcommand: ``add_arguments(parser)`` and ``run(args) -> exit code``."""
