"""The ``healthd`` command line: dispatch, nothing heavy at import.

The parser itself is ``healthd.cli.parser`` (argparse), imported only for a command line
that needs it: ``healthd status`` spelled out in full, as a monitoring agent runs it
often, and ``healthd check --once`` spelled out likewise, are read by ``plain_command``
without it. Each subcommand lives in its own module
under ``healthd.commands`` and is imported only when it is the one being run, so
``healthd check --once`` pays for what it uses and nothing else. Plugins add commands
through the ``healthd.commands`` entry points (``healthd.checks.plugin.CommandSpec``), which
are looked up only when the command is not one of these. Exit codes are those of ``healthd.exitcodes``: the Nagios
plugin convention for check results (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN) and
sysexits.h otherwise.

``healthd-prolog`` and ``healthd-epilog`` (slurm.conf's Prolog= and Epilog=) are entry points
here too, reading slurmd's usual arguments without the parser.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

from healthd.cli.stdout import quiet_broken_pipe
from healthd.commands import COMMANDS, command_module
from healthd.config.load import ConfigError
from healthd.exitcodes import EX_CONFIG, EX_INTERRUPTED, EX_SOFTWARE, EX_UNKNOWN
from healthd.store.trust import UntrustedPath

# ``typing`` is not imported at run time: ``healthd status`` would pay for it (bench/README.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Callable, Optional, Sequence


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    with quiet_broken_pipe():
        return _dispatch(argv)


# The command lines read without argparse (``plain_command``): each command's flags (``store_true``),
# and its options that take a value (``-c`` is ``--config``).
_PLAIN = {
    "status": (("--json",), ("--config",)),
    "check": (("--once", "--json", "--dry-run", "--active", "--force", "--quiet", "--debug"), ("--only", "--config")),
}
# What the parser gives the options this reader leaves to it (a command line with them is the parser's).
_UNREAD = {"status": (), "check": ("expect", "timeout")}


def plain_command(argv: Sequence[str]) -> Optional[argparse.Namespace]:
    """``status`` or ``check`` spelled out (as a monitoring agent, slurmd's HealthCheckProgram or cron runs
    them), parsed as the parser would parse it; None for anything else (``--help``, abbreviations, ``-cPATH``,
    a missing or empty value, an option of another command, other commands), which the parser reads.

    Building the parser (argparse, gettext, locale, shutil) and parsing with it costs ``healthd status``
    more than its own work does, and a cold ``check --once`` a few milliseconds (bench/README.md).
    """
    if not argv or argv[0] not in _PLAIN:
        return None
    flags, options = _PLAIN[argv[0]]
    values: dict[str, object] = {_dest(name): False for name in flags}
    values.update((_dest(name), None) for name in options)
    values.update((dest, None) for dest in _UNREAD[argv[0]])
    rest = iter(argv[1:])
    for arg in rest:
        name, equals, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        name = "--config" if name == "-c" else name
        if name in flags and not equals:
            values[_dest(name)] = True
        elif name in options:
            if not equals:
                value = next(rest, "")
                if value.startswith("-"):
                    return None
            if not value:
                return None
            values[_dest(name)] = value
        else:
            return None

    config = values["config"]
    # What the parser gives: an argparse.Namespace is a plain attribute holder too.
    args = SimpleNamespace(**values, command=argv[0], _module=COMMANDS[argv[0]][0])
    args.config = None if config is None else Path(str(config))
    return args  # type: ignore[return-value]  # duck-typed: ``typing.cast`` would import typing


def _dest(option: str) -> str:
    """The attribute argparse stores a long option in: ``--dry-run`` -> ``dry_run``."""
    return option[2:].replace("-", "_")


def _dispatch(argv: list[str]) -> int:
    args = plain_command(argv)
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


def _console(which: str, argv: Optional[Sequence[str]]) -> int:
    """The command as ``healthd WHICH ARGS`` runs it; without building the CLI's parser when slurmd's usual
    arguments (none, or ``-c``/``--config PATH``) are all there is: finding every command costs more than a
    prolog from the daemon's pass does (bench/README.md)."""
    from healthd.commands.jobs import run

    args = list(sys.argv[1:] if argv is None else argv)
    plain = plain_command(["status", *args])  # the same spelled-out -c/--config; --json is not the prolog's
    if plain is None or plain.json:
        return main([which, *args])
    with quiet_broken_pipe():
        return run(which, plain)


def prolog_main(argv: Optional[Sequence[str]] = None) -> int:
    """``healthd-prolog``: for slurm.conf ``Prolog=``."""
    return _console("prolog", argv)


def epilog_main(argv: Optional[Sequence[str]] = None) -> int:
    """``healthd-epilog``: for slurm.conf ``Epilog=``."""
    return _console("epilog", argv)


if __name__ == "__main__":
    sys.exit(main())
