"""The ``ipmi`` check: critical events the BMC logged in its System Event Log since the last pass.

``gather`` runs ``ipmitool sel elist`` (by the absolute path in ``ipmitool``, under a
deadline: ``program``) where the BMC's device node exists, and reads the check's state;
``judge`` takes the records whose ID is above the highest one seen before (all of them
when the log was cleared, none on the very first pass, which only takes the baseline: a
SEL holds months of history, and old events must not drain a node), grades each by the
event's description, and reports one finding per sensor and description (the subject).

Grades follow the sensor-specific event offsets of the IPMI 2.0 specification (table
42-3), as ipmitool prints them: uncorrectable memory errors, processor IERR and thermal
trips, power-supply failures, fatal bus errors and non-recoverable thresholds are
CRITICAL; predictive failures, correctable-ECC logging limits and critical thresholds are
WARNING; everything else (non-critical thresholds included), and every deassertion, is not
reported. A CRITICAL event holds
until the node reboots, a WARNING for ``window`` seconds. See docs/host.md.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Optional, Union

from healthd.checks.plugin import CheckSpec, NotApplicable, Staged, Unobserved, Verdict
from healthd.model import DetailValue, Finding, Status
from healthd.text import one_line

from ..common import program
from ..common.sysfs import boot_id_or_none

if TYPE_CHECKING:
    from healthd.checks.plugin import CheckContext, JudgeContext

    from .settings import IpmiSettings


# Threshold crossings (IPMI 2.0 table 42-2, event type 01h) as ipmitool's threshold event table
# prints them: "Upper Critical going high", "Lower Non-recoverable going low". Matched as whole
# words, never as a substring: "Upper Non-critical going high" contains "critical going". A
# non-critical threshold is the BMC's early notice, set well inside the part's operating range:
# not a fault, so not reported (docs/host.md).
THRESHOLD = re.compile(r"\b(?:lower|upper) (non-critical|critical|non-recoverable) going (?:low|high)\b")
THRESHOLD_GRADES: Mapping[str, Optional[Status]] = {
    "non-recoverable": Status.CRITICAL,
    "critical": Status.WARNING,
    "non-critical": None,
}

# Descriptions ipmitool prints for sensor-specific offsets (IPMI 2.0 table 42-3), lower-cased,
# with their grade. The first that the description contains decides.
GRADES: tuple[tuple[str, Status], ...] = (
    ("uncorrectable ecc", Status.CRITICAL),
    ("uncorrectable machine check", Status.CRITICAL),
    ("memory scrub failed", Status.CRITICAL),
    ("memory device disabled", Status.CRITICAL),
    ("critical overtemperature", Status.CRITICAL),
    ("ierr", Status.CRITICAL),
    ("thermal trip", Status.CRITICAL),
    ("failure detected", Status.CRITICAL),
    ("pci serr", Status.CRITICAL),
    ("bus fatal error", Status.CRITICAL),
    ("bus uncorrectable error", Status.CRITICAL),
    ("parity", Status.CRITICAL),
    ("predictive failure", Status.WARNING),
    ("correctable ecc logging limit reached", Status.WARNING),
    ("pci perr", Status.WARNING),
    ("power supply ac lost", Status.WARNING),
)


class SelRecord(NamedTuple):
    """One line of ``ipmitool sel elist``: ``ID | date | time | sensor | description | direction``."""

    record_id: int
    when: str
    sensor: str
    description: str
    asserted: bool


def parse_sel_line(line: str) -> Optional[SelRecord]:
    """One record, or None for a line that is not one (ipmitool's headers and warnings). Never raises."""
    fields = [part.strip() for part in line.split("|")]
    if len(fields) < 5:
        return None
    try:
        record_id = int(fields[0], 16)
    except ValueError:
        return None
    direction = fields[5].lower() if len(fields) > 5 else "asserted"
    return SelRecord(
        record_id,
        one_line(f"{fields[1]} {fields[2]}", 40),
        one_line(fields[3], 80),
        one_line(fields[4], 120),
        direction != "deasserted",
    )


def grade(record: SelRecord) -> Optional[Status]:
    """The grade of an asserted event by its description (``THRESHOLD_GRADES``, ``GRADES``); None: not reported."""
    if not record.asserted:
        return None
    text = record.description.lower()
    crossing = THRESHOLD.search(text)
    if crossing is not None:
        return THRESHOLD_GRADES[crossing.group(1)]
    for needle, status in GRADES:
        if needle in text:
            return status
    return None


class IpmiObservation(NamedTuple):
    records: Union[tuple[SelRecord, ...], Unobserved]
    boot_id: Optional[str]
    previous: Mapping[str, Any] = MappingProxyType({})


def gather(ctx: CheckContext[IpmiSettings]) -> IpmiObservation:
    settings = ctx.settings
    if not program.present(settings.ipmitool):
        raise NotApplicable(f"no ipmitool at {settings.ipmitool}")
    if not settings.device.exists():
        raise NotApplicable(f"no BMC device {settings.device} (ipmi_devintf not loaded, or no BMC)")
    argv = [str(settings.ipmitool), "sel", "elist"]
    done = program.run(ctx.memory, argv, settings.sel_timeout, "sel", "IPMI_SEL")
    records: Union[tuple[SelRecord, ...], Unobserved]
    if isinstance(done, Unobserved):
        records = done
    elif done.returncode != 0:
        records = program.failed(done, argv, "sel", "IPMI_SEL")
    else:
        # ipmitool ends each SEL entry with "\n"; its text is the BMC's, which no user of the node writes.
        records = tuple(r for r in map(parse_sel_line, done.out.split("\n")) if r is not None)
    return IpmiObservation(records, boot_id_or_none(ctx.paths.procfs), ctx.state.load())


@dataclass
class _Event:
    sensor: str
    description: str
    grade: str
    first_id: int
    when: str
    seen: float
    count: int = 0


def _load(raw: Any) -> dict[str, _Event]:
    events: dict[str, _Event] = {}
    for key, value in (raw or {}).items() if isinstance(raw, dict) else ():
        try:
            event = _Event(**value)
        except TypeError:
            continue
        if event.grade in Status.__members__:
            events[str(key)] = event
    return events


def judge(observed: IpmiObservation, jc: JudgeContext[IpmiSettings]) -> Verdict:
    if isinstance(observed.records, Unobserved):
        return Verdict((observed.records.finding(jc),))
    previous = observed.previous
    last = previous.get("last_id")
    events = _load(previous.get("events"))
    if previous.get("boot_id") != observed.boot_id:
        events = {k: e for k, e in events.items() if Status[e.grade] is not Status.CRITICAL}
    top = max((r.record_id for r in observed.records), default=None)
    if isinstance(last, int) and not isinstance(last, bool):
        # A highest ID below the last pass's means the SEL was cleared: every record is new.
        after = last if top is not None and top >= last else -1
        for record in observed.records:
            status = grade(record)
            if record.record_id <= after or status is None:
                continue
            key = f"{record.sensor}|{record.description}"
            event = events.setdefault(
                key, _Event(record.sensor, record.description, status.name, record.record_id, record.when, jc.now)
            )
            event.count += 1
            event.seen, event.when = jc.now, record.when
            if status.rank > Status[event.grade].rank:
                event.grade = status.name
    findings: list[Finding] = []
    for key, event in sorted(events.items()):
        status = Status[event.grade]
        if status is not Status.CRITICAL and jc.now - event.seen >= jc.settings.window:
            del events[key]
            continue
        details: dict[str, DetailValue] = {"count": event.count, "record_id": event.first_id, "logged": event.when}
        message = f"BMC event: {event.sensor}: {event.description} (at {event.when}; {event.count} since healthd began)"
        subject = one_line(f"{event.sensor}: {event.description}", 120)
        findings.append(jc.finding(status, "IPMI_SEL_EVENT", subject, one_line(message), **details))
    state = {
        "boot_id": observed.boot_id,
        "last_id": top if top is not None else last if isinstance(last, int) else -1,
        "events": {key: asdict(event) for key, event in sorted(events.items())},
    }
    return Verdict(tuple(findings), state)


CHECK = CheckSpec(
    name="ipmi",
    description="critical events in the BMC's System Event Log since the last pass (ipmitool, when present)",
    settings="healthd_checks.ipmi.settings:IpmiSettings",
    run=Staged(gather, judge, keeps="the last SEL record seen and its critical events"),
)
