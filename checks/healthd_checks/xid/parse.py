"""Pure parser for NVIDIA driver lines in the kernel log: Xid, SXid, fallen-off-bus, GPU UUIDs.

No I/O here. ``split_record`` takes one line as any of the usual tools print it
(a raw /dev/kmsg record, ``dmesg``, ``dmesg -r``, ``journalctl -k``, syslog) and
returns the kernel message with its sequence number and facility when the format
has them; ``read_message`` turns a message into an event or ``None``. All of them
accept any text and never raise.

Who wrote a line decides whether it counts. The kernel log also holds text that
users choose: the kernel's segfault report begins with the task name and quotes
the faulting file's name, and processes can write records to /dev/kmsg. So:

- only a message that *begins* with the driver's own prefix, ``NVRM: `` or
  ``nvidia-nvswitchN: ``, is read, and each pattern is anchored right after it
  with strict PCI tags. A task name (at most 15 characters, always followed by
  the kernel's ``[pid]``) cannot complete any of them;
- ``origin_of`` (``healthd_checks.kernlog.source``, which every kernel-log reader
  shares) maps a record's syslog facility to ``Origin``: facility 0 is the
  kernel's alone (the kernel gives userspace writes another facility). Callers
  count only ``Origin.KERNEL`` records, or ``Origin.UNKNOWN`` ones from formats
  that do not carry the facility (plain ``dmesg``, ``journalctl -k`` text).

Line formats follow the NVIDIA driver's output as documented in NVIDIA's "Xid
Errors" guide (docs.nvidia.com/deploy/xid-errors) and as seen in real logs: the
PCI tag of an Xid has no function number, MIG tags may follow it, old drivers
omit the ``PCI:`` prefix. The driver reports a GPU off the bus as Xid 79, as
``NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.`` (some versions leave out
the PCI domain), or as a banner printed by one call over three lines
(open-gpu-kernel-modules, ``nv.c``)::

    NVRM: The NVIDIA GPU 0000:18:00.0
    NVRM: (PCI ID: 10de:2901) installed in this system has
    NVRM: fallen off the bus and is not responding to commands.

The kernel keeps such a call as one record with embedded newlines, which dumps
print as indented continuation lines; older kernels and some tools split it into
records of their own. ``Banner`` carries a banner that is not complete yet from one
record, or one pass, to the next. A substring prefilter rejects the ~99% of lines
that cannot match before any regular expression runs, which is what makes scanning a
flooded log cheap.
"""

from __future__ import annotations

import enum
import functools
import re
from dataclasses import dataclass
from typing import AnyStr, Callable, Iterable, Iterator, NamedTuple, Optional, TypeVar, Union

from healthd.text import one_line

from ..kernlog.source import Origin, origin_of, parse_kmsg_record
from .envelope import JournalRecord, record_of


class PciAddress(NamedTuple):
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


class LineKind(enum.Enum):
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


class RecoveryChange(NamedTuple):
    """Xid 154: "GPU recovery action changed from 0xA to 0xB" (raw codes; may be unknown to us)."""

    before: int
    after: int

    @property
    def action(self) -> Optional[RecoveryAction]:
        try:
            return RecoveryAction(self.after)
        except ValueError:
            return None


class NvlinkFault(NamedTuple):
    """Xid 74's link and error registers: ``NVLink: fatal error detected on link 4(0x0, 0x0, 0x10000, ...)``.

    NVIDIA's Xid documentation ("Xid 74: NVLink error") shows this form: the failing link's
    number, then the NVLink error registers with bits set, in hex. The registers are kept
    as the driver printed them; healthd does not name their bits.
    """

    link: int
    registers: tuple[int, ...]


class XidEvent(NamedTuple):
    """One Xid, SXid or fallen-off-bus line. A fallen-off-bus line without an Xid counts as Xid 79.

    The NVSwitch driver prints each SXid as three lines: ``<code>, Fatal|Non-fatal, <text>``,
    then ``<code>, Severity N ...`` and ``<code>, Data {...}``. Only the first says whether
    the error is fatal; the other two carry ``detail=True`` and describe the same error.
    """

    kind: LineKind
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
    nvlink: Optional[NvlinkFault] = None


@functools.cache
def _rare(pattern: str) -> re.Pattern[str]:
    """A pattern compiled on first use: the envelopes of a text dump (``split_record``, for ``scan-log``; a
    check reads /dev/kmsg, whose records have none) and the lines few logs hold (a banner, Xid 13's
    location, Xid 154's recovery action). Compiling them all costs every check process about 3 ms."""
    return re.compile(pattern)


