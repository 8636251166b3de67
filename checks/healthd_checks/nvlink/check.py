"""The ``nvlink`` check: NVLinks up, GPUs registered with the fabric, and Fabric Manager running where NVSwitches are.

``gather`` finds the NVSwitches on the PCI bus (``sysfs.PciFunction.is_nvswitch``:
NVIDIA vendor 0x10de, class 0x0680), reads each GPU's NVLink states
(``nvmlDeviceGetNvLinkState``) and fabric registration (``nvmlDeviceGetGpuFabricInfoV``)
from NVML or from an NVML snapshot and, where Fabric Manager is required, looks for its
daemon in the process table; ``judge`` grades them.

Fabric Manager is required exactly where NVSwitches are on the host's PCI bus (HGX and
DGX baseboards), unless ``fabric_manager`` says otherwise: a PCIe H100, a GH200 or a
single GPU has no NVSwitch and nothing to manage, so it is never asked for there. On
Hopper and later, NVIDIA's Fabric Manager user guide says a GPU cannot run CUDA work
until Fabric Manager has registered it with the fabric; NVML reports that registration
per GPU (state COMPLETED, status SUCCESS). GPUs that report the state as NOT_SUPPORTED
(Ampere and older, PCIe boards) are left alone. A GPU with fewer active links than
``expect_active_links``, or (with no count expected) with some links up and others
down, is ``NVLINK_DOWN``; the links' error counters stay the gpu check's, which keeps
their baselines. See docs/nvlink.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Union

from healthd.checks.plugin import CheckSpec, NotApplicable, Staged, Unobserved, Verdict
from healthd.model import DetailValue, Finding, Status

from ..common.procs import COMM_MAX, read_processes
from ..common.sysfs import VENDOR_NVIDIA, scan_pci
from ..nvml.source import (
    NOT_SUPPORTED,
    FabricInfo,
    FabricReading,
    GpuFabric,
    LinkState,
    NvmlError,
    NvmlLibrary,
    SnapshotError,
)
from ..services.check import ProcessRule, find_service

if TYPE_CHECKING:
    from healthd.checks.plugin import CheckContext, JudgeContext

    from ..nvml.snapshot import SnapshotFile
    from .settings import NvlinkSettings


# nvmlGpuFabricState_t (nvml.h; pynvml's NVML_GPU_FABRIC_STATE_*).
STATE_NOT_SUPPORTED, STATE_NOT_STARTED, STATE_IN_PROGRESS, STATE_COMPLETED = 0, 1, 2, 3
STATE_NAMES = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}
ZERO_UUID = "00000000-0000-0000-0000-000000000000"

# NVML_GPU_FABRIC_HEALTH_MASK_* (nvml.h): (shift, width, value meaning "bad", grade, code, text).
HEALTH_BITS = (
    (0, 0x3, 1, Status.WARNING, "NVLINK_FABRIC_DEGRADED_BW", "the fabric runs at degraded bandwidth"),
    (4, 0x3, 1, Status.WARNING, "NVLINK_FABRIC_ROUTE_UNHEALTHY", "a route through the fabric is unhealthy"),
)
# NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_* (4 bits from bit 8): 0 not supported, 1 none.
_INCORRECT_CONFIGURATION = {
    2: "incorrect system GUID",
    3: "incorrect chassis serial number",
    4: "no partition",
    5: "insufficient NVLinks",
    6: "incompatible GPU firmware",
    7: "invalid location",
    8: "GPU state invalid",
}
# Errors that only say "this GPU, driver or binding has no fabric registration to report".
_ABSENT = frozenset({NOT_SUPPORTED, "FUNCTION_NOT_FOUND", "INVALID_ARGUMENT", "NOT_FOUND"})


class NvlinkObservation(NamedTuple):
    """The NVSwitches on the bus, the GPUs' fabric registration, and whether Fabric Manager runs.

    ``fabric_manager`` is None when it was not looked for (not required here).
    """

    switches: tuple[str, ...]
    fabric: Union[FabricReading, Unobserved]
    fabric_manager: Optional[bool] = None
    problems: tuple[Unobserved, ...] = ()


def manager_required(settings: NvlinkSettings, switches: int) -> bool:
    if settings.fabric_manager == "auto":
        return switches > 0
    return settings.fabric_manager == "required"


def _fabric_manager_running(ctx: CheckContext[NvlinkSettings]) -> Union[bool, Unobserved]:
    """Whether a live process of that name, started by root, is in the process table."""
    procfs = ctx.paths.procfs
    try:
        table = read_processes(procfs)
    except OSError as exc:
        return Unobserved("PROCESSES_UNREADABLE", str(procfs), f"cannot list processes: {exc}")
    rule = ProcessRule(names=(ctx.settings.fabric_manager_process,), owners={0: "root"})
    running = find_service(rule, table.processes).running
    if not running and table.skipped:
        # A process skipped as malformed may be the one looked for: not seen is not absent.
        return Unobserved("PROCESS_STATUS_MALFORMED", str(procfs), table.skipped[0])
    return running


def _wanted(settings: NvlinkSettings) -> bool:
    """Whether the settings ask for NVLink hardware, or replay a snapshot, whatever the PCI bus holds."""
    return bool(
        settings.snapshot
        or settings.expect_nvswitches
        or settings.expect_cluster_uuid
        or settings.expect_active_links is not None
        or settings.fabric_manager == "required"
    )


def _source(settings: NvlinkSettings) -> Union[NvmlLibrary, SnapshotFile]:
    """The snapshot when ``snapshot`` is set (imported only then: it needs pydantic), else NVML."""
    if not settings.snapshot:
        return NvmlLibrary()
    from ..nvml.snapshot import SnapshotFile

    return SnapshotFile(settings.snapshot)


def gather(ctx: CheckContext[NvlinkSettings]) -> NvlinkObservation:
    settings = ctx.settings
    scan = scan_pci(ctx.paths.sysfs, frozenset({VENDOR_NVIDIA}))
    problems = [Unobserved("PCI_SYSFS_UNREADABLE", "pci", str(e), {"file": str(e.path)}) for e in scan.errors]
    switches = tuple(f.address for f in scan.functions if f.is_nvswitch)
    if scan.present and not scan.errors and not scan.nvidia_gpus and not switches and not _wanted(settings):
        # As the gpu check does: loading NVML costs a cold pass more than the rest of this check
        # (pynvml's import alone is about 30 ms), and with no NVIDIA device on a readable PCI bus
        # and nothing expected its answer could not change the verdict (judge: not applicable).
        raise NotApplicable("no NVIDIA GPU or NVSwitch on the PCI bus and none expected (NVML not loaded)")
    fabric: Union[FabricReading, Unobserved]
    try:
        fabric = _source(settings).read_fabric()
    except SnapshotError as exc:
        fabric = Unobserved("NVML_SNAPSHOT_INVALID", "nvml", str(exc))
    running: Optional[bool] = None
    if manager_required(settings, len(switches)):
        seen = _fabric_manager_running(ctx)
        if isinstance(seen, Unobserved):
            problems.append(seen)
        else:
            running = seen
    return NvlinkObservation(switches, fabric, running, tuple(problems))


def _gpu_details(gpu: GpuFabric) -> dict[str, DetailValue]:
    details: dict[str, DetailValue] = {"gpu": gpu.index}
    for name, value in (("uuid", gpu.uuid), ("pci_bus_id", gpu.pci_bus_id)):
        if isinstance(value, str):
            details[name] = value
    return details


def judge_registration(
    gpu: GpuFabric, info: FabricInfo, settings: NvlinkSettings, jc: JudgeContext[NvlinkSettings]
) -> list[Finding]:
    """One GPU's registration: not started or failed is CRITICAL, in progress a WARNING, health bits as graded."""
    subject = f"gpu{gpu.index}"
    state = STATE_NAMES.get(info.state, f"unknown state {info.state}")
    details = {**_gpu_details(gpu), "state": state, "fabric_status": info.status}
    if info.state == STATE_NOT_STARTED:
        message = "not registered with the NVLink fabric (state NOT_STARTED): CUDA cannot use it until it is"
        return [jc.finding(Status.CRITICAL, "NVLINK_FABRIC_NOT_REGISTERED", subject, message, **details)]
    if info.state == STATE_IN_PROGRESS:
        message = "NVLink fabric registration in progress: CUDA cannot use the GPU until it completes"
        return [jc.finding(Status.WARNING, "NVLINK_FABRIC_IN_PROGRESS", subject, message, **details)]
    if info.state != STATE_COMPLETED:
        message = f"NVML reports an NVLink fabric state healthd does not know ({info.state})"
        return [jc.finding(Status.UNKNOWN, "NVLINK_FABRIC_STATE_UNKNOWN", subject, message, **details)]
    if info.status != "SUCCESS":
        message = f"NVLink fabric registration failed (status {info.status})"
        return [jc.finding(Status.CRITICAL, "NVLINK_FABRIC_FAILED", subject, message, **details)]
    findings: list[Finding] = []
    if settings.expect_cluster_uuid and info.cluster_uuid in (ZERO_UUID, ""):
        message = "registered with the NVLink fabric but given no cluster UUID (expect_cluster_uuid)"
        findings.append(jc.finding(Status.CRITICAL, "NVLINK_FABRIC_NO_CLUSTER", subject, message, **details))
    mask = info.health_mask or 0
    for shift, width, bad, status, code, text in HEALTH_BITS:
        if (mask >> shift) & width == bad:
            findings.append(jc.finding(status, code, subject, text, health_mask=mask, **details))
    wrong = _INCORRECT_CONFIGURATION.get((mask >> 8) & 0xF)
    if wrong is not None:
        message = f"the NVLink fabric reports an incorrect configuration: {wrong}"
        findings.append(
            jc.finding(Status.CRITICAL, "NVLINK_FABRIC_MISCONFIGURED", subject, message, health_mask=mask, **details)
        )
    return findings


