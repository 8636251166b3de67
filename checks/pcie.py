"""The ``pcie`` check: link width and speed against their maximum, and AER error counters by their change.

Reads ``bus/pci/devices/<address>/`` under ``[paths].sysfs`` (kernel ABI:
Documentation/ABI/testing/sysfs-bus-pci and sysfs-bus-pci-devices-aer_stats).
By default it looks at every NVIDIA device and every NVIDIA/Mellanox network
controller, which on a GPU node are the parts whose links matter. AER totals
persist in ``ctx.state`` so only increases between passes count.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from healthd.model import Finding, Status
from healthd.plugin import CheckContext, CheckSettings, CheckSpec, NotApplicable
from healthd.state import StateError

from .sysfs import (
    SysfsError,
    SysfsMissing,
    parse_aer_counts,
    parse_hex,
    parse_pcie_speed,
    parse_width,
    read,
    read_boot_id,
)

VENDOR_NVIDIA = 0x10DE
VENDOR_MELLANOX = 0x15B3
# PCI class codes (PCI Code and ID Assignment spec): base class 0x03 display, 0x02 network.
BASE_CLASS_DISPLAY = 0x03
BASE_CLASS_NETWORK = 0x02

# (file, label, total line, severity, code): a fatal error may have taken the link or
# the device down; a non-fatal one was recovered by the hardware but cost a transaction.
AER_KINDS = (
    ("aer_dev_fatal", "fatal", "TOTAL_ERR_FATAL", Status.CRITICAL, "PCIE_AER_FATAL"),
    ("aer_dev_nonfatal", "non-fatal", "TOTAL_ERR_NONFATAL", Status.WARNING, "PCIE_AER_NONFATAL"),
)

_AER_FILES = frozenset(kind[0] for kind in AER_KINDS)
_STATE_VERSION = 1
_ADDRESS = re.compile(r"(?:([0-9a-f]{4}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])")


@dataclass(frozen=True)
class DeviceReading:
    """What one device's sysfs directory said; ``None`` where absent, unreadable or ``Unknown``."""

    address: str
    vendor: Optional[int]
    pci_class: Optional[int]
    current_width: Optional[int]
    max_width: Optional[int]
    current_speed: Optional[float]
    max_speed: Optional[float]
    aer: Mapping[str, Mapping[str, int]]
    errors: tuple[SysfsError, ...]

    @property
    def is_gpu(self) -> Optional[bool]:
        if self.vendor is None or self.pci_class is None:
            return None
        return self.vendor == VENDOR_NVIDIA and self.pci_class >> 16 == BASE_CLASS_DISPLAY


def normalize_address(text: str) -> Optional[str]:
    """``0000:3a:00.0`` in lower case; a missing domain means 0000; ``None`` if not an address."""
    match = _ADDRESS.fullmatch(text.strip().lower())
    if not match:
        return None
    domain, bus, device, function = match.groups()
    return f"{domain or '0000'}:{bus}:{device}.{function}"


def _aer_parser(total: str) -> Callable[[str], dict[str, int]]:
    def parse(text: str) -> dict[str, int]:
        counts = parse_aer_counts(text)
        if total not in counts:
            raise ValueError(f"no {total} line")
        return counts

    return parse


def read_device(directory: Path) -> DeviceReading:
    """Read one device; a missing attribute is skipped (not every device has a PCIe link or AER)."""
    errors: list[SysfsError] = []

    def attempt(name: str, parse: Callable[[str], Any]) -> Any:
        try:
            return read(directory / name, parse)
        except SysfsMissing:
            return None
        except SysfsError as exc:
            errors.append(exc)
            return None

    aer = {}
    for filename, _label, total, _status, _code in AER_KINDS:
        counts = attempt(filename, _aer_parser(total))
        if counts is not None:
            aer[filename] = counts
    return DeviceReading(
        address=directory.name,
        vendor=attempt("vendor", parse_hex),
        pci_class=attempt("class", parse_hex),
        current_width=attempt("current_link_width", parse_width),
        max_width=attempt("max_link_width", parse_width),
        current_speed=attempt("current_link_speed", parse_pcie_speed),
        max_speed=attempt("max_link_speed", parse_pcie_speed),
        aer=aer,
        errors=tuple(errors),
    )


def discover_devices(devices: Path) -> tuple[list[Path], list[SysfsError]]:
    """Physical functions of NVIDIA devices and NVIDIA/Mellanox network controllers.

    Virtual functions (those with a ``physfn`` link) are skipped: their link
    registers are reserved and read as width 0, which would look like a dead link.
    """
    try:
        entries = sorted(devices.iterdir(), key=lambda p: p.name)
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [SysfsError(devices, f"cannot list: {exc.strerror or exc}")]
    chosen: list[Path] = []
    errors: list[SysfsError] = []
    for entry in entries:
        try:
            vendor = read(entry / "vendor", parse_hex)
            if vendor == VENDOR_MELLANOX and read(entry / "class", parse_hex) >> 16 != BASE_CLASS_NETWORK:
                continue
        except SysfsMissing:
            continue
        except SysfsError as exc:
            errors.append(exc)
            continue
        if vendor in (VENDOR_NVIDIA, VENDOR_MELLANOX) and not (entry / "physfn").exists():
            chosen.append(entry)
    return chosen, errors