# Xid 13's location: "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): ...".
_GPC_TPC = r"\bGPC (\d+), TPC (\d+)"


def sm_location(event: XidEvent) -> Optional[str]:
    """``GPC g TPC t`` of an Xid 13 that names where its SM faulted; None for other Xids and lines without one.

    NVIDIA's Xid catalog (WORKFLOW_XID_13) suspects the hardware when Xid 13 repeats at
    the same GPC/TPC under different applications: a bad TPC shows as the same pair
    again and again, while a program's bug moves with its data.
    """
    if event.kind is not LineKind.XID or event.code != 13:
        return None
    match = _rare(_GPC_TPC).search(event.text)
    return f"GPC {match.group(1)} TPC {match.group(2)}" if match else None


class GpuIdentity(NamedTuple):
    """The driver's once-per-GPU ``NVRM: GPU at PCI:0000:3b:00: GPU-<uuid>`` line."""

    pci: PciAddress
    uuid: str


Event = Union[XidEvent, GpuIdentity]


class LogFormat(enum.Enum):
    KMSG = "kmsg"
    DMESG_RAW = "dmesg-raw"
    DMESG_DECODED = "dmesg-decoded"
    DMESG = "dmesg"
    SYSLOG = "syslog"
    TALOS = "talos"
    JOURNAL = "journal"
    RFC5424 = "rfc5424"
    PLAIN = "plain"


class Record(NamedTuple):
    """A kernel message stripped of the envelope its tool printed around it."""

    message: str
    format: LogFormat
    seq: Optional[int] = None
    priority: Optional[int] = None
    usec: Optional[int] = None

    @property
    def facility(self) -> Optional[int]:
        """The syslog facility when the format tells it; None when it does not.

        /dev/kmsg's PRI and ``dmesg -x``'s names always tell it. ``dmesg -r`` does only
        from 8 up: util-linux before its June 2023 fix ("dmesg -r LOG_MAKEPRI needs
        fac << 3"; Debian 12's 2.38.1 has the bug) prints ``<facility | level>``, so a
        user-facility record can read ``<5>`` there, like a kernel notice.
        """
        if self.priority is None or (self.format is LogFormat.DMESG_RAW and self.priority < 8):
            return None
        return self.priority >> 3


class Banner(NamedTuple):
    """The driver lines of a fallen-off-the-bus banner so far, with their ``NVRM: `` prefixes removed.

    ``waited`` counts the other driver lines seen since it last grew; past
    ``BANNER_PATIENCE`` the banner is dropped. Only lines of the same origin continue it.
    """

    text: str
    origin: Origin = Origin.KERNEL
    waited: int = 0


class ParseStep(NamedTuple):
    """What one record (or continuation line) gave: an event, the pending banner, and whether it took part in it.

    ``engaged`` means the record began or continued the banner, so its further lines
    may continue it too; the lines of any other record are never read past the first.
    """

    event: Optional[Event]
    banner: Optional[Banner]
    engaged: bool = False


