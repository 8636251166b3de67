"""Table-driven tests of the pure policy: severity, hysteresis, ownership, pending, circuit breaker."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional, Union

import pytest
from hypothesis import given
from hypothesis import strategies as st

from healthd.config.models import Config, EscalationSettings, PolicySettings, SlurmSettings
from healthd.cycle.execute import execute
from healthd.cycle.render import pass_to_dict
from healthd.model import CheckResult, Finding, PassResult, RunState, Status, Tier
from healthd.plan.acks import Ack, FindingRef, apply_acks, refs_from_document
from healthd.plan.breaker import (
    BREAKER_BASE,
    BREAKER_MAX,
    allowed_out,
    breaker_confirm,
    breaker_held,
    circuit_breaker,
    group_views,
)
from healthd.plan.plan import (
    Executed,
    Observed,
    Plan,
    Read,
    Situation,
    Step,
    conclude,
    plan,
)
from healthd.plan.policy import decide
from healthd.plan.rules import (
    Coverage,
    PassFacts,
    PolicyRules,
    acknowledged_by_resume,
    after_apply,
    after_failure,
    needs_node,
)
from healthd.plan.state import Action, BreakerHold, Decision, Pending, PolicyState
from healthd.slurm.adapter import SlurmClient, SlurmError
from healthd.slurm.nodestate import NodeGroup, NodeInfo, PartitionView
from healthd.slurm.problem import SlurmFailure, SlurmProblem
from healthd.slurm.reasons import Reasons, place_stamp, with_place


def _failure(message: str) -> SlurmProblem:
    """A Slurm failure as the adapter gives it (healthd.slurm.command.SlurmError)."""
    return SlurmError(message, SlurmFailure.UNREACHABLE).problem


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
OURS_OTHER = _node("IDLE", "DRAIN", "healthd: OTHER thing (+3 more)")
ADMIN_FAIL = _node("ALLOCATED", "FAIL", "admin: PSU fault")
ADMIN_REASON_IN_SERVICE = _node("ALLOCATED", "", "admin: watch this node")
LEMON = _node("IDLE", "DRAIN", "healthd: LEMON 9 incidents, 3/40 runs failed, score 6.1")
LEMON_BUSY = _node("MIXED", "DRAIN", "healthd: LEMON 9 incidents, 3/40 runs failed, score 6.1")


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
            {"unknown_streaks": {"t": 1}},
            Action.DRAIN_AFTER_JOBS,
        ),
        (("CRITICAL", "UNKNOWN"), BUSY, {}, {}, Action.TAKE_OUT_NOW),
        (("WARNING", "UNKNOWN"), BUSY, {}, {}, Action.DRAIN_AFTER_JOBS),
        (("CRITICAL",), BUSY, {"fail_passes": 3}, {"fail_streaks": {"t": 1}}, Action.HOLD),
        (("CRITICAL",), BUSY, {"fail_passes": 3}, {"fail_streaks": {"t": 2}}, Action.TAKE_OUT_NOW),
        (("CRITICAL",), BUSY, {"fail_passes": 3}, {"fail_streaks": {"other": 2}}, Action.HOLD),
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
        (("CRITICAL",), ADMIN_FAIL, {}, {}, Action.NONE),
        ((), ADMIN_FAIL, {}, {}, Action.NONE),
        (("CRITICAL",), ADMIN_REASON_IN_SERVICE, {}, {}, Action.NONE),
        (("CRITICAL",), REBOOT, {}, {}, Action.NONE),
        (("CRITICAL",), OURS, {}, {}, Action.NONE),
        (("CRITICAL",), OURS_BUSY, {}, {}, Action.TAKE_OUT_NOW),
        (("WARNING",), OURS_BUSY, {}, {}, Action.NONE),
        (("WARNING", "WARNING"), OURS, {}, {}, Action.NONE),
        (("WARNING",), OURS_OTHER, {}, {}, Action.DRAIN_AFTER_JOBS),
        (("UNKNOWN",), OURS, {}, {}, Action.NONE),
        # A lemon drain (healthd fleet lemons) is neither lifted by a clean pass nor rewritten by a warning.
        ((), LEMON, {}, {}, Action.NONE),
        (("WARNING",), LEMON, {}, {}, Action.NONE),
        (("CRITICAL",), LEMON_BUSY, {}, {}, Action.TAKE_OUT_NOW),
    ],
)
def test_decision_table(
    statuses: tuple[str, ...], node: NodeInfo, settings: dict[str, object], streaks: dict[str, int], expected: Action
) -> None:
    decision, _ = decide(
        PassFacts(_pass(*statuses), PolicyState(**streaks), node),
        PolicyRules(PolicySettings(**settings), Reasons()),
    )
    assert decision.action is expected, decision.explanation


@pytest.mark.parametrize(
    ("statuses", "reason", "expected"),
    [
        # Out with the configured prefix: healthd's own, resumed or kept out with its reason updated.
        ((), "site hc: CODE_0 subj0", Action.RESUME),
        (("WARNING",), "site hc: OTHER thing", Action.DRAIN_AFTER_JOBS),
        # The default prefix is another tool's once the config names a prefix of its own.
        ((), "healthd: CODE_0 subj0", Action.NONE),
        (("CRITICAL",), "healthd: CODE_0 subj0", Action.NONE),
        # The prefix's first word alone, or glued to the next, is not the prefix.
        ((), "site CODE_0 subj0", Action.NONE),
        ((), "site hc:CODE_0 subj0", Action.NONE),
        ((), "site hc: LEMON 9 incidents", Action.NONE),
    ],
)
def test_a_configured_prefix_decides_which_drains_are_healthds(
    statuses: tuple[str, ...], reason: str, expected: Action
) -> None:
    """``[slurm] reason_prefix`` reaches the policy once, in ``PolicyRules.reasons``: it alone says
    which drain healthd may lift or rewrite, and every reason written carries it."""
    rules = PolicyRules(PolicySettings(), Reasons("site hc:"))
    decision, _ = decide(PassFacts(_pass(*statuses), PolicyState(), _node("IDLE", "DRAIN", reason)), rules)
    assert decision.action is expected, decision.explanation
    taken, _ = decide(PassFacts(_pass("CRITICAL", "WARNING"), PolicyState(), BUSY), rules)
    assert taken.reason == "site hc: CODE_0 subj0 (+1 more)"


def test_reason_names_worst_finding_and_counts_the_rest() -> None:
    decision, _ = decide(
        PassFacts(_pass("WARNING", "CRITICAL", "WARNING"), PolicyState(), BUSY),
        PolicyRules(PolicySettings(), Reasons()),
    )
    assert decision.reason == "healthd: CODE_1 subj1 (+2 more)"
    assert decision.causes == tuple(FindingRef(f"t/CODE_{i}/subj{i}") for i in range(3))


def _checks(*results: tuple[str, RunState, tuple[tuple[str, str, str], ...]]) -> PassResult:
    """A pass of several checks: (check, run state, ((status, code, subject), ...))."""
    return PassResult(
        "n1",
        0.0,
        0.1,
        tuple(
            CheckResult(name, state, tuple(Finding(name, Status[s], code, subj, "m") for s, code, subj in found), 0.1)
            for name, state, found in results
        ),
    )


RAN = RunState.RAN


def test_reason_and_causes_follow_the_acting_order_not_the_report_order() -> None:
    """A timed-out check (UNKNOWN) must neither name the reason nor be acknowledged by a resume."""
    result = _checks(
        ("gpu", RunState.TIMEOUT, (("UNKNOWN", "CHECK_TIMEOUT", "gpu"),)),
        ("infiniband", RAN, (("WARNING", "IB_SYMBOL_ERRORS", "mlx5_0:1"),)),
    )
    for settings in (PolicySettings(), PolicySettings(unknown_action="drain", unknown_passes=1)):
        decision, _ = decide(PassFacts(result, PolicyState(), BUSY), PolicyRules(settings, Reasons()))
        assert decision.action is Action.DRAIN_AFTER_JOBS
        assert decision.reason.startswith("healthd: IB_SYMBOL_ERRORS mlx5_0:1")
        assert decision.causes == (FindingRef("infiniband/IB_SYMBOL_ERRORS/mlx5_0:1"),)
    only_timeout = _checks(("gpu", RunState.TIMEOUT, (("UNKNOWN", "CHECK_TIMEOUT", "gpu"),)))
    drain = PolicySettings(unknown_action="drain", unknown_passes=1)
    decision, _ = decide(PassFacts(only_timeout, PolicyState(), BUSY), PolicyRules(drain, Reasons()))
    assert decision.action is Action.DRAIN_AFTER_JOBS and decision.causes == ()


def test_runner_unknowns_are_never_acknowledged() -> None:
    result = _checks(("gpu", RunState.TIMEOUT, (("UNKNOWN", "CHECK_TIMEOUT", "gpu"),)))
    ack = Ack(FindingRef("gpu/CHECK_TIMEOUT/gpu"), 1.0, "slurm-resume")
    acked, _ = apply_acks(result, [ack])
    assert acked.status is Status.UNKNOWN
    assert refs_from_document(pass_to_dict(result), []) == []


def test_hysteresis_is_per_check() -> None:
    """fail_passes counts passes of the same check failing; two checks taking turns never act."""
    settings = PolicySettings(fail_passes=2)
    a_fails = _checks(("a", RAN, (("WARNING", "A", "x"),)), ("b", RAN, ()))
    b_fails = _checks(("a", RAN, ()), ("b", RAN, (("WARNING", "B", "y"),)))
    state = PolicyState()
    for result in (a_fails, b_fails, a_fails, b_fails):
        decision, state = decide(PassFacts(result, state, BUSY), PolicyRules(settings, Reasons()))
        assert decision.action is Action.HOLD, decision.explanation
        assert decision.intended is Action.DRAIN_AFTER_JOBS
    decision, state = decide(PassFacts(b_fails, state, BUSY), PolicyRules(settings, Reasons()))
    assert decision.action is Action.DRAIN_AFTER_JOBS and decision.reason == "healthd: B y"
    assert dict(state.fail_streaks) == {"b": 2}


def test_ready_check_acts_while_another_still_waits() -> None:
    settings = PolicySettings(fail_passes=2)
    state = PolicyState(fail_streaks={"b": 1})
    result = _checks(("a", RAN, (("CRITICAL", "A", "x"),)), ("b", RAN, (("WARNING", "B", "y"),)))
    decision, state = decide(PassFacts(result, state, BUSY), PolicyRules(settings, Reasons()))
    assert decision.action is Action.DRAIN_AFTER_JOBS and decision.reason == "healthd: B y"
    assert "CRITICAL from a for 1 of 2" in decision.explanation
    decision, _ = decide(PassFacts(result, state, BUSY), PolicyRules(settings, Reasons()))
    assert decision.action is Action.TAKE_OUT_NOW and decision.reason == "healthd: A x (+1 more)"


def test_streaks_count_consecutive_passes_and_reset() -> None:
    settings = PolicySettings(fail_passes=2)
    _, state = decide(PassFacts(_pass("WARNING"), PolicyState(), BUSY), PolicyRules(settings, Reasons()))
    assert dict(state.fail_streaks) == {"t": 1}
    _, state = decide(PassFacts(_pass("UNKNOWN"), state, BUSY), PolicyRules(settings, Reasons()))
    assert (dict(state.fail_streaks), dict(state.unknown_streaks)) == ({}, {"t": 1})
    _, state = decide(PassFacts(_pass(), state, BUSY), PolicyRules(settings, Reasons()))
    assert (dict(state.fail_streaks), dict(state.unknown_streaks), state.clean_streak) == ({}, {}, 1)
    # A timeout says nothing about the fault: the fail streak is kept; --only keeps absent checks'.
    _, state = decide(PassFacts(_pass("WARNING"), PolicyState(), BUSY), PolicyRules(settings, Reasons()))
    timed_out = _checks(("t", RunState.TIMEOUT, (("UNKNOWN", "CHECK_TIMEOUT", "t"),)))
    _, state = decide(PassFacts(timed_out, state, BUSY), PolicyRules(settings, Reasons()))
    assert dict(state.fail_streaks) == {"t": 1}
    _, state = decide(
        PassFacts(_checks(("other", RAN, ())), state, BUSY, partial=True), PolicyRules(settings, Reasons())
    )
    assert dict(state.fail_streaks) == {"t": 1}
    _, state = decide(PassFacts(_checks(("other", RAN, ())), state, BUSY), PolicyRules(settings, Reasons()))
    assert dict(state.fail_streaks) == {}, "a full pass forgets checks that no longer exist"


def test_partial_pass_never_resumes_for_a_check_that_did_not_run() -> None:
    """The review's reproduction: --only mounts drained the node, --only services must not resume it."""
    took_out = PolicyState(took_out=(FindingRef("mounts/MOUNT_MISSING//scratch"),))
    services_only = _checks(("services", RAN, ()))
    decision, _ = decide(
        PassFacts(services_only, took_out, OURS, partial=True), PolicyRules(PolicySettings(), Reasons())
    )
    assert decision.action is Action.NONE and "mounts" in decision.explanation
    decision, _ = decide(
        PassFacts(services_only, took_out, None, partial=True), PolicyRules(PolicySettings(), Reasons())
    )
    assert decision.action is Action.NONE, "not even as a pending resume"
    decision, _ = decide(
        PassFacts(services_only, PolicyState(), OURS, partial=True), PolicyRules(PolicySettings(), Reasons())
    )
    assert decision.action is Action.NONE, "unknown causes: a partial pass proves nothing"
    mounts_only = _checks(("mounts", RAN, ()))
    decision, _ = decide(PassFacts(mounts_only, took_out, OURS, partial=True), PolicyRules(PolicySettings(), Reasons()))
    assert decision.action is Action.RESUME
    decision, _ = decide(PassFacts(services_only, took_out, OURS), PolicyRules(PolicySettings(), Reasons()))
    assert decision.action is Action.NONE, "a full pass without the check (disabled, removed) does not resume"