def judge_link(ctx: CheckContext[CheckSettings], reading: DeviceReading) -> Iterator[Finding]:
    """Width below maximum is CRITICAL; speed below maximum is a WARNING, except on GPUs."""
    address = reading.address
    for error in reading.errors:
        yield ctx.finding(Status.UNKNOWN, "PCIE_SYSFS_UNREADABLE", address, str(error), file=str(error.path))
    if (
        reading.current_width is not None
        and reading.max_width is not None
        and reading.current_width < reading.max_width
    ):
        yield ctx.finding(
            Status.CRITICAL,
            "PCIE_WIDTH_DEGRADED",
            address,
            f"link runs at x{reading.current_width} of x{reading.max_width}",
            current_width=reading.current_width,
            max_width=reading.max_width,
        )
    # NVIDIA GPUs drop their link speed when idle on purpose (power saving), so a
    # low current speed says nothing at rest; the gpu check judges generation under load.
    if reading.is_gpu is not False:
        return
    if (
        reading.current_speed is not None
        and reading.max_speed is not None
        and reading.current_speed < reading.max_speed
    ):
        yield ctx.finding(
            Status.WARNING,
            "PCIE_SPEED_DEGRADED",
            address,
            f"link runs at {reading.current_speed:g} GT/s of {reading.max_speed:g} GT/s",
            current_gts=reading.current_speed,
            max_gts=reading.max_speed,
        )


def judge_aer(
    ctx: CheckContext[CheckSettings], reading: DeviceReading, stored: Mapping[str, Any]
) -> tuple[list[Finding], dict[str, Any]]:
    """Compare AER totals with the last pass's; a lower total is a reset and a new baseline."""
    findings: list[Finding] = []
    for filename, label, total, status, code in AER_KINDS:
        counts = reading.aer.get(filename)
        previous = stored.get(filename)
        if counts is None or not isinstance(previous, dict):
            continue
        before = previous.get(total)
        if not isinstance(before, int) or isinstance(before, bool) or counts[total] <= before:
            continue
        rose = [
            name
            for name, value in counts.items()
            if name != total and isinstance(previous.get(name), int) and value > previous[name]
        ]
        findings.append(
            ctx.finding(
                status,
                code,
                reading.address,
                f"{counts[total] - before} new {label} AER error(s) since the previous pass"
                + (f" ({', '.join(rose)})" if rose else ""),
                increase=counts[total] - before,
                total=counts[total],
                errors=",".join(rose),
            )
        )
    # A file unreadable this pass keeps its old baseline rather than losing it.
    kept = {name: value for name, value in stored.items() if name in _AER_FILES and isinstance(value, dict)}
    kept.update((filename, dict(counts)) for filename, counts in reading.aer.items())
    return findings, kept


def _mapping(raw: Any) -> dict[str, Any]:
    """A stored JSON object, or empty when the state holds something else."""
    return raw if isinstance(raw, dict) else {}


def select_devices(ctx: CheckContext[CheckSettings], devices: Path) -> tuple[list[Path], list[Finding]]:
    """The device directories to judge, with findings for configured devices that are absent or malformed."""
    configured = ctx.node.pcie_devices
    if configured is None:
        directories, errors = discover_devices(devices)
        if not directories and not errors:
            raise NotApplicable(f"no NVIDIA devices or NVIDIA/Mellanox NICs under {devices}")
        return directories, [
            ctx.finding(Status.UNKNOWN, "PCIE_SYSFS_UNREADABLE", e.path.parent.name, str(e), file=str(e.path))
            for e in errors
        ]
    if not configured:
        raise NotApplicable("[node].pcie_devices is empty")
    directories = []
    findings = []
    for text in configured:
        address = normalize_address(text)
        if address is None:
            message = f"[node].pcie_devices entry {text!r} is not a PCI address like 0000:3a:00.0"
            findings.append(ctx.finding(Status.UNKNOWN, "PCIE_BAD_ADDRESS", text, message))
        elif (devices / address).is_dir():
            if devices / address not in directories:
                directories.append(devices / address)
        else:
            message = f"configured device is not on the PCI bus ({devices / address})"
            findings.append(ctx.finding(Status.CRITICAL, "PCIE_DEVICE_MISSING", address, message))
    return directories, findings


def run(ctx: CheckContext[CheckSettings]) -> list[Finding]:
    directories, findings = select_devices(ctx, ctx.paths.sysfs / "bus" / "pci" / "devices")
    readings = [read_device(directory) for directory in directories]
    for reading in readings:
        findings.extend(judge_link(ctx, reading))

    stored = ctx.state.load()
    boot = read_boot_id(ctx.paths.procfs)
    # AER counters restart at boot: totals from an earlier boot are no baseline.
    same_boot = boot is None or stored.get("boot_id") in (None, boot)
    old_devices = _mapping(stored.get("devices")) if same_boot else {}
    new_devices: dict[str, Any] = {}
    for reading in readings:
        aer_findings, new_devices[reading.address] = judge_aer(ctx, reading, _mapping(old_devices.get(reading.address)))
        findings.extend(aer_findings)
    try:
        ctx.state.save({"version": _STATE_VERSION, "boot_id": boot, "devices": new_devices})
    except StateError as exc:
        findings.append(ctx.finding(Status.UNKNOWN, "PCIE_STATE_UNSAVED", "pcie", f"AER baselines not kept: {exc}"))
    return findings


CHECK = CheckSpec(
    name="pcie",
    description="PCIe links of GPUs and NICs: width and speed against their maximum, AER errors by their change",
    settings=CheckSettings,
    run=run,
)