_HEX = "[0-9A-Fa-f]"
_PCI = re.compile(rf"({_HEX}{{4,8}}):({_HEX}{{2}}):({_HEX}{{2}})(?:\.({_HEX}))?")
_ADDR = rf"{_HEX}{{4,8}}:{_HEX}{{2}}:{_HEX}{{2}}(?:\.{_HEX})?"
# An address whose PCI domain may be missing (some drivers print "GPU 1a:00.0: ...").
_BUS_ADDR = rf"((?:{_HEX}{{4,8}}:)?)({_HEX}{{2}}):({_HEX}{{2}})(?:\.({_HEX}))?"
# The tag in "Xid (<tag>): <code>": a PCI address, then MIG tags such as "GPU-I:01 GPU-CI:00".
# No brackets, parentheses or commas: the kernel follows a task name with "[pid]" or " (pid)".
_TAG = rf"(?:PCI:)?{_ADDR}(?: [A-Za-z0-9:_-]{{1,24}}){{0,4}}"
_CODE = r"(\d{1,6})(?!\d)(?:, *(.*))?"
# re.ASCII: the driver prints numbers in ASCII digits; a Unicode \d would read an Arabic-Indic seven as 7.
_XID = re.compile(rf"NVRM: Xid \(({_TAG})\): *{_CODE}", re.ASCII)
_SXID = re.compile(rf"nvidia-(nvswitch\d{{1,4}}): SXid \(({_TAG})\): *{_CODE}", re.ASCII)
_MIG = re.compile(r"GPU-I:(\d+)(?: +GPU-CI:(\d+))?", re.ASCII)
_PID = re.compile(r"pid=(?:'? *<unknown>'?|(\d+))(?:, *name=([^,]*))?(?:, *(.*))?", re.ASCII)
_NVLINK = re.compile(
    r"NVLink: fatal error detected on link (\d{1,3}) ?\((0x[0-9a-fA-F]{1,16}(?:, ?0x[0-9a-fA-F]{1,16}){0,15})\)",
    re.ASCII,
)
_RECOVERY = r"(?i)recovery action changed from (0x[0-9a-f]+)\b.*?\bto (0x[0-9a-f]+)\b"
_SXID_REST = re.compile(r"(?:(Fatal|Non-fatal)\b|Severity (\d+)\b|(Data)(?= *\{)),? *(.*)", re.IGNORECASE | re.ASCII)
_FALLEN = re.compile(rf"NVRM: GPU (?:at )?(?:PCI:)?{_BUS_ADDR}:? (?:GPU )?has fallen off the bus")
_UUID = re.compile(rf"NVRM: GPU at PCI:({_ADDR}): (GPU-[0-9A-Fa-f-]+)")
_BANNER_HEAD = rf"The NVIDIA GPU {_BUS_ADDR}(?: \(PCI ID: ({_HEX}{{4}}:{_HEX}{{4}})\))?"
_BANNER_TAIL = " installed in this system has fallen off the bus and is not responding to commands."
_BANNER_START = "NVRM: The NVIDIA GPU "
# The printk caller id that kernels built with CONFIG_PRINTK_CALLER print after the time:
# "[ T1946]" (a task) or "[    C3]" (a CPU), kernel/printk/printk.c print_caller(); util-linux's
# dmesg puts a space before it, the kernel's console does not.
_CALLER = r"(?:\[ *[TC]\d{1,10}\] ?)?"
# An ISO 8601 time as dmesg --time-format=iso prints it ("2025-01-21T04:41:44,283302+00:00").
_ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[0-9:.,+\-Z]{0,24}"
_DMESG_RAW = rf"(?as)<(\d{{1,4}})>(?:\[ *[0-9.]+\] ?)?{_CALLER}(.*)"
_DMESG = rf"(?as)(?:\[[^\]]{{1,40}}\]|{_ISO}) ?{_CALLER}(.*)"
# ``dmesg -x``: "kern  :err   : [  12.3] text", names from util-linux's facility_names and level_names;
# with --time-format=iso the time is an ISO stamp, not in brackets.
_FACILITIES = ["kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv", "ftp"]
_FACILITIES += ["res0", "res1", "res2", "res3", *(f"local{n}" for n in range(8))]
_LEVELS = ["emerg", "alert", "crit", "err", "warn", "notice", "info", "debug"]
_DMESG_DECODED = (
    rf"(?as)({'|'.join(_FACILITIES)}) *:({'|'.join(_LEVELS)}) *: (?:\[[^\]]{{1,40}}\] ?|{_ISO} )?{_CALLER}(.*)"
)
# Talos (``talosctl dmesg``): "[NODE: ]kern: warning: [2026-04-22T21:27:51.291660856Z]: text". Its names come
# from siderolabs/go-kmsg (message.go), where a facility's place in the list is its number (local0 is 11
# there) and the level "warning" is spelt out.
_TALOS_FACILITIES = [*_FACILITIES[:11], *(f"local{n}" for n in range(8))]
_TALOS_LEVELS = ["emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"]
_TALOS = (
    rf"(?as)(?:[0-9A-Za-z._:%\[\]-]{{1,255}}: )?({'|'.join(_TALOS_FACILITIES)}): *({'|'.join(_TALOS_LEVELS)}): "
    rf"\[{_ISO}\]: (.*)"
)
# syslog and journalctl: "Nov 22 04:51:10[.283302] [host] kernel: [[  12.3] ][[ T1946] ]text" (the host is left
# out by journalctl --no-hostname), or an ISO time first; log shippers and bug reports often keep only
# "kernel: ...". The identifier "kernel" is journald's and rsyslog's for the kernel's own records.
_KERNEL_TAG = rf"kernel: (?:\[ *[0-9.]+\] ?)?{_CALLER}(.*)"
_SYSLOG = rf"(?as)(?:[A-Z][a-z]{{2}} +\d{{1,2}} \d\d:\d\d:\d\d(?:\.\d{{1,9}})?|{_ISO}) (?:\S+ )?{_KERNEL_TAG}"
# A host name and ``kernel:`` without a time, as shippers keep syslog lines: "node01 kernel: ...". The name is
# one a host can have (RFC 1123 letters, digits, dots, hyphens; an address's colons).
_BARE_KERNEL = rf"(?as)(?:[0-9A-Za-z][0-9A-Za-z._:-]{{0,252}} )?{_KERNEL_TAG}"
# RFC 5424 (section 6), as rsyslog writes it: "<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID SD [MSG]", each
# header field "-" when empty. Only APP-NAME "kernel" is the kernel's (imklog's tag); the PRI keeps the facility.
# Structured data is "-" or "[id param=\"value\" ...]" elements, whose values escape '"', '\\' and ']'.
_SD_ELEMENT = r'\[[^\]" ]{1,32}(?: [^\]"= ]{1,32}="(?:[^"\\]|\\.){0,1024}"){0,32}\]'
_RFC5424 = (
    rf"(?as)<(\d{{1,3}})>1 (?:-|\d{{4}}-\d\d-\d\dT[0-9:.]{{8,16}}(?:Z|[+-]\d\d:\d\d)) \S{{1,255}} (\S{{1,48}}) "
    rf"\S{{1,128}} \S{{1,32}} (?:-|(?:{_SD_ELEMENT}){{1,16}})(?: (?:\ufeff)?(.*))?"
)