DCGM = frozenset({"dcgm"})
ORDINARY = Coverage(Tier.ORDINARY, DCGM)
ACTIVE_ALONE = Coverage(Tier.ACTIVE, DCGM)
EVERY_CHECK = Coverage(Tier.ALL, DCGM)
EPILOG = _node("IDLE", "COMPLETING")
DCGM_OUT = _node("IDLE", "DRAIN", "healthd: DCGM_PCIE_FAILED GPU 1")


@pytest.mark.parametrize(
    ("status", "settings"),
    [("WARNING", PolicySettings(fail_passes=2)), ("UNKNOWN", PolicySettings(unknown_action="drain", unknown_passes=2))],
)
def test_ordinary_passes_between_two_diagnostics_keep_the_active_checks_streak(
    status: str, settings: PolicySettings
) -> None:
    """The review's reproduction: the hook's pass wiped dcgm's streak after each epilog's, so it never drained."""
    failing = _checks(("dcgm", RAN, ((status, "DCGM_PCIE_FAILED", "GPU 1"),)))
    clean = _checks(("infiniband", RAN, ()))
    decision, state = decide(
        PassFacts(failing, PolicyState(), EPILOG, partial=True, coverage=ACTIVE_ALONE),
        PolicyRules(settings, Reasons()),
    )
    assert decision.action is Action.HOLD
    _, state = decide(PassFacts(clean, state, IDLE, coverage=ORDINARY), PolicyRules(settings, Reasons()))
    streaks = state.fail_streaks if status == "WARNING" else state.unknown_streaks
    assert dict(streaks) == {"dcgm": 1}, "an ordinary pass leaves the active checks out: it keeps their count"
    decision, _ = decide(
        PassFacts(failing, state, EPILOG, partial=True, coverage=ACTIVE_ALONE), PolicyRules(settings, Reasons())
    )
    assert decision.action is Action.DRAIN_AFTER_JOBS and decision.reason == "healthd: DCGM_PCIE_FAILED GPU 1"
    _, state = decide(PassFacts(clean, state, IDLE, coverage=Coverage()), PolicyRules(settings, Reasons()))
    assert dict(state.fail_streaks) == dict(state.unknown_streaks) == {}, "dcgm no longer enabled: forgotten"