def judge_links(
    gpu: GpuFabric, links: tuple[LinkState, ...], expected: Optional[int], jc: JudgeContext[NvlinkSettings]
) -> list[Finding]:
    """One GPU's links against ``expected``: too few up is CRITICAL, unless unread links could make up the count."""
    subject = f"gpu{gpu.index}"
    active = [link.link for link in links if link.active is True]
    down = [link.link for link in links if link.active is False]
    unread = {link.link: link.active.code for link in links if isinstance(link.active, NvmlError)}
    findings: list[Finding] = []
    if unread:
        listed = ", ".join(f"link {link}: NVML {code}" for link, code in sorted(unread.items()))
        findings.append(
            jc.finding(
                Status.UNKNOWN,
                "NVLINK_STATE_UNREADABLE",
                subject,
                f"cannot read whether NVLinks are up ({listed})",
                links=",".join(map(str, sorted(unread))),
                **_gpu_details(gpu),
            )
        )
    # Without an expected count, a GPU whose links are all inactive is taken as one
    # without NVLink (a PCIe card without a bridge); some up and some down is a fault.
    short = expected is not None and len(active) < expected and len(active) + len(unread) < expected
    if short or (expected is None and active and down):
        message = f"{len(down)} NVLink(s) down ({len(active)} active" + (
            f", {expected} expected)" if expected is not None else ")"
        )
        details: dict[str, DetailValue] = {"links_down": ",".join(map(str, down)), "active": len(active)}
        if expected is not None:
            details["expected"] = expected
        findings.append(jc.finding(Status.CRITICAL, "NVLINK_DOWN", subject, message, **details, **_gpu_details(gpu)))
    return findings


