"""The policy's state machine: docs/policy.md's transition table is what the code does, and the races it covers.

The table is read from docs/policy.md ("The policy state machine") as
tests/checks/test_escalation_table.py reads docs/escalation.md, so the page and
``state.transition`` cannot drift apart. Each race a flag of ``PolicyState``
covered before the phases is a named test below, run through ``plan`` and
``conclude`` as a pass runs them.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, Optional, Union

import pytest
from healthd_testkit.paths import REPO
from hypothesis import given
from hypothesis import strategies as st

from healthd.config.models import PolicySettings
from healthd.model import CheckResult, Finding, PassResult, RunState, Status
from healthd.plan.acks import FindingRef
from healthd.plan.breaker import breaker_held
from healthd.plan.plan import Executed, Observed, Plan, Read, Situation, Step, conclude, plan
from healthd.plan.policy import decide
from healthd.plan.rules import PassFacts, PolicyRules
from healthd.plan.state import (
    REPAIR_TRANSITIONS,
    WRITE_TRANSITIONS,
    Action,
    Phases,
    PolicyEvent,
    PolicyState,
    Repair,
    RepairPhase,
    WritePhase,
    advance,
    transition,
)
from healthd.slurm.command import SlurmError
from healthd.slurm.nodestate import NodeInfo, PartitionView
from healthd.slurm.reasons import Reasons

TABLE = REPO / "docs" / "policy.md"
_ROW = re.compile(r"^\| (write|repair) \| ([A-Z_]+) \| ([A-Z_]+) \| ([A-Z_]+) \| .+ \|$")
Phase = Union[WritePhase, RepairPhase]
_MACHINES: dict[str, Any] = {"write": WritePhase, "repair": RepairPhase}
REPAIR = Repair("XID_48", "0000:3b:00", "GPU-aaaa", 3, "CRITICAL", 100.0)


def _rows() -> list[tuple[Phase, PolicyEvent, Phase]]:
    """(phase, event, next phase) of every row of the page's transition table."""
    rows: list[tuple[Phase, PolicyEvent, Phase]] = []
    for line in TABLE.read_text().splitlines():
        match = _ROW.match(line)
        if match:
            machine = _MACHINES[match.group(1)]
            rows.append((machine[match.group(2)], PolicyEvent[match.group(3)], machine[match.group(4)]))
    return rows


def _phases(phase: Phase) -> Phases:
    return Phases(write=phase) if isinstance(phase, WritePhase) else Phases(repair=phase)


def _in(phases: Phases) -> PolicyState:
    """A state in ``phases``, built as policy.json stores them."""
    write = phases.write
    return PolicyState(
        unconfirmed=write in (WritePhase.DRAIN_UNCONFIRMED, WritePhase.UNDO_SENT),
        resume_sent=write in (WritePhase.RESUME_SENT, WritePhase.UNDO_SENT),
        repair=REPAIR if phases.repair is RepairPhase.IN_REPAIR else None,
        repair_ended=phases.repair is RepairPhase.REPAIR_ENDED,
    )


def _advance(state: PolicyState, event: PolicyEvent) -> PolicyState:
    return advance(state, event, REPAIR if event is PolicyEvent.ESCALATED else None)


# -- the page's table is the code's -------------------------------------------------------------


def test_the_page_has_a_row_for_every_transition_in_the_code_and_no_other() -> None:
    code = {(*key, after) for key, after in {**WRITE_TRANSITIONS, **REPAIR_TRANSITIONS}.items()}
    documented = _rows()
    assert len(documented) == len(set(documented)), "a row appears twice"
    assert set(documented) == code


@pytest.mark.parametrize(("phase", "event", "after"), _rows(), ids=lambda v: getattr(v, "name", str(v)))
def test_each_row_is_what_the_code_does(phase: Phase, event: PolicyEvent, after: Phase) -> None:
    moved = transition(_phases(phase), event)
    assert after in (moved.write, moved.repair)
    # And the state as saved: the flags and the repair record say the row's next phase.
    state = PolicyState.from_dict(_advance(_in(_phases(phase)), event).to_dict())
    assert after in (state.phases.write, state.phases.repair)


# -- no sequence of events reaches a phase the table does not allow --------------------------

_START = st.builds(Phases, st.sampled_from(WritePhase), st.sampled_from(RepairPhase))
_EVENTS = st.lists(st.sampled_from(PolicyEvent), max_size=40)


