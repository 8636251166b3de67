"""Counter judgement across passes, run through the check itself with a controlled clock."""

from __future__ import annotations

import json
from typing import Any

from healthd.model import Finding, Status
from healthd.plugin import CheckContext
from healthd_checks.infiniband import CHECK
from healthd_checks.infiniband_settings import InfinibandSettings, PerHourLimits

HOUR = 3600.0
PORT = "mlx5_3:1"
run = CHECK.run
COUNTERS = "class/infiniband/mlx5_3/ports/1/counters"


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make(node: Any, clock: Clock, settings: InfinibandSettings | None = None) -> CheckContext[InfinibandSettings]:
    context: CheckContext[InfinibandSettings] = node.context("infiniband", settings or InfinibandSettings(), clock)
    return context


def codes(found: list[Finding]) -> set[tuple[Status, str, str]]:
    return {(f.status, f.code, f.subject) for f in found}


def set_counter(node: Any, name: str, value: int) -> None:
    node.write(f"{COUNTERS}/{name}", f"{value}\n")


def test_symbol_errors_under_the_hourly_limit_are_quiet(node: Any) -> None:
    clock = Clock()
    ctx = make(node, clock)
    assert run(ctx) == []
    clock.now += HOUR
    set_counter(node, "symbol_error", 12 + 120)
    assert run(ctx) == []


def test_symbol_errors_over_the_hourly_limit_warn(node: Any) -> None:
    clock = Clock()
    ctx = make(node, clock)
    run(ctx)
    clock.now += HOUR
    set_counter(node, "symbol_error", 12 + 121)
    (found,) = run(ctx)
    assert (found.status, found.code, found.subject) == (Status.WARNING, "IB_COUNTER_RATE", PORT)
    assert found.details["counter"] == "symbol_error"
    assert found.details["per_hour"] == 121.0
    assert found.details["limit_per_hour"] == 120


def test_a_burst_in_a_short_interval_counts_against_the_whole_window(node: Any) -> None:
    # 50 errors in five minutes is 50 in the last hour, not 600 per hour.
    clock = Clock()
    ctx = make(node, clock)
    run(ctx)
    clock.now += 300
    set_counter(node, "symbol_error", 62)
    assert run(ctx) == []
    # ... but bursts add up within the hour.
    for step in range(1, 4):
        clock.now += 300
        set_counter(node, "symbol_error", 62 + 30 * step)
    found = run(ctx)
    assert codes(found) == {(Status.WARNING, "IB_COUNTER_RATE", PORT)}
    assert found[0].details["increase"] == 140


def test_a_slow_rise_over_a_long_gap_is_averaged(node: Any) -> None:
    clock = Clock()
    ctx = make(node, clock)
    run(ctx)
    clock.now += 2 * HOUR
    set_counter(node, "symbol_error", 12 + 200)
    assert run(ctx) == []


def test_rate_ages_out_of_the_window(node: Any) -> None:
    clock = Clock()
    ctx = make(node, clock)
    run(ctx)
    clock.now += 300
    set_counter(node, "link_error_recovery", 11)
    assert codes(run(ctx)) == {(Status.WARNING, "IB_COUNTER_RATE", PORT)}
    clock.now += HOUR - 600
    assert codes(run(ctx)) == {(Status.WARNING, "IB_COUNTER_RATE", PORT)}
    clock.now += 2 * HOUR
    assert run(ctx) == []


def test_any_increase_of_integrity_and_overrun_errors_warns(node: Any) -> None:
    clock = Clock()
    ctx = make(node, clock)
    run(ctx)
    clock.now += 300
    set_counter(node, "local_link_integrity_errors", 1)
    set_counter(node, "excessive_buffer_overrun_errors", 1)
    found = run(ctx)
    assert {f.details["counter"] for f in found} == {"local_link_integrity_errors", "excessive_buffer_overrun_errors"}
    assert {f.status for f in found} == {Status.WARNING}


def test_limits_are_configurable(node: Any) -> None:
    clock = Clock()
    ctx = make(node, clock, InfinibandSettings(per_hour=PerHourLimits(symbol_error=1000)))
    run(ctx)
    clock.now += HOUR
    set_counter(node, "symbol_error", 12 + 500)
    assert run(ctx) == []


