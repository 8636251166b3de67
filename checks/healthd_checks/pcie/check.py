"""The ``pcie`` check: link width and speed against what the link can do, and AER error counters by their change.

``gather`` reads ``bus/pci/devices/<address>/`` under ``[paths].sysfs`` (kernel ABI:
Documentation/ABI/testing/sysfs-bus-pci and sysfs-bus-pci-devices-aer_stats), the
boot id and the last pass's AER totals; ``judge`` compares them. By default it looks
at NVIDIA GPUs (display class) and NVIDIA/Mellanox network controllers, which on a
GPU node are the parts whose links matter. A link can train no wider or faster than
both of its ends, so the current width and speed are compared with the lower of the
device's maximum and its upstream port's. AER totals persist per boot
(``healthd.checks.counters.BootScoped``) so only increases between passes count.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional, TypeVar, Union

from healthd.checks.counters import BootScoped, rise
from healthd.checks.plugin import CheckSpec, NotApplicable, Staged, Unobserved, Verdict
from healthd.model import Finding, Status

from ..common.sysfs import (
    VENDOR_MELLANOX,
    VENDOR_NVIDIA,
    PciFunction,
    SysfsError,
    SysfsMissing,
    boot_id_or_none,
    normalize_pci_address,
    parse_aer_counts,
    parse_pcie_speed,
    parse_width,
    read,
    read_pci_function,
    scan_pci,
)

# (file, label, total line, severity, code): a fatal error may have taken the link or
# the device down; a non-fatal one was recovered by the hardware but cost a transaction.
AER_KINDS = (
    ("aer_dev_fatal", "fatal", "TOTAL_ERR_FATAL", Status.CRITICAL, "PCIE_AER_FATAL"),
    ("aer_dev_nonfatal", "non-fatal", "TOTAL_ERR_NONFATAL", Status.WARNING, "PCIE_AER_NONFATAL"),
)

_AER_FILES = frozenset(kind[0] for kind in AER_KINDS)
# AER counters restart at boot: totals from an earlier boot are no baseline.
_STATE = BootScoped("devices", version=1)
_VENDORS = frozenset({VENDOR_NVIDIA, VENDOR_MELLANOX})

if TYPE_CHECKING:
    from healthd.checks.plugin import CheckContext, JudgeContext

    from .settings import PcieSettings


N = TypeVar("N", int, float)


class LinkEnd(NamedTuple):
    """The most one end of a link can do; ``None`` where absent, unreadable or ``Unknown``."""

    width: Optional[int] = None
    speed: Optional[float] = None


class DeviceReading(NamedTuple):
    """What one device's sysfs directory (and its upstream port's) said."""

    address: str
    is_gpu: bool
    current_width: Optional[int]
    current_speed: Optional[float]
    device_max: LinkEnd
    port: Optional[str]
    port_max: LinkEnd
    aer: Mapping[str, Mapping[str, int]]
    errors: tuple[SysfsError, ...]

    @property
    def max_width(self) -> Optional[int]:
        return _lowest(self.device_max.width, self.port_max.width)

    @property
    def max_speed(self) -> Optional[float]:
        return _lowest(self.device_max.speed, self.port_max.speed)


def _lowest(device: Optional[N], port: Optional[N]) -> Optional[N]:
    """The link's maximum: the lower end's, or the device's when the port's is unknown."""
    if device is None or port is None:
        return device
    return min(device, port)


def _aer_parser(total: str) -> Callable[[str], dict[str, int]]:
    def parse(text: str) -> dict[str, int]:
        counts = parse_aer_counts(text)
        if total not in counts:
            raise ValueError(f"no {total} line")
        return counts

    return parse


def upstream_port(device: Path) -> Optional[Path]:
    """The bridge (root or switch downstream port) the device hangs from, when sysfs shows one.

    ``bus/pci/devices/X`` is a link into ``devices/pci<domain>:<bus>/.../<port>/X``: the
    parent of the resolved directory is the upstream port, or the root bus directory
    (``pci0000:00``), which has no link of its own, for a root-complex integrated device.
    """
    try:
        parent = device.resolve().parent
    except (OSError, RuntimeError):
        return None
    return parent if normalize_pci_address(parent.name) is not None else None


def read_device(function: PciFunction) -> DeviceReading:
    """Read one device; a missing attribute is skipped (not every device has a PCIe link or AER)."""
    errors: list[SysfsError] = []

    def attempt(path: Path, parse: Callable[[str], Any]) -> Any:
        try:
            return read(path, parse)
        except SysfsMissing:
            return None
        except SysfsError as exc:
            errors.append(exc)
            return None

    directory = function.path
    aer = {}
    for filename, _label, total, _status, _code in AER_KINDS:
        counts = attempt(directory / filename, _aer_parser(total))
        if counts is not None:
            aer[filename] = counts
    port = upstream_port(directory)
    port_max = LinkEnd()
    if port is not None:
        port_max = LinkEnd(
            attempt(port / "max_link_width", parse_width), attempt(port / "max_link_speed", parse_pcie_speed)
        )
    return DeviceReading(
        address=function.address,
        is_gpu=function.is_nvidia_gpu,
        current_width=attempt(directory / "current_link_width", parse_width),
        current_speed=attempt(directory / "current_link_speed", parse_pcie_speed),
        device_max=LinkEnd(
            attempt(directory / "max_link_width", parse_width), attempt(directory / "max_link_speed", parse_pcie_speed)
        ),
        port=port.name if port is not None else None,
        port_max=port_max,
        aer=aer,
        errors=tuple(errors),
    )


def judge_link(jc: JudgeContext[PcieSettings], reading: DeviceReading) -> Iterator[Finding]:
    """Width below the link's maximum is CRITICAL; speed below it is a WARNING, except on GPUs.

    The link's maximum is the lower of the device's and its upstream port's: a Gen5 NIC
    in a Gen4 slot, or an x16 card in an x8 slot, runs as fast as it can.
    """
    address = reading.address
    for error in reading.errors:
        yield _unreadable(address, error).finding(jc)
    limits: dict[str, Any] = {"upstream_port": reading.port}
    width, max_width = reading.current_width, reading.max_width
    if width is not None and max_width is not None and width < max_width:
        yield jc.finding(
            Status.CRITICAL,
            "PCIE_WIDTH_DEGRADED",
            address,
            f"link runs at x{width} of x{max_width}",
            current_width=width,
            max_width=max_width,
            device_max_width=reading.device_max.width,
            port_max_width=reading.port_max.width,
            **limits,
        )
    # NVIDIA GPUs drop their link speed when idle on purpose (power saving), so a
    # low current speed says nothing at rest; the gpu check judges generation under load.
    if reading.is_gpu:
        return
    speed, max_speed = reading.current_speed, reading.max_speed
    if speed is not None and max_speed is not None and speed < max_speed:
        yield jc.finding(
            Status.WARNING,
            "PCIE_SPEED_DEGRADED",
            address,
            f"link runs at {speed:g} GT/s of {max_speed:g} GT/s",
            current_gts=speed,
            max_gts=max_speed,
            device_max_gts=reading.device_max.speed,
            port_max_gts=reading.port_max.speed,
            **limits,
        )


def judge_aer(
    jc: JudgeContext[PcieSettings], reading: DeviceReading, stored: Mapping[str, Any]
) -> tuple[list[Finding], dict[str, Any]]:
    """Compare AER totals with the last pass's; a lower total is a reset and a new baseline."""
    findings: list[Finding] = []
    for filename, label, total, status, code in AER_KINDS:
        counts = reading.aer.get(filename)
        previous = stored.get(filename)
        if counts is None or not isinstance(previous, dict):
            continue
        increase = rise(previous.get(total), counts[total])
        if not increase:
            continue
        rose = [name for name, value in counts.items() if name != total and rise(previous.get(name), value)]
        findings.append(
            jc.finding(
                status,
                code,
                reading.address,
                f"{increase} new {label} AER error(s) since the previous pass"
                + (f" ({', '.join(rose)})" if rose else ""),
                increase=increase,
                total=counts[total],
                errors=",".join(rose),
            )
        )
    # A file unreadable this pass keeps its old baseline rather than losing it.
    kept = {name: value for name, value in stored.items() if name in _AER_FILES and isinstance(value, dict)}
    kept.update((filename, dict(counts)) for filename, counts in reading.aer.items())
    return findings, kept


