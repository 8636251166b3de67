"""The ``gpu`` check: NVML readings (live or from a snapshot) judged against the node's expectations.

``gather`` reads NVML (``healthd_checks.nvml.source``), the NVIDIA GPUs that
``healthd_checks.common.sysfs.scan_pci`` finds on the PCI bus and the last pass's counter
baselines; ``judge`` hands them to ``evaluate``, a pure function that also returns
the baselines to remember for the next pass (PCIe replays and NVLink errors are
judged as rates, never as totals, in ``healthd_checks.gpu.counters``). See
docs/gpu.md for the codes.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Optional, Union

from healthd.checks.plugin import CheckSpec, NotApplicable, Staged, Unobserved, Verdict
from healthd.model import DetailValue, Device, Finding, Status

from ..common.sysfs import VENDOR_NVIDIA, PciScan, normalize_pci_address, scan_pci
from ..nvml.source import (
    GPU_IS_LOST,
    LIB_RM_VERSION_MISMATCH,
    RESET_REQUIRED,
    GpuReading,
    GpuSource,
    NodeReading,
    NvmlError,
    NvmlLibrary,
    SnapshotError,
)
from .counters import NVLINK_COUNTERS, judge_counters

if TYPE_CHECKING:
    from healthd.checks.plugin import CheckContext, JudgeContext

    from .settings import GpuSettings


# ---------------------------------------------------------------------------------------
# Domain tables.

# Error names that say the GPU itself is unusable (NVML API reference, nvmlReturn_t): it
# needs a reset or the node a reboot, or a person at the machine: INSUFFICIENT_POWER is "a
# device's external power cables are not properly attached" (the fault of Xid 54, whose
# immediate action in NVIDIA's Xid catalog is CHECK_MECHANICALS), IRQ_ISSUE "NVIDIA Kernel
# detected an interrupt issue with a GPU".
_GPU_FATAL = {
    GPU_IS_LOST: ("GPU_LOST", "GPU has fallen off the bus or is otherwise inaccessible (NVML: GPU is lost)"),
    RESET_REQUIRED: ("GPU_RESET_REQUIRED", "GPU requires a reset (NVML: reset required)"),
    "INSUFFICIENT_POWER": (
        "GPU_INSUFFICIENT_POWER",
        "GPU's external power cables are not properly attached (NVML: insufficient power)",
    ),
    "IRQ_ISSUE": ("GPU_IRQ_ISSUE", "the kernel detected an interrupt issue with the GPU (NVML: IRQ issue)"),
}
# The ``remedy`` detail healthd's remediation acts on (docs/remediation.md): a GPU lost to
# NVML is back only after a reboot (NVIDIA's Xid 79 "fallen off the bus" bucket is
# RESTART_BM); a reset NVML asks for, or a pending row remap (NVIDIA's memory error
# management: remapping takes effect at the next GPU reset), is a GPU reset.
_REMEDY = {GPU_IS_LOST: "reboot", RESET_REQUIRED: "reset"}
# The driver's recovery actions (by name, below) that are a reboot or a GPU reset.
_RECOVERY_REMEDY = {"gpu_reset": "reset", "node_reboot": "reboot", "system_reboot": "reboot"}
# Errors that only say "this GPU, driver or binding does not offer that reading".
_ABSENT = frozenset({"NOT_SUPPORTED", "FUNCTION_NOT_FOUND", "INVALID_ARGUMENT", "NOT_FOUND"})

# nvmlClocksEventReasons bits (nvml.h) that mean the hardware itself is slowing the clocks.
_HW_SLOWDOWN_BITS = {0x08: "hw_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown"}

# nvmlDeviceGpuRecoveryAction_t (nvml.h); see also Xid 154 in NVIDIA's XID catalog.
_RECOVERY_ACTIONS = {
    1: "gpu_reset",
    2: "node_reboot",
    3: "drain_p2p",
    4: "drain_and_reset",
    5: "recover_imex_domain",
    6: "bus_reset",
    7: "system_reboot",
}

Make = Callable[..., Finding]
Add = Callable[..., None]


def _value(reading: Any) -> Any:
    return None if isinstance(reading, NvmlError) else reading


def _gpu_key(gpu: GpuReading) -> str:
    return str(_value(gpu.uuid) or _value(gpu.pci_bus_id) or f"index{gpu.index}")


def evaluate(
    reading: NodeReading,
    pci: PciScan,
    expected_gpus: Optional[int],
    settings: GpuSettings,
    previous: Mapping[str, Any],
    now: float,
    make: Make,
) -> Verdict:
    """Judge one node reading. Pure: raises ``NotApplicable`` when there is nothing to judge.

    The verdict's state holds the counter baselines for the next pass (None when NVML was unusable).
    """
    expected = expected_gpus or 0
    # min_gpus: at least that many, more being fine (NHC's GPU health checks need one GPU to pass).
    floor = max(expected, settings.min_gpus or 0)
    on_bus = len(pci.nvidia_gpus) if pci.present else None
    wanted = floor > 0 or bool(on_bus)
    counts: dict[str, DetailValue] = {"expected": expected_gpus, "pci_count": on_bus}
    findings = [make(Status.UNKNOWN, "PCI_SYSFS_UNREADABLE", "pci", str(e), file=str(e.path)) for e in pci.errors]

    if reading.init_error is not None:
        error = reading.init_error
        if not wanted:
            raise NotApplicable(f"no NVIDIA driver ({error.code}) and no GPUs expected or on the PCI bus")
        if error.code == LIB_RM_VERSION_MISMATCH:
            message = "NVML library and kernel driver versions differ (driver updated without reboot?)"
            findings.append(
                make(Status.CRITICAL, "NVML_VERSION_MISMATCH", "nvml", message, nvml_error=error.code, **counts)
            )
        else:
            message = f"NVML cannot be used ({error.code}: {error.message or 'no detail'}) but GPUs are expected"
            findings.append(make(Status.CRITICAL, "NVML_UNAVAILABLE", "nvml", message, nvml_error=error.code, **counts))
        return Verdict(tuple(findings))

    count = reading.device_count
    if isinstance(count, NvmlError):
        status = Status.CRITICAL if count.code in _GPU_FATAL else Status.UNKNOWN
        findings.append(make(status, "NVML_READ_ERROR", "nvml", f"nvmlDeviceGetCount failed: {count.code}", **counts))
    elif count == 0 and not wanted:
        raise NotApplicable("NVML sees no GPUs and none are expected or on the PCI bus")
    else:
        findings.extend(_count_findings(count, reading, pci, (expected, floor), counts, make))

    state: dict[str, Any] = {}
    devices = tuple(_device(gpu) for gpu in reading.gpus if isinstance(gpu.pci_bus_id, str))
    raw_gpus = previous.get("gpus")
    old_gpus: Mapping[str, Any] = raw_gpus if isinstance(raw_gpus, dict) else {}
    for gpu in reading.gpus:
        gpu_findings, gpu_state = _judge_gpu(gpu, settings, old_gpus.get(_gpu_key(gpu)), now, make)
        findings.extend(gpu_findings)
        if gpu_state:
            state[_gpu_key(gpu)] = gpu_state
    return Verdict(tuple(findings), {"gpus": state}, devices)


def _device(gpu: GpuReading) -> Device:
    """The GPU for the boot's inventory: its slot (PCI address) and the part in it (UUID, serial)."""
    address = str(gpu.pci_bus_id)
    return Device("gpu", gpu.index, normalize_pci_address(address) or address, _value(gpu.uuid), _value(gpu.serial))


