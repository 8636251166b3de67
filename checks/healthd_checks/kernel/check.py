"""The ``kernel`` check: a stuck kernel. Tasks in D state that do not move, hung-task and lockup reports.

Two sources, one verdict:

- the process table (``tasks``): every thread in uninterruptible sleep (D) is
  remembered per boot with its context-switch count; one whose count has not moved for
  ``stuck_after`` seconds is stuck, the rule of the kernel's own hung-task detector
  (kernel/hung_task.c), judged across passes. Nothing here can block on the stuck task
  (see ``tasks`` for what is read and what never is). The first pass that sees a task
  starts its clock, so a task is reported ``stuck_after`` after healthd first saw it.
  A stuck task of an ordinary user is only an OK note (``user_tasks``): /proc shows a
  killable wait as D too, and any user can park a task in one (docs/host.md);
- the kernel log (``healthd_checks.kernlog.events``): the hung-task detector's ``INFO: task NAME:PID
  blocked for more than N seconds``, the soft- and hard-lockup watchdog's reports
  (kernel/watchdog.c), and RCU stall warnings (kernel/rcu/tree_stall.h). Only records the
  kernel wrote count, matched from the start of the message. A hung-task report whose
  thread waits on an ordinary user's own FUSE server (``fuseblame``: the thread's uids,
  the user's FUSE connections with requests waiting in fusectl, the report's call trace) is an OK note naming the
  mount and the user (``HUNG_TASK_USER_FUSE``): any user may mount FUSE, and a server
  that never answers holds its caller past SIGKILL.

See docs/host.md.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Optional, Union

from healthd.checks.counters import BootScoped
from healthd.checks.plugin import CheckSpec, Staged, Unobserved, Verdict
from healthd.model import Finding, Status
from healthd.text import one_line

from ..common.procs import system_uid
from ..kernlog.events import LogObservation, Pattern, gather_log, judge_log, kept_log
from ..kernlog.source import Origin, origin_of
from .fuseblame import GONE, FuseMount, FuseView, HungReport, blame, read_fuse_view, read_trace, report_blames
from .tasks import StuckCandidate, read_d_state, read_task

if TYPE_CHECKING:
    from pathlib import Path

    from healthd.checks.plugin import CheckContext, JudgeContext

    from .settings import KernelSettings


def _task(match: re.Match[str]) -> dict[str, Union[str, int]]:
    return {"task": one_line(match.group("comm"), 32), "pid": int(match.group("pid"))}


# kernel/hung_task.c check_hung_task: "INFO: task %s:%d blocked for more than %ld seconds.\n" (comm, pid).
def _hung_regex(tids: str) -> re.Pattern[str]:
    return re.compile(
        rf"INFO: task (?P<comm>.{{1,16}}):(?P<pid>{tids}) blocked for more than (?P<seconds>\d{{1,10}}) seconds\."
    )


HUNG_REPORT = _hung_regex(r"\d{1,10}")

# Messages of the kernel's watchdogs, from the kernel source (pr_fmt prefixes optional: they
# changed between versions). A task name (16 bytes at most, chosen by its owner) is only
# ever in the middle of a line.
PATTERNS = (
    Pattern(
        "HUNG_TASK",
        HUNG_REPORT,
        Status.WARNING,
        "the hung-task detector found a task blocked",
        "blocked for more than",
        lambda m: "hung_task",
        lambda m: {**_task(m), "seconds": int(m.group("seconds"))},
    ),
    Pattern(
        "SOFT_LOCKUP",
        re.compile(
            r"(?:watchdog: )?BUG: soft lockup - CPU#(?P<cpu>\d{1,5}) stuck for (?P<seconds>\d{1,10})s! "
            r"\[(?P<comm>.{1,16}):(?P<pid>\d{1,10})\]"
        ),
        Status.CRITICAL,
        "soft lockup: a CPU ran kernel code without scheduling",
        "soft lockup",
        lambda m: f"cpu{int(m.group('cpu'))}",
        lambda m: {**_task(m), "seconds": int(m.group("seconds"))},
    ),
    Pattern(
        "HARD_LOCKUP",
        re.compile(
            r"(?:NMI watchdog: |watchdog: )?(?:CPU\d{1,5}: )?Watchdog detected hard LOCKUP on cpu (?P<cpu>\d{1,5})"
        ),
        Status.CRITICAL,
        "hard lockup: a CPU stopped taking interrupts",
        "hard LOCKUP",
        lambda m: f"cpu{int(m.group('cpu'))}",
    ),
    Pattern(
        "RCU_STALL",
        re.compile(
            r"(?:rcu: )?INFO: (?P<flavor>rcu_[a-z_]{1,16}) (?:self-detected stall on CPU|detected stalls on CPUs)"
        ),
        Status.WARNING,
        "RCU stall: a CPU or task held up the kernel's grace periods",
        "stall",
        lambda m: "rcu",
        lambda m: {"flavor": m.group("flavor")},
    ),
)

_TASKS = BootScoped(key="tasks")


class KernelObservation(NamedTuple):
    """The kernel log's new lines, the threads in D state (or why they could not be read), the saved task clocks.

    For blaming a stuck task on a user's FUSE server: the threads the new hung-task reports
    name as they are now, the node's FUSE connections (``fuseblame``), and the clock ticks
    per second of the start times in /proc.
    """

    log: LogObservation
    tasks: Union[tuple[StuckCandidate, ...], Unobserved]
    previous: Mapping[str, Any] = MappingProxyType({})
    reports: tuple[HungReport, ...] = ()
    fuse: FuseView = FuseView()
    clock_ticks: int = 100
    malformed: Optional[Unobserved] = None  # the stat files skipped as malformed, named


def gather(ctx: CheckContext[KernelSettings]) -> KernelObservation:
    log = gather_log(ctx, ctx.settings)
    procfs = ctx.paths.procfs
    tasks: Union[tuple[StuckCandidate, ...], Unobserved]
    skipped: tuple[str, ...] = ()
    try:
        tasks, skipped = read_d_state(procfs)
    except OSError as exc:
        tasks = Unobserved("PROCESSES_UNREADABLE", str(procfs), f"cannot list processes: {exc}")
    previous = ctx.state.load().get("d_state")
    reports = _hung_reports(ctx, log)
    needed = reports or (not isinstance(tasks, Unobserved) and tasks)
    fuse = read_fuse_view(ctx.paths.sysfs, procfs) if needed else FuseView()
    ticks = os.sysconf("SC_CLK_TCK")
    kept = previous if isinstance(previous, dict) else {}
    return KernelObservation(log, tasks, kept, reports, fuse, ticks, _malformed(procfs, skipped))


def _malformed(procfs: Path, skipped: tuple[str, ...]) -> Optional[Unobserved]:
    """UNKNOWN naming the stat files skipped: those tasks were not seen, every other one was still judged."""
    if not skipped:
        return None
    more = f" and {len(skipped) - 1} more" if len(skipped) > 1 else ""
    return Unobserved("PROCESS_STAT_MALFORMED", str(procfs), one_line(f"skipped {skipped[0]}{more}"))


# Threads looked up per pass: the kernel logs at most kernel.hung_task_warnings (10) reports a boot.
_REPORTS_MAX = 64


def _hung_reports(ctx: CheckContext[KernelSettings], log: LogObservation) -> tuple[HungReport, ...]:
    """The hung-task reports among the lines read: each with its thread as it is now, and its trace."""
    read = log.read
    if read is None or read.result is None:
        return ()
    userspace = ctx.settings.accept_userspace_kmsg
    lines = read.result.lines
    reports: list[HungReport] = []
    for index, line in enumerate(lines):
        if origin_of(line.facility) is not Origin.KERNEL and not userspace:
            continue
        found = HUNG_REPORT.match(line.message.partition("\n")[0])
        if found is None or len(reports) >= _REPORTS_MAX:
            continue
        tid = int(found.group("pid"))
        try:
            task = read_task(ctx.paths.procfs, tid)
        except ValueError:
            task = None
        trace = read_trace(lines, index, found.group("comm"), tid, userspace)
        reports.append(HungReport(tid, line.usec, task, trace))
    return tuple(reports)


def _clock(task: StuckCandidate, stored: Mapping[str, Any], now: float) -> dict[str, Any]:
    """The task's entry: since when it has slept without a context switch."""
    since = stored.get("since")
    unchanged = task.switches is None or stored.get("switches") == task.switches
    if not unchanged or not isinstance(since, (int, float)) or isinstance(since, bool) or since > now:
        since = now
    return {"since": since, "switches": task.switches}