# The SGR escapes ``dmesg --color=always`` wraps the time, a subsystem prefix and the text in (util-linux).
_SGR = r"\x1b\[[0-9;]{0,32}m"

DRIVER_PREFIXES = ("NVRM: ", "nvidia-nvswitch")
# Other driver lines after which a banner that stopped growing is dropped. The driver
# prints a banner in one call, so its lines are adjacent unless another CPU's lines
# land between them.
BANNER_PATIENCE = 8
_BANNER_LIMIT = 400
_TEXT_LIMIT = 300


def _clean(text: str) -> str:
    """One printable line, bounded: kernel text may carry control characters or garbage."""
    return one_line(text[:_TEXT_LIMIT], _TEXT_LIMIT)


def might_match(line: str) -> bool:
    """The cheap prefilter: every line that ``read_message`` reads contains a driver prefix."""
    return "NVRM: " in line or "nvidia-nvswitch" in line


def split_record(line: str) -> Record:
    """Strip the envelope of one line in any supported format; unknown shapes pass through as PLAIN.

    Each envelope is matched from the start of the line and stripped once: what follows it is
    the message, which counts only if it begins with a driver prefix (``read_message``).
    """
    line = line.rstrip("\r\n")
    if "\x1b[" in line:  # ``dmesg --color=always``: its colour escapes are no part of the record
        line = _rare(_SGR).sub("", line)
    head = line[:1]
    if head == "{":
        journal = record_of(line)
        if journal is not None:
            return _journal(journal)
    elif head.isdigit():
        kmsg = parse_kmsg_record(line.encode("utf-8", errors="replace"))
        if kmsg is not None:
            return Record(kmsg.message, LogFormat.KMSG, kmsg.seq, kmsg.priority, kmsg.usec)
    elif head == "<":
        rfc5424 = _rare(_RFC5424).match(line)
        if rfc5424:
            return _rfc5424(*rfc5424.groups())
        match = _rare(_DMESG_RAW).match(line)
        if match:
            return Record(match.group(2), LogFormat.DMESG_RAW, priority=int(match.group(1)))
    elif head == "[":
        match = _rare(_DMESG).match(line)
        if match:
            return Record(match.group(1), LogFormat.DMESG)
    elif head.islower():
        match = _rare(_DMESG_DECODED).match(line)
        if match:
            facility, level, message = match.groups()
            priority = _FACILITIES.index(facility) * 8 + _LEVELS.index(level)
            return Record(message, LogFormat.DMESG_DECODED, priority=priority)
    return _tagged(line, head)


def _journal(record: JournalRecord) -> Record:
    """A journal record of the kernel transport; its PRIORITY is the level, SYSLOG_FACILITY the facility."""
    priority = None if record.facility is None else record.facility * 8 + (record.level or 0) % 8
    return Record(record.message, LogFormat.JOURNAL, priority=priority, usec=record.usec)