def _count_findings(
    count: int,
    reading: NodeReading,
    pci: PciScan,
    bounds: tuple[int, int],
    counts: dict[str, DetailValue],
    make: Make,
) -> list[Finding]:
    """GPU_MISSING under ``bounds`` (expect_gpus, and the floor with min_gpus) or the PCI bus's count."""
    expected, floor = bounds
    bus_ids = [function.address for function in pci.nvidia_gpus]
    on_bus = len(bus_ids)
    details = dict(counts, nvml_count=count)
    if count < max(floor, on_bus) or (pci.present and on_bus < floor):
        seen = {normalize_pci_address(b) for b in (_value(g.pci_bus_id) for g in reading.gpus) if isinstance(b, str)}
        unseen = [b for b in bus_ids if b not in seen]
        if unseen:
            details["unseen_pci_bus_ids"] = ",".join(unseen)
        message = f"NVML sees {count} GPU(s), {on_bus if pci.present else 'unknown'} on the PCI bus"
        message += f", {expected} expected" if expected else f", at least {floor} expected" if floor else ""
        return [make(Status.CRITICAL, "GPU_MISSING", "gpus", message, **details)]
    if expected and count > expected:
        message = f"NVML sees {count} GPUs but [checks.gpu] expect_gpus is {expected}"
        return [make(Status.WARNING, "GPU_COUNT_UNEXPECTED", "gpus", message, **details)]
    return []