def test_no_resume_while_a_diagnostic_runs() -> None:
    """The hook's pass must not put the node in service beside ``dcgmi diag`` (another process holds active.lock)."""
    took_out = PolicyState(took_out=(FindingRef("t/CODE_0/subj0"),))
    running = ORDINARY._replace(active_running=True)
    for node in (OURS, None):
        decision, _ = decide(
            PassFacts(_pass(), took_out, node, coverage=running), PolicyRules(PolicySettings(), Reasons())
        )
        assert decision.action is Action.HOLD and decision.intended is Action.RESUME
        assert decision.explanation == "not resuming: active checks are running on this node (active.lock is held)"
    decision, _ = decide(
        PassFacts(_pass(), took_out, OURS, coverage=ORDINARY), PolicyRules(PolicySettings(), Reasons())
    )
    assert decision.action is Action.RESUME


def test_a_lost_state_resumes_only_from_a_pass_of_every_check_when_active_checks_are_enabled() -> None:
    """The review's reproduction: an empty state and healthd's dcgm reason made an ordinary pass resume."""
    ordinary = _checks(("infiniband", RAN, ()))
    decision, _ = decide(
        PassFacts(ordinary, PolicyState(), DCGM_OUT, coverage=ORDINARY), PolicyRules(PolicySettings(), Reasons())
    )
    assert decision.action is Action.HOLD and decision.intended is Action.RESUME
    assert "policy state lost" in decision.explanation and "(dcgm) did not run" in decision.explanation
    whole = _checks(("infiniband", RAN, ()), ("dcgm", RAN, ()))
    decision, _ = decide(
        PassFacts(whole, PolicyState(), DCGM_OUT, coverage=EVERY_CHECK), PolicyRules(PolicySettings(), Reasons())
    )
    assert decision.action is Action.RESUME
    decision, _ = decide(
        PassFacts(ordinary, PolicyState(), DCGM_OUT, coverage=Coverage()),
        PolicyRules(PolicySettings(), Reasons()),
    )
    assert decision.action is Action.RESUME, "no active check enabled: an ordinary pass is every check"


def test_a_pass_of_the_active_checks_alone_never_resumes() -> None:
    """The review's reproduction: ``check --once --active`` resumed a node healthd drained for dcgm."""
    took_out = PolicyState(took_out=(FindingRef("dcgm/DCGM_PCIE_FAILED/GPU 1"),), clean_streak=5)
    dcgm_only = _checks(("dcgm", RAN, ()))
    decision, _ = decide(
        PassFacts(dcgm_only, took_out, DCGM_OUT, partial=True, coverage=ACTIVE_ALONE),
        PolicyRules(PolicySettings(), Reasons()),
    )
    assert decision.action is Action.HOLD and decision.intended is Action.RESUME
    assert decision.explanation.startswith("not resuming on a pass of the active checks alone")
    whole = _checks(("infiniband", RAN, ()), ("dcgm", RAN, ()))
    decision, _ = decide(
        PassFacts(whole, took_out, DCGM_OUT, coverage=EVERY_CHECK), PolicyRules(PolicySettings(), Reasons())
    )
    assert decision.action is Action.RESUME, "the daemon's pass of every check resumes"


def test_pending_survives_a_read_that_works_and_a_write_that_fails() -> None:
    """Backoff grows while slurmctld answers reads but rejects the write (it used to restart every pass)."""
    state = PolicyState()
    for attempt, delay in ((1, 10.0), (2, 20.0), (3, 40.0), (4, 80.0)):
        decision, state = decide(PassFacts(_pass("CRITICAL"), state, BUSY), PolicyRules(PolicySettings(), Reasons()))
        assert decision.action is Action.TAKE_OUT_NOW
        state = after_failure(state, decision, "rejected", now=1000.0, attempted=True)
        assert state.pending is not None
        assert (state.pending.attempts, state.pending.next_try) == (attempt, 1000.0 + delay)
    decision, cleared = decide(PassFacts(_pass(), state, BUSY), PolicyRules(PolicySettings(), Reasons()))
    assert cleared.pending is None, "a pass that no longer calls for the action drops it"
    decision, _ = decide(PassFacts(_pass("CRITICAL"), state, BUSY), PolicyRules(PolicySettings(), Reasons()))
    assert after_apply(state, decision).pending is None


def test_own_findings_do_not_keep_a_pending_take_out() -> None:
    pending = Pending(Action.TAKE_OUT_NOW, "healthd: X y", (FindingRef("t/X/y"),), 1, 0.0, 0.0, "down")
    own = _checks(("healthd", RAN, (("WARNING", "STATE_PROBLEM", "/var/lib/healthd"),)), ("t", RAN, ()))
    decision, state = decide(
        PassFacts(own, PolicyState(pending=pending), None), PolicyRules(PolicySettings(), Reasons())
    )
    assert decision.action is Action.NONE and state.pending is None


def test_breaker_hold_backs_off_with_a_stable_per_node_jitter() -> None:
    state = PolicyState()
    delays = []
    for _ in range(8):
        state = breaker_held(state, "why", 0.0, "gpu001")
        assert state.held is not None
        delays.append(state.held.next_check)
    assert delays == sorted(delays) and delays[-1] <= BREAKER_MAX * 1.25
    assert BREAKER_BASE * 0.75 <= delays[0] < BREAKER_BASE * 1.25
    assert breaker_held(PolicyState(), "why", 0.0, "gpu001") == breaker_held(PolicyState(), "why", 0.0, "gpu001")
    spread = {breaker_held(PolicyState(), "w", 0.0, f"gpu{i:03}").held.next_check for i in range(50)}  # type: ignore[union-attr]
    assert len(spread) > 25
    assert PolicyState.from_dict(state.to_dict()) == state


def test_unreachable_slurm_keeps_intent_and_pending_is_retried() -> None:
    settings = PolicySettings()
    decision, state = decide(PassFacts(_pass("CRITICAL"), PolicyState(), None), PolicyRules(settings, Reasons()))
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
    retried, after = decide(PassFacts(_pass("UNKNOWN"), restored, BUSY), PolicyRules(settings, Reasons()))
    assert retried.action is Action.TAKE_OUT_NOW and after.pending == restored.pending
    # A clean pass drops it.
    clean, after = decide(PassFacts(_pass(), restored, None), PolicyRules(settings, Reasons()))
    assert clean.action is Action.NONE and after.pending is None


def test_pending_is_revalidated_against_the_node() -> None:
    pending = Pending(Action.TAKE_OUT_NOW, "healthd: X y", (FindingRef("t/X/y"),), 1, 0.0, 0.0, "down")
    decision, _ = decide(
        PassFacts(_pass("UNKNOWN"), PolicyState(pending=pending), ADMIN_DRAIN),
        PolicyRules(PolicySettings(), Reasons()),
    )
    assert decision.action is Action.NONE


