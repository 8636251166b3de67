"""The ``infiniband`` check: port state, rate and link layer, and error counters judged by their change.

``gather`` reads ``class/infiniband/<dev>/ports/<n>/`` and ``<dev>/board_id`` under ``[paths].sysfs``
(kernel ABI: Documentation/ABI/stable/sysfs-class-infiniband), the boot id and the
last pass's state; ``judge`` compares them with ``[checks.infiniband]``. Link state
is judged from one reading; error counters only from their change between passes,
because on HDR/NDR links raw symbol errors are never zero and counters restart at
every reboot. Counter samples (per boot), link-down events and the flapping flag
persist in the check's state (``healthd.checks.counters.BootScoped``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

from healthd.checks.counters import BootScoped, rise, saturated
from healthd.checks.plugin import CheckSpec, NotApplicable, Staged, Unobserved, Verdict
from healthd.model import Finding, Status

from ..common.sysfs import (
    IbRate,
    NumberedState,
    SysfsError,
    SysfsMissing,
    boot_id_or_none,
    parse_counter,
    parse_ib_rate,
    parse_numbered_state,
    parse_word,
    read,
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

# Counter samples restart with the counters at boot; link drops and flapping are remembered
# across it. A port not seen for a week (removed card, renamed device) is forgotten.
_STATE = BootScoped("ports", version=1, boot_fields=frozenset({"samples"}), forget_after=7 * 86400.0)

if TYPE_CHECKING:
    from healthd.checks.plugin import CheckContext, JudgeContext

    from .settings import InfinibandSettings


class PortReading(NamedTuple):
    """Everything read from one port; ``None`` where the file could not be read or parsed.

    ``board_id`` is the adapter's (the kernel prints its PSID, e.g. ``MT_0000000838``);
    ``None`` where the device does not offer it.
    """

    port: str
    state: Optional[NumberedState]
    phys_state: Optional[NumberedState]
    rate: Optional[IbRate]
    link_layer: Optional[str]
    counters: Mapping[str, int]
    unavailable: tuple[str, ...]
    errors: tuple[SysfsError, ...]
    board_id: Optional[str] = None

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


def parse_board_id(text: str) -> Optional[str]:
    """An adapter's ``board_id``; ``None`` when empty (some drivers print nothing)."""
    value = text.strip()
    if len(value) > 64 or not value.isprintable():
        raise ValueError("expected a board id such as 'MT_0000000838'")
    return value or None


def read_port(root: Path, port: str) -> PortReading:
    """Read one port's attributes, counters and its adapter's board id; every problem is kept, never raised."""
    base = port_dir(root, port)
    errors: list[SysfsError] = []

    def attempt(path: Path, parse: Any, optional: bool = False) -> Any:
        try:
            return read(path, parse)
        except SysfsError as exc:
            if not (optional and isinstance(exc, SysfsMissing)):
                errors.append(exc)
            return None

    state = attempt(base / "state", parse_numbered_state)
    phys_state = attempt(base / "phys_state", parse_numbered_state)
    rate = attempt(base / "rate", parse_ib_rate)
    link_layer = attempt(base / "link_layer", parse_word)
    # A device without a board id is compared by lane count instead (see peer_group).
    board_id = attempt(base.parent.parent / "board_id", parse_board_id, optional=True)
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
    return PortReading(port, state, phys_state, rate, link_layer, counters, tuple(unavailable), tuple(errors), board_id)


def _gbps(rate: IbRate) -> str:
    return f"{rate.gbps:g} Gb/sec ({rate.lanes}X{' ' + rate.speed if rate.speed else ''})"


def peer_group(reading: PortReading) -> tuple[Optional[str], str]:
    """The ports this one is compared with when no rate is expected: same link layer and same board.

    Nodes mix adapters on purpose: NDR400 compute HCAs beside NDR200 storage HCAs is a
    common layout, so the fastest port of the node says nothing about a storage port.
    Ports of one board (``board_id``, the adapter's PSID: a single-port OSFP card and a
    dual-port QSFP112 card differ even when both are ConnectX-7) are built to run alike,
    so a port slower than its siblings, narrower or at a lower speed, is degraded. Where
    the device has no board id the lane count stands in for it: a 2X port is not judged
    against 4X ones.
    """
    if reading.board_id is not None:
        return reading.link_layer, f"ports on board {reading.board_id}"
    return reading.link_layer, f"{reading.rate.lanes if reading.rate else 0}X ports"


