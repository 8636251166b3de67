"""Counter rates for the ``gpu`` check: PCIe replays and NVLink errors judged by their change.

The counters are cumulative, so a total says nothing: each pass stores them (per GPU,
with the time) and the next judges the increase. Rates divide by
``max(elapsed, rate_window)`` so that a pass seconds after another one (the daemon's,
then an operator's or the Slurm hook's, sharing the state dir) cannot turn one event
into a high rate. Pure: the caller loads and saves the state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Optional

from healthd.checks.counters import rise
from healthd.model import Status

from ..nvml.source import GpuReading, NvLinkReading, NvmlError

if TYPE_CHECKING:
    from .settings import GpuSettings

# NvLinkReading's error counters (nvmlNvLinkErrorCounter_t), each judged on its own.
NVLINK_COUNTERS = ("replay_errors", "recovery_errors", "crc_flit_errors", "crc_data_errors")

Add = Callable[..., None]


class _Span(NamedTuple):
    """What judging one GPU's counters over the time since the last pass needs besides the reading.

    ``elapsed`` is None when the last pass's time is unknown: there is no rate to judge
    yet, but ``new`` still gets the baselines for the next pass.
    """

    settings: GpuSettings
    old: Mapping[str, Any]
    new: dict[str, Any]
    elapsed: Optional[float]
    add: Add


def judge_counters(
    gpu: GpuReading, settings: GpuSettings, old: Mapping[str, Any], now: float, add: Add
) -> dict[str, Any]:
    """Judge one GPU's counters against ``old`` (its state from the last pass); returns the new state.

    The new state is empty when no counter could be read.
    """
    new: dict[str, Any] = {"at": now}
    at = _number(old.get("at"))
    elapsed = now - at if at is not None and now > at else None
    span = _Span(settings, old, new, elapsed, add)
    _judge_replays(gpu, span)
    _judge_nvlinks(gpu, span)
    return new if len(new) > 1 else {}


def _number(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _judge_replays(gpu: GpuReading, span: _Span) -> None:
    settings, new, elapsed = span.settings, span.new, span.elapsed
    replays = gpu.pcie_replay_counter
    if isinstance(replays, NvmlError):
        return
    new["pcie_replay"] = replays
    # A counter that went down was reset (driver reload, reboot): it is the new baseline.
    increase = rise(span.old.get("pcie_replay"), replays)
    if increase is None or elapsed is None:
        return
    rate = increase * 60.0 / max(elapsed, settings.rate_window)
    if rate > settings.pcie_replay_per_minute_max:
        span.add(
            Status.WARNING,
            "PCIE_REPLAY_RATE",
            f"{increase} PCIe replays in {elapsed:.0f}s ({rate:.1f}/min, limit "
            f"{settings.pcie_replay_per_minute_max:g})",
            rate_per_minute=round(rate, 3),
            replays=replays,
            increase=increase,
            seconds=round(elapsed, 3),
        )


def _judge_nvlinks(gpu: GpuReading, span: _Span) -> None:
    settings, elapsed, add = span.settings, span.elapsed, span.add
    links = gpu.nvlinks
    if isinstance(links, NvmlError) or not links:
        return
    raw_links = span.old.get("nvlink")
    old_links: Mapping[str, Any] = raw_links if isinstance(raw_links, dict) else {}
    counters: dict[str, dict[str, int]] = {}
    rising: list[str] = []
    crc_rates: list[str] = []
    for link in links:
        current = _link_counters(link)
        if current:
            counters[str(link.link)] = current
        stored = old_links.get(str(link.link))
        if not isinstance(stored, dict) or elapsed is None:
            continue
        delta = _increases(current, stored)
        errors = {name: delta[name] for name in ("replay_errors", "recovery_errors") if name in delta}
        if sum(errors.values()) > settings.nvlink_errors_max:
            listed = ", ".join(f"+{count} {name.split('_')[0]}" for name, count in errors.items())
            rising.append(f"link{link.link}: {listed}")
        crc = [delta[name] for name in ("crc_flit_errors", "crc_data_errors") if name in delta]
        crc_rate = sum(crc) / max(elapsed, settings.rate_window)
        if crc and crc_rate > settings.nvlink_crc_per_second_max:
            crc_rates.append(f"link{link.link}: {crc_rate:.1f}/s")
    span.new["nvlink"] = counters
    for links_found, code, what in (
        (rising, "NVLINK_ERRORS_RISING", "NVLink replay/recovery errors rising"),
        (crc_rates, "NVLINK_CRC_RATE", "NVLink CRC error rate above limit"),
    ):
        if links_found:
            add(Status.WARNING, code, f"{what}: " + "; ".join(links_found), links=len(links_found))


def _link_counters(link: NvLinkReading) -> dict[str, int]:
    """The link's error counters that could be read; one a driver does not offer hides no other."""
    values = {name: getattr(link, name) for name in NVLINK_COUNTERS}
    return {name: value for name, value in values.items() if isinstance(value, int) and not isinstance(value, bool)}


def _increases(current: Mapping[str, int], stored: Mapping[str, Any]) -> dict[str, int]:
    """Each counter's rise since its own stored value; a counter without one, or lower (reset), has none yet."""
    rises = {name: rise(stored.get(name), value) for name, value in current.items()}
    return {name: amount for name, amount in rises.items() if amount is not None}