def _rfc5424(priority: str, app: str, message: Optional[str]) -> Record:
    """An RFC 5424 line: its message only when APP-NAME is ``kernel``; a process's line (``logger``) gives none."""
    if app != "kernel" or message is None:
        return Record("", LogFormat.RFC5424, priority=int(priority))
    return Record(message, LogFormat.RFC5424, priority=int(priority))


def _tagged(line: str, head: str) -> Record:
    """The envelopes that do not begin with a character of their own: syslog, Talos, ``kernel:``, ISO dmesg."""
    match = _rare(_SYSLOG).match(line) or _rare(_BARE_KERNEL).match(line)
    if match:
        return Record(match.group(1), LogFormat.SYSLOG)
    match = _rare(_TALOS).match(line)
    if match:
        facility, level, message = match.groups()
        priority = _TALOS_FACILITIES.index(facility) * 8 + _TALOS_LEVELS.index(level)
        return Record(message, LogFormat.TALOS, priority=priority)
    # ``dmesg --time-format=iso``: after syslog, whose ISO form also starts with the time.
    match = _rare(_DMESG).match(line) if head.isdigit() else None
    if match:
        return Record(match.group(1), LogFormat.DMESG)
    return Record(line, LogFormat.PLAIN)


def _parse_xid_tag(tag: str) -> tuple[Optional[PciAddress], Optional[int], Optional[int]]:
    pci_match = _PCI.search(tag)
    pci = PciAddress.parse(pci_match.group(0)) if pci_match else None
    mig = _MIG.search(tag)
    if mig is None:
        return pci, None, None
    ci = mig.group(2)
    return pci, int(mig.group(1)), None if ci is None else int(ci)


def _parse_xid(message: str) -> Optional[XidEvent]:
    match = _XID.match(message)
    if match is None:
        return None
    tag, code_text, rest = match.groups()
    code = int(code_text)
    pci, gpu_instance, compute_instance = _parse_xid_tag(tag)
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
        rec = _rare(_RECOVERY).search(text)
        if rec and len(rec.group(1)) <= 10 and len(rec.group(2)) <= 10:
            recovery = RecoveryChange(int(rec.group(1), 16), int(rec.group(2), 16))
    nvlink: Optional[NvlinkFault] = None
    if code == 74:
        fault = _NVLINK.search(text)
        if fault:
            registers = tuple(int(value, 16) for value in fault.group(2).replace(" ", "").split(","))
            nvlink = NvlinkFault(int(fault.group(1)), registers)
    return XidEvent(
        LineKind.XID,
        code,
        pci,
        _clean(text),
        pid=pid,
        process=process,
        gpu_instance=gpu_instance,
        compute_instance=compute_instance,
        recovery=recovery,
        nvlink=nvlink,
    )


def _parse_sxid(message: str) -> Optional[XidEvent]:
    match = _SXID.match(message)
    if match is None:
        return None
    switch, tag, code_text, rest = match.groups()
    fatal: Optional[bool] = None
    severity: Optional[int] = None
    detail = False
    text = rest or ""
    rest_match = _SXID_REST.match(text)
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
        LineKind.SXID,
        int(code_text),
        _parse_xid_tag(tag)[0],
        _clean(text),
        switch=switch,
        fatal=fatal,
        severity=severity,
        detail=detail,
    )


def _bus_address(domain: str, bus: str, device: str) -> PciAddress:
    """A driver address that may lack its domain: the driver leaves it out only for domain 0."""
    return PciAddress(int(domain[:-1] or "0", 16), int(bus, 16), int(device, 16))


def _fallen(pci: PciAddress, text: str) -> XidEvent:
    """A GPU off the bus, however the driver said it: what Xid 79 means (NVIDIA's catalog: RESTART_BM)."""
    return XidEvent(LineKind.FALLEN_OFF_BUS, 79, pci, _clean(text))


