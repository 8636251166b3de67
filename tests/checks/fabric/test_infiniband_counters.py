"""Counter judgement across passes, run through the check itself with a controlled clock."""

from __future__ import annotations

import json
from typing import Any

from healthd_testkit.nvml import Clock

from healthd.checks.plugin import CheckContext
from healthd.model import Finding, Status
from healthd_checks.infiniband.check import CHECK
from healthd_checks.infiniband.settings import InfinibandSettings, PerHourLimits

HOUR = 3600.0
PORT = "mlx5_3:1"
COUNTERS = "class/infiniband/mlx5_3/ports/1/counters"


class Passes:
    """Passes of the infiniband check over the fixture node, on a clock the test moves."""

    def __init__(self, node: Any, settings: InfinibandSettings | None = None) -> None:
        self.node = node
        self.clock = Clock()
        self.ctx: CheckContext[InfinibandSettings] = node.context(
            "infiniband", settings or InfinibandSettings(), self.clock
        )

    def run(self, **counters: int) -> list[Finding]:
        """A pass, with these counters of the port set first."""
        for name, value in counters.items():
            set_counter(self.node, name, value)
        return list(CHECK.run(self.ctx))

    def after(self, seconds: float, **counters: int) -> list[Finding]:
        """A pass ``seconds`` after the last one, with these counters of the port set first."""
        self.clock.now += seconds
        return self.run(**counters)


def codes(found: list[Finding]) -> set[tuple[Status, str, str]]:
    return {(f.status, f.code, f.subject) for f in found}


def set_counter(node: Any, name: str, value: int) -> None:
    node.write(f"{COUNTERS}/{name}", f"{value}\n")


def test_symbol_errors_under_the_hourly_limit_are_quiet(node: Any) -> None:
    passes = Passes(node)
    assert passes.run() == []
    assert passes.after(HOUR, symbol_error=12 + 120) == []


def test_symbol_errors_over_the_hourly_limit_warn(node: Any) -> None:
    passes = Passes(node)
    passes.run()
    (found,) = passes.after(HOUR, symbol_error=12 + 121)
    assert (found.status, found.code, found.subject) == (Status.WARNING, "IB_COUNTER_RATE", PORT)
    assert found.details["counter"] == "symbol_error"
    assert found.details["per_hour"] == 121.0
    assert found.details["limit_per_hour"] == 120


def test_a_burst_in_a_short_interval_counts_against_the_whole_window(node: Any) -> None:
    # 50 errors in five minutes is 50 in the last hour, not 600 per hour.
    passes = Passes(node)
    passes.run()
    assert passes.after(300, symbol_error=62) == []
    # ... but bursts add up within the hour.
    for step in range(1, 4):
        passes.clock.now += 300
        set_counter(node, "symbol_error", 62 + 30 * step)
    found = passes.run()
    assert codes(found) == {(Status.WARNING, "IB_COUNTER_RATE", PORT)}
    assert found[0].details["increase"] == 140


def test_a_slow_rise_over_a_long_gap_is_averaged(node: Any) -> None:
    passes = Passes(node)
    passes.run()
    assert passes.after(2 * HOUR, symbol_error=12 + 200) == []


def test_rate_ages_out_of_the_window(node: Any) -> None:
    passes = Passes(node)
    passes.run()
    assert codes(passes.after(300, link_error_recovery=11)) == {(Status.WARNING, "IB_COUNTER_RATE", PORT)}
    assert codes(passes.after(HOUR - 600)) == {(Status.WARNING, "IB_COUNTER_RATE", PORT)}
    assert passes.after(2 * HOUR) == []


def test_any_increase_of_integrity_and_overrun_errors_warns(node: Any) -> None:
    passes = Passes(node)
    passes.run()
    found = passes.after(300, local_link_integrity_errors=1, excessive_buffer_overrun_errors=1)
    assert {f.details["counter"] for f in found} == {"local_link_integrity_errors", "excessive_buffer_overrun_errors"}
    assert {f.status for f in found} == {Status.WARNING}


def test_limits_are_configurable(node: Any) -> None:
    passes = Passes(node, InfinibandSettings(per_hour=PerHourLimits(symbol_error=1000)))
    passes.run()
    assert passes.after(HOUR, symbol_error=12 + 500) == []