def test_admin_resume_is_an_acknowledgement() -> None:
    refs = (FindingRef("t/CODE_0/subj0", "e1"),)
    state = after_apply(PolicyState(), Decision(Action.TAKE_OUT_NOW, Action.TAKE_OUT_NOW, "r", "", refs))
    assert state.took_out == refs
    assert acknowledged_by_resume(state, OURS) == ()
    assert acknowledged_by_resume(state, ADMIN_DRAIN) == ()
    assert acknowledged_by_resume(state, IDLE) == refs
    assert after_apply(state, Decision(Action.RESUME, Action.RESUME, "", "")).took_out == ()


def _view(name: str, size: int, *out: str) -> PartitionView:
    return PartitionView(name, size, tuple((True, float(i), n) for i, n in enumerate(out)))


@pytest.mark.parametrize(
    ("size", "fraction", "allowed"),
    [(3, 0.34, 1), (3, 0.7, 2), (1, 0.1, 1), (100, 0.1, 10), (100, 0.29, 29), (10, 0.3, 3), (7, 1.0, 7), (5, 0.01, 1)],
)
def test_the_limit_is_a_fraction_of_the_whole_partition(size: int, fraction: float, allowed: int) -> None:
    """docs/policy.md: 10% of 100 nodes is 10; the first node may always go."""
    assert allowed_out(size, fraction) == allowed


@pytest.mark.parametrize(
    ("views", "fraction", "held"),
    [
        ({"batch": _view("batch", 3)}, 0.34, False),
        ({"batch": _view("batch", 3, "n2")}, 0.34, True),
        ({"batch": _view("batch", 3, "n2")}, 0.7, False),
        ({"batch": _view("batch", 1)}, 0.1, False),
        ({"batch": _view("batch", 100, *(f"o{i}" for i in range(9)))}, 0.1, False),
        ({"batch": _view("batch", 100, *(f"o{i}" for i in range(10)))}, 0.1, True),
        ({"batch": _view("batch", 3, "n1")}, 0.34, False),
        ({"a": _view("a", 3), "b": _view("b", 4, "x", "y")}, 0.5, True),
    ],
)
def test_circuit_breaker(views: dict[str, PartitionView], fraction: float, held: bool) -> None:
    decision = Decision(Action.TAKE_OUT_NOW, Action.TAKE_OUT_NOW, "r", "")
    result, why = circuit_breaker(decision, "n1", views, PolicySettings(max_out_fraction=fraction))
    assert (result.action is Action.HOLD) is held
    assert bool(why) is held
    assert result.intended is Action.TAKE_OUT_NOW


def test_breaker_message_counts_the_whole_partition() -> None:
    decision = Decision(Action.TAKE_OUT_NOW, Action.TAKE_OUT_NOW, "r", "")
    _, why = circuit_breaker(decision, "n1", {"batch": _view("batch", 3, "n2")}, PolicySettings(max_out_fraction=0.34))
    assert why == (
        "partition batch: 1 of its 3 nodes taken out by healthd in the last 3600s; the limit is 1"
        " ([policy].max_out_fraction = 0.34)"
    )


@pytest.mark.parametrize(
    ("out", "fraction", "keeps"),
    [
        (("n1",), 0.34, True),
        (("n1", "n2", "n3"), 0.34, True),
        (("n2", "n1", "n3"), 0.34, False),
        (("n2", "n1"), 0.7, True),
        (("n2", "n3", "n1"), 0.7, False),
        (("n2",), 0.34, False),
    ],
)
def test_breaker_confirm_keeps_the_earliest_drains(out: tuple[str, ...], fraction: float, keeps: bool) -> None:
    why = breaker_confirm("n1", {"batch": _view("batch", 3, *out)}, PolicySettings(max_out_fraction=fraction))
    assert (why == "") is keeps


@given(
    drains=st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from("abcdefgh")), min_size=1, max_size=8, unique_by=lambda d: d[1]
    ),
    fraction=st.sampled_from([0.1, 0.25, 0.34, 0.5, 0.9]),
    draw=st.data(),
)
def test_breaker_confirm_never_keeps_more_than_the_limit(
    drains: list[tuple[int, str]], fraction: float, draw: st.DataObject
) -> None:
    """Any interleaving: each node reads >= 1.2 s after its own drain; stamps are whole seconds of one clock.

    A node sees every drain sent before its read and keeps its place only if
    ``breaker_confirm`` says so; otherwise it resumes (later readers no longer see
    it). A node that keeps its place and takes out now is set DOWN a moment later:
    that update stamps its reason again, and the reason carries its drain's stamp
    (``with_place``). slurmd may bring a DOWN node back (ReturnToService=2): still
    drained, no longer DOWN, its reason stamped at the DOWN. A kept node may have its
    reason updated by a later fault: that drain is stamped again and carries the place
    too (``execute``). The partition is read as
    sinfo's groups through ``group_views``. However the reads interleave, the kept
    nodes never exceed the limit.
    """
    size = 8
    settings = PolicySettings(max_out_fraction=fraction)
    events: list[tuple[float, str, str]] = []
    now_down = {name: draw.draw(st.booleans(), label=f"take out now {name}") for _, name in drains}
    for second, name in drains:
        at = second + draw.draw(st.floats(0, 0.99), label=f"offset {name}")
        events.append((at, "drain", name))
        events.append((at + 1.2 + draw.draw(st.floats(0, 3), label=f"delay {name}"), "read", name))
    groups: dict[str, NodeGroup] = {}
    kept: set[str] = set()
    events.sort()
    while events:
        at, kind, name = events.pop(0)
        if kind == "drain":
            groups[name] = NodeGroup("p", 1, "IDLE", frozenset({"DRAIN"}), "healthd: X", float(int(at)), name)
            continue
        if kind in ("down", "back", "update"):
            group = groups[name]
            place = place_stamp(group.reason)
            place = place if place is not None else group.reason_time or 0.0
            if kind == "update":
                # Another fault on a node that holds its place: its reason is drained again, stamped now.
                groups[name] = replace(group, reason=with_place("healthd: Y", place), reason_time=float(int(at)))
                continue
            down = kind == "down"
            reason = with_place(group.reason, place)
            stamp = float(int(at)) if down else group.reason_time
            groups[name] = replace(group, state="DOWN" if down else "IDLE", reason=reason, reason_time=stamp)
            continue
        idle = NodeGroup("p", size - len(groups), "IDLE", frozenset(), "", None, "spare[1-8]")
        views = group_views([*groups.values(), idle], ("p",), Reasons())
        if breaker_confirm(name, views, settings):
            del groups[name]
        else:
            kept.add(name)
            if draw.draw(st.booleans(), label=f"update {name}"):
                events.append((at + draw.draw(st.floats(0.01, 4), label=f"update after {name}"), "update", name))
                events.sort()
            if now_down[name]:
                down_at = at + draw.draw(st.floats(0.01, 0.5), label=f"down {name}")
                events.append((down_at, "down", name))
                if draw.draw(st.booleans(), label=f"back {name}"):
                    events.append((down_at + draw.draw(st.floats(0.01, 4), label=f"back after {name}"), "back", name))
                events.sort()
    assert len(kept) <= allowed_out(size, fraction)
    assert kept, "the first node to drain always keeps its place"


WINDOW = 30.0