def parse_message(message: str) -> Optional[Event]:
    """The event in one line of a driver message, or None. Never raises.

    Only the first line of ``message`` is read, and only from its start: text after
    a driver prefix in the middle of a line, or on a later line, is not the driver's.
    A banner is complete here only when it fits in this one line.
    """
    if message.startswith("NVRM: "):
        line = message.partition("\n")[0]
        if line.startswith("NVRM: Xid ("):
            return _parse_xid(line)
        if line.startswith("NVRM: GPU "):
            fallen = _FALLEN.match(line)
            if fallen:
                return _fallen(_bus_address(*fallen.groups()[:3]), "GPU has fallen off the bus")
            uuid = _UUID.match(line)
            if uuid:
                pci = PciAddress.parse(uuid.group(1))
                return GpuIdentity(pci, uuid.group(2)[:64]) if pci is not None else None
            return None
        if line.startswith(_BANNER_START):
            return _banner(line[6:].strip(), Origin.UNKNOWN).event
        return None
    if message.startswith("nvidia-nvswitch"):
        return _parse_sxid(message.partition("\n")[0])
    return None


def _banner(text: str, origin: Origin) -> ParseStep:
    """A banner whose lines so far read ``text``: complete (an event), still growing, or not a banner at all."""
    head = _rare(_BANNER_HEAD).match(text)
    if head is None or len(text) > _BANNER_LIMIT:
        return ParseStep(None, None)
    rest = text[head.end() :]
    if rest in (_BANNER_TAIL, _BANNER_TAIL[:-1]):
        pci_id = head.group(5)
        said = "GPU has fallen off the bus and is not responding to commands"
        return ParseStep(
            _fallen(_bus_address(*head.groups()[:3]), f"{said} (PCI ID {pci_id})" if pci_id else said), None, True
        )
    # Lines end between words, so a banner still growing ends at a word of the tail.
    if _BANNER_TAIL.startswith(rest) and _BANNER_TAIL[len(rest)] == " ":
        return ParseStep(None, Banner(text, origin), True)
    return ParseStep(None, None)


def _waited(banner: Optional[Banner]) -> Optional[Banner]:
    if banner is None or banner.waited >= BANNER_PATIENCE:
        return None
    return Banner(banner.text, banner.origin, banner.waited + 1)


def read_continuation(line: str, banner: Optional[Banner], origin: Origin = Origin.KERNEL) -> ParseStep:
    """A further line of a record that began or continued ``banner``: it may only continue the banner."""
    line = line.strip()
    if banner is None or banner.origin is not origin or not line.startswith("NVRM: "):
        return ParseStep(None, banner)
    step = _banner(f"{banner.text} {line[6:].strip()}", origin)
    return step if step.engaged else ParseStep(None, banner)


def _first_line(line: str, banner: Optional[Banner], origin: Origin) -> ParseStep:
    if banner is not None and line.startswith("NVRM: "):
        step = read_continuation(line, banner, origin)
        if step.engaged:
            return step
    if line.startswith(_BANNER_START):
        step = _banner(line[6:].strip(), origin)
        if step.engaged:
            return step
    return ParseStep(parse_message(line), _waited(banner))


def read_message(message: str, banner: Optional[Banner] = None, origin: Origin = Origin.KERNEL) -> ParseStep:
    """The event in one record's message, given the banner pending before it. Never raises.

    The caller decides first whether the record counts at all (``origin_of``). A
    message that does not begin with a driver prefix changes nothing; its later lines
    are never read. The later lines of a driver record are read only to continue a
    banner that its first line began or continued.
    """
    if not message.startswith(DRIVER_PREFIXES):
        return ParseStep(None, banner)
    first, newline, more = message.partition("\n")
    step = _first_line(first, banner, origin)
    if newline:
        for line in more.split("\n"):
            if step.event is not None or not step.engaged:
                break
            step = read_continuation(line, step.banner, origin)
    return step


def counts(origin: Origin, accept_userspace: bool = False) -> bool:
    """Whether a record of ``origin`` may give an event: never one that userspace wrote, unless told to."""
    return origin is not Origin.USERSPACE or accept_userspace


def parse_line(line: str, accept_userspace: bool = False) -> tuple[Record, Optional[Event]]:
    """One line of a dump on its own: ``split_record``, the origin rule, then ``read_message``."""
    if not might_match(line):
        return Record(line, LogFormat.PLAIN), None
    record = split_record(line)
    origin = origin_of(record.facility)
    if not counts(origin, accept_userspace):
        return record, None
    return record, read_message(record.message, None, origin).event


