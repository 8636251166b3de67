"""``healthd prolog`` and ``healthd epilog`` (also ``healthd-prolog``/``healthd-epilog``): Slurm's Prolog= and Epilog=.

Prolog. slurmd runs it before a job starts on the node (slurm.conf(5), Prolog); a
non-zero exit makes Slurm drain the node and requeue the job. Within
``[checks.jobs].prolog_timeout`` (1 s by default, far under PrologTimeout) it notes
where the kernel log stands (for the epilog). When the running daemon's last pass is
one the hook could report (``healthd.store.daemonpass``), that pass and the kernel log
since it are all it reads (``_from_daemon``: the ``xid`` check judged from its state,
saving nothing; no NVML, no other check). Otherwise it runs ``prolog_checks`` through
the ordinary pass (``run_pass`` of ``prolog_checks``: checks, plan, Slurm, history, under the
state lock). Either way a fault it finds drains the node with healthd's own reason and
is later resumed by healthd like any other. It fails (exit 2, one line) only for a CRITICAL finding about
the job's GPUs or the whole node. Everything else, healthd's own trouble included (a
bad config, a check that hangs, a held lock), lets the job start: at the deadline the
prolog prints an UNKNOWN line, tries briefly to record it, and leaves with
``os._exit(0)`` whatever thread is still stuck in the kernel.

Epilog. slurmd runs it after the job; a non-zero exit drains the node, so it always
exits 0. It reads the kernel log after the position its prolog noted (``healthd_checks.jobs.joblog``)
and records, in the node's history, each Xid, SXid and fallen-off-the-bus record that
is this job's alone (``healthd_checks.jobs.scope.owner`` against every job's window) and not recorded
yet, with the job id and user; then a ``job_end`` event with where the log ended. A
job whose prolog noted no position records only why. When it recorded an application
Xid it runs the ``jobs`` check through the ordinary pass: the same application Xid on
one GPU under ``app_xid_jobs`` different jobs of ``app_xid_users`` users drains the
node after its jobs. With ``[active] at_epilog`` it then runs the
active checks, when due and when no other job is on the node (docs/active.md).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence, cast

from healthd.checks.plugin import CommandSpec
from healthd.cli.main import add_config_argument
from healthd_checks.jobs.scope import Job, LogWindow, owner

if TYPE_CHECKING:
    import argparse
    from typing import NoReturn

    from healthd.checks.engine import Engine
    from healthd.config.loaded import LoadedConfig
    from healthd.model import Finding
    from healthd.store.history import History
    from healthd_checks.jobs.joblog import JobEvent
    from healthd_checks.jobs.settings import JobsSettings

# Used until the config is read (reading it is part of the prolog's time).
DEFAULT_PROLOG_TIMEOUT = 1.0
DEFAULT_EPILOG_TIMEOUT = 20.0
# How long a prolog past its deadline still tries to record that it gave up.
RECORD_GRACE = 0.25
# How long the prolog from the daemon's pass waits for the state lock to note the job's start: a
# healthy pass holds it for about a millisecond (bench/README.md, history cost), one acting through
# Slurm for up to [slurm].timeout, far past the prolog's budget, which goes to the verdict instead.
FRESH_LOCK_WAIT = 0.1
# How far back the epilog looks for the node's other jobs (and for records already
# counted): a job that ran beside this one for longer is not seen as a claimant.
JOB_LOOKBACK = 30 * 86400.0


@dataclass
class _Deadline:
    """A deadline the work may move once it has read its configured budget."""

    at: float


def run_with_deadline(work: Callable[[_Deadline], int], deadline: _Deadline) -> Optional[int]:
    """``work``'s exit code, run in a child process; None when the child is still running at the deadline.

    A child, not a thread: what can hang here (NVML, an open on a hung mount) blocks in
    the kernel, and a process with a thread stuck there cannot finish exiting; the
    child is sent SIGKILL at the deadline and not waited for (``healthd.checks.bounded``'s
    rule). It sends back a moved deadline (``deadline <at>``) once it has read its
    budget, then its exit code and what it printed. Its standard streams are
    /dev/null, so a stuck child holds no pipe of slurmd's or of a caller's.
    """
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_end)
        _child(work, deadline, write_end)
    os.close(write_end)
    return _await_child(pid, read_end, deadline)


def _child(work: Callable[[_Deadline], int], deadline: _Deadline, write_end: int) -> NoReturn:
    """The child's side: ``work`` run with its streams on /dev/null, its exit code and output sent up the pipe.

    It exits with ``os._exit``, running nothing of the parent's (atexit, buffers) twice.
    """
    import io
    import json

    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    out = io.StringIO()
    sys.stdout = sys.stderr = out
    code = 0
    moved = _Deadline(deadline.at)
    try:
        code = work(_Moving(moved, write_end))
    except Exception as exc:  # healthd's own failure never fails a job
        out.write(f"healthd: internal error, job allowed: {type(exc).__name__}: {exc}\n")
    os.write(write_end, (json.dumps({"code": code, "out": out.getvalue()}) + "\n").encode())
    os._exit(0)


def _await_child(pid: int, read_end: int, deadline: _Deadline) -> Optional[int]:
    """The parent's side: the child's lines until its result, following the deadline it moves; None at the deadline.

    At the deadline the child is sent SIGKILL and not waited for: it may be stuck in the kernel.
    """
    import json
    import select
    import signal

    buffer = b""
    while True:
        left = deadline.at - time.monotonic()
        if left <= 0 or not select.select([read_end], [], [], left)[0]:
            if deadline.at - time.monotonic() > 0:
                continue
            os.kill(pid, signal.SIGKILL)
            os.close(read_end)
            return None
        chunk = os.read(read_end, 65536)
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"deadline "):
                deadline.at = float(line.split()[1])
            elif line:
                result = json.loads(line)
                os.close(read_end)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                sys.stdout.write(result["out"])
                return int(result["code"])
    os.close(read_end)
    return 0


class _Moving(_Deadline):
    """The child's side of the deadline: moving it tells the parent."""

    def __init__(self, deadline: _Deadline, fd: int) -> None:
        super().__init__(deadline.at)
        self._fd = fd

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name == "at" and "_fd" in self.__dict__:
            os.write(self._fd, f"deadline {value!r}\n".encode())


