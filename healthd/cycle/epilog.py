"""Slurm's Epilog=: the job's own Xid events into the node's history, their triage, and the active checks.

slurmd runs it after the job; a non-zero exit drains the node, so it always exits 0. It
reads the kernel log after the position its prolog noted (``job_log``) and records, in
the node's history, each Xid, SXid and fallen-off-the-bus record that is this job's
alone (``healthd_checks.jobs.scope.owner`` against every job's window) and not recorded yet, with the
job id and user; then a ``job_end`` event with where the log ended. A job whose prolog
noted no position records only why. When it recorded an application Xid it runs the
``jobs`` check through the ordinary pass: the same application Xid on one GPU under
``app_xid_jobs`` different jobs of ``app_xid_users`` users drains the node after its
jobs. With ``[active] at_epilog`` it then runs the active checks, when due and when no
other job is on the node (docs/active.md).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from healthd.boot import read_boot_id
from healthd.cycle import activerun
from healthd.cycle.engine import Engine
from healthd.cycle.jobrecord import jobs_settings, record_end, with_history
from healthd.cycle.pipeline import PassRequest, pass_budget, run_pass
from healthd.plan.active import epilog_refusal, interval_left
from healthd.store.history import History
from healthd.store.historyreader import HistoryReader
from healthd.store.historyschema import HistoryError, Kind
from healthd_checks.jobs.joblog import LogUnavailable, job_events, last_seq
from healthd_checks.jobs.scope import Job, LogWindow, owner

if TYPE_CHECKING:
    from healthd.cycle.childrun import Deadline
    from healthd_checks.jobs.joblog import JobEvent

# How far back the epilog looks for the node's other jobs (and for records already
# counted): a job that ran beside this one for longer is not seen as a claimant.
JOB_LOOKBACK = 30 * 86400.0


def run_epilog(job: Job, config: Optional[Path], deadline: Deadline, started: float) -> int:
    """The job's events recorded, then the active checks; ``deadline`` moves to ``started`` plus
    ``[checks.jobs].epilog_timeout`` once the config is read. Always 0: a failing epilog drains the node."""
    engine = Engine.from_path(config)
    settings = jobs_settings(engine.loaded)
    deadline.at = started + settings.epilog_timeout
    _record_job_xids(engine, job)
    if engine.config.active.at_epilog:
        _active_at_epilog(engine, job, deadline)
    return 0


def _kmsg_settings(engine: Engine) -> tuple[Any, bool]:
    """The xid check's overrides and its userspace switch, so the epilog grades exactly as the check does."""
    xid = engine.loaded.check_settings.get("xid")
    return getattr(xid, "overrides", None), getattr(xid, "accept_userspace_kmsg", False) is True


def _record_job_xids(engine: Engine, job: Job) -> None:
    """The job's own Xid events into the history; the ``jobs`` check's pass when one was an application Xid.

    Only the records that are this job's alone (``healthd_checks.jobs.scope.owner``) and not recorded
    yet (by boot and SEQ) are recorded, so one kernel record is evidence against one
    job at most. A job whose prolog noted no position has no known stretch of the log:
    it records why, and nothing else.
    """

    paths = engine.config.paths
    boot = read_boot_id(paths.procfs, default="")
    after = _job_start_seq(paths.state_dir, job, boot)
    if after is None:
        why = "no prolog position for this boot (prolog missed or timed out, or history reset): nothing attributed"
        print(f"healthd epilog: job {job.job_id}: {why}", file=sys.stderr)
        # Where the log ends still closes the job's window: later records cannot be its.
        end = _log_end(paths.kmsg)
        with_history(engine.config, lambda h: record_end(h, job, boot, end, "UNKNOWN", why))
        return
    overrides, accept_userspace = _kmsg_settings(engine)
    try:
        log = job_events(paths.kmsg, paths.sysfs, after, overrides, accept_userspace)
    except LogUnavailable as exc:
        unread = f"kernel log unreadable: {exc}"
        print(f"healthd epilog: job {job.job_id}: {unread}", file=sys.stderr)
        with_history(engine.config, lambda h: record_end(h, job, boot, None, "UNKNOWN", unread))
        return
    if log.lost:
        print(f"healthd epilog: job {job.job_id}: {log.lost}", file=sys.stderr)
    window = LogWindow(job, after, log.end)
    recorded: list[JobEvent] = []
    gres = jobs_settings(engine.loaded).gpu_gres
    with_history(engine.config, lambda h: recorded.extend(attribute(h, window, log.events, boot, gres)))
    applications = sum(1 for e in recorded if e.entry.entry.bucket.value == "application")
    if applications and "jobs" in {spec.name for spec in engine.specs}:
        run_pass(engine, PassRequest(("jobs",)))
    print(
        f"healthd epilog: job {job.job_id}: {len(recorded)} event(s) recorded, {applications} application Xid(s)"
        f" ({len(log.events) - len(recorded)} not this job's alone, or recorded already)"
    )


def _log_end(kmsg: Path) -> Optional[int]:
    """The SEQ of the kernel log's newest record; None when it cannot be read."""

    try:
        return last_seq(kmsg)
    except LogUnavailable:
        return None