@given(
    drains=st.lists(
        st.tuples(st.integers(0, 150), st.sampled_from("abcdefgh")), min_size=1, max_size=8, unique_by=lambda d: d[1]
    ),
    fraction=st.sampled_from([0.1, 0.25, 0.34, 0.5]),
    draw=st.data(),
)
def test_breaker_confirm_never_keeps_more_than_the_limit_within_a_window(
    drains: list[tuple[int, str]], fraction: float, draw: st.DataObject
) -> None:
    """Drains spread over five windows; a kept node stays out for good (waiting for hardware work).

    Each node reads 1.2-4 s after its own drain and keeps its place only if
    ``breaker_confirm`` says so. However the reads interleave, no span of
    ``breaker_window`` seconds of drain stamps holds more kept nodes than the limit,
    and a node drained more than a window after every other node still out always keeps its place.
    """
    size = 8
    settings = PolicySettings(max_out_fraction=fraction, breaker_window=WINDOW)
    events = sorted(
        event
        for second, name in drains
        for at in [second + draw.draw(st.floats(0, 0.99), label=f"offset {name}")]
        for event in ((at, "drain", name), (at + 1.2 + draw.draw(st.floats(0, 3), label=f"delay {name}"), "read", name))
    )
    groups: dict[str, NodeGroup] = {}
    kept: dict[str, float] = {}
    for at, kind, name in events:
        if kind == "drain":
            groups[name] = NodeGroup("p", 1, "IDLE", frozenset({"DRAIN"}), "healthd: X", float(int(at)), name)
            continue
        idle = NodeGroup("p", size - len(groups), "IDLE", frozenset(), "", None, "spare[1-8]")
        stamp = groups[name].reason_time or 0.0
        # No other node still out drained within a window before this one: nothing ahead counts.
        fresh = all(not 0 <= stamp - (g.reason_time or 0.0) <= WINDOW for g in groups.values() if g.nodelist != name)
        if breaker_confirm(name, group_views([*groups.values(), idle], ("p",), Reasons()), settings):
            assert not fresh, f"{name} drained more than a window after every kept node, yet lost"
            del groups[name]
        else:
            kept[name] = stamp
    limit = allowed_out(size, fraction)
    for start in kept.values():
        assert sum(1 for when in kept.values() if start <= when <= start + WINDOW) <= limit


def test_a_node_out_longer_than_the_window_no_longer_holds_the_budget() -> None:
    """A REPAIR node out for hours is a backlog: the next sick node of the 3-node partition may go."""
    settings = PolicySettings(max_out_fraction=0.34, breaker_window=3600.0)
    now = 1_800_000_000.0
    old = {"batch": PartitionView("batch", 3, ((False, now - 7200.0, "n2"),))}
    recent = {"batch": PartitionView("batch", 3, ((False, now - 600.0, "n2"),))}
    decision = Decision(Action.TAKE_OUT_NOW, Action.TAKE_OUT_NOW, "r", "")
    assert circuit_breaker(decision, "n1", old, settings, now)[1] == ""
    assert circuit_breaker(decision, "n1", recent, settings, now)[1].startswith("partition batch: 1 of its 3 nodes")
    # After the drain: n2's take-out is more than a window before n1's own drain stamp.
    drained = {"batch": PartitionView("batch", 3, ((False, now - 7200.0, "n2"), (True, now, "n1")))}
    assert breaker_confirm("n1", drained, settings) == ""
    close = {"batch": PartitionView("batch", 3, ((False, now - 600.0, "n2"), (True, now, "n1")))}
    assert breaker_confirm("n1", close, settings) != ""


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("healthd: MOUNT_MISSING /scratch (+1 more)", "MOUNT_MISSING"),
        ("healthd: REPAIR XID_48 0000:3b:00 x3 #1800000000", "XID_48"),
        ("healthd: REBOOT XID_79 gpu0 : reboot issued", "XID_79"),
        ("healthd: LEMON 4 drains in 30 days", ""),
        ("maintenance: XID_48", ""),
        ("healthd:", ""),
    ],
)
def test_reason_code_names_the_finding_a_healthd_reason_is_about(reason: str, code: str) -> None:
    assert Reasons().code(reason) == code


def test_acks_downgrade_and_lapse() -> None:
    keyed = Ack(FindingRef("t/CODE_0/subj0"), 1.0, "cli")
    result, kept = apply_acks(_pass("CRITICAL"), [keyed])
    assert result.status is Status.OK and kept == (keyed,)
    finding = result.findings[0]
    assert finding.details["acknowledged"] is True and finding.details["acknowledged_status"] == "CRITICAL"
    _, kept = apply_acks(_pass(), [keyed])
    assert kept == ()
    timed_out = _pass()._replace(results=(CheckResult("t", RunState.TIMEOUT, (), 1.0),))
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


ESCALATION = EscalationSettings(repeats=3, window_days=30, overrides={"CODE_9": 0})


def _decide_with(repeats: int, *, code: str = "CODE_0") -> tuple[Decision, PolicyState]:
    result = _pass("CRITICAL")
    if code != "CODE_0":
        finding = replace(result.findings[0], code=code)
        result = result._replace(results=(result.results[0]._replace(findings=(finding,)),))
    key = result.findings[0].key
    counts = {key: ("GPU-1", repeats)}
    return decide(
        PassFacts(result, PolicyState(), IDLE, repeats=counts),
        PolicyRules(PolicySettings(), Reasons(), escalation=ESCALATION),
    )


def test_the_third_repeat_sends_the_node_to_repair() -> None:
    decision, state = _decide_with(2)
    assert decision.reason == "healthd: CODE_0 subj0" and state.repair is None
    decision, state = _decide_with(3)
    assert decision.action is Action.TAKE_OUT_NOW
    assert decision.reason == "healthd: REPAIR CODE_0 subj0 x3"
    assert state.repair is not None and (state.repair.unit, state.repair.count) == ("GPU-1", 3)
    assert "ack --repaired subj0" in decision.explanation


def test_a_code_overridden_to_zero_never_escalates() -> None:
    decision, state = _decide_with(50, code="CODE_9")
    assert not decision.reason.startswith("healthd: REPAIR") and state.repair is None


def test_a_node_in_repair_is_never_resumed_by_a_clean_pass() -> None:
    _, in_repair = _decide_with(3)
    ours = _node("IDLE", "DRAIN", "healthd: REPAIR CODE_0 subj0 x3")
    decision, state = decide(
        PassFacts(_pass(), in_repair, ours), PolicyRules(PolicySettings(), Reasons(), escalation=ESCALATION)
    )
    assert decision.action is Action.NONE and state.repair == in_repair.repair
    assert "already out" in decision.explanation


def test_repair_state_survives_the_state_file() -> None:
    _, state = _decide_with(3)
    assert PolicyState.from_dict(state.to_dict()) == state


# -- the plan's reads -------------------------------------------------------------------

WIDE_VIEWS = {"batch": PartitionView("batch", 100, ())}
HELD = BreakerHold("partition batch: full", 1000.0, 1, 1100.0)
NOTHING_READ = Observed()


def _planned(
    statuses: tuple[str, ...], state: PolicyState, observed: Observed = NOTHING_READ, now: float = 1050.0
) -> Union[Read, Plan]:
    situation = Situation(_pass(*statuses), state, (), observed, now, False, True, False)
    return plan(situation, PolicyRules(PolicySettings(), Reasons(), reconcile_interval=3600.0))


# The last breaker read counted every partition whole: the combined read is the cheaper one.
WHOLE = PolicyState(sharded=False)
COMBINED = Read.NODE_AND_PARTITIONS