def _engine(config: Any) -> Engine:
    from healthd.checks.engine import Engine

    return Engine.from_path(config)


def _settings(loaded: LoadedConfig) -> JobsSettings:
    """``[checks.jobs]`` as validated (a read-only view of the model, healthd.config.view)."""
    settings = loaded.check_settings.get("jobs")
    if settings is None:  # the check's settings were not validated with this config: its defaults
        from healthd_checks.jobs.settings import JobsSettings

        return JobsSettings()
    return cast("JobsSettings", settings)


def _with_history(config: Any, write: Callable[[History], object], lock_wait: Optional[float] = None) -> None:
    """Open the node's history under the state lock, write, close (history.py's rule for writers).

    ``lock_wait``: how long to wait for the lock (None: ``[slurm].lock_timeout``); raises ``LockTimeout``.
    """
    from healthd.store.history import History
    from healthd.store.lock import StateLock

    wait = config.slurm.lock_timeout if lock_wait is None else lock_wait
    with StateLock(config.paths.state_dir, wait):
        history = History.open(config.paths.state_dir)
        try:
            write(history)
        finally:
            history.close()
    for problem in history.problems:
        print(f"healthd: {problem}", file=sys.stderr)


def _kmsg_settings(engine: Engine) -> tuple[Any, bool]:
    """The xid check's overrides and its userspace switch, so the epilog grades exactly as the check does."""
    xid = engine.loaded.check_settings.get("xid")
    return getattr(xid, "overrides", None), getattr(xid, "accept_userspace_kmsg", False) is True


def _document_criticals(document: Mapping[str, Any], job: Optional[Job]) -> list[Finding]:
    """CRITICAL findings about the job (None: any) in a pass document (``check --once --json``'s shape)."""
    from healthd.model import Finding, Status

    found = []
    for check in document.get("checks", []):
        for item in check.get("findings", []) if isinstance(check, dict) else []:
            if not isinstance(item, dict) or item.get("status") != "CRITICAL":
                continue
            raw = item.get("details")
            details = (
                {str(k): v for k, v in raw.items() if v is None or isinstance(v, (str, int, float))}
                if isinstance(raw, dict)
                else {}
            )
            finding = Finding(
                str(item.get("check", "")),
                Status.CRITICAL,
                str(item.get("code", "")),
                str(item.get("subject", "")),
                str(item.get("message", "")),
                details,
            )
            if job is None or job.concerns(finding):
                found.append(finding)
    return found