def test_link_flapping_stays_critical_until_the_window_passes_clean(node: Any) -> None:
    clock = Clock()
    ctx = make(node, clock)
    run(ctx)
    downs = 1
    for _ in range(3):
        clock.now += 600
        downs += 1
        set_counter(node, "link_downed", downs)
        assert codes(run(ctx)) == {(Status.CRITICAL, "IB_LINK_DOWNED", PORT)}
    clock.now += 600
    set_counter(node, "link_downed", downs + 1)
    found = run(ctx)
    assert codes(found) == {(Status.CRITICAL, "IB_LINK_DOWNED", PORT), (Status.CRITICAL, "IB_LINK_FLAPPING", PORT)}
    flapping = next(f for f in found if f.code == "IB_LINK_FLAPPING")
    assert flapping.details["downs_in_window"] == 4
    # Quiet passes: the first drops age out, yet the port stays flapping while any remain.
    clock.now += 3 * HOUR - 60
    assert codes(run(ctx)) == {(Status.CRITICAL, "IB_LINK_FLAPPING", PORT)}
    clock.now += 120
    assert run(ctx) == []


def test_flapping_counts_drops_not_passes(node: Any) -> None:
    clock = Clock()
    ctx = make(node, clock)
    run(ctx)
    clock.now += 600
    set_counter(node, "link_downed", 4)
    found = run(ctx)
    assert codes(found) == {(Status.CRITICAL, "IB_LINK_DOWNED", PORT)}
    clock.now += 600
    set_counter(node, "link_downed", 5)
    assert codes(run(ctx)) == {(Status.CRITICAL, "IB_LINK_DOWNED", PORT), (Status.CRITICAL, "IB_LINK_FLAPPING", PORT)}


def test_saturated_counters_are_noted(node: Any) -> None:
    clock = Clock()
    ctx = make(node, clock)
    set_counter(node, "symbol_error", 65535)
    set_counter(node, "link_downed", 254)
    found = run(ctx)
    assert codes(found) == {(Status.OK, "IB_COUNTER_SATURATED", PORT)}
    assert found[0].details["counters"] == "symbol_error"
    clock.now += 600
    set_counter(node, "link_downed", 255)
    found = run(ctx)
    downed = next(f for f in found if f.code == "IB_LINK_DOWNED")
    assert downed.details["saturated"] is True
    saturated = next(f for f in found if f.code == "IB_COUNTER_SATURATED")
    assert saturated.details["counters"] == "symbol_error,link_downed"


def test_unavailable_counter_is_skipped_with_a_note(node: Any) -> None:
    clock = Clock()
    ctx = make(node, clock)
    node.write(f"{COUNTERS}/link_downed", "N/A (no PMA)\n")
    (note,) = run(ctx)
    assert (note.status, note.code, note.details["counters"]) == (Status.OK, "IB_COUNTERS_UNAVAILABLE", "link_downed")


def test_clock_going_backwards_starts_a_new_baseline(node: Any) -> None:
    clock = Clock()
    ctx = make(node, clock)
    run(ctx)
    clock.now -= 10 * HOUR
    set_counter(node, "link_downed", 9)
    assert run(ctx) == []
    clock.now += 600
    assert run(ctx) == []


def test_garbage_state_file_is_survived(node: Any) -> None:
    clock = Clock()
    ctx = make(node, clock)
    node.state_dir.mkdir(parents=True, exist_ok=True)
    for garbage in (
        {"ports": "x"},
        {"ports": {PORT: {"samples": {"link_downed": [["a", 1], [1.0], None, [clock.now - 60, "2"]]}}}},
        {"ports": {PORT: {"seen": clock.now, "samples": "x", "downs": {"a": 1}, "flapping": "yes"}}},
        [1, 2, 3],
    ):
        ctx.state.path.write_text(json.dumps(garbage))
        assert run(ctx) == []


def test_unwritable_state_is_unknown_but_findings_survive(node: Any) -> None:
    clock = Clock()
    node.root.joinpath("blocker").write_text("a file, not a directory\n")
    node.write("class/infiniband/mlx5_3/ports/1/state", "1: DOWN\n")
    ctx = node.context("infiniband", InfinibandSettings(), clock)
    from dataclasses import replace

    from healthd.state import StateFile

    ctx = replace(ctx, state=StateFile(node.root / "blocker" / "state", "check-infiniband"))
    assert codes(run(ctx)) == {
        (Status.CRITICAL, "IB_PORT_DOWN", PORT),
        (Status.UNKNOWN, "STATE_UNWRITABLE", str(node.root / "blocker" / "state" / "check-infiniband.json")),
    }


def test_flapping_survives_a_reboot_but_counter_baselines_do_not(node: Any) -> None:
    clock = Clock()
    ctx = make(node, clock, InfinibandSettings(flap_downs=2))
    run(ctx)
    clock.now += 600
    set_counter(node, "link_downed", 3)
    assert (Status.CRITICAL, "IB_LINK_FLAPPING", PORT) in codes(run(ctx))
    node.reboot("0f4e6d2c-1a3b-4c5d-8e9f-a0b1c2d3e4f5")
    clock.now += 600
    set_counter(node, "link_downed", 0)
    assert codes(run(ctx)) == {(Status.CRITICAL, "IB_LINK_FLAPPING", PORT)}
