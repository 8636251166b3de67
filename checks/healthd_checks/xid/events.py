"""The ``xid`` check's judging: new kernel-log lines folded into this boot's events, graded and reported.

Pure: ``Position`` and ``Folding`` are built from the saved state document and what
the check's ``gather`` read, and only compute; ``Folding.document()`` is the state to
save. One event is one GPU (or NVSwitch) and one Xid within a ``window``; a flood
of identical lines is counted, never repeated. Grades come from ``healthd_checks.xid.catalog``
with the operator's overrides, and every line is dated by its own record time.

Application Xids (NVIDIA's RESTART_APP bucket) stay OK notes: users choose how often
their programs fault. Only where the operator sets ``app_repeat_count`` do they
escalate, and then by the distinct processes (pids) that hit one Xid on one GPU
within ``app_repeat_window``, never by lines; an Xid 13 that names its GPC/TPC counts
only with others naming the same one (NVIDIA's WORKFLOW_XID_13: hardware is suspected
when the same location faults under different applications).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional

from healthd.model import DetailValue, Finding, Status
from healthd.store.state import load_records
from healthd.text import one_line

from ..kernlog.read import Position
from ..kernlog.source import LogLine, Origin, ReadResult, origin_of
from .catalog import CLEARS, NVLINK5_XIDS, Bucket, Entry, Sticky, awaits_154, classify, followed_by_154, remedy
from .nvlink5 import DESCRIPTIONS, causes, parse_registers
from .parse import Banner, GpuIdentity, LineKind, PciAddress, XidEvent, read_message, sm_location

if TYPE_CHECKING:
    from healthd.checks.plugin import JudgeContext

    from .settings import XidSettings

STATE_VERSION = 1
# Finding messages are cut to this (healthd.text.one_line), as the kernel check's are.
MESSAGE_LIMIT = 240
# Lines of one GPU and application Xid that name no process and are closer than this are
# one occurrence: a crashing process makes the driver print several lines at once.
_BURST_SECONDS = 5.0
# Processes remembered per application Xid group: enough to judge any sane app_repeat_count.
_OCCURRENCES_KEPT = 256


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
    # "<GPC g TPC t or empty>|<pid N, or the time of a burst without a pid>" -> its latest time.
    recent: dict[str, float] = field(default_factory=dict)
    text: str = ""
    summary: str = ""
    uuid: str = ""
    recovery_action: str = ""
    action: str = ""
    userspace: int = 0
    nvlink: str = ""  # Xid 74: the link (and registers) of the latest line that named one
    cleared_by: str = ""  # what cleared the event ("" in states from before Xid 162: Xid 154's "None")
    # Xids 144-150: "<resolution>|<unit>|<error status>|<link>" of the line that graded the event
    # (resolution "" for a combination NVIDIA's decode lacks).
    nvlink5: str = ""
    # An XID_154_EVAL line is waiting for the Xid 154 that follows on its GPU (see _follow_154).
    awaiting_154: bool = False


# A number as healthd writes it in its state: ASCII digits (str.isdigit also takes "²", which int() refuses).
_NUMBER = re.compile(r"[0-9]+")


def _sane(group: _Group) -> bool:
    """Raises ValueError for a bucket or stickiness this version does not know, or NVLink registers unparsed."""
    nvlink_ok = isinstance(group.nvlink, str) and bool(_NUMBER.fullmatch(group.nvlink.partition(":")[0])) == bool(
        group.nvlink
    )
    if nvlink_ok and group.nvlink:
        parse_registers(group.nvlink.partition(":")[2])
    known = bool(group.grade in Status.__members__ and Bucket(group.bucket) and Sticky(group.sticky))
    recent_ok = isinstance(group.recent, dict) and all(
        isinstance(key, str) and isinstance(at, (int, float)) for key, at in group.recent.items()
    )
    nvlink5_ok = isinstance(group.nvlink5, str) and isinstance(group.awaiting_154, bool)
    return (
        known
        and isinstance(group.userspace, int)
        and isinstance(group.cleared_by, str)
        and nvlink_ok
        and recent_ok
        and nvlink5_ok
    )


def _load_groups(raw: Any) -> dict[str, _Group]:
    if isinstance(raw, dict):
        # States from before repeats were counted by process kept a list of line times,
        # which say nothing about processes: such a group keeps all else and starts afresh.
        raw = {
            key: {**fields, "recent": {}}
            if isinstance(fields, dict) and isinstance(fields.get("recent"), list)
            else fields
            for key, fields in raw.items()
        }
    return load_records(raw, _Group, _sane)


def _load_banner(raw: Any) -> Optional[Banner]:
    """The banner pending at the end of the last pass, if the state holds a sane one."""
    if not isinstance(raw, dict):
        return None
    text, origin, waited = raw.get("text"), raw.get("origin"), raw.get("waited")
    if not isinstance(text, str) or origin not in {o.value for o in Origin} or not isinstance(waited, int):
        return None
    return Banner(text, Origin(origin), waited)


class Folding:
    """One pass's judging of this boot's Xid events: folds new lines in, reports every event.

    Holds a working copy of the saved state (built fresh from ``document``, which it
    never changes) and collects findings as it goes.
    """

    def __init__(
        self,
        jc: JudgeContext[XidSettings],
        document: Mapping[str, Any],
        boot_id: str,
        position: Position,
        kmsg: str,
    ) -> None:
        self.jc = jc
        self.settings = jc.settings
        self.now = jc.now
        self.boot_id = boot_id
        self.kmsg = kmsg
        self.source = position.source
        self.cursor = position.cursor
        self.last_usec = position.last_usec
        self.skip_usec = position.skip_usec
        self.order = list(position.order)
        uuids = document.get("uuids")
        self.uuids: dict[str, str] = {str(k): str(v) for k, v in uuids.items()} if isinstance(uuids, dict) else {}
        self.groups = _load_groups(document.get("groups"))
        self.banner = _load_banner(document.get("banner"))
        self.findings: list[Finding] = []

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
            "banner": None if self.banner is None else {**self.banner._asdict(), "origin": self.banner.origin.value},
            "groups": {key: asdict(group) for key, group in sorted(self.groups.items())},
        }

    def _is_old(self, line: LogLine) -> bool:
        """Whether the old source already folded ``line`` (only right after a change of source)."""
        if self.skip_usec is None or line.usec is None:
            return False
        if line.usec <= self.skip_usec:
            return True
        self.skip_usec = None
        return False

    def fold(self, result: ReadResult, first_read: bool) -> None:
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
        if self.source == "kmsg" and first_read and result.oldest:
            # The ring buffer wraps on any long-running node: a note, never an alarm.
            self.findings.append(
                self.jc.finding(
                    Status.OK,
                    "KERNEL_LOG_TRUNCATED",
                    self.kmsg,
                    f"the kernel log starts at record {result.oldest}: earlier records of this boot were "
                    "overwritten before healthd first read it, so Xids among them are not known",
                    first_seq=result.oldest,
                )
            )
        if result.lost:
            where = self.kmsg if self.source == "kmsg" else "journal"
            # Lost records mean an Xid may have gone unseen: that is "could not observe"
            # (UNKNOWN), not a fault of the node, so by default it is reported, not drained.
            self.findings.append(
                self.jc.finding(
                    Status.UNKNOWN,
                    "KERNEL_LOG_OVERRUN",
                    where,
                    one_line(f"kernel log records were lost before healthd read them: {result.lost}", MESSAGE_LIMIT),
                    event=f"{self.boot_id}:lost:{self.cursor}",
                )
            )

    def _identify(self, event: XidEvent) -> tuple[str, str, str]:
        """(subject, gpu, pci) for an event."""
        if event.kind is LineKind.SXID:
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
        """Fold one driver line into its group: open or continue its event, grade, count, and clear what it ends."""
        if event.detail:
            # An SXid's Severity and Data lines describe the error of its Fatal/Non-fatal
            # line just before; that line alone creates and grades the event.
            return
        entry = classify(event, self.settings.overrides)
        key, group, created = self._group_for(event, event_id)
        recovery = event.recovery.action.name if event.recovery and event.recovery.action else ""
        is_154 = event.recovery is not None
        in_window = not group.cleared and when - group.window_start < self.settings.window
        rank, held = entry.grade.rank, Status[group.grade].rank
        # An Xid 154's recovery action is its grade; another Xid's recovery_action is that of
        # the Xid 154 that graded it (_follow_154), which a milder line of it must not undo.
        new_event = created or not in_window or (is_154 and group.recovery_action != recovery) or rank > held
        # Inside its window an event is never graded down by a milder line of the same Xid;
        # only a new recovery action (Xid 154) may say the GPU needs less than before.
        milder = not new_event and rank < held
        if new_event:
            group.event = event_id
            group.window_start = when
            group.window_count = 0
            group.recovery_action = recovery
        if is_154:
            self._follow_154(event, entry)
        else:
            self._end_wait(event)
        if not milder:
            _take_grade(group, event, entry, is_154)
        if is_154:
            group.recovery_action = recovery
        _count(group, event, userspace)
        if group.bucket == Bucket.APPLICATION.value and self.settings.app_repeat_count:
            self._occurred(group, event, when)
        group.last_seen = max(group.last_seen, when)
        self._apply_clears(event, key)

    def _group_for(self, event: XidEvent, event_id: str) -> tuple[str, _Group, bool]:
        """The group of the line's code on its GPU or switch (its key), made when this line is its first; and if so."""
        subject, gpu, pci = self._identify(event)
        prefix = "SXID" if event.kind is LineKind.SXID else "XID"
        code = f"{prefix}_{event.code}"
        key = f"{code}@{subject}"
        group = self.groups.get(key)
        if group is not None:
            return key, group, False
        group = _Group(code, event.code, event.kind.value, subject, gpu, pci, "", "OK", "", event_id)
        self.groups[key] = group
        return key, group, True

    def _apply_clears(self, event: XidEvent, key: str) -> None:
        """What the line ends on its GPU: an Xid 154 back to "no action" ends the events a reset
        would clear (``_clear_gpu``); an Xid listed in ``CLEARS`` ends the earlier Xids it names."""
        if event.recovery is not None and event.recovery.after == 0 and event.pci is not None:
            self._clear_gpu(event.pci, key)
        if event.kind is LineKind.XID and event.pci is not None:
            for earlier in CLEARS.get(event.code, ()):
                self._clear_xid(event.pci, earlier, f"Xid {event.code}")

    def _waiting(self, pci: PciAddress) -> list[_Group]:
        """The GPU's Xid 144-150 events whose XID_154_EVAL line waits for an Xid 154."""
        return [g for g in self.groups.values() if g.awaiting_154 and g.pci == str(pci) and not g.cleared]

    def _follow_154(self, event: XidEvent, recovery: Entry) -> None:
        """NVIDIA's XID_154_EVAL: "If an XID 154 is seen along with this error, take that action".

        The Xid 154 that follows an XID_154_EVAL line on the same GPU, with only Xid
        144-150 lines of that GPU between (the driver logs them together), grades that
        line's event as it grades itself; it also remembers the recovery action.
        """
        if event.pci is None or event.recovery is None:
            return
        for group in self._waiting(event.pci):
            entry = followed_by_154(group.summary, recovery)
            group.grade, group.sticky, group.bucket = entry.grade.name, entry.sticky.value, entry.bucket.value
            group.summary = entry.summary
            group.sticky_active = entry.sticky is not Sticky.NO and entry.grade is not Status.OK
            group.recovery_action = event.recovery.action.name if event.recovery.action else ""
            group.awaiting_154 = False

    def _end_wait(self, event: XidEvent) -> None:
        """Another Xid than 144-150 on the GPU: no Xid 154 follows its waiting lines, which keep RESTART_APP."""
        if event.kind is not LineKind.SXID and event.pci is not None and event.code not in NVLINK5_XIDS:
            for group in self._waiting(event.pci):
                group.awaiting_154 = False

    def _occurred(self, group: _Group, event: XidEvent, when: float) -> None:
        """Remember the process behind an application Xid's line (one entry per pid, and location for Xid 13)."""
        if event.pid is not None:
            who = f"pid {event.pid}"
        elif abs(when - group.last_seen) >= _BURST_SECONDS:
            # Without a pid, processes cannot be told apart; one crash's lines come together.
            who = f"at {when:.6f}"
        else:
            return
        where = sm_location(event) or ""
        # An Xid 13 prints a located line and one without a location (its ESR) per fault:
        # a process seen at a location counts there only, whichever line came first.
        if where:
            group.recent.pop(f"|{who}", None)
        elif any(name.endswith(f"|{who}") for name in group.recent if not name.startswith("|")):
            return
        key = f"{where}|{who}"
        group.recent[key] = max(when, group.recent.get(key, when))
        horizon = self.now - self.settings.app_repeat_window
        # Times after now were stamped before the clock stepped back: their age is unknown.
        latest = sorted(((t, k) for k, t in group.recent.items() if horizon < t <= self.now), reverse=True)
        per_location: dict[str, int] = {}
        kept: dict[str, float] = {}
        for at, name in latest:
            where = name.partition("|")[0]
            per_location[where] = per_location.get(where, 0) + 1
            if per_location[where] <= self.settings.app_repeat_count and len(kept) < _OCCURRENCES_KEPT:
                kept[name] = at
        group.recent = kept

    def _repeats(self, group: _Group) -> tuple[int, str]:
        """The most processes that hit the group's Xid at one location within ``app_repeat_window``, and where."""
        horizon = self.now - self.settings.app_repeat_window
        processes: dict[str, int] = {}
        for name, at in group.recent.items():
            if horizon < at <= self.now:
                where = name.partition("|")[0]
                processes[where] = processes.get(where, 0) + 1
        return max(((count, where) for where, count in processes.items()), default=(0, ""))

    def _clear_xid(self, pci: PciAddress, xid: int, by: str) -> None:
        """An Xid the catalog pairs with a later one (``CLEARS``): that later one on the same GPU ends it."""
        for group in self.groups.values():
            if group.kind == LineKind.XID.value and group.xid == xid and group.pci == str(pci) and not group.cleared:
                group.sticky_active = False
                group.cleared = True
                group.cleared_by = by

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
                group.cleared_by = "recovery action None"

    def _status(self, group: _Group) -> tuple[Status, str]:
        grade = Status[group.grade]
        if group.cleared:
            return Status.OK, f"; cleared by {group.cleared_by or 'recovery action None'}"
        if group.sticky_active:
            return grade, ""
        if grade is not Status.OK and self.now - group.last_seen < self.settings.window:
            return grade, ""
        wanted = self.settings.app_repeat_count
        if group.bucket == Bucket.APPLICATION.value and grade is Status.OK and wanted:
            processes, where = self._repeats(group)
            if processes >= wanted:
                at = f" at {where}" if where else ""
                window = self.settings.app_repeat_window
                return Status.WARNING, f"; {processes} processes hit it{at} within {window:g}s"
        return Status.OK, ""

    def report(self) -> list[Finding]:
        for group in sorted(self.groups.values(), key=lambda g: (g.subject, g.xid, g.code)):
            status, note = self._status(group)
            what = "SXid" if group.kind == LineKind.SXID.value else "Xid"
            text = f": {group.text}" if group.text else ""
            link = _nvlink_details(group.nvlink)
            if link:
                # Before the line's text, which the message's length limit may cut: that text is in the details.
                decoded = "; ".join(DESCRIPTIONS[c] for c in link["causes"]) or "no register bit set"
                text = f" on link {link['nvlink']} ({decoded}){text}"
            # The note before the line's text, which the message's length limit may cut.
            message = f"{what} {group.xid} on {group.subject}: {group.summary}{note}{text} ({group.count} this boot)"
            details: dict[str, DetailValue] = {
                "event": group.event,
                "xid": group.xid,
                "gpu": int(group.gpu) if _NUMBER.fullmatch(group.gpu) else group.gpu,
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
            if link:
                details["nvlink"] = link["nvlink"]
                details["nvlink_registers"] = link["registers"]
                details["nvlink_causes"] = ",".join(c.value for c in link["causes"])
            details.update(_nvlink5_details(group.nvlink5))
            if group.userspace:
                details["userspace_records"] = group.userspace
            fix = remedy(group.action, group.recovery_action)
            if fix and status is not Status.OK:
                details["remedy"] = fix
            self.findings.append(
                self.jc.finding(status, group.code, group.subject, one_line(message, MESSAGE_LIMIT), **details)
            )
        return self.findings


def _take_grade(group: _Group, event: XidEvent, entry: Entry, is_154: bool) -> None:
    """The group takes this line's grade and what comes with it (the line was not milder than its event)."""
    group.bucket = entry.bucket.value
    group.grade = entry.grade.name
    group.sticky = entry.sticky.value
    group.summary = entry.summary
    group.action = entry.action.value
    group.text = one_line(event.text, MESSAGE_LIMIT)[:120]
    failing = entry.sticky is not Sticky.NO and entry.grade is not Status.OK
    # Xid 154 states the GPU's current need: its latest action replaces the last one.
    group.sticky_active = failing if is_154 else group.sticky_active or failing
    group.nvlink5 = _nvlink5_state(entry)
    group.awaiting_154 = awaits_154(entry)


def _count(group: _Group, event: XidEvent, userspace: bool) -> None:
    """Count the line in its group (in all, in the window, written from userspace) and mark the group seen again."""
    group.count += 1
    group.window_count += 1
    group.userspace += int(userspace)
    if event.nvlink is not None:
        registers = ",".join(f"0x{r:x}" for r in event.nvlink.registers)
        group.nvlink = f"{event.nvlink.link}:{registers}"
    group.cleared = False
    group.cleared_by = ""


def _nvlink5_state(entry: Entry) -> str:
    """An Xid 144-150 entry's decode as the state keeps it: ``resolution|unit|status|link`` ("" for other Xids)."""
    line = entry.nvlink5
    if line is None:
        return ""
    resolution = line.row.resolution.value if line.row is not None else ""
    return f"{resolution}|{line.unit}|0x{line.status:08x}|{line.link}"


def _nvlink5_details(state: str) -> dict[str, DetailValue]:
    """The finding's details for an Xid 144-150 event's decode (``_nvlink5_state``)."""
    parts = state.split("|")
    if len(parts) != 4 or not re.fullmatch(r"-?[0-9]{1,3}", parts[3]):
        return {}
    resolution, unit, status, link = parts
    return {
        "nvlink": int(link),
        "nvlink5_unit": unit,
        "nvlink5_status": status,
        "nvlink5_resolution": resolution or "UNLISTED",
    }


def _nvlink_details(nvlink: str) -> dict[str, Any]:
    """Xid 74's ``link:registers`` as kept in the state: the link, the registers and their causes ({} if none)."""
    if not nvlink:
        return {}
    link, _, registers = nvlink.partition(":")
    return {"nvlink": int(link), "registers": registers, "causes": causes(parse_registers(registers))}