def _judge_gpu(
    gpu: GpuReading, settings: GpuSettings, old: Any, now: float, make: Make
) -> tuple[list[Finding], dict[str, Any]]:
    subject = f"gpu{gpu.index}"
    ids: dict[str, DetailValue] = {"uuid": _value(gpu.uuid), "pci_bus_id": _value(gpu.pci_bus_id)}
    out: list[Finding] = []

    def add(status: Status, code: str, message: str, **details: DetailValue) -> None:
        out.append(make(status, code, subject, message, **ids, **details))

    if gpu.handle_error is not None:
        _judge_handle(gpu.handle_error, add)
        return out, {}
    name = _value(gpu.name)
    if settings.expect_model is not None and isinstance(name, str) and name != settings.expect_model:
        # A different part than the node was built with: its jobs get other memory and speed than asked for.
        add(Status.WARNING, "GPU_MODEL_MISMATCH", f"GPU is {name}, expected {settings.expect_model}", model=name)
    errors = _errors(gpu)
    fatal = [code for code in _GPU_FATAL if code in errors.values()]
    pci = _value(gpu.pci_bus_id)
    for code in fatal:
        finding, message = _GPU_FATAL[code]
        add(Status.CRITICAL, finding, message, nvml_error=code, **_remedy(_REMEDY.get(code, ""), pci))
    odd = {name: code for name, code in errors.items() if code not in _ABSENT and code not in _GPU_FATAL}
    if odd and not fatal:
        listed = ", ".join(f"{name}={code}" for name, code in sorted(odd.items()))
        add(Status.UNKNOWN, "NVML_READ_ERROR", f"NVML could not read: {listed}", fields=",".join(sorted(odd)))

    _judge_memory(gpu, settings, add)
    _judge_pcie(gpu, settings, add)
    reasons = _value(gpu.clock_event_reasons)
    if isinstance(reasons, int):
        slow = [name for bit, name in _HW_SLOWDOWN_BITS.items() if reasons & bit]
        if slow:
            add(
                Status.WARNING,
                "CLOCK_HW_SLOWDOWN",
                f"hardware is slowing the clocks: {', '.join(slow)}",
                reasons=",".join(slow),
                reasons_mask=reasons,
            )
    action = _value(gpu.recovery_action)
    if isinstance(action, int) and action != 0:
        name = _RECOVERY_ACTIONS.get(action, f"action_{action}")
        fix = _remedy(_RECOVERY_REMEDY.get(name, ""), pci)
        add(Status.CRITICAL, "GPU_RECOVERY_ACTION", f"the driver asks for recovery action {name}", action=name, **fix)

    _judge_vbios(gpu, settings, add)
    return out, judge_counters(gpu, settings, old if isinstance(old, dict) else {}, now, add)


