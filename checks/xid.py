"""The ``xid`` check: NVIDIA Xid/SXid events from the kernel log, read exactly once, graded by catalog.

Each pass reads the kernel log from the cursor kept in the check's state (with the
boot id: a new boot starts over), folds new lines into one group per GPU and Xid,
and reports one finding per group seen this boot. Only what the NVIDIA driver wrote
counts: records of the kernel facility whose message begins with the driver's prefix
(``xid_parse``). A record that a process wrote to /dev/kmsg is never a finding unless
``accept_userspace_kmsg`` is on, a switch for tests that is reported in every pass
while on. A fallen-off-the-bus banner split over records, or over passes, is
completed from the state. Grades come from
``xid_catalog`` with the operator's overrides. Every line is dated by its own
record time (kernel timestamp plus boot time, or the journal's), never by when it
was read, and all windows are judged on that time. A flood of identical lines is
one event per ``window`` (``details["count"]`` counts every line), and inside it a
milder line never grades the event down. Xids that need a GPU reset stay active
until a reboot, an Xid 154 back to "no action" on that GPU, or an acknowledgement
(handled centrally, matched on ``details["event"]``); those that need a reboot
ignore the Xid 154. Everything else that was seen is still reported, as an OK
finding, so metrics can count Xids by GPU and code.

GPU numbering: the driver's Xid line names a PCI address. healthd maps it to an
index by sorting the NVIDIA display/3D controllers under ``[paths].sysfs/bus/pci/
devices`` by address, which is the order NVML enumerates GPUs in by default
(``CUDA_DEVICE_ORDER`` aside); the order is captured once per boot, so a GPU that
falls off the bus does not renumber the others.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Optional

from pydantic import Field, field_validator

from healthd.model import DetailValue, Finding, Status
from healthd.plugin import CheckContext, CheckSettings, CheckSpec

from .kernlog import (
    LogLine,
    LogUnavailable,
    ReadResult,
    journal_available,
    kmsg_seq,
    read_boot_id,
    read_boot_time,
    read_journal,
    read_kmsg,
)
from .sysfs import VENDOR_NVIDIA, scan_pci
from .xid_catalog import Bucket, Sticky, classify
from .xid_parse import Banner, GpuIdentity, Kind, Origin, PciAddress, XidEvent, origin_of, read_message

STATE_VERSION = 1
_OVERRIDE_KEY = re.compile(r"(?:XID_)?(\d{1,6})|SXID_(\d{1,6})")
_MESSAGE_LIMIT = 240
# Lines of one GPU and application Xid closer than this are one occurrence: a crashing
# process makes the driver print several lines at once.
_BURST_SECONDS = 5.0


class XidSettings(CheckSettings):
    source: Literal["auto", "kmsg", "journal"] = Field(
        default="auto", description="auto: the journal where systemd booted the node and systemd-python imports"
    )
    journal_directory: Optional[Path] = Field(default=None, description="journal files to read (default: system's)")
    window: float = Field(default=3600.0, gt=0, description="seconds one event covers; repeats inside it are counted")
    app_repeat_count: int = Field(default=3, ge=1, description="application Xids on one GPU that make a WARNING")
    app_repeat_window: float = Field(default=3600.0, gt=0, description="seconds within which those repeats count")
    overrides: dict[str, Status] = Field(
        default_factory=dict, description='grade per Xid, e.g. { "63" = "CRITICAL", "SXID_20034" = "WARNING" }'
    )
    accept_userspace_kmsg: bool = Field(
        default=False,
        description="TESTS ONLY: count records that processes wrote to /dev/kmsg (a facility other than the "
        "kernel's) like the driver's own; anyone who can write /dev/kmsg can then report a GPU fault",
        json_schema_extra={"trust_switch": True},
    )

    @field_validator("overrides", mode="before")
    @classmethod
    def _normalize_overrides(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ValueError("overrides must be a table of Xid = grade")
        normalized: dict[str, Status] = {}
        for key, grade in value.items():
            match = _OVERRIDE_KEY.fullmatch(str(key).strip().upper())
            if match is None:
                raise ValueError(f"overrides key {key!r} is not an Xid number or SXID_<n>")
            if not isinstance(grade, (str, Status)):
                raise ValueError(f"overrides.{key}: grade must be OK, WARNING, CRITICAL or UNKNOWN, got {grade!r}")
            try:
                status = grade if isinstance(grade, Status) else Status.parse(grade)
            except ValueError as exc:
                raise ValueError(f"overrides.{key}: {exc}") from None
            normalized[str(int(match.group(1))) if match.group(1) else f"SXID_{int(match.group(2))}"] = status
        return normalized


@dataclass
class _Group:
    """What we know this boot about one GPU (or switch) and one Xid. Lives only in this module."""

    code: str
    xid: int
    kind: str
    subject: str
    gpu: str
    pci: str
    bucket: str
    grade: str
    sticky: str
    event: str
    count: int = 0
    window_start: float = 0.0
    window_count: int = 0
    last_seen: float = 0.0
    sticky_active: bool = False
    cleared: bool = False
    recent: list[float] = field(default_factory=list)
    text: str = ""
    summary: str = ""
    uuid: str = ""
    recovery_action: str = ""
    action: str = ""
    userspace: int = 0


def _load_groups(raw: Any) -> dict[str, _Group]:
    groups: dict[str, _Group] = {}
    if not isinstance(raw, dict):
        return groups
    for key, value in raw.items():
        try:
            group = _Group(**value)
            valid = bool(group.grade in Status.__members__ and Bucket(group.bucket) and Sticky(group.sticky))
            valid = valid and isinstance(group.userspace, int)
        except (TypeError, ValueError):
            continue  # a damaged entry is dropped rather than trusted
        if valid:
            groups[str(key)] = group
    return groups


def _load_banner(raw: Any) -> Optional[Banner]:
    """The banner pending at the end of the last pass, if the state holds a sane one."""
    if not isinstance(raw, dict):
        return None
    text, origin, waited = raw.get("text"), raw.get("origin"), raw.get("waited")
    if not isinstance(text, str) or origin not in {o.value for o in Origin} or not isinstance(waited, int):
        return None
    return Banner(text, Origin(origin), waited)


def nvidia_gpus(sysfs: Path) -> list[PciAddress]:
    """NVIDIA GPUs on the PCI bus, in address order (NVML's default enumeration order)."""
    scan = scan_pci(sysfs, frozenset({VENDOR_NVIDIA}))
    return [a for a in (PciAddress.parse(f.address) for f in scan.nvidia_gpus) if a is not None]


def _one_line(text: str) -> str:
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 3] + "..."