def _prolog(job: Job, config: Any) -> Callable[[_Deadline], int]:
    def work(deadline: _Deadline) -> int:
        from healthd.store.daemonpass import daemon_document

        started = deadline.at - DEFAULT_PROLOG_TIMEOUT
        now = time.time()
        # The hook's rule (healthd.store.daemonpass): a live daemon's own fresh, settled pass with this config.
        document = daemon_document(config, dry_run=False, now=now)
        if document is not None:
            code = _from_daemon(job, config, document, deadline, started, now)
            if code is not None:
                return code
        return _full_prolog(job, config, document, deadline, started, now)

    return work


def _from_daemon(
    job: Job, config: Any, document: Mapping[str, Any], deadline: _Deadline, started: float, now: float
) -> Optional[int]:
    """The prolog from the daemon's fresh pass and the kernel log since: its exit code, or None for the full prolog.

    The daemon's pass stands for every check but the kernel log's newest records: the
    ``xid`` check is judged once more from its own state (where the daemon's pass left
    the log, and what it had folded), saving nothing, so the daemon's next pass reads
    the same records. No NVML, no other check, and the config from its validated cache.
    A CRITICAL the daemon's pass already had was acted on by the daemon; a new one is
    acted on by the ``xid`` check's ordinary pass, which drains with healthd's reason.
    """
    from healthd.config.cache import load_checks
    from healthd.model import Status
    from healthd.slurm.reasons import Reasons

    loaded, _ = load_checks(config, load=False)
    settings = _settings(loaded)
    deadline.at = started + settings.prolog_timeout
    since = _xid_since(loaded) if "xid" in settings.prolog_checks else ((), None)
    if since is None:
        return None
    new, position = since
    config_values = loaded.config
    note_start(config_values, job, now, FRESH_LOCK_WAIT, position)
    reasons = Reasons(config_values.slurm.reason_prefix)
    known = _document_criticals(document, job)
    if known:
        print(f"healthd prolog: job {job.job_id}: {reasons.reason(known)} (daemon's last pass)")
        return int(Status.CRITICAL)
    seen = {(f.check, f.code, f.subject) for f in _document_criticals(document, None)}
    unseen = [f for f in new if f.status is Status.CRITICAL and (f.check, f.code, f.subject) not in seen]
    if unseen:  # as the full prolog would, act on it now, whoever's GPU it is
        failed = _act(_engine(config), ["xid"], job, " (kernel log since the daemon's pass)")
        if failed is not None:
            return failed
    print(f"healthd prolog: job {job.job_id}: {document.get('status')} (daemon's pass), kernel log since: job allowed")
    return 0


def _xid_since(loaded: Any) -> Optional[tuple[tuple[Finding, ...], Optional[int]]]:
    """What the ``xid`` check reports now, from its state and the records after it, saving nothing; None: unusable.

    With it, the SEQ of the newest /dev/kmsg record it read (None: it read the journal),
    which is where the job starts: the kernel log is then read once, not twice.

    Unusable: the check is off, or its state is not of this boot (a reboot since the
    state was saved, or no pass has read this boot's log yet). The daemon's pass is of
    this boot: its ``daemon.lock`` is held by a live process (``flock`` does not outlive
    a boot), and the lock's token is the pass record's.
    """
    from healthd.checks.plugin import CheckContext, JudgeContext
    from healthd.store.state import StateFile
    from healthd_checks.xid.check import gather, judge

    xid = loaded.check_settings.get("xid")
    if xid is None or not xid.enabled:
        return None
    paths = loaded.config.paths
    context = CheckContext(name="xid", settings=xid, paths=paths, state=StateFile(paths.state_dir, "check-xid"))
    observed = gather(context)
    if not observed.document:  # another boot's (or no) state: gather starts over, as after a reboot
        return None
    log, position = observed.log, observed.position
    # The read's own cursor (the last SEQ read), or, with nothing new, where the state stood.
    cursor = (log.cursor or position.cursor) if log is not None and position.source == "kmsg" else None
    findings = judge(observed, JudgeContext("xid", xid, context.clock())).findings
    return findings, int(cursor) if cursor is not None and cursor.isdigit() else None


