"""The job's own records in the node's history, written under the state lock: the prolog's and the epilog's.

``job_start`` (where the kernel log stood when the job started) and ``job_end`` (where
it stood when the job ended, and why), and the ``[checks.jobs]`` settings both flows read.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Callable, Optional, cast

from healthd.store.history import History
from healthd.store.historyschema import Kind
from healthd.store.lock import StateLock

if TYPE_CHECKING:
    from healthd.config.loaded import LoadedConfig
    from healthd.config.sections import Config
    from healthd_checks.jobs.scope import Job
    from healthd_checks.jobs.settings import JobsSettings


def jobs_settings(loaded: LoadedConfig) -> JobsSettings:
    """``[checks.jobs]`` as validated (a read-only view of the model, healthd.config.view)."""
    settings = loaded.check_settings.get("jobs")
    if settings is None:  # the check's settings were not validated with this config: its defaults
        from healthd_checks.jobs.settings import JobsSettings

        return JobsSettings()
    return cast("JobsSettings", settings)


def with_history(config: Config, write: Callable[[History], object], lock_wait: Optional[float] = None) -> None:
    """Open the node's history under the state lock, write, close (history.py's rule for writers).
    ``lock_wait``: how long to wait for the lock (None: ``[slurm].lock_timeout``); raises ``LockTimeout``.
    """
    wait = config.slurm.lock_timeout if lock_wait is None else lock_wait
    with StateLock(config.paths.state_dir, wait):
        history = History.open(config.paths.state_dir)
        try:
            write(history)
        finally:
            history.close()
    for problem in history.problems:
        print(f"healthd: {problem}", file=sys.stderr)


def record_start(history: History, job: Job, seq: Optional[int], boot: str, at: float) -> None:
    """The job's ``job_start`` event: where the kernel log stood in boot ``boot`` when it started (None: unknown)."""
    details = {**job.to_dict(), "kmsg_seq": seq, "boot": boot}
    history.record_job(at=at, kind=Kind.JOB_START, subject=job.job_id, message="prolog", details=details)


def record_end(history: History, job: Job, boot: str, seq: Optional[int], status: str, message: str) -> None:
    """The job's ``job_end`` event: where the kernel log stood when it ended (None: unknown), and why."""
    details = {**job.to_dict(), "kmsg_seq": seq, "boot": boot}
    history.record_job(
        at=time.time(), kind=Kind.JOB_END, subject=job.job_id, status=status, message=message, details=details
    )