def _judge_all_links(fabric: FabricReading, jc: JudgeContext[NvlinkSettings]) -> tuple[list[Finding], bool]:
    """Findings on every GPU's links, and whether any GPU has NVLinks to judge (or is expected to)."""
    expected = jc.settings.expect_active_links
    findings: list[Finding] = []
    present = bool(expected) and bool(fabric.gpus)
    for gpu in fabric.gpus:
        links = gpu.links
        if isinstance(links, NvmlError):
            # "No NVLink here" is an answer only where none is expected: with links
            # expected, a GPU whose links cannot be listed is one not observed, not one that is fine.
            if links.code not in _ABSENT or expected:
                message = f"cannot read the GPU's NVLinks: NVML {links.code}"
                if links.code in _ABSENT:
                    message += f" ({expected} active expected: expect_active_links)"
                findings.append(
                    jc.finding(
                        Status.UNKNOWN,
                        "NVLINK_STATE_UNREADABLE",
                        f"gpu{gpu.index}",
                        message,
                        nvml_error=links.code,
                        **_gpu_details(gpu),
                    )
                )
            continue
        present = present or any(link.active is True for link in links)
        findings += judge_links(gpu, links, expected, jc)
    return findings, present


def _judge_fabric(observed: NvlinkObservation, jc: JudgeContext[NvlinkSettings]) -> tuple[list[Finding], bool]:
    """Findings on the GPUs' registration, and whether any GPU has a registration to judge."""
    fabric = observed.fabric
    if isinstance(fabric, Unobserved):
        return [fabric.finding(jc)], True
    if fabric.init_error is not None:
        if not observed.switches and not jc.settings.expect_cluster_uuid and jc.settings.expect_active_links is None:
            return [], False
        error = fabric.init_error
        message = f"cannot read the GPUs' NVLinks and fabric registration: NVML {error.code} {error.message}".strip()
        return [jc.finding(Status.UNKNOWN, "NVLINK_FABRIC_UNOBSERVED", "nvml", message, nvml_error=error.code)], True
    findings, supported = _judge_all_links(fabric, jc)
    for gpu in fabric.gpus:
        info = gpu.fabric
        if isinstance(info, NvmlError):
            if info.code in _ABSENT:
                continue
            message = f"cannot read the NVLink fabric registration: NVML {info.code}"
            findings.append(
                jc.finding(
                    Status.UNKNOWN,
                    "NVLINK_FABRIC_UNREADABLE",
                    f"gpu{gpu.index}",
                    message,
                    nvml_error=info.code,
                    **_gpu_details(gpu),
                )
            )
            supported = True
            continue
        if info.state == STATE_NOT_SUPPORTED:
            continue
        supported = True
        findings += judge_registration(gpu, info, jc.settings, jc)
    return findings, supported