def expected_rate(settings: InfinibandSettings, port: str) -> Optional[int]:
    """The port's own rate from ``expect_rates_gbps``, else the common ``expect_rate_gbps``."""
    own = (settings.expect_rates_gbps or {}).get(port)
    return own if own is not None else settings.expect_rate_gbps


def judge_link(
    jc: JudgeContext[InfinibandSettings],
    reading: PortReading,
    fastest: Mapping[tuple[Optional[str], str], float],
) -> Iterator[Finding]:
    """State, link layer and rate of one port; ``fastest`` is the best up rate per ``peer_group``."""
    port = reading.port
    for error in reading.errors:
        yield jc.finding(Status.UNKNOWN, "IB_SYSFS_UNREADABLE", port, str(error), file=str(error.path))
    if reading.up is False:
        state = reading.state.name if reading.state else "?"
        phys = reading.phys_state.name if reading.phys_state else "?"
        yield jc.finding(
            Status.CRITICAL,
            "IB_PORT_DOWN",
            port,
            f"port is {state}/{phys}, expected ACTIVE/LinkUp",
            state=state,
            phys_state=phys,
        )
    expected_layer = jc.settings.expect_link_layer
    if expected_layer is not None and reading.link_layer is not None and reading.link_layer != expected_layer:
        yield jc.finding(
            Status.CRITICAL,
            "IB_LINK_LAYER",
            port,
            f"link layer is {reading.link_layer}, expected {expected_layer}",
            link_layer=reading.link_layer,
            expected=expected_layer,
        )
    if reading.up is not True or reading.rate is None:
        return
    expected = expected_rate(jc.settings, port)
    if expected is not None:
        if reading.rate.gbps != expected:
            yield jc.finding(
                Status.CRITICAL,
                "IB_RATE_MISMATCH",
                port,
                f"port runs at {_gbps(reading.rate)}, expected {expected} Gb/sec",
                rate_gbps=reading.rate.gbps,
                expected_gbps=expected,
            )
        return
    group = peer_group(reading)
    best = fastest.get(group, reading.rate.gbps)
    if reading.rate.gbps < best:
        yield jc.finding(
            Status.WARNING,
            "IB_RATE_DEGRADED",
            port,
            f"port runs at {_gbps(reading.rate)}, slower than the {best:g} Gb/sec of the other {group[1]}",
            rate_gbps=reading.rate.gbps,
            fastest_gbps=best,
            compared_with=group[1],
        )


def fastest_rates(readings: list[PortReading]) -> dict[tuple[Optional[str], str], float]:
    """The highest rate among up ports, per ``peer_group`` (an Ethernet NIC is never compared with IB)."""
    best: dict[tuple[Optional[str], str], float] = {}
    for reading in readings:
        if reading.up is True and reading.rate is not None:
            group = peer_group(reading)
            best[group] = max(best.get(group, 0.0), reading.rate.gbps)
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
    return sum(rise(a[1], b[1]) or 0 for a, b in zip(samples, samples[1:]))


def _trim(samples: list[tuple[float, int]], now: float, window: float) -> list[tuple[float, int]]:
    """Samples inside the window plus the newest one before it, so the history spans the whole window."""
    inside = [s for s in samples if s[0] >= now - window]
    before = [s for s in samples if s[0] < now - window]
    return before[-1:] + inside


def judge_counters(
    jc: JudgeContext[InfinibandSettings], reading: PortReading, stored: Mapping[str, Any]
) -> tuple[list[Finding], dict[str, Any]]:
    """Judge one port's counters against its stored history; returns findings and the new history."""
    now = jc.now
    findings: list[Finding] = []
    old_samples = _mapping(stored.get("samples"))
    new_samples: dict[str, list[list[float]]] = {}
    stuck: list[str] = []
    for name, bits in COUNTER_BITS.items():
        history = _samples(old_samples.get(name), now)
        value = reading.counters.get(name)
        if value is None:
            if history:
                new_samples[name] = [[t, v] for t, v in history]
            continue
        if saturated(value, bits):
            stuck.append(name)
        history = _trim([*history, (now, value)], now, jc.settings.rate_window)
        new_samples[name] = [[t, v] for t, v in history]
        if name != "link_downed":  # judged by _judge_downs: any new increment counts, not a rate
            findings.extend(_judge_rate(jc, reading.port, name, history, name in stuck))
    downs_findings, downs_state = _judge_downs(jc, reading, stored, _samples(old_samples.get("link_downed"), now))
    findings.extend(downs_findings)
    findings.extend(_counter_notices(jc, reading, stuck))
    return findings, {"samples": new_samples, **downs_state}


