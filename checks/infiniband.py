"""The ``infiniband`` check: port state, rate and link layer, and error counters judged by their change.

Reads ``class/infiniband/<dev>/ports/<n>/`` under ``[paths].sysfs`` (kernel ABI:
Documentation/ABI/stable/sysfs-class-infiniband). Link state is judged from one
reading; error counters only from their change between passes, because on HDR/NDR
links raw symbol errors are never zero and counters restart at every reboot.
Counter samples, link-down events and the flapping flag persist in ``ctx.state``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field

from healthd.model import Finding, Status
from healthd.plugin import CheckContext, CheckSettings, CheckSpec, NotApplicable

from .sysfs import (
    IbRate,
    NumberedState,
    SysfsError,
    SysfsMissing,
    parse_counter,
    parse_ib_rate,
    parse_numbered_state,
    parse_word,
    read,
    read_boot_id,
)

# IBA PortCounters widths: narrow counters stop at their maximum instead of wrapping,
# after which increases can no longer be seen until the counter is cleared.
COUNTER_BITS: Mapping[str, int] = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
}

# Port state 4 is ACTIVE and physical state 5 is LinkUp (IBA PortInfo; the kernel
# prints the number first, e.g. "4: ACTIVE").
STATE_ACTIVE = 4
PHYS_LINK_UP = 5

_STATE_VERSION = 1
# A port not seen for this long (removed card, renamed device) is forgotten.
_FORGET_SECONDS = 7 * 86400.0


class PerHourLimits(BaseModel):
    """Most increases per hour tolerated before a WARNING; 0 means any increase warns."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # NVIDIA's NIC health monitor design treats symbol errors above 120 per hour as fatal.
    symbol_error: float = Field(default=120, ge=0)
    # infiniband-diags' example thresholds file uses 10 for LinkErrorRecoveryCounter.
    link_error_recovery: float = Field(default=10, ge=0)
    # Our choice, in line with the infiniband-diags example thresholds (10 per counter).
    port_rcv_errors: float = Field(default=10, ge=0)
    # NVIDIA's NIC health monitor design treats any increase of these two as fatal.
    local_link_integrity_errors: float = Field(default=0, ge=0)
    excessive_buffer_overrun_errors: float = Field(default=0, ge=0)


class InfinibandSettings(CheckSettings):
    """``[checks.infiniband]``: counter limits, the rate window and the flapping rule."""

    per_hour: PerHourLimits = Field(default_factory=PerHourLimits)
    rate_window: float = Field(
        default=3600.0, ge=60, le=7 * 86400, description="seconds of counter history a rate is judged over"
    )
    # Azure's node health agent errors when link_downed rises by more than 3 in 3 hours.
    flap_downs: int = Field(default=4, ge=1, le=255, description="link_downed increments that make a port flapping")
    flap_window: float = Field(default=3 * 3600.0, ge=60, le=7 * 86400, description="seconds the flap count spans")


@dataclass(frozen=True)
class PortReading:
    """Everything read from one port; ``None`` where the file could not be read or parsed."""

    port: str
    state: Optional[NumberedState]
    phys_state: Optional[NumberedState]
    rate: Optional[IbRate]
    link_layer: Optional[str]
    counters: Mapping[str, int]
    unavailable: tuple[str, ...]
    errors: tuple[SysfsError, ...]

    @property
    def up(self) -> Optional[bool]:
        """True when ACTIVE and LinkUp, False when either says otherwise, None when unsure."""
        if (self.state is not None and self.state.number != STATE_ACTIVE) or (
            self.phys_state is not None and self.phys_state.number != PHYS_LINK_UP
        ):
            return False
        if self.state is None or self.phys_state is None:
            return None
        return True


def _natural_key(name: str) -> tuple[Any, ...]:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def _list_dir(path: Path) -> list[Path]:
    try:
        return sorted((p for p in path.iterdir() if p.is_dir()), key=lambda p: _natural_key(p.name))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SysfsError(path, f"cannot list: {exc.strerror or exc}") from None


def discover_ports(root: Path) -> list[str]:
    """Every ``DEV:PORT`` under ``class/infiniband``, in natural order (mlx5_2 before mlx5_10)."""
    ports = []
    for device in _list_dir(root):
        for port in _list_dir(device / "ports"):
            if port.name.isdigit():
                ports.append(f"{device.name}:{port.name}")
    return ports