def _judge_handle(error: NvmlError, add: Add) -> None:
    """A GPU NVML could not open: one finding for the whole GPU, whatever the error.

    Every reading of it carries the same error, so judged field by field an ordinary
    code (INVALID_ARGUMENT, NOT_FOUND: "not offered") would make it look healthy.
    """
    if error.code in _GPU_FATAL:
        code, message = _GPU_FATAL[error.code]
        add(
            Status.CRITICAL,
            code,
            f"{message}; NVML cannot open it",
            nvml_error=error.code,
            **_remedy(_REMEDY.get(error.code, ""), None),
        )
        return
    detail = f": {error.message}" if error.message else ""
    message = f"NVML cannot open the GPU (nvmlDeviceGetHandleByIndex: {error.code}{detail})"
    add(Status.UNKNOWN, "GPU_HANDLE_ERROR", message, nvml_error=error.code)


def _remedy(remedy: str, pci: object) -> dict[str, DetailValue]:
    """The ``remedy`` details of a finding: a reset names the GPU to reset by its PCI bus id."""
    if not remedy:
        return {}
    if remedy == "reset":
        return {"remedy": remedy, "pci": pci} if isinstance(pci, str) else {}
    return {"remedy": remedy}


def _errors(gpu: GpuReading) -> dict[str, str]:
    errors: dict[str, str] = {}
    for name in gpu.__dataclass_fields__:
        # The serial is identity for the inventory, not health: many boards have none to give.
        # The fabric registration is the nvlink check's to judge; the VBIOS is judged only
        # when one is expected (_judge_vbios); a handle error is judged before any reading.
        if name in ("serial", "fabric", "vbios_version", "handle_error"):
            continue
        value = getattr(gpu, name)
        if isinstance(value, NvmlError):
            errors[name] = value.code
        elif name == "nvlinks":
            for link in value:
                # Whether a link is up is the nvlink check's to judge (NVLINK_DOWN).
                for link_field in NVLINK_COUNTERS:
                    link_value = getattr(link, link_field)
                    if isinstance(link_value, NvmlError):
                        errors[f"nvlink{link.link}.{link_field}"] = link_value.code
    return errors


def _judge_memory(gpu: GpuReading, settings: GpuSettings, add: Add) -> None:
    if settings.expect_ecc and _value(gpu.ecc_mode_current) is False:
        add(Status.WARNING, "ECC_DISABLED", "ECC is disabled", ecc_pending=_value(gpu.ecc_mode_pending))
    volatile = _value(gpu.ecc_volatile_uncorrected)
    if isinstance(volatile, int) and volatile > 0:
        # Not a kill: on Ampere and later an uncorrectable error is contained to the process
        # that hit it (Xid 94, RESTART_APP in NVIDIA's Xid catalog) and its page is blocked
        # dynamically; an uncontained one is Xid 95 or 48 (RESET_GPU, WORKFLOW_XID_48), which
        # the xid check grades CRITICAL. The count holds until the driver reloads or the GPU
        # resets, so the node drains after its jobs and stays out until then.
        add(
            Status.WARNING,
            "ECC_UNCORRECTED",
            f"{volatile} uncorrectable ECC error(s) since the driver loaded",
            count=volatile,
        )
    for kind, reading, limit in (
        ("corrected", gpu.ecc_aggregate_corrected, settings.ecc_aggregate_corrected_max),
        ("uncorrected", gpu.ecc_aggregate_uncorrected, settings.ecc_aggregate_uncorrected_max),
    ):
        total = _value(reading)
        if limit is not None and isinstance(total, int) and total > limit:
            add(
                Status.WARNING,
                f"ECC_AGGREGATE_{kind.upper()}",
                f"{total} lifetime {kind} ECC errors (limit {limit})",
                count=total,
                limit=limit,
            )
    if _value(gpu.retired_pages_pending) is True:
        add(Status.CRITICAL, "RETIRED_PAGES_PENDING", "a retired page is pending: the GPU needs a reset or reboot")
    sbe, dbe = _value(gpu.retired_pages_sbe), _value(gpu.retired_pages_dbe)
    if isinstance(sbe, int) and isinstance(dbe, int) and sbe + dbe >= settings.retired_pages_max:
        add(
            Status.WARNING,
            "RETIRED_PAGES_LIMIT",
            f"{sbe + dbe} retired pages (limit {settings.retired_pages_max})",
            sbe=sbe,
            dbe=dbe,
        )
    rows = _value(gpu.remapped_rows)
    if rows is not None:
        counts: dict[str, DetailValue] = {"rows_corrected": rows.corrected, "rows_uncorrected": rows.uncorrected}
        if rows.failure:
            add(Status.CRITICAL, "ROW_REMAP_FAILED", "a memory row remap failed: the GPU needs replacement", **counts)
        if rows.pending:
            # NVML (nvmlDeviceGetRemappedRows): "A pending remapping won't affect future work
            # on the GPU since error-containment and dynamic page blacklisting will take care
            # of that"; NVIDIA's A100 memory error management guide: running applications
            # that were not affected continue and new ones may start. So the node drains
            # after its jobs, and the reset applies the remap.
            fix = _remedy("reset", _value(gpu.pci_bus_id))
            message = "a memory row remap is pending: the GPU needs a reset once its jobs end"
            add(Status.WARNING, "ROW_REMAP_PENDING", message, **counts, **fix)