def _judge_rate(
    jc: JudgeContext[InfinibandSettings], port: str, name: str, history: list[tuple[float, int]], stuck: bool
) -> list[Finding]:
    """A WARNING when one error counter rose faster than its ``per_hour`` limit over the window.

    The rate is taken over at least the whole window, so the first samples after a start
    (a short span) cannot turn one error into a high rate.
    """
    if len(history) < 2:
        return []
    settings = jc.settings
    limit = getattr(settings.per_hour, name)
    rose = _increase(history)
    elapsed = jc.now - history[0][0]
    per_hour = rose * 3600.0 / max(elapsed, settings.rate_window)
    if not rose or per_hour <= limit:
        return []
    return [
        jc.finding(
            Status.WARNING,
            "IB_COUNTER_RATE",
            port,
            f"{name} rose by {rose} in the last {elapsed / 60:.0f} min ({per_hour:.1f}/h, limit {limit:g}/h)",
            counter=name,
            increase=rose,
            per_hour=round(per_hour, 3),
            limit_per_hour=limit,
            window_seconds=settings.rate_window,
            saturated=stuck,
        )
    ]


def _counter_notices(jc: JudgeContext[InfinibandSettings], reading: PortReading, stuck: list[str]) -> list[Finding]:
    """OK notices for what the rates cannot see: counters the device lacks, and counters stuck at their maximum."""
    notices = []
    if reading.unavailable:
        notices.append(
            jc.finding(
                Status.OK,
                "IB_COUNTERS_UNAVAILABLE",
                reading.port,
                f"counters not offered by the device, not judged: {', '.join(reading.unavailable)}",
                counters=",".join(reading.unavailable),
            )
        )
    if stuck:
        notices.append(
            jc.finding(
                Status.OK,
                "IB_COUNTER_SATURATED",
                reading.port,
                f"counters stuck at their maximum, further increases are invisible until cleared: {', '.join(stuck)}",
                counters=",".join(stuck),
            )
        )
    return notices