def port_dir(root: Path, port: str) -> Path:
    device, _, number = port.partition(":")
    return root / device / "ports" / number


def read_port(root: Path, port: str) -> PortReading:
    """Read one port's attributes and counters; every problem is kept, never raised."""
    base = port_dir(root, port)
    errors: list[SysfsError] = []

    def attempt(name: str, parse: Any) -> Any:
        try:
            return read(base / name, parse)
        except SysfsError as exc:
            errors.append(exc)
            return None

    state = attempt("state", parse_numbered_state)
    phys_state = attempt("phys_state", parse_numbered_state)
    rate = attempt("rate", parse_ib_rate)
    link_layer = attempt("link_layer", parse_word)
    counters: dict[str, int] = {}
    unavailable: list[str] = []
    for name in COUNTER_BITS:
        try:
            value = read(base / "counters" / name, parse_counter)
        except SysfsMissing:
            value = None
        except SysfsError as exc:
            errors.append(exc)
            continue
        if value is None:
            unavailable.append(name)
        else:
            counters[name] = value
    return PortReading(port, state, phys_state, rate, link_layer, counters, tuple(unavailable), tuple(errors))


def _gbps(rate: IbRate) -> str:
    return f"{rate.gbps:g} Gb/sec ({rate.lanes}X{' ' + rate.speed if rate.speed else ''})"


def judge_link(
    ctx: CheckContext[InfinibandSettings], reading: PortReading, fastest: Mapping[Optional[str], float]
) -> Iterator[Finding]:
    """State, link layer and rate of one port; ``fastest`` is the best up rate per link layer."""
    port = reading.port
    for error in reading.errors:
        yield ctx.finding(Status.UNKNOWN, "IB_SYSFS_UNREADABLE", port, str(error), file=str(error.path))
    if reading.up is False:
        state = reading.state.name if reading.state else "?"
        phys = reading.phys_state.name if reading.phys_state else "?"
        yield ctx.finding(
            Status.CRITICAL,
            "IB_PORT_DOWN",
            port,
            f"port is {state}/{phys}, expected ACTIVE/LinkUp",
            state=state,
            phys_state=phys,
        )
    expected_layer = ctx.node.ib_link_layer
    if expected_layer is not None and reading.link_layer is not None and reading.link_layer != expected_layer:
        yield ctx.finding(
            Status.CRITICAL,
            "IB_LINK_LAYER",
            port,
            f"link layer is {reading.link_layer}, expected {expected_layer}",
            link_layer=reading.link_layer,
            expected=expected_layer,
        )
    if reading.up is not True or reading.rate is None:
        return
    expected_rate = ctx.node.ib_rate_gbps
    if expected_rate is not None:
        if reading.rate.gbps != expected_rate:
            yield ctx.finding(
                Status.CRITICAL,
                "IB_RATE_MISMATCH",
                port,
                f"port runs at {_gbps(reading.rate)}, expected {expected_rate} Gb/sec",
                rate_gbps=reading.rate.gbps,
                expected_gbps=expected_rate,
            )
        return
    best = fastest.get(reading.link_layer, reading.rate.gbps)
    if reading.rate.gbps < best:
        yield ctx.finding(
            Status.WARNING,
            "IB_RATE_DEGRADED",
            port,
            f"port runs at {_gbps(reading.rate)}, slower than the {best:g} Gb/sec of other ports",
            rate_gbps=reading.rate.gbps,
            fastest_gbps=best,
        )


def fastest_rates(readings: list[PortReading]) -> dict[Optional[str], float]:
    """The highest rate among up ports, per link layer (an Ethernet NIC is not compared with IB)."""
    best: dict[Optional[str], float] = {}
    for reading in readings:
        if reading.up is True and reading.rate is not None:
            best[reading.link_layer] = max(best.get(reading.link_layer, 0.0), reading.rate.gbps)
    return best


def _mapping(raw: Any) -> dict[str, Any]:
    """A stored JSON object, or empty when the state holds something else."""
    return raw if isinstance(raw, dict) else {}


