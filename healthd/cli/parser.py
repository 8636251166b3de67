"""The ``healthd`` argument parser (argparse): the built-in commands' options and the plugins' commands.

Imported by ``healthd.cli.main`` only for a command line that needs parsing, and by ``healthd.cli.hook``
for a person's options.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn, Optional, Sequence

from healthd import __version__
from healthd.commands import COMMANDS, command_module
from healthd.exitcodes import EX_USAGE


class Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error, which Nagios would read as CRITICAL; use EX_USAGE."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: error: {message}\n")


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser; only the command named in ``argv`` has its module imported for its options."""
    parser = Parser(prog="healthd", description="Node health checks for GPU clusters run by Slurm.")
    parser.add_argument("--version", action="version", version=f"healthd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    # A parser costs a millisecond or two: `healthd status` builds only its own. The full list
    # is built when it is shown (top-level --help) or when the command is not a known one.
    only = None
    if chosen in COMMANDS and not any(arg in ("-h", "--help") for arg in argv[: list(argv).index(chosen)]):
        only = chosen
    for name, (module, help_text) in COMMANDS.items():
        if only is not None and name != only:
            continue
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        command_parser.set_defaults(_module=module)
        if name == chosen:
            command_module(module).add_arguments(command_parser)
    if chosen not in COMMANDS:
        _add_plugin_commands(sub, chosen)
    return parser


def _add_plugin_commands(sub: Any, chosen: Optional[str]) -> None:
    """The commands plugins contribute; none may replace a built-in one."""
    from healthd.checks.plugin import discover_commands

    for command in discover_commands():
        if command.name in COMMANDS:
            continue
        command_parser = sub.add_parser(command.name, help=command.help, description=command.help)
        command_parser.set_defaults(_module=None, _run=command.run)
        if command.name == chosen:
            command.add_arguments(command_parser)
