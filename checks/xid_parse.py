"""Pure parser for NVIDIA driver lines in the kernel log: Xid, SXid, fallen-off-bus, GPU UUIDs.

No I/O here. ``split_record`` takes one line as any of the usual tools print it
(a raw /dev/kmsg record, ``dmesg``, ``dmesg -r``, ``journalctl -k``, syslog) and
returns the kernel message with its sequence number when it has one;
``parse_message`` turns a message into an event or ``None``. Both accept any text
and never raise. A substring prefilter rejects the ~99% of lines that cannot match
before any regular expression runs, which is what makes scanning a flooded log
cheap.

Line formats follow the NVIDIA driver's output as documented in NVIDIA's "Xid
Errors" guide (docs.nvidia.com/deploy/xid-errors) and as seen in real logs: the
PCI tag of an Xid has no function number, MIG tags may follow it, old drivers
omit the ``PCI:`` prefix, and journald may split a leading ``NVRM:`` off into
SYSLOG_IDENTIFIER, so the ``NVRM:`` prefix is never required.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional, Union


@dataclass(frozen=True)
class PciAddress:
    """A PCI address; the driver's Xid tag has no function number, so ``function`` may be None.

    Two addresses name the same device when domain, bus and device agree as integers
    (the driver prints ``0000:3b:00``, NVML ``00000000:3B:00.0``).
    """

    domain: int
    bus: int
    device: int
    function: Optional[int] = None

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.domain, self.bus, self.device)

    def same_device(self, other: PciAddress) -> bool:
        return self.key == other.key

    def __str__(self) -> str:
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}"

    @property
    def full(self) -> str:
        """With the function number when known (NVSwitch tags, sysfs names)."""
        return str(self) if self.function is None else f"{self}.{self.function:x}"

    @classmethod
    def parse(cls, text: str) -> Optional[PciAddress]:
        """``0000:3b:00``, ``0000:3B:00.0``, ``00000000:3B:00.0`` or ``PCI:0000:3b:00``; None otherwise."""
        match = _PCI.fullmatch(text.strip().removeprefix("PCI:"))
        if match is None:
            return None
        domain, bus, device, function = match.groups()
        return cls(int(domain, 16), int(bus, 16), int(device, 16), None if function is None else int(function, 16))


class Kind(enum.Enum):
    """What kind of driver line an event came from."""

    XID = "xid"
    SXID = "sxid"
    FALLEN_OFF_BUS = "fallen_off_bus"


class RecoveryAction(enum.IntEnum):
    """Xid 154's recovery actions: NVML's ``nvmlDeviceGpuRecoveryAction_t`` (nvml.h, and pynvml's
    ``NVML_GPU_RECOVERY_ACTION_*``). The one table of these codes in healthd; the same values
    come back from NVML's ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`` field."""

    NONE = 0
    GPU_RESET = 1
    NODE_REBOOT = 2
    DRAIN_P2P = 3
    DRAIN_AND_RESET = 4
    RECOVER_IMEX_DOMAIN = 5
    BUS_RESET = 6
    SYSTEM_REBOOT = 7


@dataclass(frozen=True)
class RecoveryChange:
    """Xid 154: "GPU recovery action changed from 0xA to 0xB" (raw codes; may be unknown to us)."""

    before: int
    after: int

    @property
    def action(self) -> Optional[RecoveryAction]:
        try:
            return RecoveryAction(self.after)
        except ValueError:
            return None


@dataclass(frozen=True)
class XidEvent:
    """One Xid, SXid or fallen-off-bus line. A fallen-off-bus line without an Xid counts as Xid 79.

    The NVSwitch driver prints each SXid as three lines: ``<code>, Fatal|Non-fatal, <text>``,
    then ``<code>, Severity N ...`` and ``<code>, Data {...}``. Only the first says whether
    the error is fatal; the other two carry ``detail=True`` and describe the same error.
    """

    kind: Kind
    code: int
    pci: Optional[PciAddress]
    text: str
    pid: Optional[int] = None
    process: Optional[str] = None
    gpu_instance: Optional[int] = None
    compute_instance: Optional[int] = None
    switch: Optional[str] = None
    fatal: Optional[bool] = None
    severity: Optional[int] = None
    recovery: Optional[RecoveryChange] = None
    detail: bool = False


