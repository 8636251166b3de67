"""Kernel-log events for the checks that look for kernel messages: read once each, trusted only from the kernel.

The ``kernel`` (hung tasks, lockups), ``edac`` (machine checks) and ``disks`` (block I/O
errors) checks each give a table of ``Pattern``s; this module reads the new lines of
this boot from the check's own cursor (``healthd_checks.kernlog.read``), folds the lines that match
into one group per pattern and subject, and reports every group seen this boot.

Trust follows the ``xid`` check's rules: only records of the kernel facility count
(``healthd_checks.xid.parse.origin_of``: facility 0 is the kernel's alone, userspace writes to
/dev/kmsg get another), and each pattern is matched from the *start* of the first line
of a record's message. Task names and file names that users choose appear inside
kernel messages (the hung-task report names the task), never at their start, so they
cannot complete a pattern; they are cleaned (``healthd.text.one_line``) before they are
shown. ``accept_userspace_kmsg`` (tests only) lifts the facility rule and says so.

A group's grade holds while its last line is younger than ``window``; a ``sticky``
pattern holds a CRITICAL grade (an uncorrected machine check) until the node reboots. Older groups are
still reported, as OK, so the count of events this boot stays visible.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Optional

from healthd.boot import BootIdUnreadable, read_boot_id
from healthd.checks.plugin import NotApplicable, Unobserved, Verdict
from healthd.model import DetailValue, Finding, Status
from healthd.store.state import load_records
from healthd.text import one_line

from .read import LogRead, Position, read_new
from .source import LogLine, Origin, origin_of

if TYPE_CHECKING:
    from healthd.checks.plugin import CheckContext, JudgeContext

    from .settings import KernelLogSettings

STATE_VERSION = 1
# Groups kept per boot: subjects come from the kernel (CPU numbers, device names), but a
# bound keeps a flood of distinct ones from growing the state without end.
MAX_GROUPS = 128
_TEXT_LIMIT = 200


class Pattern(NamedTuple):
    """One kind of kernel message: matched from the start of a record's first line.

    ``subject`` names the group from the match (a CPU, a device); ``details`` gives the
    match's details (cleaned text only). ``needle`` is a substring every matching line
    holds, checked before the expression runs.
    """

    code: str
    regex: re.Pattern[str]
    status: Status
    summary: str
    needle: str
    subject: Callable[[re.Match[str]], str]
    details: Callable[[re.Match[str]], Mapping[str, DetailValue]] = lambda match: {}
    sticky: bool = False
    grade: Optional[Callable[[re.Match[str]], Status]] = None  # a grade read from the line, instead of ``status``


class Hit(NamedTuple):
    """One line that matched: its pattern, subject, details and the line itself (cleaned)."""

    pattern: Pattern
    subject: str
    details: Mapping[str, DetailValue]
    text: str
    status: Status


def match_line(message: str, patterns: tuple[Pattern, ...]) -> Optional[Hit]:
    """The first pattern that matches the start of the first line of ``message``, or None. Never raises."""
    line = message.partition("\n")[0]
    for pattern in patterns:
        if pattern.needle not in line:
            continue
        found = pattern.regex.match(line)
        if found is not None:
            subject = one_line(pattern.subject(found), 64) or "unknown"
            status = pattern.grade(found) if pattern.grade is not None else pattern.status
            return Hit(pattern, subject, pattern.details(found), one_line(line, _TEXT_LIMIT), status)
    return None


@dataclass
class _Group:
    """What is known this boot about one pattern and subject. Lives only in this module and the state."""

    code: str
    subject: str
    grade: str
    sticky: bool
    summary: str
    event: str
    first_seen: float
    last_seen: float
    count: int = 0
    text: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    userspace: int = 0


def _sane(group: _Group) -> bool:
    return group.grade in Status.__members__ and isinstance(group.count, int) and isinstance(group.details, dict)


def _load_groups(raw: Any) -> dict[str, _Group]:
    return load_records(raw, _Group, _sane)


class LogObservation(NamedTuple):
    """What one pass read: the boot, the saved state, where reading stands, and the new lines (or why none)."""

    kmsg: str
    boot_id: Optional[str] = None
    unreadable: Optional[Unobserved] = None
    document: Mapping[str, Any] = MappingProxyType({})
    position: Position = Position()
    read: Optional[LogRead] = None


def gather_log(ctx: CheckContext[Any], settings: KernelLogSettings) -> LogObservation:
    """Read this boot's new kernel-log lines from the check's cursor (a new boot starts over)."""
    kmsg = str(ctx.paths.kmsg)
    try:
        boot_id = read_boot_id(ctx.paths.procfs)
    except BootIdUnreadable as exc:
        return LogObservation(kmsg, unreadable=Unobserved("KERNEL_LOG_UNREADABLE", str(ctx.paths.procfs), str(exc)))
    document = ctx.state.load()
    log = document.get("log")
    if not isinstance(log, dict) or log.get("version") != STATE_VERSION or log.get("boot_id") != boot_id:
        log = {}
    position = Position.load(log)
    read = read_new(ctx, boot_id, position)
    if read.unreadable is not None:
        problem = Unobserved("KERNEL_LOG_UNREADABLE", kmsg, one_line(read.unreadable), {"path": kmsg})
        return LogObservation(kmsg, boot_id, problem, log, position)
    return LogObservation(kmsg, boot_id, None, log, position, read)


def _fresh(lines: tuple[LogLine, ...], position: Position) -> tuple[list[LogLine], Position]:
    """The lines not read before (after a change of source, those past the old source's last), and the new position."""
    fresh: list[LogLine] = []
    skip, last = position.skip_usec, position.last_usec
    for line in lines:
        if skip is not None and line.usec is not None:
            if line.usec <= skip:
                continue
            skip = None
        if line.usec is not None:
            last = max(line.usec, last or 0)
        fresh.append(line)
    return fresh, position._replace(skip_usec=skip, last_usec=last)


def _add(groups: dict[str, _Group], hit: Hit, event: str, when: float, userspace: bool) -> None:
    key = f"{hit.pattern.code}@{hit.subject}"
    group = groups.get(key)
    if group is None:
        if len(groups) >= MAX_GROUPS:
            return
        pattern = hit.pattern
        group = _Group(pattern.code, hit.subject, hit.status.name, pattern.sticky, pattern.summary, event, when, when)
        groups[key] = group
    # A worse line raises the group's grade; a milder one never lowers it within the boot.
    # The worse line starts a new event, as in xid_events: an acknowledgement of the milder
    # one (a corrected machine check) must not cover it (an uncorrected one).
    if hit.status.rank > Status[group.grade].rank:
        group.grade = hit.status.name
        group.event = event
    group.count += 1
    group.first_seen = min(group.first_seen, when)
    group.last_seen = max(group.last_seen, when)
    group.text = hit.text
    group.details = dict(hit.details)
    group.userspace += int(userspace)


def judge_log(
    observed: LogObservation, jc: JudgeContext[Any], settings: KernelLogSettings, patterns: tuple[Pattern, ...]
) -> tuple[list[Finding], Optional[dict[str, Any]]]:
    """This pass's findings from the kernel log, and the ``log`` part of the state to save (None: keep it)."""
    if observed.boot_id is None or observed.unreadable is not None:
        return [observed.unreadable.finding(jc)] if observed.unreadable is not None else [], None
    findings: list[Finding] = []
    if settings.accept_userspace_kmsg:
        message = "accept_userspace_kmsg is on: records that processes wrote to /dev/kmsg count as the kernel's"
        setting = "accept_userspace_kmsg"
        findings.append(jc.finding(Status.OK, "KERNEL_LOG_USERSPACE_ACCEPTED", setting, message, setting=setting))
    groups = _load_groups(observed.document.get("groups"))
    position = observed.position
    read = observed.read
    if read is not None and read.result is not None:
        position = read.position
        lines, position = _fresh(read.result.lines, position)
        for line in lines:
            origin = origin_of(line.facility)
            if origin is not Origin.KERNEL and not settings.accept_userspace_kmsg:
                continue
            hit = match_line(line.message, patterns)
            if hit is None:
                continue
            record = line.usec if line.usec is not None else line.record_id
            when = min(line.time, jc.now) if line.time is not None else jc.now
            _add(groups, hit, f"{observed.boot_id}:{record}", when, origin is not Origin.KERNEL)
        if read.result.cursor is not None:
            position = position._replace(cursor=read.result.cursor)
        if read.result.lost:
            where = observed.kmsg if position.source == "kmsg" else "journal"
            lost = one_line(f"kernel log records were lost before healthd read them: {read.result.lost}")
            findings.append(jc.finding(Status.UNKNOWN, "KERNEL_LOG_OVERRUN", where, lost))
        if read.journal_problem is not None:
            problem = one_line(read.journal_problem)
            journal = str(settings.journal_directory or "journal")
            note = f"{problem}; reading {observed.kmsg} instead"
            findings.append(jc.finding(Status.OK, "KERNEL_LOG_JOURNAL_UNREADABLE", journal, note, reason=problem))
    findings += _report(groups, jc, settings)
    document = {
        "version": STATE_VERSION,
        "boot_id": observed.boot_id,
        "source": position.source,
        "cursor": position.cursor,
        "last_usec": position.last_usec,
        "skip_usec": position.skip_usec,
        "groups": {key: asdict(group) for key, group in sorted(groups.items())},
    }
    return findings, document


def _report(groups: Mapping[str, _Group], jc: JudgeContext[Any], settings: KernelLogSettings) -> list[Finding]:
    findings = []
    for group in sorted(groups.values(), key=lambda g: (g.code, g.subject)):
        grade = Status[group.grade]
        recent = jc.now - group.last_seen < settings.window
        # Sticky kinds hold until a reboot once CRITICAL (a corrected machine check does not).
        status = grade if (group.sticky and grade is Status.CRITICAL) or recent else Status.OK
        note = "" if status is grade else f" (none in the last {settings.window:g}s)"
        message = f"{group.summary}: {group.text}{note} ({group.count} this boot)"
        details: dict[str, DetailValue] = {
            "event": group.event,
            "count": group.count,
            "first_seen": group.first_seen,
            "last_seen": group.last_seen,
            "sticky": group.sticky,
        }
        details.update({k: v for k, v in group.details.items() if isinstance(v, (str, int, float, bool))})
        if group.userspace:
            details["userspace_records"] = group.userspace
        findings.append(jc.finding(status, group.code, group.subject, one_line(message, 300), **details))
    return findings


def with_log(
    log: LogObservation,
    jc: JudgeContext[Any],
    settings: KernelLogSettings,
    patterns: tuple[Pattern, ...],
    findings: list[Finding],
    state: dict[str, Any],
    absent: Optional[str],
) -> Verdict:
    """A hardware check's verdict with its kernel-log part added after its own findings and state.

    ``absent`` says why the check does not apply when it is not None and neither
    the hardware nor the log gave a finding (``NotApplicable``). The state is kept
    even then: every new record was matched against ``patterns`` and none matched, so
    the next pass need read only what is logged after it, and a check that applies
    later (a driver loaded) still sees every record logged since (docs/host.md, "Reading the kernel log").
    """
    log_findings, log_state = judge_log(log, jc, settings, patterns)
    findings = [*findings, *log_findings]
    kept = {**state, **kept_log(log, log_state)}
    if absent is not None and not findings:
        raise NotApplicable(absent, kept)
    return Verdict(tuple(findings), kept)


def kept_log(log: LogObservation, new: Optional[dict[str, Any]]) -> dict[str, Any]:
    """The ``log`` part of a check's state to save: ``new`` from ``judge_log``, else the cursor it had."""
    if new is not None:
        return {"log": new}
    return {"log": dict(log.document)} if log.document else {}