# A line that starts a record can give an event (or begin a banner) only if it holds one of these;
# every other driver line just ends whatever the record above began.
_USEFUL = ("NVRM: Xid (", "has fallen off the bus", "NVRM: GPU at PCI:", _BANNER_START, "nvidia-nvswitch")
# The same without UUID lines, for a scan that has its UUIDs already (xid_scan.scan_stream).
EVENTS_ONLY = tuple(n for n in _USEFUL if n != "NVRM: GPU at PCI:")
# str.find per literal: far faster than the regex engine on an alternation without a common prefix.
_CANDIDATE = ("NVRM: ", "nvidia-nvswitch")
# In a run of lines: one that does not start with a blank, i.e. does not continue the record above.
_NEW_RECORD = re.compile(r"\n[^ \t]")
CHUNK = 1 << 20  # characters (or bytes) per read of a streamed log

# (line number, line, whether a line that continues no record came since the previous one)
Candidate = tuple[int, str, bool]


@dataclass
class Focus:
    """Shared by ``read_candidates`` and ``scan_candidates``: whether the scanner is idle (no banner pending,
    no record engaged), when only lines holding ``narrow`` literals can change anything and the others need
    not be read one by one."""

    narrow: tuple[str, ...] = _USEFUL
    idle: bool = True


def _each_line(lines: Iterable[str]) -> Iterator[Candidate]:
    broke = False
    for number, line in enumerate(lines, 1):
        if might_match(line):
            yield number, line, broke
            broke = False
        elif line[:1] not in (" ", "\t"):
            broke = True


def _breaks(body: str, start: int, end: int) -> bool:
    """Whether the whole lines ``body[start:end]`` hold one that starts a record (not a blank-led continuation)."""
    return start < end and (body[start] not in " \t" or _NEW_RECORD.search(body, start, end) is not None)


_UNSEARCHED = -2


class _Finder:
    """The next occurrence of any of several literals in ``body[:end]``, each literal searched again only once passed.

    A literal that no longer occurs is never searched again, so a run of lines costs one
    ``find`` pass per literal however many candidates it holds.
    """

    def __init__(self, body: str, end: int, needles: tuple[str, ...]) -> None:
        self.body = body
        self.end = end
        self.next = dict.fromkeys(needles, _UNSEARCHED)  # searched on first use only

    def first(self, start: int) -> int:
        """The first position at or after ``start`` where a literal occurs; -1 if none does."""
        best = -1
        for needle, at in self.next.items():
            if at == _UNSEARCHED or 0 <= at < start:
                at = self.next[needle] = self.body.find(needle, start, self.end)
            if at >= 0 and (best < 0 or at < best):
                best = at
        return best


def read_candidates(
    read: Callable[[int], str],
    chunk: int = CHUNK,
    needles: tuple[str, ...] = _CANDIDATE,
    focus: Optional[Focus] = None,
    readline: Optional[Callable[[], str]] = None,
) -> Iterator[Candidate]:
    """The lines of a text stream that hold a driver prefix, found a chunk at a time by ``str.find``.

    What ``scan_lines`` would see of the same lines, without a Python step per line:
    the gaps between candidates are only counted (line numbers) and searched for a
    line that starts a record. Memory stays one chunk (plus the longest line).
    ``needles`` may narrow the candidates further (each must occur only in driver lines).
    With ``focus``, while the scanner is idle only lines holding its ``narrow`` literals are
    read; a driver line skipped then counts as a line that starts a record, which is all it
    would have done.
    """
    number = 0  # lines before ``pos``
    broke = False
    for body, pos, end in _bodies(read, chunk, "\n", readline):
        # ``pos``: the start of the first line not yet looked at
        finder = _Finder(body, end, needles)
        narrow = _Finder(body, end, focus.narrow) if focus is not None else finder
        found = (narrow if focus is not None and focus.idle else finder).first(pos)
        while found >= 0:
            start, stop = _line_around(body, found, "\n")
            broke = broke or _breaks(body, pos, start)
            number += body.count("\n", pos, start) + 1
            yield number, body[start:stop], broke
            broke = False
            pos = stop
            found = (narrow if focus is not None and focus.idle else finder).first(stop)
        broke = broke or _breaks(body, pos, end)
        number += body.count("\n", pos, end)


def lines_holding(
    read: Callable[[int], AnyStr],
    needle: AnyStr,
    newline: AnyStr,
    readline: Optional[Callable[[], AnyStr]] = None,
    chunk: int = CHUNK,
) -> Iterator[AnyStr]:
    """Each line of a text or binary stream that holds ``needle``, found a chunk at a time (no line numbers).

    ``newline`` is ``"\\n"`` or ``b"\\n"``, as the stream reads: a binary stream skips decoding
    all the lines that do not hold ``needle``.
    """
    for body, begin, end in _bodies(read, chunk, newline, readline):
        found = body.find(needle, begin, end)
        while found >= 0:
            start, stop = _line_around(body, found, newline)
            yield body[start:stop]
            found = body.find(needle, stop, end)