def _samples(raw: Any, now: float) -> list[tuple[float, int]]:
    """Stored ``[[time, value], ...]``; anything malformed or from the future is dropped."""
    if not isinstance(raw, list):
        return []
    samples = []
    for item in raw:
        if (
            isinstance(item, list)
            and len(item) == 2
            and isinstance(item[0], (int, float))
            and isinstance(item[1], int)
            and not isinstance(item[1], bool)
            and item[0] <= now
        ):
            samples.append((float(item[0]), item[1]))
    samples.sort()
    return samples


def _increase(samples: list[tuple[float, int]]) -> int:
    """Sum of rises between consecutive samples; a drop is a reset (reboot, clear) and starts a new baseline."""
    return sum(max(0, b[1] - a[1]) for a, b in zip(samples, samples[1:]))


def _trim(samples: list[tuple[float, int]], now: float, window: float) -> list[tuple[float, int]]:
    """Samples inside the window plus the newest one before it, so the history spans the whole window."""
    inside = [s for s in samples if s[0] >= now - window]
    before = [s for s in samples if s[0] < now - window]
    return before[-1:] + inside


def judge_counters(
    ctx: CheckContext[InfinibandSettings], reading: PortReading, stored: Mapping[str, Any], now: float
) -> tuple[list[Finding], dict[str, Any]]:
    """Judge one port's counters against its stored history; returns findings and the new history."""
    settings = ctx.settings
    port = reading.port
    findings: list[Finding] = []
    old_samples = _mapping(stored.get("samples"))
    new_samples: dict[str, list[list[float]]] = {}
    saturated: list[str] = []
    for name, bits in COUNTER_BITS.items():
        history = _samples(old_samples.get(name), now)
        value = reading.counters.get(name)
        if value is None:
            if history:
                new_samples[name] = [[t, v] for t, v in history]
            continue
        is_saturated = value >= 2**bits - 1
        if is_saturated:
            saturated.append(name)
        history = _trim([*history, (now, value)], now, settings.rate_window)
        new_samples[name] = [[t, v] for t, v in history]
        if name == "link_downed" or len(history) < 2:
            continue
        limit = getattr(settings.per_hour, name)
        rise = _increase(history)
        elapsed = now - history[0][0]
        per_hour = rise * 3600.0 / max(elapsed, settings.rate_window)
        if rise and per_hour > limit:
            findings.append(
                ctx.finding(
                    Status.WARNING,
                    "IB_COUNTER_RATE",
                    port,
                    f"{name} rose by {rise} in the last {elapsed / 60:.0f} min ({per_hour:.1f}/h, limit {limit:g}/h)",
                    counter=name,
                    increase=rise,
                    per_hour=round(per_hour, 3),
                    limit_per_hour=limit,
                    window_seconds=settings.rate_window,
                    saturated=is_saturated,
                )
            )
    downs_findings, downs_state = _judge_downs(ctx, reading, stored, _samples(old_samples.get("link_downed"), now), now)
    findings.extend(downs_findings)
    if reading.unavailable:
        findings.append(
            ctx.finding(
                Status.OK,
                "IB_COUNTERS_UNAVAILABLE",
                port,
                f"counters not offered by the device, not judged: {', '.join(reading.unavailable)}",
                counters=",".join(reading.unavailable),
            )
        )
    if saturated:
        findings.append(
            ctx.finding(
                Status.OK,
                "IB_COUNTER_SATURATED",
                port,
                f"counters stuck at their maximum, further increases are invisible until cleared: "
                f"{', '.join(saturated)}",
                counters=",".join(saturated),
            )
        )
    return findings, {"samples": new_samples, "seen": now, **downs_state}


def _judge_downs(
    ctx: CheckContext[InfinibandSettings],
    reading: PortReading,
    stored: Mapping[str, Any],
    previous: list[tuple[float, int]],
    now: float,
) -> tuple[list[Finding], dict[str, Any]]:
    """Any new link_downed increment is CRITICAL; enough of them in the window make the port flapping.

    Flapping stays CRITICAL until a whole window passes without a new increment.
    """
    settings = ctx.settings
    port = reading.port
    findings: list[Finding] = []
    events = [(t, n) for t, n in _samples(stored.get("downs"), now) if t > now - settings.flap_window and n > 0]
    value = reading.counters.get("link_downed")
    if value is not None and previous and value > previous[-1][1]:
        delta = value - previous[-1][1]
        events.append((now, delta))
        findings.append(
            ctx.finding(
                Status.CRITICAL,
                "IB_LINK_DOWNED",
                port,
                f"link went down {delta} time(s) since the previous pass (link_downed {previous[-1][1]} -> {value})",
                increase=delta,
                link_downed=value,
                saturated=value >= 2 ** COUNTER_BITS["link_downed"] - 1,
            )
        )
    count = sum(n for _, n in events)
    flapping = count >= settings.flap_downs or (stored.get("flapping") is True and bool(events))
    if flapping:
        hours = settings.flap_window / 3600
        findings.append(
            ctx.finding(
                Status.CRITICAL,
                "IB_LINK_FLAPPING",
                port,
                f"link went down {count} time(s) in the last {hours:g} h; "
                f"stays critical until {hours:g} h pass without a link drop",
                downs_in_window=count,
                window_seconds=settings.flap_window,
            )
        )
    return findings, {"downs": [[t, n] for t, n in events], "flapping": flapping}