def _judge_pcie(gpu: GpuReading, settings: GpuSettings, add: Add) -> None:
    width, width_max = _value(gpu.pcie_width_current), _value(gpu.pcie_width_max)
    if isinstance(width, int) and isinstance(width_max, int) and width < width_max:
        add(
            Status.CRITICAL,
            "PCIE_WIDTH_DEGRADED",
            f"PCIe link is x{width} of x{width_max}",
            width=width,
            width_max=width_max,
        )
    gen, gen_max = _value(gpu.pcie_gen_current), _value(gpu.pcie_gen_max)
    busy = _value(gpu.utilization_gpu)
    # Idle GPUs lower their link generation on purpose to save power; only a busy GPU
    # running below its maximum generation is degraded.
    if (
        isinstance(gen, int)
        and isinstance(gen_max, int)
        and gen < gen_max
        and isinstance(busy, int)
        and busy >= settings.busy_utilization_percent
    ):
        add(
            Status.WARNING,
            "PCIE_GEN_DEGRADED",
            f"PCIe link is Gen{gen} of Gen{gen_max} while {busy}% busy",
            gen=gen,
            gen_max=gen_max,
            utilization=busy,
        )


def _judge_vbios(gpu: GpuReading, settings: GpuSettings, add: Add) -> None:
    """The board's VBIOS against ``expect_vbios``: another version is a WARNING, as the host check grades a driver's."""
    if not settings.expect_vbios:
        return
    version = gpu.vbios_version
    if isinstance(version, NvmlError):
        if version.code not in _GPU_FATAL:  # a lost GPU is reported as such, not as an unread version
            add(Status.UNKNOWN, "VBIOS_UNREADABLE", f"cannot read the VBIOS version: NVML {version.code}")
    elif version not in settings.expect_vbios:
        message = f"VBIOS version {version}, expected {' or '.join(settings.expect_vbios)}"
        add(Status.WARNING, "VBIOS_VERSION", message, found=version)


# ---------------------------------------------------------------------------------------
# Gathering.


def source_for(settings: GpuSettings) -> GpuSource:
    """The snapshot when ``[checks.gpu] snapshot`` is set, else the real NVML library."""
    if settings.snapshot is None:
        return NvmlLibrary()
    # Imported only to replay: reading a snapshot validates it with pydantic, NVML itself never does.
    from ..nvml.snapshot import SnapshotFile

    return SnapshotFile(settings.snapshot)