@given(_START, _EVENTS)
def test_no_sequence_of_events_reaches_a_phase_the_table_does_not_allow(
    start: Phases, events: list[PolicyEvent]
) -> None:
    rows = {(phase, event): after for phase, event, after in _rows()}
    allowed = {start.write, start.repair} | set(rows.values())
    phases = start
    for event in events:
        moved = transition(phases, event)
        for was, now in ((phases.write, moved.write), (phases.repair, moved.repair)):
            assert now is was or rows[(was, event)] is now, f"{was.name} --{event.name}--> {now.name}"
            assert now in allowed
        phases = moved


@given(_START, _EVENTS)
def test_the_saved_state_follows_the_table_through_any_sequence(start: Phases, events: list[PolicyEvent]) -> None:
    """``advance`` keeps policy.json's flags and repair record in the phase the table says, read back or not."""
    state = _in(start)
    for event in events:
        expected = transition(state.phases, event)
        state = _advance(state, event)
        assert state.phases == expected
        assert (state.repair is not None) is (expected.repair is RepairPhase.IN_REPAIR)
        assert PolicyState.from_dict(json.loads(json.dumps(state.to_dict()))).phases == expected


def test_only_advance_sets_the_flags_that_store_the_phases() -> None:
    """No scattered flag assignment: every change of phase in healthd goes through ``state.advance``."""
    flags = {"unconfirmed", "resume_sent", "repair_ended"}
    setters = []
    for path in sorted((REPO / "healthd").rglob("*.py")):
        for function in ast.walk(ast.parse(path.read_text())):
            if not isinstance(function, ast.FunctionDef) or function.name == "advance":
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.keyword) and node.arg in flags:
                    setters.append(f"{path.relative_to(REPO)}: {function.name}: {node.arg}")
    assert setters == []


def test_a_repair_record_goes_with_escalated_alone() -> None:
    with pytest.raises(ValueError, match="ESCALATED"):
        advance(PolicyState(), PolicyEvent.ESCALATED)
    with pytest.raises(ValueError, match="REPAIR_ACKED"):
        advance(PolicyState(repair=REPAIR), PolicyEvent.REPAIR_ACKED, REPAIR)


# -- policy.json written by the version before the phases reads with the same meaning ----------

_OLD = {
    "fail_streaks": {},
    "unknown_streaks": {},
    "clean_streak": 0,
    "took_out": [{"key": "gpu/GPU_LOST/gpu0", "event": None}],
    "pending": None,
    "held": None,
    "last_read": 0.0,
    "unconfirmed": False,
    "repair": None,
    "reboot": None,
    "rebooted": "",
    "reset_tried": [],
    "skips_breaker": False,
    "resume_sent": False,
    "repair_ended": False,
}
_OLD_REPAIR = {"code": "XID_48", "subject": "0000:3b:00", "unit": "GPU-aaaa", "count": 3, "severity": "CRITICAL"}


@pytest.mark.parametrize(
    ("written", "phases"),
    [
        ({}, Phases()),
        ({"unconfirmed": True}, Phases(WritePhase.DRAIN_UNCONFIRMED)),
        ({"resume_sent": True}, Phases(WritePhase.RESUME_SENT)),
        ({"unconfirmed": True, "resume_sent": True, "took_out": []}, Phases(WritePhase.UNDO_SENT)),
        ({"repair": {**_OLD_REPAIR, "since": 100.0}}, Phases(repair=RepairPhase.IN_REPAIR)),
        ({"repair_ended": True}, Phases(repair=RepairPhase.REPAIR_ENDED)),
    ],
    ids=["settled", "unconfirmed", "resume_sent", "undo", "repair", "repair_ended"],
)
def test_a_policy_file_of_the_version_before_the_phases_reads_into_its_phase(
    written: dict[str, Any], phases: Phases
) -> None:
    document = {**_OLD, **written}
    state, _ = PolicyState.read(json.loads(json.dumps(document)))
    assert state.phases == phases
    assert state.to_dict() == document, "written back as it was read"


def test_a_damaged_repair_record_of_an_old_file_is_no_repair_ended() -> None:
    """The record gone, nothing says the repair ended: NONE, whose REPAIR drain stays out (rules._REPAIR_HELD)."""
    state, problems = PolicyState.read({**_OLD, "repair": {**_OLD_REPAIR, "count": "x"}})
    assert state.phases == Phases() and problems and problems[0].startswith("bad policy state: repair: ")


