"""The ``xid`` check: NVIDIA Xid/SXid events from the kernel log, read exactly once, graded by catalog.

Each pass reads the kernel log from the cursor kept in the check's state (with the
boot id: a new boot starts over), folds new lines into one group per GPU and Xid,
and reports one finding per group seen this boot. Only what the NVIDIA driver wrote
counts: records of the kernel facility whose message begins with the driver's prefix
(``healthd_checks.xid.parse``). A record that a process wrote to /dev/kmsg is never a finding unless
``accept_userspace_kmsg`` is on, a switch for tests that is reported in every pass
while on. A fallen-off-the-bus banner split over records, or over passes, is
completed from the state. Grades come from
``healthd_checks.xid.catalog`` with the operator's overrides. Every line is dated by its own
record time (kernel timestamp plus boot time, or the journal's), never by when it
was read, and all windows are judged on that time. A flood of identical lines is
one event per ``window`` (``details["count"]`` counts every line), and inside it a
milder line never grades the event down. Xids that need a GPU reset stay active
until a reboot, an Xid 154 back to "no action" on that GPU, or an acknowledgement
(handled centrally, matched on ``details["event"]``); those that need a reboot
ignore the Xid 154. Everything else that was seen is still reported, as an OK
finding, so metrics can count Xids by GPU and code.

``gather`` reads the boot id, the saved state, the GPU order and the new lines;
``judge`` folds them into events (``healthd_checks.xid.events``) and reports them. Every Xid event
feeds the ``healthd_xid_events_total`` counter (``XID_EVENTS``), labelled by GPU and
Xid, the GPU named as dcgm-exporter names it (``gpu`` index, ``UUID``, ``pci_bus_id``).

GPU numbering: the driver's Xid line names a PCI address. healthd maps it to an
index by sorting the NVIDIA display/3D controllers under ``[paths].sysfs/bus/pci/
devices`` by address, which is the order NVML enumerates GPUs in by default
(``CUDA_DEVICE_ORDER`` aside); the order is captured once per boot, so a GPU that
falls off the bus does not renumber the others.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Optional

from healthd.boot import BootIdUnreadable, read_boot_id
from healthd.checks.plugin import CheckSpec, EventCounter, Staged, Unobserved, Verdict
from healthd.model import Finding, Status
from healthd.text import one_line, read_kernel_text, records

from ..common.sysfs import VENDOR_NVIDIA, scan_pci
from ..kernlog.read import Position, read_new
from ..kernlog.source import ReadResult
from .catalog import CATALOG, HARDWARE_BUCKETS
from .events import MESSAGE_LIMIT, STATE_VERSION, Folding
from .parse import PciAddress

_EVENT_CODE = re.compile(r"(S?XID)_(\d{1,6})")
_UUID = re.compile(r"GPU-[0-9A-Fa-f-]{1,60}")
# The label value of a GPU's index, UUID or PCI address that healthd cannot know (docs/metrics.md).
UNKNOWN = "unknown"

if TYPE_CHECKING:
    from healthd.checks.plugin import CheckContext, JudgeContext

    from .settings import XidSettings


def nvidia_gpus(sysfs: Path) -> list[PciAddress]:
    """NVIDIA GPUs on the PCI bus, in address order (NVML's default enumeration order)."""
    scan = scan_pci(sysfs, frozenset({VENDOR_NVIDIA}))
    return [a for a in (PciAddress.parse(f.address) for f in scan.nvidia_gpus) if a is not None]


class XidObservation(NamedTuple):
    """What one pass read: the boot, its saved state, where reading stands now, and the new lines.

    ``position`` is after any change of source; ``first_read`` says whether this boot's
    log had never been read before. ``journal_problem`` is why the journal could not be
    read when kmsg was read instead; ``log_unreadable`` is set when no source could be.
    """

    kmsg: str
    boot_id: Optional[str] = None
    boot_unreadable: Optional[Unobserved] = None
    document: Mapping[str, Any] = MappingProxyType({})
    position: Position = Position()
    first_read: bool = True
    log: Optional[ReadResult] = None
    journal_problem: Optional[str] = None
    log_unreadable: Optional[Unobserved] = None


def _read_log(ctx: CheckContext[XidSettings], boot_id: str, position: Position) -> XidObservation:
    """New lines from the configured source, falling back to kmsg, with the position after reading."""
    kmsg = ctx.paths.kmsg
    read = read_new(ctx, boot_id, position)
    if read.unreadable is not None:
        unreadable = Unobserved(
            "KERNEL_LOG_UNREADABLE", str(kmsg), one_line(read.unreadable, MESSAGE_LIMIT), {"path": str(kmsg)}
        )
        return XidObservation(str(kmsg), boot_id, position=position, log_unreadable=unreadable)
    return XidObservation(
        str(kmsg), boot_id, position=read.position, log=read.result, journal_problem=read.journal_problem
    )


def gather(ctx: CheckContext[XidSettings]) -> XidObservation:
    try:
        boot_id = read_boot_id(ctx.paths.procfs)
    except BootIdUnreadable as exc:
        unreadable = Unobserved("KERNEL_LOG_UNREADABLE", str(ctx.paths.procfs), str(exc))
        return XidObservation(str(ctx.paths.kmsg), boot_unreadable=unreadable)
    document = ctx.state.load()
    if document.get("version") != STATE_VERSION or document.get("boot_id") != boot_id:
        document = {}  # a new boot starts over
    position = Position.load(document)
    if not position.order:
        # Captured once per boot, so a GPU that falls off the bus does not renumber the others.
        position = position._replace(order=tuple(str(a) for a in nvidia_gpus(ctx.paths.sysfs)))
    # The driver's own lines name a GPU's UUID once, at load: a first read of a ring buffer
    # that has wrapped lacks them, so the driver's procfs fills in what the log does not say.
    known = document.get("uuids")
    document = {**document, "uuids": {**driver_uuids(ctx.paths.procfs), **(known if isinstance(known, dict) else {})}}
    observed = _read_log(ctx, boot_id, position)
    first_read = position.cursor is None and position.last_usec is None
    return observed._replace(document=document, first_read=first_read)


def judge(observed: XidObservation, jc: JudgeContext[XidSettings]) -> Verdict:
    if observed.boot_id is None:
        return Verdict(tuple(p.finding(jc) for p in (observed.boot_unreadable,) if p is not None))
    findings: list[Finding] = []
    if jc.settings.accept_userspace_kmsg:
        findings.append(
            jc.finding(
                Status.OK,
                "KERNEL_LOG_USERSPACE_ACCEPTED",
                "accept_userspace_kmsg",
                "accept_userspace_kmsg is on: records that processes wrote to /dev/kmsg count as NVIDIA driver "
                "messages, so anyone who can write /dev/kmsg can report a GPU fault (a setting for tests)",
                setting="accept_userspace_kmsg",
            )
        )
    if observed.journal_problem is not None:
        # Xids are still seen through kmsg, so this is a note, not "could not observe";
        # but the journal's longer history is not being used, and someone should know.
        directory = jc.settings.journal_directory
        findings.append(
            jc.finding(
                Status.OK,
                "KERNEL_LOG_JOURNAL_UNREADABLE",
                str(directory) if directory is not None else "journal",
                one_line(f"{observed.journal_problem}; reading {observed.kmsg} instead", MESSAGE_LIMIT),
                reason=one_line(observed.journal_problem, MESSAGE_LIMIT),
            )
        )
    if observed.log_unreadable is not None:
        findings.append(observed.log_unreadable.finding(jc))
    folding = Folding(jc, observed.document, observed.boot_id, observed.position, observed.kmsg)
    if observed.log is not None:
        folding.fold(observed.log, observed.first_read)
    return Verdict((*findings, *folding.report()), folding.document())


def driver_uuids(procfs: Path) -> dict[str, str]:
    """Each GPU's UUID by PCI address (``0000:3b:00``), from the driver's ``gpus/<pci>/information``.

    The NVIDIA driver's procfs tree (/proc/driver/nvidia/gpus/<domain:bus:device.fn>/information)
    names each GPU's ``GPU UUID``; no driver, or a file that cannot be read, gives nothing.
    Its ``Device Minor`` (/dev/nvidia<N>) is not used: it need not be NVML's index.
    """
    uuids: dict[str, str] = {}
    try:
        directories = sorted((procfs / "driver" / "nvidia" / "gpus").iterdir())
    except OSError:
        return uuids
    for directory in directories:
        address = PciAddress.parse(directory.name)
        try:
            text = read_kernel_text(directory / "information")
        except OSError:
            continue
        for record in records(text):
            key, _, value = record.partition(":")
            if address is not None and key.strip() == "GPU UUID" and _UUID.fullmatch(value.strip()):
                uuids[str(address)] = value.strip()
    return uuids


def hardware_code(code: str) -> bool:
    """Whether ``code`` is an Xid (or SXid) that NVIDIA's catalog puts on the GPU (or NVSwitch) itself.

    Application Xids, those of a process's cleanup, informational, software and
    power-smoothing Xids, and Xids not in the catalog never escalate: a user's program,
    the driver or a new driver's unknown code can cause them (docs/escalation.md).
    """
    match = _EVENT_CODE.fullmatch(code)
    if match is None:
        return False
    if match.group(1) == "SXID":
        return True
    entry = CATALOG.get(int(match.group(2)))
    return entry is not None and entry.bucket in HARDWARE_BUCKETS


def nvml_bus_id(pci: str) -> str:
    """A PCI address as NVML (and so dcgm-exporter's ``pci_bus_id``) writes it: ``00000000:3B:00.0``.

    The driver's Xid tag has no function number; a GPU is function 0.
    """
    address = PciAddress.parse(pci)
    if address is None:
        return UNKNOWN
    function = 0 if address.function is None else address.function
    return f"{address.domain:08X}:{address.bus:02X}:{address.device:02X}.{function:X}"


def xid_event_labels(finding: Finding) -> Optional[tuple[str, str, str, str]]:
    """(gpu, UUID, pci_bus_id, xid) of a finding coded ``XID_<n>`` or ``SXID_<n>``, as dcgm-exporter names a GPU.

    ``gpu`` is the NVML index (the ``gpu`` detail when it is a number), ``UUID`` the ``uuid``
    detail, ``pci_bus_id`` the ``pci`` detail in NVML's form; each is ``unknown`` when
    the check could not tell it. An SXid's ``gpu`` is the NVSwitch, its xid ``SXID_<n>``.
    """
    match = _EVENT_CODE.fullmatch(finding.code)
    if match is None:
        return None
    details = finding.details
    gpu, uuid, pci = details.get("gpu"), details.get("uuid"), details.get("pci")
    bus_id = nvml_bus_id(pci) if isinstance(pci, str) and pci else UNKNOWN
    uuid_label = uuid if isinstance(uuid, str) and uuid else UNKNOWN
    if match.group(1) == "SXID":
        return str(gpu if gpu is not None else finding.subject), uuid_label, bus_id, finding.code
    index = str(gpu) if isinstance(gpu, int) and not isinstance(gpu, bool) else UNKNOWN
    return index, uuid_label, bus_id, match.group(2)


# One finding per GPU and Xid seen since boot, its count growing until a reboot: a counter
# whose resets rate() understands.
XID_EVENTS = EventCounter(
    name="xid_events",
    documentation="Xid and SXid lines the kernel logged this boot, by GPU (or NVSwitch) and Xid "
    "(SXID_<n> for an SXid).",
    labels=("gpu", "UUID", "pci_bus_id", "xid"),
    select=xid_event_labels,
)


CHECK = CheckSpec(
    name="xid",
    description="NVIDIA Xid/SXid errors in the kernel log, read once each, graded by NVIDIA's Xid catalog",
    settings="healthd_checks.xid.settings:XidSettings",
    run=Staged(gather, judge, keeps="the kernel-log cursor and Xid events"),
    events=(XID_EVENTS,),
    hardware=hardware_code,
)