class GpuObservation(NamedTuple):
    """NVML's reading (or why the snapshot is unusable), the PCI bus, and the last pass's baselines."""

    pci: PciScan
    reading: Union[NodeReading, Unobserved]
    previous: Mapping[str, Any] = MappingProxyType({})


def gather(ctx: CheckContext[GpuSettings]) -> GpuObservation:
    pci = scan_pci(ctx.paths.sysfs, frozenset({VENDOR_NVIDIA}))
    settings = ctx.settings
    wanted = settings.expect_gpus or settings.min_gpus
    if pci.present and not pci.errors and not pci.nvidia_gpus and not wanted and not settings.snapshot:
        # Loading NVML costs a cold pass more than the rest of this check; with no NVIDIA
        # GPU on a readable PCI bus and none expected, its answer could not change the verdict.
        raise NotApplicable("no NVIDIA GPUs on the PCI bus and none expected (NVML not loaded)")
    try:
        reading = source_for(ctx.settings).read()
    except SnapshotError as exc:
        return GpuObservation(pci, Unobserved("NVML_SNAPSHOT_INVALID", "nvml", str(exc)))
    return GpuObservation(pci, reading, previous=ctx.state.load())


def judge(observed: GpuObservation, jc: JudgeContext[GpuSettings]) -> Verdict:
    if isinstance(observed.reading, Unobserved):
        return Verdict((observed.reading.finding(jc),))
    settings = jc.settings
    return evaluate(
        observed.reading, observed.pci, settings.expect_gpus, settings, observed.previous, jc.now, jc.finding
    )


def baseline(ctx: CheckContext[GpuSettings]) -> dict[str, Any]:
    """The GPUs NVML sees: their count, their model when they share one, and their VBIOS versions."""
    observed = gather(ctx)
    reading = observed.reading
    if isinstance(reading, Unobserved):
        raise OSError(reading.message)
    if reading.init_error is not None:
        if observed.pci.nvidia_gpus:
            raise OSError(f"NVML cannot be used ({reading.init_error.code}) but GPUs are on the PCI bus")
        raise NotApplicable(f"no NVIDIA driver ({reading.init_error.code}) and no GPU on the PCI bus")
    found: dict[str, Any] = {"expect_gpus": len(reading.gpus)}
    models = {_value(gpu.name) for gpu in reading.gpus}
    if len(models) == 1 and isinstance(next(iter(models)), str):
        found["expect_model"] = next(iter(models))
    versions = {gpu.vbios_version for gpu in reading.gpus}
    if versions and all(isinstance(version, str) for version in versions):
        found["expect_vbios"] = sorted(str(version) for version in versions)
    return found


CHECK = CheckSpec(
    name="gpu",
    description="GPUs through NVML: count, lost GPUs, ECC, row remaps, PCIe link, clocks, NVLink errors, VBIOS",
    settings="healthd_checks.gpu.settings:GpuSettings",
    baseline=baseline,
    run=Staged(gather, judge, keeps="counter baselines"),
    # One GPU's (or its PCIe link's) own fault; NVML and driver trouble, a clock slowed by
    # a power brake or the room's heat, and expectations of the node (model, VBIOS, ECC mode)
    # are not (docs/escalation.md).
    hardware=frozenset(
        {
            "ECC_UNCORRECTED",
            "GPU_INSUFFICIENT_POWER",
            "GPU_LOST",
            "GPU_MISSING",
            "GPU_RECOVERY_ACTION",
            "GPU_RESET_REQUIRED",
            "NVLINK_CRC_RATE",
            "NVLINK_ERRORS_RISING",
            "PCIE_GEN_DEGRADED",
            "PCIE_REPLAY_RATE",
            "PCIE_WIDTH_DEGRADED",
            "RETIRED_PAGES_LIMIT",
            "RETIRED_PAGES_PENDING",
            "ROW_REMAP_FAILED",
            "ROW_REMAP_PENDING",
        }
    ),
)