def users_task(task: StuckCandidate) -> bool:
    """Whether an ordinary user may have put ``task`` where it is: a uid of it is not root's nor a system account's.

    The owner of its /proc directory comes first: the kernel keeps it (the effective uid,
    ``procs.task_owner``) and nothing the task writes changes it, so a task a user owns is
    the user's whatever its status file reads. Every uid of the ``Uid:`` line counts too,
    not only the real one: a setuid-root program run by a user keeps the user's real uid,
    and a root daemon acting for a user (seteuid) takes the user's effective and filesystem
    uids, which are what a user's FUSE server answers to. A task whose status could not be
    read (it exited meanwhile) is counted as before.
    """
    uids = (*(task.uids or ()), *(() if task.owner is None else (task.owner,)))
    return bool(uids) and not all(system_uid(uid) for uid in uids)


def _stuck_finding(
    jc: JudgeContext[KernelSettings],
    status: Status,
    code: str,
    subject: str,
    whose: str,
    stuck: list[tuple[StuckCandidate, float]],
) -> Finding:
    """One finding naming the stuck tasks, longest first: up to five in the message, twenty in ``tids``."""
    stuck = sorted(stuck, key=lambda item: -item[1])
    shown = ", ".join(f"{one_line(task.name, 16)}[{task.tid}]" for task, _ in stuck[:5])
    more = f" and {len(stuck) - 5} more" if len(stuck) > 5 else ""
    after = jc.settings.stuck_after
    message = f"{len(stuck)} task(s){whose} in D state without a context switch for {after:g}s or more: {shown}{more}"
    if status is Status.OK:
        message += ' (not acted on: user_tasks = "note")'
    return jc.finding(
        status,
        code,
        subject,
        message,
        count=len(stuck),
        longest_seconds=round(stuck[0][1]),
        tids=",".join(str(task.tid) for task, _ in stuck[:20]),
    )


