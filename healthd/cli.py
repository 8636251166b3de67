"""The ``healthd`` command line: argument parsing and dispatch, nothing heavy at import.

Each subcommand lives in its own module under ``healthd.commands`` and is imported
only when it is the one being run, so ``healthd check --once`` pays for what it
uses and nothing else. Plugins add commands through the ``healthd.commands`` entry
points (``healthd.plugin.CommandSpec``), which are looked up only when the command
is not one of these. Exit codes are those of ``healthd.exitcodes``: the Nagios
plugin convention for check results (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN) and
sysexits.h otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType
from typing import Any, Callable, NoReturn, Optional, Sequence

from healthd import __version__
from healthd.exitcodes import EX_CONFIG, EX_INTERRUPTED, EX_SOFTWARE, EX_UNKNOWN, EX_USAGE
from healthd.stdout import quiet_broken_pipe

# name -> (module under healthd.commands, one-line help). Order is the order of --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("check", "run the checks once, report, and act through Slurm"),
    "ack": ("ack", "acknowledge the findings of the last pass so they no longer drain the node"),
    "list-checks": ("list_checks", "list the installed checks"),
    "config": ("config_cmd", "validate the configuration"),
    "run": ("run", "run as a daemon: a pass at start, then one every [daemon].interval"),
    "status": ("status", "show the daemon's last recorded pass without running checks"),
    "history": ("history", "show the node's history: findings raised and cleared, actions, acks, boots"),
    "baseline": ("baseline", "write a config that expects what this known-good node has (GPUs, ports, mounts, ...)"),
    "import-nhc": ("import_nhc", "convert an LBNL NHC config (nhc.conf) into healthd's TOML, naming what it cannot"),
    "fleet": ("fleet", "fleet reliability from Slurm accounting: failure causes, MTTF, ETTR, lemon nodes"),
}


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error, which Nagios would read as CRITICAL; use EX_USAGE."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: error: {message}\n")


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser; only the command named in ``argv`` has its module imported for its options."""
    parser = _Parser(prog="healthd", description="Node health checks for GPU clusters run by Slurm.")
    parser.add_argument("--version", action="version", version=f"healthd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
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
            _module(module).add_arguments(command_parser)
    if chosen not in COMMANDS:
        _add_plugin_commands(sub, chosen)
    return parser


def _add_plugin_commands(sub: Any, chosen: Optional[str]) -> None:
    """The commands plugins contribute; none may replace a built-in one."""
    from healthd.plugin import discover_commands

    for command in discover_commands():
        if command.name in COMMANDS:
            continue
        command_parser = sub.add_parser(command.name, help=command.help, description=command.help)
        command_parser.set_defaults(_module=None, _run=command.run)
        if command.name == chosen:
            command.add_arguments(command_parser)


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"healthd.commands.{name}")


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    """The ``--config PATH`` option every command that reads the config takes."""
    from pathlib import Path

    parser.add_argument(
        "--config", type=Path, default=None, metavar="PATH", help="config file (default /etc/healthd/healthd.toml)"
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    with quiet_broken_pipe():
        return _dispatch(argv)


def _dispatch(argv: list[str]) -> int:
    args = build_parser(argv).parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args._run if args._module is None else _module(args._module).run
    if args._module in ("status", "history"):  # the cheap path: config.py would import pydantic
        return run(args)
    from healthd.configload import ConfigError
    from healthd.trust import UntrustedPath

    try:
        return run(args)
    except ConfigError as exc:
        print(f"healthd: configuration error, nothing was done:\n{exc}", file=sys.stderr)
        return EX_CONFIG
    except UntrustedPath as exc:  # the state directory (healthd.state): refused before acting on anything
        print(f"healthd: {exc}; nothing was done", file=sys.stderr)
        return EX_CONFIG
    except KeyboardInterrupt:
        return EX_INTERRUPTED
    except Exception as exc:  # a bug must not read as WARNING (1) or CRITICAL (2) to Nagios or NHC
        import traceback

        traceback.print_exc()
        print(f"healthd: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EX_UNKNOWN if args.command == "check" else EX_SOFTWARE


if __name__ == "__main__":
    sys.exit(main())