def _full_prolog(
    job: Job, config: Any, document: Optional[Mapping[str, Any]], deadline: _Deadline, started: float, now: float
) -> int:
    """The prolog without the daemon's pass to stand on: ``prolog_checks`` through the ordinary pass."""
    from healthd.model import Status
    from healthd.slurm.reasons import Reasons

    engine = _engine(config)
    settings = _settings(engine.loaded)
    deadline.at = started + settings.prolog_timeout
    note_start(engine.config, job, now, engine.config.slurm.lock_timeout)
    reasons = Reasons(engine.config.slurm.reason_prefix)
    known = _document_criticals(document, job) if document is not None else []
    if known:
        print(f"healthd prolog: job {job.job_id}: {reasons.reason(known)} (daemon's last pass)")
        return int(Status.CRITICAL)
    installed = {spec.name for spec in engine.specs}
    failed = _act(engine, [name for name in settings.prolog_checks if name in installed], job, "", allowed=True)
    return 0 if failed is None else failed


def _act(engine: Engine, only: list[str], job: Job, where: str, *, allowed: bool = False) -> Optional[int]:
    """The ordinary pass of the checks ``only`` (checks, plan, Slurm, history); 2 when a CRITICAL concerns the job.

    None otherwise, having said so when ``allowed``.
    """
    from healthd.cycle.pipeline import PassRequest, run_pass
    from healthd.model import Status
    from healthd.slurm.reasons import Reasons

    outcome = run_pass(engine, PassRequest(tuple(only)))
    criticals = [f for f in outcome.result.findings if f.status is Status.CRITICAL and job.concerns(f)]
    if criticals:
        reason = outcome.action.decision.reason or Reasons(engine.config.slurm.reason_prefix).reason(criticals)
        print(f"healthd prolog: job {job.job_id}: {reason}{where}")
        return int(Status.CRITICAL)
    if allowed:
        print(f"healthd prolog: job {job.job_id}: {outcome.result.status.name}, job allowed")
    return None


def note_start(config: Any, job: Job, now: float, lock_wait: float, seq: Optional[int] = None) -> None:
    """Note where the kernel log stands (``seq``, or read now when None), for the epilog, as the job's ``job_start``.

    Waits at most ``lock_wait`` for the state lock; a lock held longer (a pass acting
    through Slurm) leaves the job without a position, as a prolog past its deadline does.
    """
    from healthd.boot import read_boot_id
    from healthd.store.lock import LockTimeout
    from healthd_checks.jobs.joblog import LogUnavailable, last_seq

    try:
        seq = last_seq(config.paths.kmsg) if seq is None else seq
    except LogUnavailable as exc:
        print(f"healthd: {exc}: the epilog will not see this job's kernel log", file=sys.stderr)
    boot = read_boot_id(config.paths.procfs, default="")
    try:
        _with_history(config, lambda h: record_start(h, job, seq, boot, now), lock_wait)
    except LockTimeout as exc:
        print(f"healthd: {exc}: job start not recorded, the epilog attributes nothing to it", file=sys.stderr)


def record_start(history: History, job: Job, seq: Optional[int], boot: str, at: float) -> None:
    """The job's ``job_start`` event: where the kernel log stood in boot ``boot`` when it started (None: unknown)."""
    from healthd.store.history import Kind

    details = {**job.to_dict(), "kmsg_seq": seq, "boot": boot}
    history.record_job(at=at, kind=Kind.JOB_START, subject=job.job_id, message="prolog", details=details)


def _epilog(job: Job, config: Any) -> Callable[[_Deadline], int]:
    def work(deadline: _Deadline) -> int:
        engine = _engine(config)
        settings = _settings(engine.loaded)
        deadline.at = deadline.at - DEFAULT_EPILOG_TIMEOUT + settings.epilog_timeout
        _record_job_xids(engine, job)
        if engine.config.active.at_epilog:
            _active_at_epilog(engine, job, deadline)
        return 0

    return work


