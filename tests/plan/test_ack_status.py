"""An acknowledgement covers its finding only up to the status it was given at.

The reviewer's case: a corrected machine check (WARNING) is acknowledged, by
``healthd ack`` or by an administrator's resume; later the same CPU logs an
uncorrected one (CRITICAL) under the same key. It must act, not be reported OK.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from healthd.config.models import PolicySettings
from healthd.cycle.acks import AckStore
from healthd.model import CheckResult, Finding, PassResult, RunState, Status
from healthd.plan.acks import Ack, FindingRef, apply_acks, merge, refs_from_document
from healthd.plan.plan import Executed, Observed, Plan, Read, Situation, conclude, plan
from healthd.plan.rules import PolicyRules
from healthd.plan.state import Action, PolicyState
from healthd.slurm.nodestate import NodeInfo, PartitionView
from healthd.slurm.reasons import Reasons
from healthd.store.state import StateFile

KEY = "edac/MCE/cpu3"
BUSY = NodeInfo("n1", "ALLOCATED", frozenset(), "", "root", ("batch",))
VIEWS = {"batch": PartitionView("batch", 100, ())}


def _pass(status: str, event: str = "boot1:100") -> PassResult:
    finding = Finding("edac", Status[status], "MCE", "cpu3", "machine check", {"event": event})
    return PassResult("n1", 0.0, 0.1, (CheckResult("edac", RunState.RAN, (finding,), 0.1),))


def _ack(status: Optional[Status]) -> Ack:
    return Ack(FindingRef(KEY, "boot1:100", status), 10.0, "cli")


def test_an_ack_never_covers_its_finding_once_it_is_worse() -> None:
    ack = _ack(Status.WARNING)
    result, kept = apply_acks(_pass("CRITICAL"), [ack])
    assert result.status is Status.CRITICAL and "acknowledged" not in result.findings[0].details
    assert kept == (ack,), "the finding is still there: the ack of its milder form stays"
    result, _ = apply_acks(_pass("WARNING"), kept)
    assert result.status is Status.OK and result.findings[0].details["acknowledged_status"] == "WARNING"
    # UNKNOWN ranks above WARNING too: an acknowledged WARNING does not hide it.
    assert apply_acks(_pass("UNKNOWN"), [ack])[0].status is Status.UNKNOWN
    assert apply_acks(_pass("UNKNOWN"), [_ack(Status.CRITICAL)])[0].status is Status.OK


def test_healthd_ack_records_the_status_of_the_last_pass_and_keeps_it_in_the_file(tmp_path: Path) -> None:
    document = {
        "checks": [
            {
                "name": "edac",
                "findings": [
                    {"check": "edac", "code": "MCE", "subject": "cpu3", "status": "WARNING", "details": {"event": "e"}}
                ],
            }
        ]
    }
    (ref,) = refs_from_document(document, ["edac"])
    assert ref.status is Status.WARNING
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    store = AckStore(StateFile(directory, "acks"))
    store.save(merge((), [ref], 10.0, "cli"))
    assert json.loads((directory / "acks.json").read_text())["acks"][0]["status"] == "WARNING"
    (loaded,), problems = store.load()
    assert loaded.ref.status is Status.WARNING and problems == ()
    critical = Finding("edac", Status.CRITICAL, "MCE", "cpu3", "m", {"event": "e"})
    result = PassResult("n1", 0.0, 0.1, (CheckResult("edac", RunState.RAN, (critical,), 0.1),))
    assert apply_acks(result, [loaded])[0].status is Status.CRITICAL


def test_a_later_ack_at_a_worse_status_widens_the_one_kept() -> None:
    (widened,) = merge([_ack(Status.WARNING)], [FindingRef(KEY, "boot1:100", Status.CRITICAL)], 50.0, "slurm-resume")
    assert (widened.ref.status, widened.at, widened.by) == (Status.CRITICAL, 10.0, "cli")
    (kept,) = merge([_ack(Status.CRITICAL)], [FindingRef(KEY, "boot1:100", Status.WARNING)], 50.0, "cli")
    assert kept.ref.status is Status.CRITICAL


def test_an_ack_saved_without_a_status_is_pinned_at_the_first_pass_that_sees_it(tmp_path: Path) -> None:
    """acks.json from before the status was kept: nothing changes on upgrade, and no later rise is covered."""
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    (directory / "acks.json").write_text(json.dumps({"acks": [{"key": KEY, "event": "boot1:100", "at": 10.0}]}))
    (old,), _ = AckStore(StateFile(directory, "acks")).load()
    assert old.ref.status is None
    result, kept = apply_acks(_pass("WARNING"), [old])
    assert result.status is Status.OK
    assert [a.ref.status for a in kept] == [Status.WARNING]
    assert apply_acks(_pass("CRITICAL"), kept)[0].status is Status.CRITICAL
    # Its check did not run: nothing to pin it to, it stays as it was.
    skipped = PassResult("n1", 0.0, 0.1, (CheckResult("edac", RunState.TIMEOUT, (), 0.1),))
    assert [a.ref.status for a in apply_acks(skipped, [old])[1]] == [None]


def test_an_ack_with_a_status_healthd_does_not_know_is_reported_and_ignored(tmp_path: Path) -> None:
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    entries = [{"key": KEY, "event": "e", "status": "FINE"}, {"key": "x/Y/z", "status": "WARNING"}]
    (directory / "acks.json").write_text(json.dumps({"acks": entries}))
    store = AckStore(StateFile(directory, "acks"))
    acks, (problem,) = store.load()
    assert [a.ref.key for a in acks] == ["x/Y/z"]
    assert "acks[0]" in problem and "'FINE'" in problem


def _plan(result: PassResult, state: PolicyState, acks: tuple[Ack, ...], node: NodeInfo) -> Plan:
    observed = Observed(asked=frozenset({Read.NODE_AND_PARTITIONS}), node=node, views=VIEWS)
    made = plan(
        Situation(result, state, acks, observed, 1000.0, False, True, False),
        PolicyRules(PolicySettings(), Reasons(), reconcile_interval=3600.0),
    )
    assert isinstance(made, Plan)
    return made


def _applied(made: Plan, state: PolicyState) -> PolicyState:
    done = conclude(made, Executed(done=made.steps), state, 1000.0).state
    # Through policy.json, as the next pass reads it.
    return PolicyState.from_dict(json.loads(json.dumps(done.to_dict())))


def test_an_administrators_resume_acknowledges_only_the_status_that_took_the_node_out() -> None:
    drained = _plan(_pass("WARNING"), PolicyState(), (), BUSY)
    assert drained.decision.action is Action.DRAIN_AFTER_JOBS
    state = _applied(drained, PolicyState())
    assert [r.status for r in state.took_out] == [Status.WARNING]
    # The administrator resumed the node: the WARNING is acknowledged and the node stays in.
    resumed = _plan(_pass("WARNING"), state, (), BUSY)
    assert resumed.acknowledged == (FindingRef(KEY, "boot1:100"),)
    assert resumed.decision.action is Action.NONE and resumed.result.status is Status.OK
    assert [a.ref.status for a in resumed.acks] == [Status.WARNING]
    # The same finding turns CRITICAL: not what the administrator saw. The node goes out now.
    worse = _plan(_pass("CRITICAL"), resumed.state, resumed.acks, BUSY)
    assert worse.decision.action is Action.TAKE_OUT_NOW, worse.decision
    assert worse.result.status is Status.CRITICAL


def test_a_node_taken_out_for_the_worse_status_is_resumed_at_that_status() -> None:
    """Drained for the WARNING, then taken out for the CRITICAL of the same event: a resume covers the CRITICAL."""
    state = _applied(_plan(_pass("WARNING"), PolicyState(), (), BUSY), PolicyState())
    out = NodeInfo("n1", "IDLE", frozenset({"DRAIN"}), "healthd: MCE cpu3", "root", ("batch",))
    busy_out = NodeInfo("n1", "MIXED", frozenset({"DRAIN"}), "healthd: MCE cpu3", "root", ("batch",))
    taken = _plan(_pass("CRITICAL"), state, (), busy_out)
    assert taken.decision.action is Action.TAKE_OUT_NOW
    state = _applied(taken, state)
    assert [r.status for r in state.took_out] == [Status.CRITICAL]
    # A pass while the node is still out keeps the worse status too.
    assert [r.status for r in _plan(_pass("CRITICAL"), state, (), out).state.took_out] == [Status.CRITICAL]
    resumed = _plan(_pass("CRITICAL"), state, (), BUSY)
    assert resumed.decision.action is Action.NONE and resumed.result.status is Status.OK
    assert [a.ref.status for a in resumed.acks] == [Status.CRITICAL]


def test_a_resume_widens_an_earlier_ack_of_the_milder_status() -> None:
    state = PolicyState(took_out=(FindingRef(KEY, "boot1:100", Status.CRITICAL),))
    resumed = _plan(_pass("CRITICAL"), state, (_ack(Status.WARNING),), BUSY)
    assert [(a.ref.status, a.by) for a in resumed.acks] == [(Status.CRITICAL, "cli")]
    assert resumed.result.status is Status.OK
