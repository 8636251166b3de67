"""``healthd-hook``: slurmd's HealthCheckProgram, an entry point apart from ``healthd`` so its usual run stays cheap.

slurmd runs it with no arguments, every HealthCheckInterval. When the daemon runs on
the node and its last pass is fresh (``healthd.cycle.daemonpass``), that pass is all the hook
reports, and nothing else is imported: not the argument parser, not the checks.
Otherwise it runs ``healthd check --once`` through ``healthd.cli.main``.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time

from healthd import __version__
from healthd.cli.main import main
from healthd.cli.stdout import quiet_broken_pipe
from healthd.cycle.daemonpass import daemon_document
from healthd.cycle.render import pass_summary
from healthd.exitcodes import EX_USAGE

TYPE_CHECKING = False  # not typing's: importing typing at run time would slow `healthd status` (bench/README.md)
if TYPE_CHECKING:
    import argparse
    from typing import Any, Optional, Sequence


def hook_summary(document: dict[str, Any], now: float, *, daemon: bool = False) -> str:
    """The hook's one line from a ``check --once --json`` document (``healthd.cycle.render.pass_summary``).

    ``daemon``: the document is the running daemon's last pass (``healthd.cycle.daemonpass``), and the line says so.
    """
    head = f"healthd: {document.get('status')} on {document.get('node')}"
    return pass_summary(document, now, head=f"{head} (daemon's pass)" if daemon else head, one_shot=not daemon)


def hook_parser() -> argparse.ArgumentParser:
    """What ``healthd-hook`` accepts. slurmd passes nothing; the options are for a person at the node."""
    from healthd.cli.parser import Parser

    parser = Parser(
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
    ``healthd.cycle.daemonpass`` for when a record counts.

    A person who runs it by hand on a sick node must not drain it by asking for help:
    ``--help`` and ``--version`` answer without a pass, ``--dry-run`` runs the pass
    without acting, and anything else is a usage error (64) before any pass starts.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    with quiet_broken_pipe():
        dry_run = False
        if args:  # slurmd passes none: only a person's options need the parser
            try:
                dry_run = hook_parser().parse_args(args).dry_run
            except SystemExit as exc:  # --help, --version (0) or a usage error (64), already printed
                return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else EX_USAGE

        document = daemon_document(None, dry_run=dry_run)
        if document is not None:  # the daemon has just checked, decided and acted: report that pass
            print(hook_summary(document, time.time(), daemon=True))
            return int(document["exit_code"])
        return _full_pass(dry_run)


def _full_pass(dry_run: bool) -> int:
    """``check --once --json`` in this process, reported as the hook's one line."""
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        code = main(["check", "--once", "--json", *(["--dry-run"] if dry_run else [])])
    try:
        document = json.loads(captured.getvalue())
    except ValueError:  # no document: the error went to stderr (a bad config, an internal error)
        document = None
    if isinstance(document, dict):
        print(hook_summary(document, time.time()))
    else:
        print(f"healthd: no result (exit {code}); see the errors above")
    return code