@pytest.mark.parametrize(
    ("statuses", "state", "now", "read"),
    [
        # A fault pass that will take the node out: node and breaker in one read (2 RPCs, not 4).
        (("CRITICAL",), WHOLE, 1050.0, Read.NODE_AND_PARTITIONS),
        (("WARNING",), WHOLE, 1050.0, Read.NODE_AND_PARTITIONS),
        # A held node whose backoff ran out reads its partitions again, its node with them.
        (("CRITICAL",), WHOLE._replace(held=HELD), 1200.0, Read.NODE_AND_PARTITIONS),
        # A drain left unconfirmed is confirmed against the partitions.
        ((), WHOLE._replace(unconfirmed=True, took_out=(FindingRef("t/CODE_0/subj0"),)), 1050.0, COMBINED),
        # Where a partition was counted by shards, or before any breaker read, never the whole table: the node
        # alone first, then its partitions (docs/scale.md, "Breaker shards").
        (("CRITICAL",), PolicyState(), 1050.0, Read.NODE),
        (("CRITICAL",), PolicyState(sharded=True), 1050.0, Read.NODE),
        (("CRITICAL",), PolicyState(sharded=True, held=HELD), 1200.0, Read.NODE),
        ((), PolicyState(sharded=True, unconfirmed=True, took_out=(FindingRef("t/CODE_0/subj0"),)), 1050.0, Read.NODE),
        # Held within its backoff: the breaker is not asked, the cheap node read is enough.
        (("CRITICAL",), PolicyState(held=HELD), 1050.0, Read.NODE),
        # The last read found the node out by another's hand: it is left alone, no breaker to ask.
        (("CRITICAL",), PolicyState(skips_breaker=True), 1050.0, Read.NODE),
        # Already out with healthd's reason: no breaker for a node that holds its place.
        (("CRITICAL",), PolicyState(took_out=(FindingRef("t/CODE_0/subj0"),)), 1050.0, Read.NODE),
        # A resume pass (healthy, drained by healthd) and the hourly reconcile read the node alone.
        ((), PolicyState(took_out=(FindingRef("t/CODE_0/subj0"),)), 1050.0, Read.NODE),
        ((), PolicyState(last_read=0.0), 5000.0, Read.NODE),
        # Reporting UNKNOWN only calls for no take-out.
        (("UNKNOWN",), PolicyState(took_out=(FindingRef("t/CODE_0/subj0"),)), 1050.0, Read.NODE),
    ],
)
def test_the_first_read_is_combined_only_where_the_breaker_will_be_asked(
    statuses: tuple[str, ...], state: PolicyState, now: float, read: Read
) -> None:
    assert _planned(statuses, state, now=now) == read


def test_a_combined_read_answers_the_node_and_the_breaker_at_once() -> None:
    observed = Observed(asked=frozenset({Read.NODE_AND_PARTITIONS}), node=BUSY, views=WIDE_VIEWS)
    made = _planned(("CRITICAL",), PolicyState(), observed)
    assert isinstance(made, Plan), "no second read"
    assert made.decision.action is Action.TAKE_OUT_NOW and made.steps[0] is Step.DRAIN
    full = {"batch": PartitionView("batch", 10, ((True, 1.0, "other"),))}
    held = _planned(("CRITICAL",), PolicyState(), observed._replace(views=full))
    assert isinstance(held, Plan) and held.decision.action is Action.HOLD and held.steps == ()


def test_a_combined_read_that_failed_is_not_asked_again_and_leaves_the_take_out_pending() -> None:
    observed = Observed(asked=frozenset({Read.NODE_AND_PARTITIONS}), errors=(_failure("sinfo timed out"),))
    made = _planned(("CRITICAL",), PolicyState(), observed)
    assert isinstance(made, Plan) and made.steps == ()
    assert made.state.pending is not None and made.state.pending.error == "sinfo timed out"


def test_a_node_read_alone_that_finds_a_take_out_still_asks_for_the_partitions() -> None:
    """The first read is a guess: where it guessed wrong, the breaker's own read follows (no take-out unchecked)."""
    observed = Observed(asked=frozenset({Read.NODE}), node=BUSY)
    assert _planned(("CRITICAL",), PolicyState(took_out=(FindingRef("t/OLD/x"),)), observed) is Read.PARTITIONS


# -- what a read of the node teaches the next passes (docs/scale.md) ---------------------


@pytest.mark.parametrize(
    ("node", "skips"),
    [(ADMIN_DRAIN, True), (ADMIN_DOWN, True), (REBOOT, True), (OURS, True), (BUSY, False), (IDLE, False)],
)
def test_a_read_remembers_whether_a_take_out_would_skip_the_breaker(node: NodeInfo, skips: bool) -> None:
    made = _planned(("CRITICAL",), PolicyState(), Observed(asked=frozenset({Read.NODE}), node=node, views=WIDE_VIEWS))
    assert isinstance(made, Plan) and made.state.skips_breaker is skips
    assert PolicyState.from_dict(made.state.to_dict()) == made.state


def test_a_node_healthd_resumed_no_longer_skips_the_breaker() -> None:
    """The resume pass read the node out with healthd's reason; once resumed, a new fault must meet the breaker."""
    took_out = PolicyState(took_out=(FindingRef("t/CODE_0/subj0"),))
    made = _planned((), took_out, Observed(asked=frozenset({Read.NODE}), node=OURS))
    assert isinstance(made, Plan) and made.steps == (Step.RESUME,) and made.state.skips_breaker
    done = conclude(made, Executed(done=(Step.RESUME,)), took_out, 1050.0)
    assert done.applied and not done.state.skips_breaker
    failed = conclude(made, Executed(error=_failure("slurmctld down")), took_out, 1050.0)
    assert failed.state.skips_breaker, "not resumed: still out with healthd's reason"


# -- the state file: a damaged key is dropped alone ------------------------------------------

_SAVED = PolicyState(
    fail_streaks={"xid": 2},
    took_out=(FindingRef("t/XID_79/gpu0"),),
    held=HELD,
    last_read=1000.0,
    unconfirmed=True,
    reset_tried=("t/XID_79/gpu0",),
    skips_breaker=True,
)


def test_a_state_file_of_an_older_version_with_remembered_partitions_loads() -> None:
    """The keys of partition memory (no longer kept: docs/scale.md) are ignored, not a problem."""
    old = {**_SAVED.to_dict(), "partitions": ["batch", "gpu"], "partitions_read": 900.0}
    assert PolicyState.read(old) == (_SAVED, ())
    assert "partitions" not in _SAVED.to_dict()


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        ("took_out", "t/XID_79/gpu0"),
        ("took_out", [{"key": 3}]),
        ("held", {"why": "w", "next_check": "soon"}),
        ("fail_streaks", ["xid"]),
        ("last_read", "yesterday"),
        ("reset_tried", "t/XID_79/gpu0"),  # a string would be one key per letter
        ("reset_tried", ["a", 3]),
        ("unconfirmed", "false"),  # bool("false") is True
        ("skips_breaker", "false"),
        ("skips_breaker", 1),
        ("reboot", {"at": 1}),
    ],
)
def test_a_damaged_key_is_named_and_dropped_alone(key: str, bad: object) -> None:
    """One bad field must not forget what healthd took out, a hold or a reboot: the rest is kept."""
    state, problems = PolicyState.read({**_SAVED.to_dict(), key: bad})
    assert len(problems) == 1 and problems[0].startswith(f"bad policy state: {key}: "), problems
    assert state == _SAVED._replace(**{key: getattr(PolicyState(), key)})
    with pytest.raises(ValueError, match=f"bad policy state: {key}: "):
        PolicyState.from_dict({**_SAVED.to_dict(), key: bad})


def test_only_a_state_that_is_not_an_object_starts_empty() -> None:
    state, problems = PolicyState.read(["took_out"])
    assert state == PolicyState() and problems == ("bad policy state: not an object but list; starting from empty",)


# -- healthd's own RESUME is never an administrator's (docs/policy.md, "Acknowledgements") --------

GPU_LOST = Finding("gpu", Status.CRITICAL, "GPU_LOST", "gpu0", "lost")
GPU_LOST_REASON = "healthd: GPU_LOST gpu0"
GPU_LOST_REF = (FindingRef("gpu/GPU_LOST/gpu0"),)