class _Pass:
    """One pass's work: read, fold into groups, report. Holds the state document while it runs."""

    def __init__(self, ctx: CheckContext[XidSettings], boot_id: str, document: dict[str, Any]) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.boot_id = boot_id
        self.now = ctx.clock()
        self.findings: list[Finding] = []
        if document.get("version") != STATE_VERSION or document.get("boot_id") != boot_id:
            document = {}
        self.source: str = str(document.get("source", ""))
        cursor = document.get("cursor")
        self.cursor: Optional[str] = cursor if isinstance(cursor, str) else None
        uuids = document.get("uuids")
        self.uuids: dict[str, str] = {str(k): str(v) for k, v in uuids.items()} if isinstance(uuids, dict) else {}
        order = document.get("gpu_order")
        self.order: list[str] = [str(o) for o in order] if isinstance(order, list) else []
        self.groups = _load_groups(document.get("groups"))
        self.banner = _load_banner(document.get("banner"))
        if not self.order:
            self.order = [str(a) for a in nvidia_gpus(ctx.paths.sysfs)]
        # Kernel timestamps (usec since boot) of the newest record folded this boot, and,
        # after a change of source, of the newest one the old source had folded.
        self.last_usec = _int_or_none(document.get("last_usec"))
        self.skip_usec = _int_or_none(document.get("skip_usec"))
        self.first_read = self.cursor is None and self.last_usec is None
        self.boot_time = read_boot_time(ctx.paths.procfs, self.now)

    def document(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "boot_id": self.boot_id,
            "source": self.source,
            "cursor": self.cursor,
            "uuids": self.uuids,
            "gpu_order": self.order,
            "last_usec": self.last_usec,
            "skip_usec": self.skip_usec,
            "banner": None if self.banner is None else {**asdict(self.banner), "origin": self.banner.origin.value},
            "groups": {key: asdict(group) for key, group in sorted(self.groups.items())},
        }

    def read(self) -> Optional[ReadResult]:
        """New lines from the configured source, falling back to kmsg; None (and UNKNOWN) when unreadable."""
        wanted = self.settings.source
        if wanted == "auto":
            wanted = "journal" if journal_available() else "kmsg"
        problems: list[str] = []
        if wanted == "journal":
            try:
                result = read_journal(
                    self.settings.journal_directory, self.boot_id, self.cursor if self.source == "journal" else None
                )
                self._switch_source("journal")
                return result
            except LogUnavailable as exc:
                problems.append(str(exc))
        kmsg = self.ctx.paths.kmsg
        try:
            result = read_kmsg(kmsg, kmsg_seq(self.cursor) if self.source == "kmsg" else None, self.boot_time)
        except LogUnavailable as exc:
            problems.append(str(exc))
        else:
            self._switch_source("kmsg")
            if problems:
                # Xids are still seen through kmsg, so this is a note, not "could not observe";
                # but the journal's longer history is not being used, and someone should know.
                directory = self.settings.journal_directory
                self.findings.append(
                    self.ctx.finding(
                        Status.OK,
                        "KERNEL_LOG_JOURNAL_UNREADABLE",
                        str(directory) if directory is not None else "journal",
                        _one_line(f"{problems[0]}; reading {kmsg} instead"),
                        reason=_one_line(problems[0]),
                    )
                )
            return result
        self.findings.append(
            self.ctx.finding(
                Status.UNKNOWN,
                "KERNEL_LOG_UNREADABLE",
                str(kmsg),
                _one_line("; ".join(problems)),
                path=str(kmsg),
            )
        )
        return None

    def _switch_source(self, source: str) -> None:
        # Cursors of different sources cannot be translated, so the new source is read from
        # the start of the boot; the groups (sticky events, event ids, counts) are kept, and
        # records the old source already folded are skipped by their kernel timestamp,
        # which both sources carry.
        if self.source != source:
            if self.source:
                self.skip_usec = self.last_usec
            self.source = source
            self.cursor = None

    def _is_old(self, line: LogLine) -> bool:
        """Whether the old source already folded ``line`` (only right after a change of source)."""
        if self.skip_usec is None or line.usec is None:
            return False
        if line.usec <= self.skip_usec:
            return True
        self.skip_usec = None
        return False

    def fold(self, result: ReadResult) -> None:
        accept_userspace = self.settings.accept_userspace_kmsg
        for line in result.lines:
            if self._is_old(line):
                continue
            if line.usec is not None:
                self.last_usec = max(line.usec, self.last_usec or 0)
            origin = origin_of(line.facility)
            # Both sources carry the facility, so a record of unknown origin is as untrusted
            # as one that userspace wrote.
            if origin is not Origin.KERNEL and not accept_userspace:
                continue
            step = read_message(line.message, self.banner, origin)
            self.banner = step.banner
            event = step.event
            if isinstance(event, GpuIdentity):
                self.uuids[str(event.pci)] = event.uuid
            elif event is not None:
                # The kernel's timestamp names the record in both sources, so an event id
                # does not change with the source. A record is dated by its own time: lines
                # read late (a first pass on a node up for months) keep their age.
                record = line.usec if line.usec is not None else line.record_id
                when = min(line.time, self.now) if line.time is not None else self.now
                self._add(event, f"{self.boot_id}:{record}", when, origin is not Origin.KERNEL)
        if result.cursor is not None:
            self.cursor = result.cursor
        if self.source == "kmsg" and self.first_read and result.oldest:
            # The ring buffer wraps on any long-running node: a note, never an alarm.
            self.findings.append(
                self.ctx.finding(
                    Status.OK,
                    "KERNEL_LOG_TRUNCATED",
                    str(self.ctx.paths.kmsg),
                    f"the kernel log starts at record {result.oldest}: earlier records of this boot were "
                    "overwritten before healthd first read it, so Xids among them are not known",
                    first_seq=result.oldest,
                )
            )
        if result.lost:
            where = str(self.ctx.paths.kmsg) if self.source == "kmsg" else "journal"
            # Lost records mean an Xid may have gone unseen: that is "could not observe"
            # (UNKNOWN), not a fault of the node, so by default it is reported, not drained.
            self.findings.append(
                self.ctx.finding(
                    Status.UNKNOWN,
                    "KERNEL_LOG_OVERRUN",
                    where,
                    _one_line(f"kernel log records were lost before healthd read them: {result.lost}"),
                    event=f"{self.boot_id}:lost:{self.cursor}",
                )
            )

    def _identify(self, event: XidEvent) -> tuple[str, str, str]:
        """(subject, gpu, pci) for an event."""
        if event.kind is Kind.SXID:
            pci = event.pci.full if event.pci else ""
            name = event.switch or pci or "unknown-nvswitch"
            return name, name, pci
        if event.pci is None:
            return "unknown-gpu", "unknown", ""
        pci = str(event.pci)
        if pci in self.order:
            index = self.order.index(pci)
            return f"gpu{index}", str(index), pci
        return pci, pci, pci

    def _add(self, event: XidEvent, event_id: str, when: float, userspace: bool) -> None:
        if event.detail:
            # An SXid's Severity and Data lines describe the error of its Fatal/Non-fatal
            # line just before; that line alone creates and grades the event.
            return
        entry = classify(event, self.settings.overrides)
        subject, gpu, pci = self._identify(event)
        prefix = "SXID" if event.kind is Kind.SXID else "XID"
        code = f"{prefix}_{event.code}"
        key = f"{code}@{subject}"
        group = self.groups.get(key)
        recovery = event.recovery.action.name if event.recovery and event.recovery.action else ""
        is_154 = event.recovery is not None
        created = group is None
        if group is None:
            group = _Group(code, event.code, event.kind.value, subject, gpu, pci, "", "OK", "", event_id)
            self.groups[key] = group
        in_window = not group.cleared and when - group.window_start < self.settings.window
        rank, held = entry.grade.rank, Status[group.grade].rank
        new_event = created or not in_window or group.recovery_action != recovery or rank > held
        # Inside its window an event is never graded down by a milder line of the same Xid;
        # only a new recovery action (Xid 154) may say the GPU needs less than before.
        milder = not new_event and rank < held
        if new_event:
            group.event = event_id
            group.window_start = when
            group.window_count = 0
        if not milder:
            group.bucket = entry.bucket.value
            group.grade = entry.grade.name
            group.sticky = entry.sticky.value
            group.summary = entry.summary
            group.action = entry.action.value
            group.text = _one_line(event.text)[:120]
            failing = entry.sticky is not Sticky.NO and entry.grade is not Status.OK
            # Xid 154 states the GPU's current need: its latest action replaces the last one.
            group.sticky_active = failing if is_154 else group.sticky_active or failing
        group.recovery_action = recovery
        group.count += 1
        group.window_count += 1
        group.userspace += int(userspace)
        group.cleared = False
        if group.bucket == Bucket.APPLICATION.value and abs(when - group.last_seen) >= _BURST_SECONDS:
            horizon = self.now - self.settings.app_repeat_window
            # Times after now were stamped before the clock stepped back: their age is unknown.
            recent = [t for t in [*group.recent, when] if horizon < t <= self.now]
            group.recent = recent[-self.settings.app_repeat_count :]
        group.last_seen = max(group.last_seen, when)
        if event.recovery is not None and event.recovery.after == 0 and event.pci is not None:
            self._clear_gpu(event.pci, key)

    def _clear_gpu(self, pci: PciAddress, except_key: str) -> None:
        """Xid 154 back to "no action": the driver says the GPU no longer needs a reset.

        Only events a GPU reset clears end here; one that needs a reboot (79, a reboot
        recovery action) ends with the boot or an acknowledgement.
        """
        for key, group in self.groups.items():
            if key == except_key or group.pci != str(pci) or not group.sticky_active:
                continue
            if group.sticky == Sticky.UNTIL_RESET.value:
                group.sticky_active = False
                group.cleared = True

    def _status(self, group: _Group) -> tuple[Status, str]:
        grade = Status[group.grade]
        if group.cleared:
            return Status.OK, "; cleared by recovery action None"
        if group.sticky_active:
            return grade, ""
        if grade is not Status.OK and self.now - group.last_seen < self.settings.window:
            return grade, ""
        if group.bucket == Bucket.APPLICATION.value and grade is Status.OK:
            horizon = self.now - self.settings.app_repeat_window
            repeats = sum(1 for t in group.recent if horizon < t <= self.now)
            if repeats >= self.settings.app_repeat_count:
                return Status.WARNING, f"; repeated {repeats} times within {self.settings.app_repeat_window:g}s"
        return Status.OK, ""

    def report(self) -> list[Finding]:
        for group in sorted(self.groups.values(), key=lambda g: (g.subject, g.xid, g.code)):
            status, note = self._status(group)
            what = "SXid" if group.kind == Kind.SXID.value else "Xid"
            text = f": {group.text}" if group.text else ""
            message = f"{what} {group.xid} on {group.subject}: {group.summary}{text}{note} ({group.count} this boot)"
            details: dict[str, DetailValue] = {
                "event": group.event,
                "xid": group.xid,
                "gpu": int(group.gpu) if group.gpu.isdigit() else group.gpu,
                "pci": group.pci,
                "count": group.count,
                "window_count": group.window_count,
                "bucket": group.bucket,
                "sticky": group.sticky_active,
            }
            uuid = self.uuids.get(group.pci, "")
            if uuid:
                details["uuid"] = uuid
            if group.recovery_action:
                details["recovery_action"] = group.recovery_action
            if group.action:
                details["action"] = group.action
            if group.userspace:
                details["userspace_records"] = group.userspace
            self.findings.append(self.ctx.finding(status, group.code, group.subject, _one_line(message), **details))
        return self.findings


