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
import contextlib
import importlib
import io
import os
import sys
from types import ModuleType
from typing import Any, Callable, Iterator, NoReturn, Optional, Sequence, TextIO

from healthd import __version__
from healthd.exitcodes import EX_CONFIG, EX_INTERRUPTED, EX_SOFTWARE, EX_UNKNOWN, EX_USAGE

# name -> (module under healthd.commands, one-line help). Order is the order of --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("check", "run the checks once, report, and act through Slurm"),
    "ack": ("ack", "acknowledge the findings of the last pass so they no longer drain the node"),
    "list-checks": ("list_checks", "list the installed checks"),
    "config": ("config_cmd", "validate the configuration"),
    "run": ("run", "run as a daemon: a pass at start, then one every [daemon].interval"),
    "status": ("status", "show the daemon's last recorded pass without running checks"),
    "history": ("history", "show the node's history: findings raised and cleared, actions, acks, boots"),
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


class _StdoutGuard(io.TextIOBase):
    """Stands in for ``sys.stdout`` while a command runs, so a reader that goes away ends the output quietly.

    ``healthd scan-log big.log | head`` closes the pipe early; the next write fails
    with EPIPE (Python ignores SIGPIPE). The command still finishes (a pass has
    already acted and saved its state) and exits with its own code: the code says
    what healthd found, not whether someone read all of it. Output after that
    is dropped.
    """

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream
        self.gone = False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.stream.encoding

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self.stream.write(text)
            except BrokenPipeError:
                self._reader_gone()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._reader_gone()

    def _reader_gone(self) -> None:
        self.gone = True
        # What the stream could not write stays in its buffer, and the interpreter
        # flushes it at exit, which would fail again ("Exception ignored ... BrokenPipeError",
        # exit 120): point the descriptor at /dev/null (Python docs, "Note on SIGPIPE").
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self.stream.fileno())
            finally:
                os.close(devnull)


@contextlib.contextmanager
def quiet_broken_pipe() -> Iterator[None]:
    """Run the body with ``sys.stdout`` guarded by ``_StdoutGuard``; flush before leaving."""
    stream = sys.stdout
    if stream is None:  # started with stdout closed: print() already writes nothing
        yield
        return
    guard = _StdoutGuard(stream)
    sys.stdout = guard
    try:
        yield
    finally:
        guard.flush()
        sys.stdout = stream


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


def hook_summary(document: dict[str, Any], now: float, *, daemon: bool = False) -> str:
    """The hook's one line from a ``check --once --json`` document (``healthd.render.pass_summary``).

    ``daemon``: the document is the running daemon's last pass (``healthd.daemonpass``), and the line says so.
    """
    from healthd.render import pass_summary

    head = f"healthd: {document.get('status')} on {document.get('node')}"
    return pass_summary(document, now, head=f"{head} (daemon's pass)" if daemon else head)


def hook_parser() -> argparse.ArgumentParser:
    """What ``healthd-hook`` accepts. slurmd passes nothing; the options are for a person at the node."""
    parser = _Parser(
        prog="healthd-hook",
        allow_abbrev=False,
        description=(
            "slurmd's HealthCheckProgram: one pass of healthd with /etc/healthd/healthd.toml, acting on this node "
            "through Slurm, one summary line, the pass's Nagios exit code. Without arguments it does exactly what "
            "slurmd runs."
        ),
        epilog="Any other argument is refused (exit 64) without running a pass. For other configs: healthd check.",
    )
    parser.add_argument("--version", action="version", version=f"healthd-hook {__version__}")
    parser.add_argument(
        "--dry-run", action="store_true", help="run the pass and say what it would do to the node, changing nothing"
    )
    return parser


def hook_main(argv: Optional[Sequence[str]] = None) -> int:
    """``healthd-hook``: slurmd's HealthCheckProgram, i.e. ``healthd check --once`` with the default config.

    slurmd starts it without arguments and with an environment of ``SLURMD_NODENAME``
    and ``PWD`` only (no PATH), so this entry point, installed with an absolute interpreter path,
    needs neither a shell wrapper nor options. It prints one line instead of the table
    (whoever captures the hook's output, slurmd's log or a person, reads one line), and
    exits with the pass's Nagios code.

    When a daemon runs on the node and its last pass is fresh, that pass is reported
    (its decision is already applied) instead of running the checks again; see
    ``healthd.daemonpass`` for when a record counts.

    A person who runs it by hand on a sick node must not drain it by asking for help:
    ``--help`` and ``--version`` answer without a pass, ``--dry-run`` runs the pass
    without acting, and anything else is a usage error (64) before any pass starts.
    """
    import json
    import time

    args = list(sys.argv[1:] if argv is None else argv)
    with quiet_broken_pipe():
        try:
            options = hook_parser().parse_args(args)
        except SystemExit as exc:  # --help, --version (0) or a usage error (64), already printed
            return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else EX_USAGE
        from healthd.daemonpass import daemon_document

        document = daemon_document(None, dry_run=options.dry_run)
        if document is not None:  # the daemon has just checked, decided and acted: report that pass
            print(hook_summary(document, time.time(), daemon=True))
            return int(document["exit_code"])
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            code = main(["check", "--once", "--json", *(["--dry-run"] if options.dry_run else [])])
        try:
            document = json.loads(captured.getvalue())
        except ValueError:  # no document: the error went to stderr (a bad config, an internal error)
            document = None
        if isinstance(document, dict):
            print(hook_summary(document, time.time()))
        else:
            print(f"healthd: no result (exit {code}); see the errors above")
        return code


if __name__ == "__main__":
    sys.exit(main())