def _gpu_pass(*findings: Finding, at: float = 1000.0) -> PassResult:
    return PassResult("n1", at, 0.1, (CheckResult("gpu", RAN, findings, 0.1),))


def _plan_of(
    result: PassResult,
    state: PolicyState,
    node: NodeInfo,
    views: Optional[dict[str, PartitionView]],
    reboot: bool = False,
) -> Plan:
    asked = frozenset({Read.NODE_AND_PARTITIONS}) if views is not None else frozenset({Read.NODE})
    situation = Situation(result, state, (), Observed(asked, node, views), result.started_at, False, True, False)
    made = plan(
        situation,
        PolicyRules(PolicySettings(max_out_fraction=0.34), Reasons(), reboot=reboot, reconcile_interval=3600.0),
    )
    assert isinstance(made, Plan)
    return made


IN_SERVICE = _node("MIXED")
GPU_OUT = _node("MIXED", "DRAIN", GPU_LOST_REASON)._replace(reason_time=101.0)
EMPTY_BATCH = {"batch": PartitionView("batch", 3, ())}


def test_a_drain_the_breaker_undid_is_not_taken_for_an_administrators_resume() -> None:
    """The review's reproduction: the undo of an unconfirmed drain kept ``took_out``, so the next pass
    read the node in service, acknowledged the real GPU_LOST as 'slurm-resume' and reported OK."""
    pending = Pending(Action.TAKE_OUT_NOW, GPU_LOST_REASON, GPU_LOST_REF, 1, 0.0, 900.0, "interrupted")
    unconfirmed = PolicyState(fail_streaks={"gpu": 1}, unconfirmed=True, pending=pending)
    lost_place = {"batch": PartitionView("batch", 3, ((True, 100.0, "n0"), (True, 101.0, "n1")))}
    undo = _plan_of(_gpu_pass(GPU_LOST), unconfirmed, GPU_OUT, lost_place)
    assert undo.decision.action is Action.HOLD and undo.steps == (Step.RESUME,)
    assert undo.state.took_out == (), "the undo leaves healthd nothing out"
    assert undo.interrupted is not None and undo.interrupted.unconfirmed and undo.interrupted.resume_sent
    saved = conclude(undo, Executed(done=(Step.RESUME,)), unconfirmed, 1000.0)
    assert saved.state.took_out == ()
    assert saved.state.held is not None

    later = saved.state.held.next_check + 1
    again = _plan_of(_gpu_pass(GPU_LOST, at=later), saved.state, IN_SERVICE, EMPTY_BATCH)
    assert again.acknowledged == () and again.acks == ()
    assert again.result.status is Status.CRITICAL
    assert again.decision.action is Action.TAKE_OUT_NOW


def test_a_failed_undo_is_confirmed_again_and_its_resume_never_acknowledges() -> None:
    """A RESUME for a HOLD that failed left ``unconfirmed`` False: the node kept the place it had lost."""
    lost_place = {"batch": PartitionView("batch", 3, ((True, 100.0, "n0"), (True, 101.0, "n1")))}
    unconfirmed = PolicyState(unconfirmed=True)
    undo = _plan_of(_gpu_pass(GPU_LOST), unconfirmed, GPU_OUT, lost_place)
    failed = conclude(undo, Executed(error=_failure("`scontrol update` timed out after 5s")), unconfirmed, 1000.0)
    assert failed.state.unconfirmed and failed.state.resume_sent and failed.state.took_out == ()


def test_a_resume_whose_answer_was_lost_is_healthds_own() -> None:
    """The review's reproduction: scontrol timed out on a RESUME that slurmctld applied; the next pass found
    the node in service with GPU_LOST back, took that for an administrator's resume and acknowledged it."""
    took_out = PolicyState(took_out=GPU_LOST_REF)
    resume = _plan_of(_gpu_pass(), took_out, GPU_OUT._replace(state="IDLE"), None)
    assert resume.steps == (Step.RESUME,)
    assert resume.interrupted is not None and resume.interrupted.resume_sent, "a pass killed after the write"
    timed_out = _failure("`scontrol update NodeName=n1 State=RESUME` timed out after 5s")
    lost = conclude(resume, Executed(error=timed_out), took_out, 1000.0)
    assert lost.state.resume_sent and lost.state.took_out == GPU_LOST_REF
    assert PolicyState.from_dict(lost.state.to_dict()) == lost.state

    back = _plan_of(_gpu_pass(GPU_LOST, at=1400.0), lost.state, IN_SERVICE, EMPTY_BATCH)
    assert back.acknowledged == () and back.result.status is Status.CRITICAL
    assert back.decision.action is Action.TAKE_OUT_NOW and back.state.took_out == ()
    assert not back.state.resume_sent


def test_a_resume_that_did_not_take_leaves_an_administrators_later_resume_an_acknowledgement() -> None:
    sent = PolicyState(took_out=GPU_LOST_REF, resume_sent=True)
    still_out = _plan_of(_gpu_pass(GPU_LOST), sent, GPU_OUT._replace(state="IDLE"), None)
    assert not still_out.state.resume_sent and still_out.state.took_out == GPU_LOST_REF
    assert still_out.decision.action is Action.NONE
    by_admin = _plan_of(_gpu_pass(GPU_LOST, at=1400.0), still_out.state, IN_SERVICE, EMPTY_BATCH)
    assert by_admin.acknowledged == GPU_LOST_REF and by_admin.result.status is Status.OK
    # Out by another's hand: whether healthd's resume took cannot be told yet, so nothing is acknowledged.
    admin_drained = _plan_of(_gpu_pass(GPU_LOST), sent, ADMIN_DRAIN._replace(state="MIXED"), None)
    assert admin_drained.acknowledged == () and admin_drained.state.resume_sent


# -- a pending take-out is sent only while its causes may still be there ------------------------

_PENDING_GPU = PolicyState(
    pending=Pending(Action.TAKE_OUT_NOW, GPU_LOST_REASON, GPU_LOST_REF, 3, 0.0, 500.0, "timed out")
)
_GPU_CLEAN = CheckResult("gpu", RAN, (), 0.1)
_MOUNTS_TIMEOUT = CheckResult(
    "mounts", RunState.TIMEOUT, (Finding("mounts", Status.UNKNOWN, "CHECK_TIMEOUT", "mounts", "t"),), 5.0
)
_IB_WARNING = CheckResult(
    "infiniband", RAN, (Finding("infiniband", Status.WARNING, "SYMBOL_ERRORS", "mlx5_0/1", "w"),), 0.1
)


@pytest.mark.parametrize(
    ("other", "settings", "action"),
    [
        (_MOUNTS_TIMEOUT, PolicySettings(), Action.NONE),
        (_IB_WARNING, PolicySettings(fail_passes=3), Action.HOLD),
    ],
)
def test_a_pending_take_out_whose_cause_cleared_is_dropped(
    other: CheckResult, settings: PolicySettings, action: Action
) -> None:
    """The review's reproduction: the gpu check now finds nothing, yet an unrelated UNKNOWN (report only)
    or a WARNING inside its hysteresis sent the pending take-out for GPU_LOST, DOWN and all."""
    result = PassResult("n1", 1000.0, 0.1, (_GPU_CLEAN, other))
    decision, state = decide(PassFacts(result, _PENDING_GPU, BUSY), PolicyRules(settings, Reasons()))
    assert decision.action is action, decision.explanation
    assert state.pending is None