def _int_or_none(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def run(ctx: CheckContext[XidSettings]) -> Iterable[Finding]:
    try:
        boot_id = read_boot_id(ctx.paths.procfs)
    except LogUnavailable as exc:
        return [ctx.finding(Status.UNKNOWN, "KERNEL_LOG_UNREADABLE", str(ctx.paths.procfs), str(exc))]
    work = _Pass(ctx, boot_id, ctx.state.load())
    if ctx.settings.accept_userspace_kmsg:
        work.findings.append(
            ctx.finding(
                Status.OK,
                "KERNEL_LOG_USERSPACE_ACCEPTED",
                "accept_userspace_kmsg",
                "accept_userspace_kmsg is on: records that processes wrote to /dev/kmsg count as NVIDIA driver "
                "messages, so anyone who can write /dev/kmsg can report a GPU fault (a setting for tests)",
                setting="accept_userspace_kmsg",
            )
        )
    result = work.read()
    if result is not None:
        work.fold(result)
    findings = work.report()
    findings += ctx.save_state(work.document(), "the kernel-log cursor and Xid events")
    return findings


CHECK = CheckSpec(
    name="xid",
    description="NVIDIA Xid/SXid errors in the kernel log, read once each, graded by NVIDIA's Xid catalog",
    settings=XidSettings,
    run=run,
)
