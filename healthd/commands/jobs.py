"""``healthd prolog`` and ``healthd epilog`` (also ``healthd-prolog``/``healthd-epilog``): Slurm's Prolog= and Epilog=.

The flows are the application's (``healthd.cycle.jobhook``: ``healthd.cycle.prolog`` and
``healthd.cycle.epilog``, docs/jobs.md); a command takes ``--config`` and runs one of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from healthd.checks.plugin import CommandSpec
from healthd.commands import add_config_argument
from healthd.cycle.jobhook import run_job_hook

if TYPE_CHECKING:
    import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_argument(parser)


def run(which: str, args: argparse.Namespace) -> int:
    """The prolog's (``which``: "prolog") or the epilog's exit code for the job in slurmd's environment."""
    return run_job_hook(which, args.config)


PROLOG = CommandSpec(
    name="prolog",
    help="Slurm Prolog=: fast checks on the job's GPUs within a deadline; exit 2 on a CRITICAL fault",
    add_arguments=add_arguments,
    run=lambda args: run("prolog", args),
)
EPILOG = CommandSpec(
    name="epilog",
    help="Slurm Epilog=: record the job's Xid events with its id and user; triage application Xids",
    add_arguments=add_arguments,
    run=lambda args: run("epilog", args),
)