def judge_tasks(
    observed: KernelObservation, jc: JudgeContext[KernelSettings]
) -> tuple[list[Finding], Optional[dict[str, Any]]]:
    """The stuck tasks (when more than tolerated), an OK note for ordinary users' ones, and the clocks to keep."""
    tasks = observed.tasks
    if isinstance(tasks, Unobserved):
        return [tasks.finding(jc)], None
    settings = jc.settings
    findings = [observed.malformed.finding(jc)] if observed.malformed is not None else []
    ignored = set(settings.ignore_tasks)
    counted = ((task.key, task) for task in tasks if task.name not in ignored)
    stuck: list[tuple[StuckCandidate, float]] = []
    users: list[tuple[StuckCandidate, float]] = []

    def clock(task: StuckCandidate, stored: Mapping[str, Any]) -> tuple[list[Finding], dict[str, Any]]:
        entry = _clock(task, stored, jc.now)
        # Remembered with its clock, for a hung-task report read after the task is gone.
        mount = blame(task, observed.fuse) if settings.user_tasks == "note" else None
        if mount is not None:
            entry["fuse"] = mount.record()
        if jc.now - entry["since"] >= settings.stuck_after:
            noted = settings.user_tasks == "note" and (users_task(task) or mount is not None)
            (users if noted else stuck).append((task, jc.now - entry["since"]))
        return [], entry

    _, document = _TASKS.judge_each(observed.previous, observed.log.boot_id, jc.now, counted, clock)
    if len(stuck) > settings.stuck_tasks_max:
        findings.append(_stuck_finding(jc, Status[settings.stuck_severity], "D_STATE_STUCK", "d_state", "", stuck))
    if users:
        # /proc shows a killable wait as D too, and a user can hold their own task in one (a
        # vfork whose child never execs, a read from their own FUSE server): never acted on.
        # Nor a task of root's that waits on a user's FUSE server (see ``blame``).
        whose = " of ordinary users or in their FUSE filesystems"
        findings.append(_stuck_finding(jc, Status.OK, "D_STATE_USER_TASKS", "d_state_user", whose, users))
    return findings, document