def attribute(
    history: History, window: LogWindow, events: Sequence[JobEvent], boot: str, gres: Optional[bool]
) -> list[JobEvent]:
    """Record, under the state lock, the events that are ``window``'s job's alone and new; returns them."""

    job = window.job
    since = time.time() - JOB_LOOKBACK
    windows, listed = _windows(history, boot, since)
    windows[job.job_id] = window
    on_gres = gres if gres is not None else listed or job.gpus is not None
    seen = _recorded_seqs(history, boot, since)
    now = time.time()
    mine = []
    for event in events:
        record = event.record
        if record.seq in seen or owner(record, windows.values(), on_gres) != job:  # someone else's, or nobody's
            continue
        seen.add(record.seq)
        mine.append(event)
        history.record_job(
            at=now,
            kind=Kind.JOB_XID,
            subject=event.subject,
            code=event.entry.code,
            status=event.entry.entry.grade.name,
            message=f"job {job.job_id} ({job.user}): {event.entry.event.text}"[:500],
            details=event.details(job, boot),
        )
    record_end(history, job, boot, window.end, "", f"epilog: {len(mine)} of {len(events)} event(s) this job's")
    return mine


def _windows(history: HistoryReader, boot: str, since: float) -> tuple[dict[str, LogWindow], bool]:
    """Each job's window in boot ``boot`` (its ``job_start``/``job_end`` events since then); whether one had a GPU list.

    A job with an end but no start (its prolog did not run) has a window that may
    begin anywhere, so the records before its end on its GPUs are nobody's.
    """

    starts: dict[str, tuple[Job, Optional[int]]] = {}
    ends: dict[str, Optional[int]] = {}
    listed = False
    for event in history.events(since=since, kinds=(Kind.JOB_START, Kind.JOB_END)):
        details = event.details
        job = _stored_job(event.subject, details)
        listed = listed or job.gpus is not None  # GRES outlives a boot
        if details.get("boot", event.boot_id) != boot:
            continue
        seq = details.get("kmsg_seq")
        seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
        if event.kind is Kind.JOB_START:
            known = starts.get(event.subject)
            # A prolog's timeout record after its position keeps the position.
            starts[event.subject] = (job, seq if seq is not None or known is None else known[1])
            ends.pop(event.subject, None)
        else:
            ends[event.subject] = seq
            starts.setdefault(event.subject, (job, None))
    return {key: LogWindow(job, start, ends.get(key)) for key, (job, start) in starts.items()}, listed


def _stored_job(job_id: str, details: Mapping[str, Any]) -> Job:
    """A job as its prolog or epilog stored it."""
    gpus = details.get("gpus")
    listed = frozenset(str(g) for g in gpus) if isinstance(gpus, list) else None
    return Job(job_id, str(details.get("user", "")), listed)


def _recorded_seqs(history: HistoryReader, boot: str, since: float) -> set[int]:
    """The SEQs of boot ``boot`` already recorded as some job's (each kernel record is recorded once)."""

    seqs = set()
    for event in history.events(since=since, kinds=(Kind.JOB_XID,)):
        seq = event.details.get("seq")
        if event.details.get("boot", event.boot_id) == boot and isinstance(seq, int):
            seqs.add(seq)
    return seqs


def _active_at_epilog(engine: Engine, job: Job, deadline: Deadline) -> None:
    """``[active] at_epilog``: the active checks, when due and no other job is on the node (docs/active.md).

    They run through the ordinary acting path (a failure drains the node with the
    check's own code) within ``[active] epilog_timeout``, for which the epilog's
    deadline moves out (plus what the pass needs for the lock and Slurm); a check
    whose own ``timeout`` is longer is not started here, so the deadline never
    leaves a diagnostic running after the epilog (its ``run_timeout`` ends it first).
    """

    config = engine.config
    settings = config.active
    head = f"healthd epilog: job {job.job_id}: active checks"
    left = interval_left(activerun.last_run(engine), engine.clock(), settings.interval)
    if left > 0:
        print(f"{head} not due for {left:.0f}s ([active] interval)")
        return
    if not engine.active_timeout():
        print(f"{head}: none enabled")
        return
    too_long = activerun.misfit(engine, settings.epilog_timeout, "[active] epilog_timeout")
    if too_long:
        print(f"{head} not run: {too_long}", file=sys.stderr)
        return
    # One sinfo read before the checks, then a whole pass's lock and Slurm time after them.
    deadline.at = time.monotonic() + config.slurm.timeout + pass_budget(config, checks=settings.epilog_timeout)
    done = activerun.start(engine, epilog_refusal, f"epilog of job {job.job_id}")
    if isinstance(done, activerun.NotStarted):
        print(f"{head} not run: {done.why}")
        return
    action = done.action.decision
    said = f"{action.action.value} ({action.reason})" if action.reason else action.explanation
    print(f"{head}: {done.result.status.name}: {said}")


def _job_start_seq(state_dir: Path, job: Job, boot: str) -> Optional[int]:
    """The kernel-log position the job's prolog noted in this boot (its last ``job_start`` with one), or None."""

    try:
        history = HistoryReader.open_readonly(state_dir)
        if history is None:
            return None
        with history:
            starts = list(history.events(kinds=(Kind.JOB_START,), subject=job.job_id))
    except HistoryError:
        return None
    for start in reversed(starts):
        seq = start.details.get("kmsg_seq")
        if isinstance(seq, int) and not isinstance(seq, bool):
            return seq if start.details.get("boot", start.boot_id) == boot else None
    return None
