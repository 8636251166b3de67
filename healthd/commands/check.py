"""``healthd check --once``: one pass (checks, plan, Slurm action), a table or JSON, the Nagios exit code.

This is also the command slurmd runs as HealthCheckProgram: it needs no
environment beyond ``SLURMD_NODENAME`` and finishes within ``[runner].pass_timeout``
plus ``[slurm].act_splay`` plus ``[slurm].lock_timeout`` plus ``[slurm].budget`` (all
scontrol calls together), 55 s with the defaults, inside slurmd's 60 s kill
(docs/slurm.md). A GPU reset or ``[remediation] on_repair`` gets what is left of
those 55 s (``healthd.cycle.pipeline.ONE_SHOT_SECONDS``), and a SIGTERM (slurmd's kill)
takes the programs the pass runs with it (``healthd.checks.bounded.end_with_children``).

``--active`` runs the active checks instead, and only on a node that one ``sinfo``
read shows idle and drained (healthd.plan.active, healthd.cycle.activerun, docs/active.md);
never from the hook.

``--expect`` (one expectation tried, as NHC's ``-e``), ``--timeout`` and ``--debug`` build the
pass's engine in ``healthd.cycle.checkmodes`` (docs/commands.md, "Trying one expectation").
This module parses the options, calls ``healthd.cycle.oneshot.check_once`` and prints.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import TYPE_CHECKING

from healthd.commands import add_config_argument
from healthd.cycle.oneshot import Declined, OneShot, check_once
from healthd.cycle.render import action_lines, render_table
from healthd.exitcodes import EX_OK
from healthd.text import one_line

if TYPE_CHECKING:
    import argparse  # a command line spelled out is read without it (``healthd.cli.main.plain_command``)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # One pass is what `check` does; `--once` stays accepted because NHC-style wrappers,
    # cron lines and the docs of earlier releases spell it out.
    parser.add_argument("--once", action="store_true", help="run one pass and exit (the default; may be spelled out)")
    parser.add_argument("--json", action="store_true", help="print the versioned JSON document")
    parser.add_argument("--only", metavar="NAME[,NAME...]", help="run only these checks")
    parser.add_argument("--dry-run", action="store_true", help="decide but change nothing in Slurm")
    parser.add_argument(
        "--active",
        action="store_true",
        help="run the active checks (GPU diagnostics) alone; refused unless Slurm reports the node idle and drained",
    )
    parser.add_argument(
        "--force", action="store_true", help="with --active: run without asking Slurm (the operator vouches for it)"
    )
    parser.add_argument(
        "--expect",
        action="append",
        metavar="LINE",
        help="try one expectation, an NHC check ('check_fs_mount_rw -f /scratch') or NAME: TOML"
        " ('mounts: expect = [{path = \"/scratch\"}]'), laid on the config; runs only the checks named,"
        " as a dry run (repeatable)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing when all is well (exit 0)")
    parser.add_argument("--debug", action="store_true", help="log what each check read, at debug level")
    parser.add_argument("--timeout", type=seconds, metavar="SECONDS", help="[runner].pass_timeout for this pass")
    add_config_argument(parser)


def seconds(text: str) -> float:
    """A number of seconds above 0; argparse words a ValueError with this function's name ("invalid seconds value")."""
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise ValueError(text)
    return value


def run(args: argparse.Namespace) -> int:
    _log_to_stderr(args.debug)
    only = tuple(name.strip() for name in args.only.split(",") if name.strip()) if args.only else None
    asked = OneShot(
        args.config, only, args.dry_run, args.active, args.force, tuple(args.expect or ()), args.timeout, args.debug
    )
    done = check_once(asked)
    if isinstance(done, Declined):
        for line in done.lines:
            print(f"healthd: {line}", file=sys.stderr)
        return done.exit_code
    if not args.quiet:
        for note in done.notes:
            print(f"healthd: note: {one_line(note, 400)}", file=sys.stderr)
    outcome = done.outcome
    if args.quiet and outcome.exit_code == EX_OK:
        return EX_OK
    if args.json:
        print(json.dumps(outcome.document, indent=2))
    else:
        print(render_table(outcome.result))
        print("\n".join(action_lines(outcome.document, time.time(), one_shot=True)))
    return outcome.exit_code


def _log_to_stderr(debug: bool) -> None:
    level = logging.DEBUG if debug else logging.WARNING
    if not logging.getLogger().handlers:
        logging.basicConfig(level=level, stream=sys.stderr, format="healthd: %(levelname)s: %(message)s")
    elif debug:
        logging.getLogger().setLevel(level)
