"""The ``jobs`` check: application Xids that follow a GPU across jobs, from the job events the epilog recorded.

NVIDIA's Xid catalog says an application Xid (RESTART_APP: 13, 31, 68, ...; bucket
``application`` in ``healthd_checks.xid.catalog``; never 43 or 45) is most often the program's own fault: one job's
application Xids never drain anything. The same Xid on the same GPU under several
different jobs (or users) within a window is another matter: the GPU is the common
factor, a suspected hardware fault. This check counts, per (Xid, GPU unit, GPC/TPC
for Xid 13), the DISTINCT jobs and users among the ``job_xid`` events of the node's
history within ``app_xid_window_days``; at ``app_xid_jobs`` jobs and ``app_xid_users``
users it reports a WARNING ``APP_XID_SUSPECT``, which healthd's policy turns into a
drain after jobs. The GPU unit (its UUID where the boot's inventory knows it) is the
history's, so a swapped GPU starts from zero.

It counts evidence, not jobs: the epilog records each kernel record (boot id, SEQ) at
most once, for the one job whose GPUs it names (``healthd_checks.jobs.scope.owner``), and one user's
jobs are never enough (``app_xid_users`` >= 2). A record that an older healthd stored
under several jobs is counted for none of them (``distinct_records``).

The settings also hold the prolog's and epilog's (``healthd prolog``/``epilog``,
``healthd.commands.jobs``), so ``[checks.jobs]`` configures all that is job-aware.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Optional

from healthd.checks.plugin import CheckSpec, Staged, Unobserved, Verdict
from healthd.model import Finding, Status

if TYPE_CHECKING:
    from healthd.checks.plugin import CheckContext, JudgeContext
    from healthd.store.historyschema import Event

    from .settings import JobsSettings

SUSPECT = "APP_XID_SUSPECT"


class JobXid(NamedTuple):
    """One recorded application Xid of a job (a ``job_xid`` event of the history)."""

    id: int
    code: str
    subject: str
    unit: str
    group: Optional[str]
    job: str
    user: str
    uuid: Optional[str]


class JobsObservation(NamedTuple):
    events: tuple[JobXid, ...]
    unreadable: Optional[Unobserved] = None


def gather(ctx: CheckContext[JobsSettings]) -> JobsObservation:
    from healthd.store.historyreader import HistoryReader
    from healthd.store.historyschema import HistoryError, Kind

    state_dir = ctx.paths.state_dir
    try:
        history = HistoryReader.open_readonly(state_dir)
    except HistoryError as exc:
        return JobsObservation((), Unobserved("JOB_HISTORY_UNREADABLE", str(state_dir), str(exc)))
    if history is None:  # no history yet: no job has recorded an Xid
        return JobsObservation(())
    since = ctx.clock() - ctx.settings.app_xid_window_days * 86400
    try:
        with history:
            rows = list(history.events(since=since, kinds=(Kind.JOB_XID,)))
    except HistoryError as exc:
        return JobsObservation((), Unobserved("JOB_HISTORY_UNREADABLE", str(state_dir), str(exc)))
    events = []
    for row in distinct_records(rows):
        details = row.details
        if details.get("bucket") != "application":
            continue
        group, uuid = details.get("group"), details.get("uuid")
        events.append(
            JobXid(
                row.id,
                row.code,
                row.subject,
                row.unit,
                group if isinstance(group, str) else None,
                str(details.get("job", "")),
                str(details.get("user", "")),
                uuid if isinstance(uuid, str) else None,
            )
        )
    return JobsObservation(tuple(events))


def distinct_records(rows: list[Event]) -> list[Event]:
    """The ``job_xid`` events, less those whose kernel record (boot id, SEQ) is stored under more than one job.

    The epilog never stores a record twice; a history written before it did may hold
    one Xid once per job that was on the node, and whose it was is unknown.
    """
    jobs: dict[tuple[str, object], set[str]] = {}
    for row in rows:
        jobs.setdefault(_record_key(row), set()).add(str(row.details.get("job", "")))
    return [row for row in rows if _record_key(row)[1] is None or len(jobs[_record_key(row)]) == 1]


def _record_key(row: Event) -> tuple[str, object]:
    seq = row.details.get("seq")
    return str(row.details.get("boot", row.boot_id)), seq if isinstance(seq, int) else None


def judge(observed: JobsObservation, jc: JudgeContext[JobsSettings]) -> Verdict:
    if observed.unreadable is not None:
        return Verdict((observed.unreadable.finding(jc),))
    groups: dict[tuple[str, str, Optional[str]], list[JobXid]] = {}
    for event in observed.events:
        groups.setdefault((event.code, event.unit, event.group), []).append(event)
    settings = jc.settings
    findings: list[Finding] = []
    for (code, _, group), events in sorted(groups.items(), key=lambda item: (item[0][1], item[0][0], item[0][2] or "")):
        jobs, users = {e.job for e in events}, {e.user for e in events}
        if len(jobs) < settings.app_xid_jobs or len(users) < settings.app_xid_users:
            continue
        last = max(events, key=lambda e: e.id)
        where = f"{last.subject} {group}" if group else last.subject
        details: dict[str, Any] = {
            "xid": code.split("_", 1)[-1],
            "jobs": ",".join(sorted(jobs)),
            "users": len(users),
            "pci": last.subject,
            # A new job's Xid is a new event: an acknowledgement holds until the next one.
            "event": str(last.id),
        }
        if group:
            details["group"] = group
        if last.uuid:
            details["uuid"] = last.uuid
        message = (
            f"{code} on {where} under {len(jobs)} different jobs ({len(users)} user(s)) within "
            f"{settings.app_xid_window_days:g} days: an application Xid that follows the GPU, "
            "a suspected hardware fault"
        )
        findings.append(jc.finding(Status.WARNING, SUSPECT, where, message, **details))
    return Verdict(tuple(findings))


CHECK = CheckSpec(
    name="jobs",
    description="application Xids on one GPU across different jobs (from the epilog's records); prolog/epilog settings",
    settings="healthd_checks.jobs.settings:JobsSettings",
    run=Staged(gather, judge),
)
