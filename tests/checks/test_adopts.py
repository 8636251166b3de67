"""A finding one check adopted from another (``CheckSpec.adopts``) keeps what was saved under its old key.

The case that matters: NVLINK_DOWN moved from the gpu check to the nvlink check. An
administrator who resumed a node (or ran ``healthd ack``) before the upgrade
acknowledged ``gpu/NVLINK_DOWN/gpuN``; after it, the same fault is
``nvlink/NVLINK_DOWN/gpuN`` and must stay acknowledged, not take the node out now.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from healthd.checks.plugin import CheckSpec, discover
from healthd.config.models import PolicySettings
from healthd.cycle.engine import Engine
from healthd.model import CheckResult, Finding, PassResult, RunState, Status
from healthd.plan.acks import Ack, FindingRef, apply_acks
from healthd.plan.plan import Observed, Plan, Read, Situation, plan
from healthd.plan.rules import PolicyRules
from healthd.plan.state import Action, PolicyState
from healthd.slurm.nodestate import NodeInfo
from healthd.slurm.reasons import Reasons
from healthd.store.history import History
from healthd.store.historyschema import Kind

OLD, NEW = "gpu/NVLINK_DOWN/gpu3", "nvlink/NVLINK_DOWN/gpu3"
RENAMES = (("gpu/NVLINK_DOWN/", "nvlink/NVLINK_DOWN/"),)
BUSY = NodeInfo("n1", "ALLOCATED", frozenset(), "", "root", ("batch",))


def _links_down(*, ran: tuple[str, ...] = ("gpu", "nvlink"), renames: Any = RENAMES) -> PassResult:
    down = Finding("nvlink", Status.CRITICAL, "NVLINK_DOWN", "gpu3", "1 NVLink(s) down")
    results = tuple(CheckResult(c, RunState.RAN, (down,) if c == "nvlink" else (), 0.1) for c in ran)
    return PassResult("n1", 0.0, 0.1, results, renames)


def test_the_nvlink_check_adopts_the_gpu_checks_links_down() -> None:
    (nvlink,) = [spec for spec in discover() if spec.name == "nvlink"]
    assert isinstance(nvlink, CheckSpec)
    assert nvlink.adopted() == RENAMES


def test_an_ack_under_the_old_key_acknowledges_the_finding_and_is_kept_under_the_new_one() -> None:
    ack = Ack(FindingRef(OLD), 10.0, "slurm-resume")
    result, kept = apply_acks(_links_down(), [ack])
    (finding,) = result.findings
    assert finding.status is Status.OK and finding.details["acknowledged_status"] == "CRITICAL"
    assert kept == (Ack(FindingRef(NEW), 10.0, "slurm-resume"),)
    # A pass that ran only the gpu check says nothing of the nvlink finding: the ack stays, renamed.
    _, kept = apply_acks(_links_down(ran=("gpu",)), [ack])
    assert kept == (Ack(FindingRef(NEW), 10.0, "slurm-resume"),)
    # Without the adoption the old ack would not match: the finding is CRITICAL (the bug).
    assert apply_acks(_links_down(renames=()), [ack])[0].status is Status.CRITICAL


def _plan(result: PassResult, state: PolicyState, acks: tuple[Ack, ...], node: NodeInfo) -> Plan:
    observed = Observed(asked=frozenset({Read.NODE_AND_PARTITIONS}), node=node, views={})
    made = plan(
        Situation(result, state, acks, observed, 1000.0, False, True, False),
        PolicyRules(PolicySettings(), Reasons(), reconcile_interval=3600.0),
    )
    assert isinstance(made, Plan)
    return made


def test_a_node_an_administrator_resumed_before_the_upgrade_is_not_taken_out() -> None:
    acks = (Ack(FindingRef(OLD), 10.0, "slurm-resume"),)
    made = _plan(_links_down(), PolicyState(), acks, BUSY)
    assert made.decision.action is Action.NONE, made.decision
    assert made.acks == (Ack(FindingRef(NEW), 10.0, "slurm-resume"),)
    taken = _plan(_links_down(renames=()), PolicyState(), acks, BUSY)
    assert taken.decision.action is Action.TAKE_OUT_NOW, "the test shows the bug without the adoption"


def test_a_resume_of_a_node_the_gpu_check_took_out_acknowledges_the_nvlink_finding() -> None:
    # Drained by the gpu check before the upgrade; the administrator resumes it after.
    state = PolicyState(took_out=(FindingRef(OLD),))
    made = _plan(_links_down(), state, (), BUSY)
    assert made.acknowledged == (FindingRef(NEW),)
    assert made.decision.action is Action.NONE, made.decision


def test_a_pass_without_the_adopting_check_does_not_resume_on_the_old_checks_word() -> None:
    # Out for the gpu check's NVLINK_DOWN; a pass of the gpu check alone proves nothing about the links.
    out = NodeInfo("n1", "IDLE", frozenset({"DRAIN"}), "healthd: NVLINK_DOWN gpu3", "root", ("batch",))
    gpu_only = PassResult("n1", 0.0, 0.1, (CheckResult("gpu", RunState.RAN, (), 0.1),), RENAMES)
    state = PolicyState(took_out=(FindingRef(OLD),), clean_streak=10)
    made = _plan(gpu_only, state, (), out)
    assert made.decision.action is Action.NONE
    assert "nvlink" in made.decision.explanation, made.decision
    assert made.state.took_out == (FindingRef(NEW),)


def test_an_open_finding_under_the_old_key_goes_on_under_the_new_one(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    old = Finding("gpu", Status.CRITICAL, "NVLINK_DOWN", "gpu3", "1 NVLink(s) down")
    before = PassResult("n1", 0.0, 0.1, (CheckResult("gpu", RunState.RAN, (old,), 0.1),))
    with History.open(state_dir) as store:
        store.record_pass(before, at=100.0, boot_id="b")
        written = store.record_pass(_links_down(), at=200.0, boot_id="b")
        # Not a fault cleared and another raised (a repeat for escalation): the same one, its text changed.
        assert [e.kind for e in written] == []
        assert [(f.key, f.since) for f in store.open_findings()] == [(NEW, 100.0)]
        assert [e.code for e in store.events(kinds=[Kind.RAISED]) if e.unit == "gpu3"] == ["NVLINK_DOWN"]


@pytest.mark.parametrize("adopts", [("NVLINK_DOWN",), ("gpu/",), ("gpu/A/B",), ("nvlink/NVLINK_DOWN",)])
def test_an_adoption_that_names_no_other_checks_finding_is_refused(adopts: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="must be OTHERCHECK/CODE"):
        CheckSpec("nvlink", "d", "x:Y", run=lambda ctx: [], adopts=adopts)


def test_the_engine_reports_every_loaded_checks_adoptions(write_config: Callable[..., Path]) -> None:
    from healthd.config.cache import load_checks

    engine = Engine(*load_checks(write_config("[checks.nvlink]\nenabled = true\n"), use_cache=False, store=False))
    result = engine.run_checks(only=["mounts"])
    assert result.current_key(OLD) == NEW and result.current_key("gpu/ECC_DBE/gpu3") == "gpu/ECC_DBE/gpu3"