def _judge_downs(
    jc: JudgeContext[InfinibandSettings],
    reading: PortReading,
    stored: Mapping[str, Any],
    previous: list[tuple[float, int]],
) -> tuple[list[Finding], dict[str, Any]]:
    """Any new link_downed increment is CRITICAL; enough of them in the window make the port flapping.

    Flapping stays CRITICAL until a whole window passes without a new increment.
    """
    settings = jc.settings
    now = jc.now
    port = reading.port
    findings: list[Finding] = []
    events = [(t, n) for t, n in _samples(stored.get("downs"), now) if t > now - settings.flap_window and n > 0]
    value = reading.counters.get("link_downed")
    delta = rise(previous[-1][1], value) if value is not None and previous else None
    if value is not None and delta:
        events.append((now, delta))
        findings.append(
            jc.finding(
                Status.CRITICAL,
                "IB_LINK_DOWNED",
                port,
                f"link went down {delta} time(s) since the previous pass (link_downed {previous[-1][1]} -> {value})",
                increase=delta,
                link_downed=value,
                saturated=saturated(value, COUNTER_BITS["link_downed"]),
            )
        )
    count = sum(n for _, n in events)
    flapping = count >= settings.flap_downs or (stored.get("flapping") is True and bool(events))
    if flapping:
        hours = settings.flap_window / 3600
        findings.append(
            jc.finding(
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


class PortsObservation(NamedTuple):
    """The ports read (all of them, or the expected ones that exist), and the last pass's state.

    ``missing`` are expected ports without a directory; ``unreadable`` says why the
    ports could not be listed.
    """

    root: Path
    readings: tuple[PortReading, ...] = ()
    missing: tuple[str, ...] = ()
    unreadable: Optional[Unobserved] = None
    boot_id: Optional[str] = None
    previous: Mapping[str, Any] = MappingProxyType({})


def _read_ports(ctx: CheckContext[InfinibandSettings], root: Path) -> PortsObservation:
    """``[checks.infiniband] expect_ports`` when set, else every port under ``root``.

    Without ``expect_ports`` the ports named in ``expect_rates_gbps`` are still required.
    """
    expected = ctx.settings.expect_ports
    if expected is None:
        try:
            ports = discover_ports(root)
        except SysfsError as exc:
            return PortsObservation(
                root, unreadable=Unobserved("IB_SYSFS_UNREADABLE", "infiniband", str(exc), {"file": str(exc.path)})
            )
        missing = tuple(port for port in ctx.settings.expect_rates_gbps or {} if port not in ports)
        if not ports and not missing:
            raise NotApplicable(f"no InfiniBand ports under {root}")
        return PortsObservation(root, tuple(read_port(root, port) for port in ports), missing)
    if not expected:
        raise NotApplicable("[checks.infiniband] expect_ports is empty")
    unique = list(dict.fromkeys(expected))
    present = [port for port in unique if port_dir(root, port).is_dir()]
    missing = tuple(port for port in unique if port not in present)
    return PortsObservation(root, tuple(read_port(root, port) for port in present), missing)


def gather(ctx: CheckContext[InfinibandSettings]) -> PortsObservation:
    observed = _read_ports(ctx, ctx.paths.sysfs / "class" / "infiniband")
    return observed._replace(boot_id=boot_id_or_none(ctx.paths.procfs), previous=ctx.state.load())


def _chosen(observed: PortsObservation, settings: InfinibandSettings) -> list[PortReading]:
    """The ports to judge: the expected ones, or by default every one whose link layer is InfiniBand.

    By default ``expect_link_layer`` (when set) replaces InfiniBand: the Ethernet ports
    of the same adapters (RoCE storage, management) are often uncabled or judged by
    other means. A port whose link layer cannot be read is kept, so the unreadable
    file is reported, and so is one given a rate in ``expect_rates_gbps``.
    """
    if settings.expect_ports is not None or not observed.readings:
        return list(observed.readings)
    layer = settings.expect_link_layer or "InfiniBand"
    rated = settings.expect_rates_gbps or {}
    chosen = [r for r in observed.readings if r.link_layer in (None, layer) or r.port in rated]
    if not chosen and not observed.missing:
        others = ", ".join(f"{r.port} ({r.link_layer})" for r in observed.readings)
        raise NotApplicable(f"no port with link layer {layer} under {observed.root}; not judged: {others}")
    return chosen


def judge(observed: PortsObservation, jc: JudgeContext[InfinibandSettings]) -> Verdict:
    readings = _chosen(observed, jc.settings)
    findings = [p.finding(jc) for p in (observed.unreadable,) if p is not None]
    for port in observed.missing:
        message = f"required port does not exist ({port_dir(observed.root, port)})"
        findings.append(jc.finding(Status.CRITICAL, "IB_PORT_MISSING", port, message))
    fastest = fastest_rates(readings)
    for reading in readings:
        findings.extend(judge_link(jc, reading, fastest))
    ports = ((reading.port, reading) for reading in readings)
    counted, state = _STATE.judge_each(
        observed.previous, observed.boot_id, jc.now, ports, lambda reading, stored: judge_counters(jc, reading, stored)
    )
    return Verdict((*findings, *counted), state)


def baseline(ctx: CheckContext[InfinibandSettings]) -> dict[str, Any]:
    """The InfiniBand ports that are up, and their rate: one for all when they share one, else each port's."""
    observed = _read_ports(ctx, ctx.paths.sysfs / "class" / "infiniband")
    if observed.unreadable is not None:
        raise OSError(observed.unreadable.message)
    up = [r for r in observed.readings if r.link_layer == "InfiniBand" and r.up]
    if not up:
        raise NotApplicable("no InfiniBand port is up on this node")
    found: dict[str, Any] = {"expect_ports": [r.port for r in up]}
    rates = {r.port: round(r.rate.gbps) for r in up if r.rate is not None}
    if len(set(rates.values())) == 1:
        found["expect_rate_gbps"] = next(iter(rates.values()))
    elif rates:
        # Adapters of different speeds (NDR400 compute beside NDR200 storage): each port its own.
        found["expect_rates_gbps"] = rates
    return found


CHECK = CheckSpec(
    name="infiniband",
    description="InfiniBand ports: state, rate, link layer, and error counters judged by their change",
    settings="healthd_checks.infiniband.settings:InfinibandSettings",
    baseline=baseline,
    run=Staged(gather, judge, keeps="counter baselines"),
    # A port's own state, rate and error counters; counters that cannot be read or have
    # saturated, and a link layer other than expected (configuration), are not.
    hardware=frozenset(
        {
            "IB_COUNTER_RATE",
            "IB_LINK_DOWNED",
            "IB_LINK_FLAPPING",
            "IB_PORT_DOWN",
            "IB_PORT_MISSING",
            "IB_RATE_DEGRADED",
            "IB_RATE_MISMATCH",
        }
    ),
)