@pytest.mark.parametrize(
    ("gpu", "partial"),
    [
        (CheckResult("gpu", RAN, (GPU_LOST,), 0.1), False),  # still reported (a check with fail_passes to wait)
        (
            CheckResult("gpu", RunState.TIMEOUT, (Finding("gpu", Status.UNKNOWN, "CHECK_TIMEOUT", "gpu", "t"),), 5.0),
            False,
        ),
        (CheckResult("gpu", RAN, (Finding("gpu", Status.UNKNOWN, "NVML_UNAVAILABLE", "nvml", "u"),), 0.1), False),
        (None, True),  # --only left the gpu check out: it saw nothing either way
    ],
)
def test_a_pending_take_out_is_retried_while_its_cause_may_still_be_there(
    gpu: Optional[CheckResult], partial: bool
) -> None:
    results = (_MOUNTS_TIMEOUT,) if gpu is None else (gpu, _MOUNTS_TIMEOUT)
    result = PassResult("n1", 1000.0, 0.1, results)
    settings = PolicySettings(fail_passes=3)
    decision, state = decide(PassFacts(result, _PENDING_GPU, BUSY, partial=partial), PolicyRules(settings, Reasons()))
    assert decision.action is Action.TAKE_OUT_NOW and decision.reason == GPU_LOST_REASON, decision.explanation
    assert state.pending == _PENDING_GPU.pending


def test_a_pending_take_out_of_a_check_the_config_now_disables_is_dropped() -> None:
    """Switched off while Slurm was unreachable (a misfiring check): an unrelated UNKNOWN must not send its DOWN."""
    disabled = CheckResult("gpu", RunState.DISABLED, (), 0.0, "disabled in config")
    result = PassResult("n1", 1000.0, 0.1, (disabled, _MOUNTS_TIMEOUT))
    decision, state = decide(PassFacts(result, _PENDING_GPU, BUSY), PolicyRules(PolicySettings(), Reasons()))
    assert decision.action is Action.NONE, decision.explanation
    assert state.pending is None


# -- a REPAIR drain is lifted only after `healthd ack --repaired` (docs/history.md) ----------------

IN_REPAIR = _node("IDLE", "DRAIN", "healthd: REPAIR XID_79 gpu3 x3")
_XID_TOOK_OUT = (FindingRef("xid/XID_79/gpu3"),)


@pytest.mark.parametrize(
    "state",
    [
        PolicyState.read({"took_out": [{"key": "xid/XID_79/gpu3"}], "repair": {"code": "XID_79", "count": "x"}})[0],
        PolicyState(),  # policy.json lost
    ],
    ids=["repair key damaged", "state lost"],
)
def test_a_repair_drain_without_its_record_stays_out(state: PolicyState) -> None:
    """The review's reproduction: with the repair record gone, a clean pass resumed a node out for repair."""
    clean = _checks(("xid", RAN, ()))
    decision, _ = decide(PassFacts(clean, state, IN_REPAIR), PolicyRules(PolicySettings(), Reasons()))
    assert decision.action is Action.NONE and "no repair record" in decision.explanation
    # Nor does a new fault rewrite the REPAIR reason, which a later clean pass would then lift.
    warning = _checks(("xid", RAN, (("WARNING", "XID_31", "gpu1"),)))
    decision, _ = decide(PassFacts(warning, state, IN_REPAIR), PolicyRules(PolicySettings(), Reasons()))
    assert decision.action is Action.NONE and "no repair record" in decision.explanation


def test_a_repair_ended_by_ack_repaired_is_lifted_by_the_next_clean_pass() -> None:
    ended = PolicyState(took_out=_XID_TOOK_OUT, repair_ended=True)
    decision, _ = decide(
        PassFacts(_checks(("xid", RAN, ())), ended, IN_REPAIR), PolicyRules(PolicySettings(), Reasons())
    )
    assert decision.action is Action.RESUME
    assert not after_apply(ended, decision).repair_ended, "resumed: the mark has done its work"
    assert PolicyState.from_dict(ended.to_dict()) == ended
    counts = {"t/CODE_0/subj0": ("GPU-1", 3)}
    fault = _pass("CRITICAL")
    _, escalated = decide(
        PassFacts(fault, ended, IDLE, repeats=counts),
        PolicyRules(PolicySettings(), Reasons(), escalation=ESCALATION),
    )
    assert escalated.repair is not None and not escalated.repair_ended, "a new repair needs its own ack"


# -- every write that sets the reason of a node holding a place carries its stamp ---------------


class _Recorded(SlurmClient):
    """The Slurm adapter with scontrol faked at its boundary: each call is recorded and answers nothing."""

    def _run(self, *args: str, program: str = "scontrol") -> str:
        self.calls.append(tuple(args) if program == "scontrol" else (program, *args))
        return ""


def _writes(made: Plan) -> list[tuple[str, ...]]:
    """The scontrol calls ``execute`` makes for ``made``."""
    client = _Recorded(SlurmSettings())
    executed = execute(made, client, Config(), sleep=lambda _: None)
    assert executed.error is None and executed.done == made.steps
    return client.calls


def _drain(reason: str) -> tuple[str, ...]:
    return ("update", "NodeName=n1", "State=DRAIN", f"Reason={reason}")


def _down(reason: str) -> tuple[str, ...]:
    return ("update", "NodeName=n1", "State=DOWN", f"Reason={reason}")


IB_OUT = _node("MIXED", "DRAIN", "healthd: IB_DOWN mlx5_0/1")._replace(reason_time=100.0)


@pytest.mark.parametrize(
    ("node", "finding", "writes"),
    [
        # CRITICAL while jobs run: the reason is updated, then DOWN; both keep the drain's place.
        (IB_OUT, GPU_LOST, [_drain("healthd: GPU_LOST gpu0 #100"), _down("healthd: GPU_LOST gpu0 #100")]),
        # Another WARNING on an idle node: only the reason changes, and its place with it stays.
        (
            IB_OUT._replace(state="IDLE"),
            replace(GPU_LOST, status=Status.WARNING),
            [_drain("healthd: GPU_LOST gpu0 #100")],
        ),
        # A place stamped before (a DOWN that slurmd brought back) is the one kept, not the later reason time.
        (
            IB_OUT._replace(reason="healthd: IB_DOWN mlx5_0/1 #90", reason_time=150.0),
            GPU_LOST,
            [_drain("healthd: GPU_LOST gpu0 #90"), _down("healthd: GPU_LOST gpu0 #90")],
        ),
        # scontrol reboot sets the reason again: it carries the place too.
        (
            IB_OUT,
            replace(GPU_LOST, details={"remedy": "reboot"}),
            [
                _drain("healthd: REBOOT GPU_LOST gpu0 #100"),
                ("reboot", "reason=healthd: REBOOT GPU_LOST gpu0 #100", "n1"),
            ],
        ),
    ],
)
def test_a_reason_update_keeps_the_nodes_place(node: NodeInfo, finding: Finding, writes: list[tuple[str, str]]) -> None:
    """The review's reproduction: the DRAIN that updates the reason of a node holding its place went out
    without the stamp, so slurmctld's new stamp put it behind a node that drained after it, which kept
    a place that was not free (two out where one is allowed)."""
    took_out = PolicyState(took_out=(FindingRef("infiniband/IB_DOWN/mlx5_0/1"),))
    made = _plan_of(_gpu_pass(finding), took_out, node, None, reboot=True)
    assert _writes(made) == writes
    # Read back as the breaker reads it: this node, re-stamped at 104, still orders before one drained at 103.
    reason = writes[0][-1].removeprefix("Reason=")
    groups = [
        NodeGroup("batch", 1, "MIXED", frozenset({"DRAIN"}), reason, 104.0, "n1"),
        NodeGroup("batch", 1, "MIXED", frozenset({"DRAIN"}), "healthd: XID_79 gpu2", 103.0, "n2"),
        NodeGroup("batch", 8, "IDLE", frozenset(), "", None, "n[3-10]"),
    ]
    assert breaker_confirm("n2", group_views(groups, ("batch",), Reasons()), PolicySettings()) != ""
