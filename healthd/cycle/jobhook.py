"""Slurm's Prolog= and Epilog= run whole: the job from slurmd's environment, its flow in a child, the deadline kept.

Everything but a CRITICAL finding about the job's GPUs or the node lets the job start,
healthd's own trouble included (a bad config, a check that hangs, a held lock): at the
deadline the prolog (or epilog) prints an UNKNOWN line, tries briefly to record it, and
leaves with ``os._exit(0)`` whatever thread is still stuck in the kernel.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Callable, Optional

from healthd.cycle.childrun import Deadline, run_with_deadline
from healthd_checks.jobs.scope import Job

if TYPE_CHECKING:
    from pathlib import Path

# Each flow's budget until it has read its own from the config: reading it, and importing what the
# flow needs, happen in the child within this time (the flows are imported there, below).
DEFAULT_PROLOG_TIMEOUT = 1.0
DEFAULT_EPILOG_TIMEOUT = 20.0
# How long a prolog past its deadline still tries to record that it gave up.
RECORD_GRACE = 0.25


def run_job_hook(which: str, config: Optional[Path]) -> int:
    """``healthd prolog`` (``which``: "prolog") or ``healthd epilog`` for the job in this environment: its exit code.

    What the flow printed is printed here; past the deadline this process leaves at once.
    """
    job = Job.from_env(os.environ)
    is_prolog = which == "prolog"
    budget = DEFAULT_PROLOG_TIMEOUT if is_prolog else DEFAULT_EPILOG_TIMEOUT
    started = time.monotonic()
    code = run_with_deadline(_flow(is_prolog, job, config, started), Deadline(started + budget))
    if code is not None:
        sys.stdout.flush()
        return code if is_prolog else 0
    print(f"healthd {which}: job {job.job_id}: UNKNOWN {which.upper()}_TIMEOUT: deadline passed, job not held up")
    _record_timeout(which, job, config)
    sys.stdout.flush()
    sys.stderr.flush()
    # A thread stuck in the kernel (NVML, a hung mount) would keep the process alive: leave now.
    os._exit(0)


def _flow(is_prolog: bool, job: Job, config: Optional[Path], started: float) -> Callable[[Deadline], int]:
    """The prolog's (or epilog's) work for the child, which imports the flow itself, within the deadline."""

    def work(deadline: Deadline) -> int:
        if is_prolog:
            from healthd.cycle.prolog import run_prolog

            return run_prolog(job, config, deadline, started)
        from healthd.cycle.epilog import run_epilog

        return run_epilog(job, config, deadline, started)

    return work


def _record_timeout(which: str, job: Job, config: Optional[Path]) -> None:
    """Record the timeout as an UNKNOWN ``job_start`` (``job_end``) event, if that can be done within ``RECORD_GRACE``.

    It notes no kernel-log position: the job's window stays open at that end, so the
    records it may have caused are nobody's (``healthd_checks.jobs.scope.owner``).
    """

    def work(_: Deadline) -> int:
        from healthd.boot import read_boot_id
        from healthd.cycle.engine import Engine
        from healthd.cycle.jobrecord import with_history
        from healthd.store.historyschema import Kind

        engine = Engine.from_path(config)
        message = f"{which} deadline passed: UNKNOWN, job allowed"
        details = {**job.to_dict(), "boot": read_boot_id(engine.config.paths.procfs, default="")}
        with_history(
            engine.config,
            lambda h: h.record_job(
                at=time.time(),
                kind=Kind.JOB_START if which == "prolog" else Kind.JOB_END,
                subject=job.job_id,
                status="UNKNOWN",
                message=message,
                details=details,
            ),
        )
        return 0

    run_with_deadline(work, Deadline(time.monotonic() + RECORD_GRACE))