@dataclass(frozen=True)
class GpuIdentity:
    """The driver's once-per-GPU ``NVRM: GPU at PCI:0000:3b:00: GPU-<uuid>`` line."""

    pci: PciAddress
    uuid: str


Event = Union[XidEvent, GpuIdentity]


class LogFormat(enum.Enum):
    KMSG = "kmsg"
    DMESG_RAW = "dmesg-raw"
    DMESG = "dmesg"
    SYSLOG = "syslog"
    PLAIN = "plain"


@dataclass(frozen=True)
class Record:
    """A kernel message stripped of the envelope its tool printed around it."""

    message: str
    format: LogFormat
    seq: Optional[int] = None
    priority: Optional[int] = None
    usec: Optional[int] = None


_HEX = "[0-9A-Fa-f]"
_PCI = re.compile(rf"({_HEX}{{4,8}}):({_HEX}{{2}}):({_HEX}{{2}})(?:\.({_HEX}))?")
_XID = re.compile(r"Xid \(([^)]*)\): *(\d+)(?:, *(.*))?")
_MIG = re.compile(r"GPU-I:(\d+)(?: +GPU-CI:(\d+))?")
_PID = re.compile(r"pid=(?:'? *<unknown>'?|(\d+))(?:, *name=([^,]*))?(?:, *(.*))?")
_RECOVERY = re.compile(r"recovery action changed from (0x[0-9a-f]+)\b.*?\bto (0x[0-9a-f]+)\b", re.IGNORECASE)
_SWITCH = re.compile(r"(nvidia-nvswitch\d+)\s*:\s*$")
_SXID_REST = re.compile(r"(?:(Fatal|Non-fatal)\b|Severity (\d+)\b|(Data)(?= *\{)),? *(.*)", re.IGNORECASE)
_ADDR = rf"{_HEX}{{4,8}}:{_HEX}{{2}}:{_HEX}{{2}}(?:\.{_HEX})?"
_FALLEN = re.compile(rf"GPU (?:at )?(?:PCI:)?({_ADDR}):? (?:GPU )?has fallen off")
_UUID = re.compile(rf"GPU at PCI:({_ADDR}): (GPU-[0-9A-Fa-f-]+)")
_KMSG = re.compile(r"(\d{1,4}),(\d+),(\d+),[^;]*;(.*)", re.DOTALL)
_DMESG_RAW = re.compile(r"<(\d{1,4})>(?:\[ *[0-9.]+\] ?)?(.*)", re.DOTALL)
_DMESG = re.compile(r"\[[^\]]{1,40}\] ?(.*)", re.DOTALL)
_SYSLOG = re.compile(
    r"(?:[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT[0-9:.,+\-Z]+) \S+ kernel: (?:\[ *[0-9.]+\] )?(.*)",
    re.DOTALL,
)
_TEXT_LIMIT = 300


def _clean(text: str) -> str:
    """One printable line, bounded: kernel text may carry control characters or garbage."""
    text = "".join(ch if ch.isprintable() else " " for ch in text[:_TEXT_LIMIT])
    return " ".join(text.split())


def might_match(line: str) -> bool:
    """The cheap prefilter: every line ``parse_message`` accepts contains "Xid" or "GPU"."""
    return "Xid" in line or "GPU" in line


def split_record(line: str) -> Record:
    """Strip the envelope of one line in any supported format; unknown shapes pass through as PLAIN."""
    line = line.rstrip("\r\n")
    head = line[:1]
    if head.isdigit():
        match = _KMSG.match(line)
        if match:
            pri, seq, usec, message = match.groups()
            return Record(message, LogFormat.KMSG, int(seq), int(pri), int(usec))
    elif head == "<":
        match = _DMESG_RAW.match(line)
        if match:
            return Record(match.group(2), LogFormat.DMESG_RAW, priority=int(match.group(1)))
    elif head == "[":
        match = _DMESG.match(line)
        if match:
            return Record(match.group(1), LogFormat.DMESG)
    match = _SYSLOG.match(line)
    if match:
        return Record(match.group(1), LogFormat.SYSLOG)
    return Record(line, LogFormat.PLAIN)


