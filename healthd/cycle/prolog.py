"""Slurm's Prolog=: the job's start noted for the epilog, and the node's health judged before the job runs.

slurmd runs it before a job starts on the node (slurm.conf(5), Prolog); a non-zero exit
makes Slurm drain the node and requeue the job. Within ``[checks.jobs].prolog_timeout``
(1 s by default, far under PrologTimeout) it notes where the kernel log stands (for the
epilog). When the running daemon's last pass is one the hook could report
(``healthd.cycle.daemonpass``), that pass and the kernel log since it are all it reads
(``_from_daemon``: the ``xid`` check judged from its state through ``Staged.peek``,
saving nothing; no NVML, no other check). Otherwise it runs ``prolog_checks`` through
the ordinary pass (``run_pass``: checks, plan, Slurm, history, under the state lock).
Either way a fault it finds drains the node with healthd's own reason and is later
resumed by healthd like any other. It fails (exit 2, one line) only for a CRITICAL
finding about the job's GPUs or the whole node; healthd's own trouble lets the job
start (``healthd.cycle.jobhook``).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Optional

from healthd.boot import read_boot_id
from healthd.checks.plugin import CheckContext, Staged
from healthd.config.cache import load_checks
from healthd.cycle.daemonpass import daemon_document
from healthd.cycle.jobrecord import jobs_settings, record_start, with_history
from healthd.model import Finding, Status
from healthd.slurm.reasons import Reasons
from healthd.store.lock import LockTimeout
from healthd.store.state import StateFile
from healthd_checks.jobs.joblog import LogUnavailable, last_seq
from healthd_checks.kernlog.read import Position
from healthd_checks.xid.check import CHECK as XID

if TYPE_CHECKING:
    from pathlib import Path

    from healthd.config.loaded import LoadedConfig
    from healthd.config.sections import Config
    from healthd.cycle.childrun import Deadline
    from healthd.cycle.engine import Engine
    from healthd_checks.jobs.scope import Job

# How long the prolog from the daemon's pass waits for the state lock to note the job's start: a
# healthy pass holds it for about a millisecond (bench/README.md, history cost), one acting through
# Slurm for up to [slurm].timeout, far past the prolog's budget, which goes to the verdict instead.
FRESH_LOCK_WAIT = 0.1


class XidSince(NamedTuple):
    """What the ``xid`` check reports now, and the SEQ of the newest /dev/kmsg record it read (None: unknown)."""

    findings: tuple[Finding, ...]
    seq: Optional[int]


def run_prolog(job: Job, config: Optional[Path], deadline: Deadline, started: float) -> int:
    """The prolog's exit code, from the daemon's fresh pass when there is one; ``deadline`` moves to
    ``started`` plus ``[checks.jobs].prolog_timeout`` once the config is read."""
    now = time.time()
    # The hook's rule (healthd.cycle.daemonpass): a live daemon's own fresh, settled pass with this config.
    document = daemon_document(config, dry_run=False, now=now)
    if document is not None:
        code = _from_daemon(job, config, document, deadline, started, now)
        if code is not None:
            return code
    return _full_prolog(job, config, document, deadline, started, now)


def _engine(config: Optional[Path]) -> Engine:
    from healthd.cycle.engine import Engine

    return Engine.from_path(config)


def _document_criticals(document: Mapping[str, Any], job: Optional[Job]) -> list[Finding]:
    """CRITICAL findings about the job (None: any) in a pass document (``check --once --json``'s shape)."""
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


def _from_daemon(
    job: Job, config: Optional[Path], document: Mapping[str, Any], deadline: Deadline, started: float, now: float
) -> Optional[int]:
    """The prolog from the daemon's fresh pass and the kernel log since: its exit code, or None for the full prolog.
    The daemon's pass stands for every check but the kernel log's newest records: the
    ``xid`` check is judged once more from its own state (where the daemon's pass left
    the log, and what it had folded), saving nothing, so the daemon's next pass reads
    the same records. No NVML, no other check, and the config from its validated cache.
    A CRITICAL the daemon's pass already had was acted on by the daemon; a new one is
    acted on by the ``xid`` check's ordinary pass, which drains with healthd's reason.
    """
    loaded, _ = load_checks(config, load=False)
    settings = jobs_settings(loaded)
    deadline.at = started + settings.prolog_timeout
    since = xid_since(loaded) if "xid" in settings.prolog_checks else XidSince((), None)
    if since is None:
        return None
    config_values = loaded.config
    note_start(config_values, job, now, FRESH_LOCK_WAIT, since.seq)
    reasons = Reasons(config_values.slurm.reason_prefix)
    known = _document_criticals(document, job)
    if known:
        print(f"healthd prolog: job {job.job_id}: {reasons.reason(known)} (daemon's last pass)")
        return int(Status.CRITICAL)
    seen = {(f.check, f.code, f.subject) for f in _document_criticals(document, None)}
    unseen = [f for f in since.findings if f.status is Status.CRITICAL and (f.check, f.code, f.subject) not in seen]
    if unseen:  # as the full prolog would, act on it now, whoever's GPU it is
        failed = act(_engine(config), ["xid"], job, " (kernel log since the daemon's pass)")
        if failed is not None:
            return failed
    print(f"healthd prolog: job {job.job_id}: {document.get('status')} (daemon's pass), kernel log since: job allowed")
    return 0


def xid_since(loaded: LoadedConfig) -> Optional[XidSince]:
    """What the ``xid`` check reports now, from its state and the records after it, saving nothing; None: unusable.
    The check is judged through the plugin interface's ``Staged.peek``: the pass's own
    gather and judge, without the save. With its findings, the SEQ of the newest
    /dev/kmsg record it read (None: it read the journal, or could not read), which is
    where the job starts: the kernel log is then read once, not twice.

    Unusable: the check is off, or its state is not of this boot (a reboot since the
    state was saved, or no pass has read this boot's log yet): the state the judge
    would save does not carry on from the saved one. The daemon's pass is of this
    boot: its ``daemon.lock`` is held by a live process (``flock`` does not outlive a
    boot), and the lock's token is the pass record's.
    """
    xid = loaded.check_settings.get("xid")
    if xid is None or not xid.enabled or not isinstance(XID.run, Staged):
        return None
    paths = loaded.config.paths
    context = CheckContext(name="xid", settings=xid, paths=paths, state=StateFile(paths.state_dir, "check-xid"))
    saved = context.state.load()
    verdict = XID.run.peek(context)
    after = verdict.state
    # Another boot's (or no) state: the check started over, as after a reboot.
    if not saved or after is None or any(saved.get(key) != after.get(key) for key in ("version", "boot_id")):
        return None
    position = Position.load(after)
    unread = any(f.code == "KERNEL_LOG_UNREADABLE" for f in verdict.findings)
    cursor = position.cursor if position.source == "kmsg" and not unread else None
    return XidSince(tuple(verdict.findings), int(cursor) if cursor is not None and cursor.isdigit() else None)


def _full_prolog(
    job: Job,
    config: Optional[Path],
    document: Optional[Mapping[str, Any]],
    deadline: Deadline,
    started: float,
    now: float,
) -> int:
    """The prolog without the daemon's pass to stand on: ``prolog_checks`` through the ordinary pass."""
    engine = _engine(config)
    settings = jobs_settings(engine.loaded)
    deadline.at = started + settings.prolog_timeout
    note_start(engine.config, job, now, engine.config.slurm.lock_timeout)
    reasons = Reasons(engine.config.slurm.reason_prefix)
    known = _document_criticals(document, job) if document is not None else []
    if known:
        print(f"healthd prolog: job {job.job_id}: {reasons.reason(known)} (daemon's last pass)")
        return int(Status.CRITICAL)
    installed = {spec.name for spec in engine.specs}
    failed = act(engine, [name for name in settings.prolog_checks if name in installed], job, "", allowed=True)
    return 0 if failed is None else failed


def act(engine: Engine, only: list[str], job: Job, where: str, *, allowed: bool = False) -> Optional[int]:
    """The ordinary pass of the checks ``only`` (checks, plan, Slurm, history); 2 when a CRITICAL concerns the job.
    None otherwise, having said so when ``allowed``.
    """
    from healthd.cycle.pipeline import PassRequest, run_pass  # the whole pass: only when the checks run

    outcome = run_pass(engine, PassRequest(tuple(only)))
    criticals = [f for f in outcome.result.findings if f.status is Status.CRITICAL and job.concerns(f)]
    if criticals:
        reason = outcome.action.decision.reason or Reasons(engine.config.slurm.reason_prefix).reason(criticals)
        print(f"healthd prolog: job {job.job_id}: {reason}{where}")
        return int(Status.CRITICAL)
    if allowed:
        print(f"healthd prolog: job {job.job_id}: {outcome.result.status.name}, job allowed")
    return None


def note_start(config: Config, job: Job, now: float, lock_wait: float, seq: Optional[int] = None) -> None:
    """Note where the kernel log stands (``seq``, or read now when None), for the epilog, as the job's ``job_start``.
    Waits at most ``lock_wait`` for the state lock; a lock held longer (a pass acting
    through Slurm) leaves the job without a position, as a prolog past its deadline does.
    """
    try:
        seq = last_seq(config.paths.kmsg) if seq is None else seq
    except LogUnavailable as exc:
        print(f"healthd: {exc}: the epilog will not see this job's kernel log", file=sys.stderr)
    boot = read_boot_id(config.paths.procfs, default="")
    try:
        with_history(config, lambda h: record_start(h, job, seq, boot, now), lock_wait)
    except LockTimeout as exc:
        print(f"healthd: {exc}: job start not recorded, the epilog attributes nothing to it", file=sys.stderr)