def test_the_flags_that_stay_data_read_as_before() -> None:
    document = {
        **_OLD,
        "skips_breaker": True,
        "rebooted": "gpu/GPU_LOST/gpu0",
        "reset_tried": ["gpu/XID_79/gpu1"],
        "reboot": {
            "boot_id": "b1",
            "at": 50.0,
            "reason": "healthd: REBOOT GPU_LOST gpu0",
            "cause": "gpu/GPU_LOST/gpu0",
        },
    }
    state = PolicyState.from_dict(document)
    assert state.skips_breaker and state.rebooted == "gpu/GPU_LOST/gpu0" and state.reset_tried == ("gpu/XID_79/gpu1",)
    assert state.reboot is not None and state.reboot.boot_id == "b1" and state.phases == Phases()
    assert state.to_dict() == document


# -- the race each old flag covered, run through plan and conclude ------------------------------

GPU_LOST = Finding("gpu", Status.CRITICAL, "GPU_LOST", "gpu0", "lost")
GPU_LOST_REASON = "healthd: GPU_LOST gpu0"
GPU_LOST_REF = (FindingRef("gpu/GPU_LOST/gpu0"),)
IN_SERVICE = NodeInfo("n1", "MIXED", frozenset(), "", "", ("batch",))
GPU_OUT = IN_SERVICE._replace(flags=frozenset({"DRAIN"}), reason=GPU_LOST_REASON, reason_user="root", reason_time=101.0)
ALONE_OUT = {"batch": PartitionView("batch", 3, ((True, 101.0, "n1"),))}
LOST_PLACE = {"batch": PartitionView("batch", 3, ((True, 100.0, "n0"), (True, 101.0, "n1")))}
NONE_OUT = {"batch": PartitionView("batch", 3, ())}


def _gpu_pass(*findings: Finding, at: float = 1000.0) -> PassResult:
    return PassResult("n1", at, 0.1, (CheckResult("gpu", RunState.RAN, findings, 0.1),))


def _plan_of(
    result: PassResult, state: PolicyState, node: Optional[NodeInfo], views: Optional[dict[str, PartitionView]]
) -> Union[Plan, Read]:
    asked = frozenset() if node is None else frozenset({Read.NODE_AND_PARTITIONS})
    situation = Situation(result, state, (), Observed(asked, node, views), result.started_at, False, True, False)
    return plan(situation, PolicyRules(PolicySettings(max_out_fraction=0.34), Reasons(), reconcile_interval=3600.0))


def _made(result: PassResult, state: PolicyState, node: NodeInfo, views: Optional[dict[str, PartitionView]]) -> Plan:
    made = _plan_of(result, state, node, views)
    assert isinstance(made, Plan)
    return made


def test_race_a_crash_between_drain_and_confirming_read_leaves_the_drain_unconfirmed() -> None:
    """``unconfirmed``: the pass killed after its DRAIN, before the breaker's read; the next pass confirms it."""
    take_out = _made(_gpu_pass(GPU_LOST), PolicyState(fail_streaks={"gpu": 1}), IN_SERVICE, NONE_OUT)
    assert take_out.steps == (Step.DRAIN, Step.CONFIRM, Step.DOWN)
    killed = take_out.interrupted
    assert killed is not None and killed.phases.write is WritePhase.DRAIN_UNCONFIRMED
    later = _gpu_pass(GPU_LOST, at=1400.0)
    assert _plan_of(later, killed, None, None) is Read.NODE_AND_PARTITIONS, "confirmed before anything else"
    confirmed = _made(later, killed, GPU_OUT, ALONE_OUT)
    assert confirmed.steps == (Step.DOWN,) and confirmed.state.phases.write is WritePhase.SETTLED
    undone = _made(later, killed, GPU_OUT, LOST_PLACE)
    assert undone.steps == (Step.RESUME,) and undone.decision.action is Action.HOLD
    assert undone.state.phases.write is WritePhase.SETTLED and undone.state.took_out == ()


def test_race_a_confirming_read_that_failed_is_confirmed_again() -> None:
    """``unconfirmed`` after CONFIRM_FAILED: an overloaded slurmctld answered neither the read nor the undo."""
    take_out = _made(_gpu_pass(GPU_LOST), PolicyState(fail_streaks={"gpu": 1}), IN_SERVICE, NONE_OUT)
    failed = conclude(take_out, Executed(error=SlurmError("sinfo timed out after 5s").problem), PolicyState(), 1000.0)
    assert failed.state.phases.write is WritePhase.DRAIN_UNCONFIRMED and failed.state.pending is not None