class DevicesObservation(NamedTuple):
    """The devices read, what kept configured ones from being read (in config order), and the last pass's state.

    An ``unjudged`` path is the sysfs directory of a configured device that is not on the PCI bus.
    """

    readings: tuple[DeviceReading, ...] = ()
    unjudged: tuple[Union[Unobserved, Path], ...] = ()
    boot_id: Optional[str] = None
    previous: Mapping[str, Any] = MappingProxyType({})


def _unreadable(subject: str, error: SysfsError) -> Unobserved:
    return Unobserved("PCIE_SYSFS_UNREADABLE", subject, str(error), {"file": str(error.path)})


def select_devices(settings: PcieSettings, sysfs: Path) -> tuple[list[PciFunction], list[Union[Unobserved, Path]]]:
    """The functions to judge, and what kept configured ones (or the scan) from being read.

    By default: NVIDIA GPUs and NVIDIA/Mellanox network controllers, not the other
    functions of those devices (a GPU's HD audio or USB-C function, an NVSwitch) and not
    SR-IOV virtual functions, whose link registers are reserved and read as width 0.
    """
    devices = sysfs / "bus" / "pci" / "devices"
    configured = settings.expect_devices
    if configured is None:
        scan = scan_pci(sysfs, _VENDORS)
        chosen = [f for f in scan.functions if (f.is_nvidia_gpu or f.is_fabric_nic) and not f.virtual]
        if not chosen and not scan.errors:
            raise NotApplicable(f"no NVIDIA GPUs or NVIDIA/Mellanox network controllers under {devices}")
        return chosen, [_unreadable(e.path.parent.name, e) for e in scan.errors]
    if not configured:
        raise NotApplicable("[checks.pcie] expect_devices is empty")
    functions: list[PciFunction] = []
    unjudged: list[Union[Unobserved, Path]] = []
    for text in configured:
        address = normalize_pci_address(text)
        if address is None:
            message = f"[checks.pcie] expect_devices entry {text!r} is not a PCI address like 0000:3a:00.0"
            unjudged.append(Unobserved("PCIE_BAD_ADDRESS", text, message))
        elif not (devices / address).is_dir():
            unjudged.append(devices / address)
        elif all(function.address != address for function in functions):
            try:
                function = read_pci_function(devices / address)
            except SysfsError as exc:
                unjudged.append(_unreadable(address, exc))
                continue
            if function is not None:
                functions.append(function)
    return functions, unjudged


