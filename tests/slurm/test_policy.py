"""Table-driven tests of the pure policy: severity, hysteresis, ownership, pending, circuit breaker."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import pytest

from healthd.acks import Ack, FindingRef, apply_acks
from healthd.config import PolicySettings
from healthd.model import CheckResult, Finding, PassResult, RunState, Status
from healthd.policy import (
    Action,
    Decision,
    Pending,
    PolicyState,
    acknowledged_by_resume,
    after_apply,
    after_failure,
    circuit_breaker,
    decide,
    needs_node,
)
from healthd.slurm import NodeInfo

PREFIX = "healthd:"


def _pass(*statuses: str, event: Optional[str] = None) -> PassResult:
    findings = tuple(
        Finding("t", Status[s], f"CODE_{i}", f"subj{i}", "m", {"event": event} if event else {})
        for i, s in enumerate(statuses)
    )
    return PassResult("n1", 0.0, 0.1, (CheckResult("t", RunState.RAN, findings, 0.1),))


def _node(state: str = "IDLE", flags: str = "", reason: str = "") -> NodeInfo:
    return NodeInfo("n1", state, frozenset(f for f in flags.split("+") if f), reason, "root", ("batch",))


IDLE = _node()
BUSY = _node("ALLOCATED")
OURS = _node("IDLE", "DRAIN", "healthd: CODE_0 subj0")
OURS_BUSY = _node("MIXED", "DRAIN", "healthd: CODE_0 subj0")
ADMIN_DRAIN = _node("IDLE", "DRAIN", "bad DIMM")
ADMIN_DOWN = _node("DOWN", "", "admin down")
REBOOT = _node("MIXED", "DRAIN+REBOOT_REQUESTED", "healthd: CODE_0 subj0")
SIMILAR_PREFIX = _node("IDLE", "DRAIN", "healthd:x mine")


@pytest.mark.parametrize(
    ("statuses", "node", "settings", "streaks", "expected"),
    [
        (("CRITICAL",), BUSY, {}, {}, Action.TAKE_OUT_NOW),
        (("CRITICAL",), IDLE, {}, {}, Action.TAKE_OUT_NOW),
        (("WARNING",), BUSY, {}, {}, Action.DRAIN_AFTER_JOBS),
        (("WARNING", "CRITICAL"), BUSY, {}, {}, Action.TAKE_OUT_NOW),
        (("UNKNOWN",), BUSY, {}, {}, Action.NONE),
        (("UNKNOWN",), BUSY, {"unknown_action": "drain", "unknown_passes": 2}, {}, Action.HOLD),
        (
            ("UNKNOWN",),
            BUSY,
            {"unknown_action": "drain", "unknown_passes": 2},
            {"unknown_streak": 1},
            Action.DRAIN_AFTER_JOBS,
        ),
        (("CRITICAL", "UNKNOWN"), BUSY, {}, {}, Action.TAKE_OUT_NOW),
        (("WARNING", "UNKNOWN"), BUSY, {}, {}, Action.DRAIN_AFTER_JOBS),
        (("CRITICAL",), BUSY, {"fail_passes": 3}, {"fail_streak": 1}, Action.HOLD),
        (("CRITICAL",), BUSY, {"fail_passes": 3}, {"fail_streak": 2}, Action.TAKE_OUT_NOW),
        ((), OURS, {}, {}, Action.RESUME),
        ((), OURS, {"clean_passes": 2}, {}, Action.HOLD),
        ((), OURS, {"clean_passes": 2}, {"clean_streak": 1}, Action.RESUME),
        ((), IDLE, {}, {}, Action.NONE),
        ((), ADMIN_DRAIN, {}, {}, Action.NONE),
        ((), ADMIN_DOWN, {}, {}, Action.NONE),
        ((), SIMILAR_PREFIX, {}, {}, Action.NONE),
        ((), REBOOT, {}, {}, Action.NONE),
        (("CRITICAL",), ADMIN_DRAIN, {}, {}, Action.NONE),
        (("CRITICAL",), ADMIN_DOWN, {}, {}, Action.NONE),
        (("CRITICAL",), REBOOT, {}, {}, Action.NONE),
        (("CRITICAL",), OURS, {}, {}, Action.NONE),
        (("CRITICAL",), OURS_BUSY, {}, {}, Action.TAKE_OUT_NOW),
        (("WARNING",), OURS_BUSY, {}, {}, Action.NONE),
        (("WARNING", "WARNING"), OURS, {}, {}, Action.DRAIN_AFTER_JOBS),
        (("UNKNOWN",), OURS, {}, {}, Action.NONE),
    ],
)
def test_decision_table(
    statuses: tuple[str, ...], node: NodeInfo, settings: dict[str, object], streaks: dict[str, int], expected: Action
) -> None:
    decision, _ = decide(_pass(*statuses), PolicyState(**streaks), node, PolicySettings(**settings), PREFIX)
    assert decision.action is expected, decision.explanation


def test_reason_names_worst_finding_and_counts_the_rest() -> None:
    decision, _ = decide(_pass("WARNING", "CRITICAL", "WARNING"), PolicyState(), BUSY, PolicySettings(), PREFIX)
    assert decision.reason == "healthd: CODE_1 subj1 (+2 more)"
    assert decision.causes == tuple(FindingRef(f"t/CODE_{i}/subj{i}") for i in range(3))


def test_streaks_count_consecutive_passes_and_reset() -> None:
    settings = PolicySettings(fail_passes=2)
    _, state = decide(_pass("WARNING"), PolicyState(), BUSY, settings, PREFIX)
    assert state.fail_streak == 1
    _, state = decide(_pass("UNKNOWN"), state, BUSY, settings, PREFIX)
    assert (state.fail_streak, state.unknown_streak) == (0, 1)
    _, state = decide(_pass(), state, BUSY, settings, PREFIX)
    assert (state.fail_streak, state.unknown_streak, state.clean_streak) == (0, 0, 1)


def test_unreachable_slurm_keeps_intent_and_pending_is_retried() -> None:
    settings = PolicySettings()
    decision, state = decide(_pass("CRITICAL"), PolicyState(), None, settings, PREFIX)
    assert decision.action is Action.TAKE_OUT_NOW
    state = after_failure(state, decision, "slurmctld down", now=100.0, attempted=True)
    assert state.pending is not None and state.pending.attempts == 1 and state.pending.next_try == 110.0
    state = after_failure(state, decision, "slurmctld down", now=110.0, attempted=True)
    assert state.pending is not None and state.pending.attempts == 2 and state.pending.next_try == 130.0
    kept = after_failure(state, decision, "backing off", now=115.0, attempted=False)
    assert kept.pending is not None and kept.pending.next_try == 130.0 and kept.pending.attempts == 2
    restored = PolicyState.from_dict(state.to_dict())
    assert restored == state
    # An UNKNOWN pass (the check timed out) retries the pending action once Slurm answers.
    retried, after = decide(_pass("UNKNOWN"), restored, BUSY, settings, PREFIX)
    assert retried.action is Action.TAKE_OUT_NOW and after.pending is None
    # A clean pass drops it.
    clean, after = decide(_pass(), restored, None, settings, PREFIX)
    assert clean.action is Action.NONE and after.pending is None


def test_pending_is_revalidated_against_the_node() -> None:
    pending = Pending(Action.TAKE_OUT_NOW, "healthd: X y", (FindingRef("t/X/y"),), 1, 0.0, 0.0, "down")
    decision, _ = decide(_pass("UNKNOWN"), PolicyState(pending=pending), ADMIN_DRAIN, PolicySettings(), PREFIX)
    assert decision.action is Action.NONE


def test_admin_resume_is_an_acknowledgement() -> None:
    refs = (FindingRef("t/CODE_0/subj0", "e1"),)
    state = after_apply(PolicyState(), Decision(Action.TAKE_OUT_NOW, Action.TAKE_OUT_NOW, "r", "", refs))
    assert state.took_out == refs
    assert acknowledged_by_resume(state, OURS) == ()
    assert acknowledged_by_resume(state, ADMIN_DRAIN) == ()
    assert acknowledged_by_resume(state, IDLE) == refs
    assert after_apply(state, Decision(Action.RESUME, Action.RESUME, "", "")).took_out == ()


@pytest.mark.parametrize(
    ("counts", "fraction", "held"),
    [
        ({"batch": (0, 3)}, 0.34, False),
        ({"batch": (1, 3)}, 0.34, True),
        ({"batch": (1, 3)}, 0.7, False),
        ({"batch": (0, 1)}, 0.1, False),
        ({"batch": (1, 100)}, 0.1, False),
        ({"batch": (9, 100)}, 0.1, False),
        ({"batch": (10, 100)}, 0.1, True),
        ({"a": (0, 3), "b": (2, 4)}, 0.5, True),
    ],
)
def test_circuit_breaker(counts: dict[str, tuple[int, int]], fraction: float, held: bool) -> None:
    decision = Decision(Action.TAKE_OUT_NOW, Action.TAKE_OUT_NOW, "r", "")
    result, why = circuit_breaker(decision, counts, PolicySettings(max_out_fraction=fraction))
    assert (result.action is Action.HOLD) is held
    assert bool(why) is held
    assert result.intended is Action.TAKE_OUT_NOW


def test_acks_downgrade_and_lapse() -> None:
    keyed = Ack(FindingRef("t/CODE_0/subj0"), 1.0, "cli")
    result, kept = apply_acks(_pass("CRITICAL"), [keyed])
    assert result.status is Status.OK and kept == (keyed,)
    finding = result.findings[0]
    assert finding.details["acknowledged"] is True and finding.details["acknowledged_status"] == "CRITICAL"
    _, kept = apply_acks(_pass(), [keyed])
    assert kept == ()
    timed_out = replace(_pass(), results=(CheckResult("t", RunState.TIMEOUT, (), 1.0),))
    _, kept = apply_acks(timed_out, [keyed])
    assert kept == (keyed,), "a check that did not run says nothing about the finding"


def test_event_ack_does_not_cover_a_new_event() -> None:
    ack = Ack(FindingRef("t/CODE_0/subj0", "e1"), 1.0, "slurm-resume")
    assert apply_acks(_pass("CRITICAL", event="e1"), [ack])[0].status is Status.OK
    assert apply_acks(_pass("CRITICAL", event="e2"), [ack])[0].status is Status.CRITICAL


@pytest.mark.parametrize(
    ("statuses", "state", "now", "needed"),
    [
        ((), PolicyState(last_read=1000.0), 1100.0, False),
        ((), PolicyState(last_read=1000.0), 4600.0, True),
        (("UNKNOWN",), PolicyState(last_read=1000.0), 1100.0, False),
        (("WARNING",), PolicyState(last_read=1000.0), 1100.0, True),
        ((), PolicyState(last_read=1000.0, took_out=(FindingRef("t/X/y"),)), 1100.0, True),
    ],
)
def test_reads_only_when_needed(statuses: tuple[str, ...], state: PolicyState, now: float, needed: bool) -> None:
    assert needs_node(_pass(*statuses), state, PolicySettings(), now, 3600.0) is needed