def test_race_a_lost_resume_answer_is_not_an_administrators_resume() -> None:
    """``resume_sent``: slurmctld applied a RESUME whose answer timed out; the node found in service is healthd's."""
    took_out = PolicyState(took_out=GPU_LOST_REF)
    resume = _made(_gpu_pass(), took_out, GPU_OUT._replace(state="IDLE"), None)
    lost = conclude(resume, Executed(error=SlurmError("scontrol timed out after 5s").problem), took_out, 1000.0)
    assert lost.state.phases.write is WritePhase.RESUME_SENT
    back = _made(_gpu_pass(GPU_LOST, at=1400.0), lost.state, IN_SERVICE, NONE_OUT)
    assert back.acknowledged == () and back.decision.action is Action.TAKE_OUT_NOW
    assert back.state.phases.write is WritePhase.SETTLED


def test_race_a_resume_of_an_unconfirmed_drain_keeps_both_until_a_read_settles_them() -> None:
    """DRAIN_UNCONFIRMED then a clean pass's RESUME with no answer: UNDO_SENT, then a read settles the resume."""
    unconfirmed = PolicyState(took_out=GPU_LOST_REF, unconfirmed=True)
    resume = _made(_gpu_pass(), unconfirmed, GPU_OUT._replace(state="IDLE"), None)
    assert resume.steps == (Step.RESUME,)
    assert resume.interrupted is not None and resume.interrupted.phases.write is WritePhase.UNDO_SENT
    done = conclude(resume, Executed(done=(Step.RESUME,)), unconfirmed, 1000.0)
    assert done.state.phases == Phases(), "Slurm answered: nothing in flight"


def test_race_a_breaker_undo_killed_in_flight_is_confirmed_again_and_never_acknowledges() -> None:
    """``unconfirmed`` with ``resume_sent``: the undo of a drain that lost its place, with no answer."""
    unconfirmed = PolicyState(fail_streaks={"gpu": 1}, unconfirmed=True)
    undo = _made(_gpu_pass(GPU_LOST), unconfirmed, GPU_OUT, LOST_PLACE)
    assert undo.interrupted is not None and undo.interrupted.phases.write is WritePhase.UNDO_SENT
    failed = conclude(undo, Executed(error=SlurmError("scontrol timed out after 5s").problem), unconfirmed, 1000.0)
    assert failed.state.phases.write is WritePhase.UNDO_SENT
    # The undo took: the node in service is healthd's own resume; the fault still there takes it out again.
    later = failed.state._replace(held=None, pending=None)
    back = _made(_gpu_pass(GPU_LOST, at=1400.0), later, IN_SERVICE, NONE_OUT)
    assert back.acknowledged == () and back.result.status is Status.CRITICAL
    assert back.steps == (Step.DRAIN, Step.CONFIRM, Step.DOWN)
    done = conclude(back, Executed(done=back.steps), later, 1400.0)
    assert done.state.phases.write is WritePhase.SETTLED


def test_race_ack_repaired_makes_the_repair_drain_healthds_to_lift() -> None:
    """``repair_ended``: after ``ack --repaired`` the next clean pass resumes the node, and the mark is spent."""
    in_repair = NodeInfo("n1", "IDLE", frozenset({"DRAIN"}), "healthd: REPAIR XID_48 0000:3b:00 x3", "root", ("batch",))
    state = PolicyState(took_out=(FindingRef("gpu/XID_48/0000:3b:00"),), repair=REPAIR)
    clean = _gpu_pass(at=2000.0)
    held, _ = decide(PassFacts(clean, state, in_repair), PolicyRules(PolicySettings(), Reasons()))
    assert held.action is not Action.RESUME, "in repair: no clean pass lifts it"
    ended = advance(state, PolicyEvent.REPAIR_ACKED)
    assert ended.phases.repair is RepairPhase.REPAIR_ENDED and ended.repair is None
    resume = _made(clean, ended, in_repair, None)
    assert resume.decision.action is Action.RESUME
    done = conclude(resume, Executed(done=(Step.RESUME,)), ended, 2000.0)
    assert done.state.phases == Phases()
    # Without the mark (the record lost, not ended), the same drain stays out.
    lost = _made(clean, ended._replace(repair_ended=False), in_repair, None)
    assert lost.decision.action is Action.NONE and "no repair record" in lost.decision.explanation


def test_race_a_repair_decided_by_a_take_out_the_breaker_held_is_dropped() -> None:
    held = breaker_held(PolicyState(repair=REPAIR), "partition full", 1000.0, "n1")
    assert held.phases.repair is RepairPhase.NONE and held.repair is None