def _record_job_xids(engine: Engine, job: Job) -> None:
    """The job's own Xid events into the history; the ``jobs`` check's pass when one was an application Xid.

    Only the records that are this job's alone (``healthd_checks.jobs.scope.owner``) and not recorded
    yet (by boot and SEQ) are recorded, so one kernel record is evidence against one
    job at most. A job whose prolog noted no position has no known stretch of the log:
    it records why, and nothing else.
    """
    from healthd.boot import read_boot_id
    from healthd.cycle.pipeline import PassRequest, run_pass
    from healthd_checks.jobs.joblog import LogUnavailable, job_events

    paths = engine.config.paths
    boot = read_boot_id(paths.procfs, default="")
    after = _job_start_seq(paths.state_dir, job, boot)
    if after is None:
        why = "no prolog position for this boot (prolog missed or timed out, or history reset): nothing attributed"
        print(f"healthd epilog: job {job.job_id}: {why}", file=sys.stderr)
        # Where the log ends still closes the job's window: later records cannot be its.
        end = _log_end(paths.kmsg)
        _with_history(engine.config, lambda h: record_end(h, job, boot, end, "UNKNOWN", why))
        return
    overrides, accept_userspace = _kmsg_settings(engine)
    try:
        log = job_events(paths.kmsg, paths.sysfs, after, overrides, accept_userspace)
    except LogUnavailable as exc:
        unread = f"kernel log unreadable: {exc}"
        print(f"healthd epilog: job {job.job_id}: {unread}", file=sys.stderr)
        _with_history(engine.config, lambda h: record_end(h, job, boot, None, "UNKNOWN", unread))
        return
    if log.lost:
        print(f"healthd epilog: job {job.job_id}: {log.lost}", file=sys.stderr)
    window = LogWindow(job, after, log.end)
    recorded: list[JobEvent] = []
    gres = _settings(engine.loaded).gpu_gres
    _with_history(engine.config, lambda h: recorded.extend(attribute(h, window, log.events, boot, gres)))
    applications = sum(1 for e in recorded if e.entry.entry.bucket.value == "application")
    if applications and "jobs" in {spec.name for spec in engine.specs}:
        run_pass(engine, PassRequest(("jobs",)))
    print(
        f"healthd epilog: job {job.job_id}: {len(recorded)} event(s) recorded, {applications} application Xid(s)"
        f" ({len(log.events) - len(recorded)} not this job's alone, or recorded already)"
    )


def _log_end(kmsg: Any) -> Optional[int]:
    """The SEQ of the kernel log's newest record; None when it cannot be read."""
    from healthd_checks.jobs.joblog import LogUnavailable, last_seq

    try:
        return last_seq(kmsg)
    except LogUnavailable:
        return None


def attribute(
    history: History, window: LogWindow, events: Sequence[JobEvent], boot: str, gres: Optional[bool]
) -> list[JobEvent]:
    """Record, under the state lock, the events that are ``window``'s job's alone and new; returns them."""
    from healthd.store.history import Kind

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


def _windows(history: History, boot: str, since: float) -> tuple[dict[str, LogWindow], bool]:
    """Each job's window in boot ``boot`` (its ``job_start``/``job_end`` events since then); whether one had a GPU list.

    A job with an end but no start (its prolog did not run) has a window that may
    begin anywhere, so the records before its end on its GPUs are nobody's.
    """
    from healthd.store.history import Kind

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


def _recorded_seqs(history: History, boot: str, since: float) -> set[int]:
    """The SEQs of boot ``boot`` already recorded as some job's (each kernel record is recorded once)."""
    from healthd.store.history import Kind

    seqs = set()
    for event in history.events(since=since, kinds=(Kind.JOB_XID,)):
        seq = event.details.get("seq")
        if event.details.get("boot", event.boot_id) == boot and isinstance(seq, int):
            seqs.add(seq)
    return seqs


def record_end(history: History, job: Job, boot: str, seq: Optional[int], status: str, message: str) -> None:
    """The job's ``job_end`` event: where the kernel log stood when it ended (None: unknown), and why."""
    from healthd.store.history import Kind

    details = {**job.to_dict(), "kmsg_seq": seq, "boot": boot}
    history.record_job(
        at=time.time(), kind=Kind.JOB_END, subject=job.job_id, status=status, message=message, details=details
    )


def _active_at_epilog(engine: Engine, job: Job, deadline: _Deadline) -> None:
    """``[active] at_epilog``: the active checks, when due and no other job is on the node (docs/active.md).

    They run through the ordinary acting path (a failure drains the node with the
    check's own code) within ``[active] epilog_timeout``, for which the epilog's
    deadline moves out (plus what the pass needs for the lock and Slurm); a check
    whose own ``timeout`` is longer is not started here, so the deadline never
    leaves a diagnostic running after the epilog (its ``run_timeout`` ends it first).
    """
    from healthd.cycle.activerun import NotStarted, last_run, misfit, start
    from healthd.cycle.pipeline import pass_budget
    from healthd.plan.active import epilog_refusal, interval_left

    config = engine.config
    settings = config.active
    head = f"healthd epilog: job {job.job_id}: active checks"
    left = interval_left(last_run(engine), engine.clock(), settings.interval)
    if left > 0:
        print(f"{head} not due for {left:.0f}s ([active] interval)")
        return
    if not engine.active_timeout():
        print(f"{head}: none enabled")
        return
    too_long = misfit(engine, settings.epilog_timeout, "[active] epilog_timeout")
    if too_long:
        print(f"{head} not run: {too_long}", file=sys.stderr)
        return
    # One sinfo read before the checks, then a whole pass's lock and Slurm time after them.
    deadline.at = time.monotonic() + config.slurm.timeout + pass_budget(config, checks=settings.epilog_timeout)
    done = start(engine, epilog_refusal, f"epilog of job {job.job_id}")
    if isinstance(done, NotStarted):
        print(f"{head} not run: {done.why}")
        return
    action = done.action.decision
    said = f"{action.action.value} ({action.reason})" if action.reason else action.explanation
    print(f"{head}: {done.result.status.name}: {said}")