def gather(ctx: CheckContext[PcieSettings]) -> DevicesObservation:
    functions, unjudged = select_devices(ctx.settings, ctx.paths.sysfs)
    readings = tuple(read_device(function) for function in functions)
    return DevicesObservation(readings, tuple(unjudged), boot_id_or_none(ctx.paths.procfs), ctx.state.load())


def judge(observed: DevicesObservation, jc: JudgeContext[PcieSettings]) -> Verdict:
    findings = []
    for item in observed.unjudged:
        if isinstance(item, Path):
            message = f"configured device is not on the PCI bus ({item})"
            findings.append(jc.finding(Status.CRITICAL, "PCIE_DEVICE_MISSING", item.name, message))
        else:
            findings.append(item.finding(jc))
    for reading in observed.readings:
        findings.extend(judge_link(jc, reading))
    devices = ((reading.address, reading) for reading in observed.readings)
    aer, state = _STATE.judge_each(
        observed.previous, observed.boot_id, jc.now, devices, lambda reading, stored: judge_aer(jc, reading, stored)
    )
    return Verdict((*findings, *aer), state)


CHECK = CheckSpec(
    name="pcie",
    description="PCIe links of GPUs and NICs: width and speed against the link's maximum, AER errors by their change",
    settings="healthd_checks.pcie.settings:PcieSettings",
    run=Staged(gather, judge, keeps="AER baselines"),
    # A link's (or its device's) own state and errors; an address in the config that names
    # no device is a configuration error.
    hardware=frozenset(
        {"PCIE_AER_FATAL", "PCIE_AER_NONFATAL", "PCIE_DEVICE_MISSING", "PCIE_SPEED_DEGRADED", "PCIE_WIDTH_DEGRADED"}
    ),
)