def _parse_xid_tag(tag: str) -> tuple[Optional[PciAddress], Optional[int], Optional[int]]:
    pci_match = _PCI.search(tag)
    pci = PciAddress.parse(pci_match.group(0)) if pci_match else None
    mig = _MIG.search(tag)
    if mig is None:
        return pci, None, None
    ci = mig.group(2)
    return pci, int(mig.group(1)), None if ci is None else int(ci)


def _parse_xid(message: str, start: int) -> Optional[XidEvent]:
    match = _XID.match(message, start)
    if match is None:
        return None
    tag, code_text, rest = match.groups()
    if len(code_text) > 6:
        return None
    code = int(code_text)
    pci, gpu_instance, compute_instance = _parse_xid_tag(tag)
    if start >= 1 and message[start - 1] == "S":
        return _parse_sxid(message[: start - 1], code, pci, rest or "")
    pid: Optional[int] = None
    process: Optional[str] = None
    text = rest or ""
    pid_match = _PID.match(text)
    if pid_match:
        pid_text, name, remainder = pid_match.groups()
        pid = int(pid_text) if pid_text and len(pid_text) < 10 else None
        process = None if name is None or name.strip() in ("<unknown>", "") else _clean(name)
        text = remainder or ""
    recovery: Optional[RecoveryChange] = None
    if code == 154:
        rec = _RECOVERY.search(text)
        if rec and len(rec.group(1)) <= 10 and len(rec.group(2)) <= 10:
            recovery = RecoveryChange(int(rec.group(1), 16), int(rec.group(2), 16))
    return XidEvent(
        Kind.XID,
        code,
        pci,
        _clean(text),
        pid=pid,
        process=process,
        gpu_instance=gpu_instance,
        compute_instance=compute_instance,
        recovery=recovery,
    )


def _parse_sxid(prefix: str, code: int, pci: Optional[PciAddress], rest: str) -> XidEvent:
    switch_match = _SWITCH.search(prefix)
    fatal: Optional[bool] = None
    severity: Optional[int] = None
    detail = False
    text = rest
    rest_match = _SXID_REST.match(rest)
    if rest_match:
        flag, severity_text, data, text = rest_match.groups()
        if flag is not None:
            fatal = flag.lower() == "fatal"
        else:
            detail = True
            if severity_text is not None and len(severity_text) < 4:
                severity = int(severity_text)
            if data is not None:
                text = f"Data {text}"
    return XidEvent(
        Kind.SXID,
        code,
        pci,
        _clean(text),
        switch=switch_match.group(1).removeprefix("nvidia-") if switch_match else None,
        fatal=fatal,
        severity=severity,
        detail=detail,
    )


def parse_message(message: str) -> Optional[Event]:
    """The event in one kernel message (or whole log line), or None. Never raises."""
    if not might_match(message):
        return None
    start = message.find("Xid (")
    if start >= 0:
        return _parse_xid(message, start)
    if "fallen off" in message:
        fallen = _FALLEN.search(message)
        if fallen:
            return XidEvent(Kind.FALLEN_OFF_BUS, 79, PciAddress.parse(fallen.group(1)), "GPU has fallen off the bus")
        return None
    if "GPU at PCI:" in message:
        uuid = _UUID.search(message)
        if uuid:
            pci = PciAddress.parse(uuid.group(1))
            if pci is not None:
                return GpuIdentity(pci, uuid.group(2)[:64])
    return None


def parse_line(line: str) -> tuple[Record, Optional[Event]]:
    """``split_record`` then ``parse_message``, skipping the envelope work for lines that cannot match."""
    if not might_match(line):
        return Record(line, LogFormat.PLAIN), None
    record = split_record(line)
    return record, parse_message(record.message)


def scan_lines(lines: Iterable[str]) -> Iterator[tuple[int, Record, Event]]:
    """Every event in ``lines`` with its 1-based line number. /dev/kmsg continuation lines are skipped."""
    for number, line in enumerate(lines, 1):
        if "Xid" not in line and "GPU" not in line:
            continue
        if line[:1] == " ":
            continue
        record = split_record(line)
        event = parse_message(record.message)
        if event is not None:
            yield number, record, event