def _blames(observed: KernelObservation, settings: KernelSettings) -> dict[int, FuseMount]:
    if settings.user_tasks != "note":
        return {}
    boot_id, hz = observed.log.boot_id, observed.clock_ticks
    return report_blames(observed.reports, observed.fuse, observed.previous, boot_id, hz)


USER_FUSE = "HUNG_TASK_USER_FUSE"


def _patterns(blames: Mapping[int, FuseMount]) -> tuple[Pattern, ...]:
    """This pass's patterns: the reports blamed on a user's FUSE server first, as OK notes, then the rest."""
    if not blames:
        return PATTERNS
    tids = "|".join(str(tid) for tid in sorted(blames))

    def details(match: re.Match[str]) -> dict[str, Union[str, int]]:
        mount = blames[int(match.group("pid"))]
        where = mount.mount_point or f"FUSE connection {mount.connection} (another mount namespace)"
        if mount is GONE:
            where = "unknown: the task is gone, and only ordinary users have FUSE filesystems here"
        return {
            **_task(match),
            "seconds": int(match.group("seconds")),
            "mount": one_line(where, 200),
            "user": one_line(mount.user, 64),
            "uid": mount.uid,
            "connection": mount.connection,
        }

    noted = Pattern(
        USER_FUSE,
        _hung_regex(tids),
        Status.OK,
        "a task blocked in the FUSE filesystem of an ordinary user, whose server does not answer",
        "blocked for more than",
        lambda m: "fuse_gone" if blames[int(m.group("pid"))] is GONE else f"uid{blames[int(m.group('pid'))].uid}",
        details,
    )
    return (noted, *PATTERNS)


def _named(finding: Finding) -> Finding:
    """A note of a user's hung FUSE filesystem, its message naming the task, the mount and the user."""
    if finding.code != USER_FUSE:
        return finding
    d = finding.details
    task = f"{d.get('task')}[{d.get('pid')}] blocked for more than {d.get('seconds')}s in"
    if d.get("uid") == GONE.uid:
        what = "a FUSE filesystem (the kernel's trace) that let it go; no FUSE filesystem here is root's"
    else:
        what = f"the FUSE filesystem {d.get('mount')} of user {d.get('user')} (uid {d.get('uid')})"
    message = f"{task} {what}: a user's doing, not acted on ({d.get('count')} this boot)"
    return replace(finding, message=one_line(message, 300))


def judge(observed: KernelObservation, jc: JudgeContext[KernelSettings]) -> Verdict:
    patterns = _patterns(_blames(observed, jc.settings))
    log_findings, log_state = judge_log(observed.log, jc, jc.settings, patterns)
    log_findings = [_named(finding) for finding in log_findings]
    task_findings, task_state = judge_tasks(observed, jc)
    if log_state is None and task_state is None:
        return Verdict((*log_findings, *task_findings))
    state: dict[str, Any] = {}
    state.update(kept_log(observed.log, log_state))
    state["d_state"] = task_state if task_state is not None else dict(observed.previous)
    return Verdict((*log_findings, *task_findings), state)


CHECK = CheckSpec(
    name="kernel",
    description="a stuck kernel: tasks in D state that do not move, hung-task, soft/hard lockup and RCU stall reports",
    settings="healthd_checks.kernel.settings:KernelSettings",
    run=Staged(gather, judge, keeps="the kernel-log cursor and the D-state task clocks"),
)
