"""Counter baselines: rises and resets, saturation, and state that holds only within the boot that took it."""

from __future__ import annotations

from typing import Any, Mapping

from healthd.checks.counters import BootScoped, rise, saturated
from healthd.model import Finding, Status

BOOT_A, BOOT_B = "aaaa-1111-2222-3333-4444", "bbbb-1111-2222-3333-4444"


def test_rise_tells_a_rise_from_a_reset_and_from_no_baseline() -> None:
    assert rise(10, 13) == 3
    assert rise(10, 10) == 0
    assert rise(10, 4) is None  # went down: reset, 4 is the new baseline
    assert rise(None, 4) is None and rise("10", 13) is None and rise(True, 3) is None


def test_saturation_is_the_counters_maximum() -> None:
    assert saturated(255, 8) and saturated(15, 4) and not saturated(254, 8) and not saturated(65534, 16)


def _judge(value: int, stored: Mapping[str, Any]) -> tuple[list[Finding], dict[str, Any]]:
    up = rise(stored.get("value"), value)
    found = [Finding("t", Status.WARNING, "ROSE", "x", f"+{up}")] if up else []
    return found, {"value": value, "downs": stored.get("downs", 0) + (1 if up else 0)}


def test_baselines_from_another_boot_are_no_baselines() -> None:
    state = BootScoped("ports")
    _, document = state.judge_each({}, BOOT_A, 0.0, [("p1", 5)], _judge)
    assert document == {"version": 1, "boot_id": BOOT_A, "ports": {"p1": {"value": 5, "downs": 0}}}
    found, document = state.judge_each(document, BOOT_A, 1.0, [("p1", 7)], _judge)
    assert [f.message for f in found] == ["+2"]
    # After a reboot the counter starts over; 9 against the old 7 would be a false rise of 2.
    found, after = state.judge_each(document, BOOT_B, 2.0, [("p1", 9)], _judge)
    assert found == [] and after["boot_id"] == BOOT_B and after["ports"]["p1"]["downs"] == 0


def test_fields_outside_the_boot_survive_a_reboot() -> None:
    state = BootScoped("ports", boot_fields=frozenset({"value"}))
    document = {"version": 1, "boot_id": BOOT_A, "ports": {"p1": {"value": 7, "downs": 3}}}
    assert state.resume(document, BOOT_B, 0.0) == {"p1": {"downs": 3}}
    # An unreadable boot id (None), or a document from before boot ids, keeps everything.
    assert state.resume(document, None, 0.0) == {"p1": {"value": 7, "downs": 3}}
    assert state.resume({**document, "boot_id": None}, BOOT_B, 0.0) == {"p1": {"value": 7, "downs": 3}}


def test_subjects_not_judged_are_dropped_or_kept_for_a_while() -> None:
    document = {"version": 1, "boot_id": BOOT_A, "ports": {"gone": {"value": 1, "seen": 100.0}, "bad": [1]}}
    _, dropped = BootScoped("ports").judge_each(document, BOOT_A, 200.0, [("p1", 5)], _judge)
    assert set(dropped["ports"]) == {"p1"}
    kept = BootScoped("ports", forget_after=1000.0)
    _, document = kept.judge_each(document, BOOT_A, 200.0, [("p1", 5)], _judge)
    assert document["ports"] == {"gone": {"value": 1, "seen": 100.0}, "p1": {"value": 5, "downs": 0, "seen": 200.0}}
    _, document = kept.judge_each(document, BOOT_A, 1150.0, [("p1", 5)], _judge)
    assert set(document["ports"]) == {"p1"}  # not seen for more than forget_after
    # An entry "seen" after now was written before the clock stepped back: its age is unknown.
    assert kept.resume({"ports": {"p1": {"seen": 5000.0}}}, BOOT_A, 1150.0) == {}
