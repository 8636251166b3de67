"""The ``healthd`` command line: dispatch, nothing heavy at import.

The parser itself is ``healthd.cli.parser`` (argparse), imported only for a command line
that needs it: ``healthd status`` spelled out in full, as a monitoring agent runs it
often, is read by ``plain_status`` without it. Each subcommand lives in its own module
under ``healthd.commands`` and is imported only when it is the one being run, so
``healthd check --once`` pays for what it uses and nothing else. Plugins add commands
through the ``healthd.commands`` entry points (``healthd.checks.plugin.CommandSpec``), which
are looked up only when the command is not one of these. Exit codes are those of ``healthd.exitcodes``: the Nagios
plugin convention for check results (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN) and
sysexits.h otherwise.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

from healthd.cli.stdout import quiet_broken_pipe
from healthd.commands import command_module
from healthd.exitcodes import EX_CONFIG, EX_INTERRUPTED, EX_SOFTWARE, EX_UNKNOWN

# ``typing`` is not imported at run time: ``healthd status`` would pay for it (bench/README.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Callable, Optional, Sequence


def add_config_argument(
    parser: argparse.ArgumentParser, help: str = "config file (default /etc/healthd/healthd.toml)"
) -> None:
    """The ``-c``/``--config PATH`` option every command that reads the config takes."""
    from pathlib import Path

    parser.add_argument("-c", "--config", type=Path, default=None, metavar="PATH", help=help)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    with quiet_broken_pipe():
        return _dispatch(argv)


def plain_status(argv: Sequence[str]) -> Optional[argparse.Namespace]:
    """``status [--json] [-c|--config PATH]`` spelled out (as a monitoring agent runs it), parsed as the parser
    would parse it; None for anything else (``--help``, abbreviations, ``-cPATH``, a missing value, other commands).

    Building the parser and parsing with it costs ``healthd status`` more than its own work does.
    """
    if not argv or argv[0] != "status":
        return None
    show_json, config = False, None
    rest = iter(argv[1:])
    for arg in rest:
        if arg == "--json":
            show_json = True
        elif arg in ("-c", "--config"):
            config = next(rest, "")
            if not config or config.startswith("-"):
                return None
        elif arg.startswith("--config=") and arg != "--config=":
            config = arg[len("--config=") :]
        else:
            return None
    from pathlib import Path

    # What the parser gives: an argparse.Namespace is a plain attribute holder too.
    args = SimpleNamespace(
        command="status", _module="status", json=show_json, config=None if config is None else Path(config)
    )
    return args  # type: ignore[return-value]  # duck-typed: ``typing.cast`` would import typing


def _dispatch(argv: list[str]) -> int:
    args = plain_status(argv)
    if args is None:
        from healthd.cli.parser import build_parser

        args = build_parser(argv).parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args._run if args._module is None else command_module(args._module).run
    if args._module in ("status", "history"):  # the cheap path: config.py would import pydantic
        try:
            return run(args)
        except KeyboardInterrupt:
            return EX_INTERRUPTED
        except Exception as exc:
            return _internal_error(exc, args.command)
    from healthd.config.load import ConfigError
    from healthd.store.trust import UntrustedPath

    try:
        return run(args)
    except ConfigError as exc:
        print(f"healthd: configuration error, nothing was done:\n{exc}", file=sys.stderr)
        return EX_CONFIG
    except UntrustedPath as exc:  # the state directory (healthd.store.state): refused before acting on anything
        print(f"healthd: {exc}; nothing was done", file=sys.stderr)
        return EX_CONFIG
    except KeyboardInterrupt:
        return EX_INTERRUPTED
    except Exception as exc:
        return _internal_error(exc, args.command)


def _internal_error(exc: Exception, command: str) -> int:
    """Report a bug that ended ``command``; its exit code, which must not read as WARNING (1) or CRITICAL (2).

    ``check`` and ``status`` report a grade to Nagios or NHC, so theirs is UNKNOWN (3): nothing
    was observed. Every other command's is EX_SOFTWARE (70).
    """
    import traceback

    traceback.print_exc()
    print(f"healthd: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
    return EX_UNKNOWN if command in ("check", "status") else EX_SOFTWARE


if __name__ == "__main__":
    sys.exit(main())