def judge(observed: NvlinkObservation, jc: JudgeContext[NvlinkSettings]) -> Verdict:
    settings = jc.settings
    switches = len(observed.switches)
    findings = [problem.finding(jc) for problem in observed.problems]
    expected = settings.expect_nvswitches
    if expected is not None and switches < expected:
        message = f"{switches} NVSwitch(es) on the PCI bus, {expected} expected"
        listed = ",".join(observed.switches)
        findings.append(
            jc.finding(
                Status.CRITICAL,
                "NVSWITCH_MISSING",
                "nvswitches",
                message,
                found=switches,
                expected=expected,
                addresses=listed,
            )
        )
    required = manager_required(settings, switches)
    if observed.fabric_manager is False:
        process = settings.fabric_manager_process
        why = f"{switches} NVSwitch(es) on the PCI bus" if switches else "fabric_manager = required"
        message = (
            f"Fabric Manager is not running (no process {process[:COMM_MAX]} owned by root) although {why}: "
            "NVLink traffic between GPUs cannot be set up"
        )
        findings.append(jc.finding(Status.CRITICAL, "FABRIC_MANAGER_DOWN", process, message, nvswitches=switches))
    fabric, supported = _judge_fabric(observed, jc)
    findings += fabric
    wanted = expected or settings.expect_cluster_uuid or settings.expect_active_links is not None
    if not (switches or required or supported or wanted or findings):
        raise NotApplicable("no NVSwitch on the PCI bus, no NVLink up and no GPU registered with an NVLink fabric")
    return Verdict(tuple(findings))


def baseline(ctx: CheckContext[NvlinkSettings]) -> dict[str, Any]:
    """The NVSwitches on the bus and the active NVLinks per GPU (when every GPU has the same number)."""
    observed = gather(ctx)
    fabric = observed.fabric
    if isinstance(fabric, Unobserved):
        raise OSError(fabric.message)
    found: dict[str, Any] = {}
    if observed.switches:
        found["expect_nvswitches"] = len(observed.switches)
    if fabric.init_error is None:
        active = {
            sum(1 for link in gpu.links if link.active is True) if not isinstance(gpu.links, NvmlError) else None
            for gpu in fabric.gpus
        }
        if len(active) == 1 and next(iter(active)):
            found["expect_active_links"] = next(iter(active))
    elif observed.switches:
        raise OSError(f"NVML cannot be used ({fabric.init_error.code}) but NVSwitches are on the PCI bus")
    if not found:
        raise NotApplicable("no NVSwitch on the PCI bus and no NVLink up")
    return found


CHECK = CheckSpec(
    name="nvlink",
    description="NVLink: links up, GPUs registered with the fabric (NVML), Fabric Manager running where NVSwitches are",
    settings="healthd_checks.nvlink.settings:NvlinkSettings",
    baseline=baseline,
    run=Staged(gather, judge),
    # Links down were the gpu check's finding: what was saved under its key (an
    # administrator's acknowledgement above all) goes on meaning the same.
    adopts=("gpu/NVLINK_DOWN",),
    # A link or an NVSwitch of this node. The fabric's states are not: Fabric Manager and
    # the fabric's routes are shared by every node of an NVLink domain.
    hardware=frozenset({"NVLINK_DOWN", "NVSWITCH_MISSING"}),
)
