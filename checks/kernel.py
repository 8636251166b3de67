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
- the kernel log (``kernlog_events``): the hung-task detector's ``INFO: task NAME:PID
  blocked for more than N seconds``, the soft- and hard-lockup watchdog's reports
  (kernel/watchdog.c), and RCU stall warnings (kernel/rcu/tree_stall.h). Only records the
  kernel wrote count, matched from the start of the message.

See docs/host.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union

from healthd.counters import BootScoped
from healthd.model import Finding, Status
from healthd.plugin import CheckSpec, Staged, Unobserved, Verdict
from healthd.text import one_line

from .kernlog_events import LogObservation, Pattern, gather_log, judge_log, kept_log
from .procs import system_uid
from .tasks import StuckCandidate, read_d_state

if TYPE_CHECKING:
    from healthd.plugin import CheckContext, JudgeContext

    from .kernel_settings import KernelSettings


def _task(match: re.Match[str]) -> dict[str, Union[str, int]]:
    return {"task": one_line(match.group("comm"), 32), "pid": int(match.group("pid"))}


# Messages of the kernel's watchdogs, from the kernel source (pr_fmt prefixes optional: they
# changed between versions). A task name (16 bytes at most, chosen by its owner) is only
# ever in the middle of a line.
PATTERNS = (
    Pattern(
        "HUNG_TASK",
        re.compile(
            r"INFO: task (?P<comm>.{1,16}):(?P<pid>\d{1,10}) blocked for more than (?P<seconds>\d{1,10}) seconds\."
        ),
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


@dataclass(frozen=True)
class KernelObservation:
    """The kernel log's new lines, the threads in D state (or why they could not be read), the saved task clocks."""

    log: LogObservation
    tasks: Union[tuple[StuckCandidate, ...], Unobserved]
    previous: Mapping[str, Any] = field(default_factory=dict)


def gather(ctx: CheckContext[KernelSettings]) -> KernelObservation:
    log = gather_log(ctx, ctx.settings)
    procfs = ctx.paths.procfs
    tasks: Union[tuple[StuckCandidate, ...], Unobserved]
    try:
        tasks = tuple(read_d_state(procfs))
    except OSError as exc:
        tasks = Unobserved("PROCESSES_UNREADABLE", str(procfs), f"cannot list processes: {exc}")
    except ValueError as exc:
        tasks = Unobserved("PROCESS_STAT_MALFORMED", str(procfs), one_line(str(exc)))
    previous = ctx.state.load().get("d_state")
    return KernelObservation(log, tasks, previous if isinstance(previous, dict) else {})


def _clock(task: StuckCandidate, stored: Mapping[str, Any], now: float) -> dict[str, Any]:
    """The task's entry: since when it has slept without a context switch."""
    since = stored.get("since")
    unchanged = task.switches is None or stored.get("switches") == task.switches
    if not unchanged or not isinstance(since, (int, float)) or isinstance(since, bool) or since > now:
        since = now
    return {"since": since, "switches": task.switches}


def users_task(task: StuckCandidate) -> bool:
    """Whether an ordinary user may have put ``task`` where it is: a uid of it is not root's nor a system account's.

    Every uid counts, not only the real one: a setuid-root program run by a user keeps the
    user's real uid, and a root daemon acting for a user (seteuid) takes the user's
    effective and filesystem uids, which are what a user's FUSE server answers to. A task
    whose status could not be read (it exited meanwhile) is counted as before.
    """
    return task.uids is not None and not all(system_uid(uid) for uid in task.uids)


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
    ignored = set(settings.ignore_tasks)
    counted = ((task.key, task) for task in tasks if task.name not in ignored)
    stuck: list[tuple[StuckCandidate, float]] = []
    users: list[tuple[StuckCandidate, float]] = []

    def clock(task: StuckCandidate, stored: Mapping[str, Any]) -> tuple[list[Finding], dict[str, Any]]:
        entry = _clock(task, stored, jc.now)
        if jc.now - entry["since"] >= settings.stuck_after:
            noted = settings.user_tasks == "note" and users_task(task)
            (users if noted else stuck).append((task, jc.now - entry["since"]))
        return [], entry

    _, document = _TASKS.judge_each(observed.previous, observed.log.boot_id, jc.now, counted, clock)
    findings = []
    if len(stuck) > settings.stuck_tasks_max:
        findings.append(_stuck_finding(jc, Status[settings.stuck_severity], "D_STATE_STUCK", "d_state", "", stuck))
    if users:
        # /proc shows a killable wait as D too, and a user can hold their own task in one (a
        # vfork whose child never execs, a read from their own FUSE server): never acted on.
        findings.append(
            _stuck_finding(jc, Status.OK, "D_STATE_USER_TASKS", "d_state_user", " of ordinary users", users)
        )
    return findings, document


def judge(observed: KernelObservation, jc: JudgeContext[KernelSettings]) -> Verdict:
    log_findings, log_state = judge_log(observed.log, jc, jc.settings, PATTERNS)
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
    settings="healthd_checks.kernel_settings:KernelSettings",
    run=Staged(gather, judge, keeps="the kernel-log cursor and the D-state task clocks"),
)