def _bodies(
    read: Callable[[int], AnyStr], chunk: int, newline: AnyStr, readline: Optional[Callable[[], AnyStr]] = None
) -> Iterator[tuple[AnyStr, int, int]]:
    """The stream as runs of whole lines ``body[start:end]`` of about ``chunk`` characters (the last may lack its
    newline).

    No read is copied to be joined with the next: the line cut by the end of a read comes
    as a short run of its own, completed by ``readline`` when given, else by the next read.
    """
    carry = newline[:0]
    while True:
        block = read(chunk)
        if not block:
            if carry:
                yield carry, 0, len(carry)
            return
        last = block.rfind(newline) + 1
        if readline is not None:
            yield block, 0, last
            if last < len(block):
                tail = block[last:] + readline()
                yield tail, 0, len(tail)
            continue
        first = block.find(newline) + 1
        if not first:  # no line ends in this read
            carry += block
            continue
        if carry:
            head = carry + block[:first]
            yield head, 0, len(head)
            yield block, first, last
        else:
            yield block, 0, last
        carry = block[last:]


def _line_around(body: AnyStr, at: int, newline: AnyStr) -> tuple[int, int]:
    """Where the line holding position ``at`` starts, and where the next one does."""
    end = body.find(newline, at)
    return body.rfind(newline, 0, at) + 1, len(body) if end < 0 else end + 1


def scan_lines(lines: Iterable[str], accept_userspace: bool = False) -> Iterator[tuple[int, Record, Event]]:
    """Every event in the dump ``lines`` with its 1-based line number and the record it belongs to.

    A line starting with white space continues the record above it: in a /dev/kmsg dump
    it is a `` KEY=value`` property and is skipped; in ``dmesg`` or ``journalctl``
    output it is a further line of the message and may only continue a banner that
    record took part in. Records that userspace wrote (where the format says so) give
    nothing unless ``accept_userspace``.
    """
    return scan_candidates(_each_line(lines), accept_userspace)


_MEMO_SIZE = 1024
K = TypeVar("K")
V = TypeVar("V")


def remember(seen: dict[K, V], key: K, value: V) -> V:
    """``value``, remembered under ``key``; a full memo is emptied first, so it stays bounded."""
    if len(seen) >= _MEMO_SIZE:
        seen.clear()
    seen[key] = value
    return value


def scan_candidates(
    candidates: Iterable[Candidate], accept_userspace: bool = False, focus: Optional[Focus] = None
) -> Iterator[tuple[int, Record, Event]]:
    """``scan_lines`` over the driver lines of a dump (``read_candidates``, or its own line-by-line filter).

    ``focus`` is kept up to date for the ``read_candidates`` that feeds it.
    """
    focus = focus if focus is not None else Focus()
    banner: Optional[Banner] = None
    engaged = False  # the record above began or continued ``banner``
    record = Record("", LogFormat.PLAIN)
    origin = Origin.UNKNOWN
    # A flood repeats its messages (same Xid, GPU and process): with no banner pending, a message's
    # step depends on its text and origin alone and its values are frozen, so each is read once.
    seen: dict[tuple[str, Optional[int]], ParseStep] = {}
    for number, line, broke in candidates:
        if broke:
            engaged = False
            focus.idle = banner is None
        if line[:1] in (" ", "\t"):
            if not engaged or record.format is LogFormat.KMSG:
                continue
            step = read_continuation(line, banner, origin)
        else:
            if banner is None and not any(needle in line for needle in focus.narrow):
                engaged = False  # a driver line that can give nothing: it only ends the record above
                focus.idle = True
                continue
            record = split_record(line)
            facility = record.facility
            origin = origin_of(facility)
            if not counts(origin, accept_userspace):
                engaged = False
                focus.idle = banner is None
                continue
            if banner is not None:
                step = read_message(record.message, banner, origin)
            else:
                key = (record.message, facility)  # the facility decides the origin
                step = seen.get(key) or remember(seen, key, read_message(record.message, None, origin))
        banner, engaged = step.banner, step.engaged and step.event is None
        focus.idle = banner is None and not engaged
        if step.event is not None:
            yield number, record, step.event