def _job_start_seq(state_dir: Any, job: Job, boot: str) -> Optional[int]:
    """The kernel-log position the job's prolog noted in this boot (its last ``job_start`` with one), or None."""
    from healthd.store.history import History, HistoryError, Kind

    try:
        history = History.open_readonly(state_dir)
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


def _run(which: str, args: argparse.Namespace) -> int:
    job = Job.from_env(os.environ)
    prolog = which == "prolog"
    budget = DEFAULT_PROLOG_TIMEOUT if prolog else DEFAULT_EPILOG_TIMEOUT
    deadline = _Deadline(time.monotonic() + budget)
    work = _prolog(job, args.config) if prolog else _epilog(job, args.config)
    code = run_with_deadline(work, deadline)
    if code is not None:
        sys.stdout.flush()
        return code if prolog else 0
    print(f"healthd {which}: job {job.job_id}: UNKNOWN {which.upper()}_TIMEOUT: deadline passed, job not held up")
    _record_timeout(which, job, args.config)
    sys.stdout.flush()
    sys.stderr.flush()
    # A thread stuck in the kernel (NVML, a hung mount) would keep the process alive: leave now.
    os._exit(0)


def _record_timeout(which: str, job: Job, config: Any) -> None:
    """Record the timeout as an UNKNOWN ``job_start`` (``job_end``) event, if that can be done within ``RECORD_GRACE``.

    It notes no kernel-log position: the job's window stays open at that end, so the
    records it may have caused are nobody's (``healthd_checks.jobs.scope.owner``).
    """

    def work(_: _Deadline) -> int:
        from healthd.boot import read_boot_id
        from healthd.store.history import Kind

        engine = _engine(config)
        message = f"{which} deadline passed: UNKNOWN, job allowed"
        details = {**job.to_dict(), "boot": read_boot_id(engine.config.paths.procfs, default="")}
        _with_history(
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

    run_with_deadline(work, _Deadline(time.monotonic() + RECORD_GRACE))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_argument(parser)


def _console(which: str, argv: Optional[Sequence[str]]) -> int:
    """The command as ``healthd WHICH ARGS`` runs it; without building the CLI's parser when slurmd's usual
    arguments (none, or ``-c``/``--config PATH``) are all there is: finding every command costs more than a
    prolog from the daemon's pass does (bench/README.md)."""
    from healthd.cli.main import main, plain_command
    from healthd.cli.stdout import quiet_broken_pipe

    args = list(sys.argv[1:] if argv is None else argv)
    plain = plain_command(["status", *args])  # the same spelled-out -c/--config; --json is not the prolog's
    if plain is None or plain.json:
        return main([which, *args])
    with quiet_broken_pipe():
        return _run(which, plain)


def prolog_main(argv: Optional[Sequence[str]] = None) -> int:
    """``healthd-prolog``: for slurm.conf ``Prolog=``."""
    return _console("prolog", argv)


def epilog_main(argv: Optional[Sequence[str]] = None) -> int:
    """``healthd-epilog``: for slurm.conf ``Epilog=``."""
    return _console("epilog", argv)


PROLOG = CommandSpec(
    name="prolog",
    help="Slurm Prolog=: fast checks on the job's GPUs within a deadline; exit 2 on a CRITICAL fault",
    add_arguments=add_arguments,
    run=lambda args: _run("prolog", args),
)
EPILOG = CommandSpec(
    name="epilog",
    help="Slurm Epilog=: record the job's Xid events with its id and user; triage application Xids",
    add_arguments=add_arguments,
    run=lambda args: _run("epilog", args),
)