def test_link_flapping_stays_critical_until_the_window_passes_clean(node: Any) -> None:
    passes = Passes(node)
    passes.run()
    downs = 1
    for _ in range(3):
        downs += 1
        assert codes(passes.after(600, link_downed=downs)) == {(Status.CRITICAL, "IB_LINK_DOWNED", PORT)}
    found = passes.after(600, link_downed=downs + 1)
    assert codes(found) == {(Status.CRITICAL, "IB_LINK_DOWNED", PORT), (Status.CRITICAL, "IB_LINK_FLAPPING", PORT)}
    flapping = next(f for f in found if f.code == "IB_LINK_FLAPPING")
    assert flapping.details["downs_in_window"] == 4
    # Quiet passes: the first drops age out, yet the port stays flapping while any remain.
    assert codes(passes.after(3 * HOUR - 60)) == {(Status.CRITICAL, "IB_LINK_FLAPPING", PORT)}
    assert passes.after(120) == []


def test_flapping_counts_drops_not_passes(node: Any) -> None:
    passes = Passes(node)
    passes.run()
    assert codes(passes.after(600, link_downed=4)) == {(Status.CRITICAL, "IB_LINK_DOWNED", PORT)}
    found = passes.after(600, link_downed=5)
    assert codes(found) == {(Status.CRITICAL, "IB_LINK_DOWNED", PORT), (Status.CRITICAL, "IB_LINK_FLAPPING", PORT)}


def test_saturated_counters_are_noted(node: Any) -> None:
    passes = Passes(node)
    found = passes.run(symbol_error=65535, link_downed=254)
    assert codes(found) == {(Status.OK, "IB_COUNTER_SATURATED", PORT)}
    assert found[0].details["counters"] == "symbol_error"
    found = passes.after(600, link_downed=255)
    downed = next(f for f in found if f.code == "IB_LINK_DOWNED")
    assert downed.details["saturated"] is True
    saturated = next(f for f in found if f.code == "IB_COUNTER_SATURATED")
    assert saturated.details["counters"] == "symbol_error,link_downed"


def test_unavailable_counter_is_skipped_with_a_note(node: Any) -> None:
    passes = Passes(node)
    node.write(f"{COUNTERS}/link_downed", "N/A (no PMA)\n")
    (note,) = passes.run()
    assert (note.status, note.code, note.details["counters"]) == (Status.OK, "IB_COUNTERS_UNAVAILABLE", "link_downed")


def test_clock_going_backwards_starts_a_new_baseline(node: Any) -> None:
    passes = Passes(node)
    passes.run()
    assert passes.after(-10 * HOUR, link_downed=9) == []
    assert passes.after(600) == []


def test_garbage_state_file_is_survived(node: Any) -> None:
    passes = Passes(node)
    now = passes.clock.now
    node.state_dir.mkdir(parents=True, exist_ok=True)
    for garbage in (
        {"ports": "x"},
        {"ports": {PORT: {"samples": {"link_downed": [["a", 1], [1.0], None, [now - 60, "2"]]}}}},
        {"ports": {PORT: {"seen": now, "samples": "x", "downs": {"a": 1}, "flapping": "yes"}}},
        [1, 2, 3],
    ):
        passes.ctx.state.path.write_text(json.dumps(garbage))
        assert passes.run() == []


def test_unwritable_state_is_unknown_but_findings_survive(node: Any) -> None:
    node.root.joinpath("blocker").write_text("a file, not a directory\n")
    node.write("class/infiniband/mlx5_3/ports/1/state", "1: DOWN\n")
    ctx = node.context("infiniband", InfinibandSettings(), Clock())
    from dataclasses import replace

    from healthd.store.state import StateFile

    ctx = replace(ctx, state=StateFile(node.root / "blocker" / "state", "check-infiniband"))
    assert codes(CHECK.run(ctx)) == {
        (Status.CRITICAL, "IB_PORT_DOWN", PORT),
        (Status.UNKNOWN, "STATE_UNWRITABLE", str(node.root / "blocker" / "state" / "check-infiniband.json")),
    }


def test_flapping_survives_a_reboot_but_counter_baselines_do_not(node: Any) -> None:
    passes = Passes(node, InfinibandSettings(flap_downs=2))
    passes.run()
    assert (Status.CRITICAL, "IB_LINK_FLAPPING", PORT) in codes(passes.after(600, link_downed=3))
    node.reboot("0f4e6d2c-1a3b-4c5d-8e9f-a0b1c2d3e4f5")
    assert codes(passes.after(600, link_downed=0)) == {(Status.CRITICAL, "IB_LINK_FLAPPING", PORT)}