def select_ports(ctx: CheckContext[InfinibandSettings], root: Path) -> tuple[list[PortReading], list[Finding]]:
    """The ports to judge, read: ``[node].ib_ports`` (a missing one is CRITICAL) or the default set.

    By default every port whose link layer is InfiniBand (``[node].ib_link_layer`` when
    set): the Ethernet ports of the same adapters (RoCE storage, management) are
    often uncabled or judged by other means. A port whose link layer cannot be read is
    kept, so the unreadable file is reported.
    """
    expected = ctx.node.ib_ports
    if expected is None:
        try:
            ports = discover_ports(root)
        except SysfsError as exc:
            return [], [ctx.finding(Status.UNKNOWN, "IB_SYSFS_UNREADABLE", "infiniband", str(exc), file=str(exc.path))]
        if not ports:
            raise NotApplicable(f"no InfiniBand ports under {root}")
        layer = ctx.node.ib_link_layer or "InfiniBand"
        readings = [read_port(root, port) for port in ports]
        chosen = [r for r in readings if r.link_layer in (None, layer)]
        if not chosen:
            others = ", ".join(f"{r.port} ({r.link_layer})" for r in readings)
            raise NotApplicable(f"no port with link layer {layer} under {root}; not judged: {others}")
        return chosen, []
    if not expected:
        raise NotApplicable("[node].ib_ports is empty")
    readings = []
    findings = []
    for port in dict.fromkeys(expected):
        if port_dir(root, port).is_dir():
            readings.append(read_port(root, port))
        else:
            message = f"required port does not exist ({port_dir(root, port)})"
            findings.append(ctx.finding(Status.CRITICAL, "IB_PORT_MISSING", port, message))
    return readings, findings


def _boot_id(procfs: Path) -> Optional[str]:
    """The boot id, or None when unreadable (the stored baselines are then kept)."""
    try:
        return read_boot_id(procfs)
    except SysfsError:
        return None


def run(ctx: CheckContext[InfinibandSettings]) -> list[Finding]:
    root = ctx.paths.sysfs / "class" / "infiniband"
    readings, findings = select_ports(ctx, root)
    fastest = fastest_rates(readings)
    for reading in readings:
        findings.extend(judge_link(ctx, reading, fastest))

    now = ctx.clock()
    stored = ctx.state.load()
    boot = _boot_id(ctx.paths.procfs)
    old_ports = _mapping(stored.get("ports"))
    same_boot = boot is None or stored.get("boot_id") in (None, boot)
    new_ports: dict[str, Any] = {
        # Counters restart at boot: earlier samples are no baseline, but link drops stay remembered.
        name: entry if same_boot else {key: value for key, value in entry.items() if key != "samples"}
        for name, entry in old_ports.items()
        if isinstance(entry, dict)
        and isinstance(entry.get("seen"), (int, float))
        and now - _FORGET_SECONDS <= entry["seen"] <= now
    }
    for reading in readings:
        entry = new_ports.get(reading.port, {})
        port_findings, new_ports[reading.port] = judge_counters(ctx, reading, entry, now)
        findings.extend(port_findings)
    findings += ctx.save_state({"version": _STATE_VERSION, "boot_id": boot, "ports": new_ports}, "counter baselines")
    return findings


CHECK = CheckSpec(
    name="infiniband",
    description="InfiniBand ports: state, rate, link layer, and error counters judged by their change",
    settings=InfinibandSettings,
    run=run,
)
