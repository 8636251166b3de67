"""Active checks never run in an ordinary pass; an active pass runs them alone, and only when allowed.

Also the rules for starting them by themselves: at the epilog (no other job on the node) and
from the daemon (its own idle drain, once per interval), and one active run at a time.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from healthd_testkit.dcgmi import Dcgmi
from hypothesis import given
from hypothesis import strategies as st

from healthd.checks.plugin import CheckContext, CheckSettings, CheckSpec
from healthd.config.models import parse_config
from healthd.cycle.activerun import NotStarted, after_pass, daemon_budget, misfit, start
from healthd.cycle.engine import Engine
from healthd.cycle.pipeline import PassRequest, pass_budget, run_pass
from healthd.exitcodes import EX_TEMPFAIL, EX_USAGE
from healthd.model import Finding, Status, Tier
from healthd.plan.acks import FindingRef
from healthd.plan.active import daemon_skip, epilog_refusal, interval_left, refusal
from healthd.plan.state import Action, PolicyState
from healthd.service.daemon import fresh_for
from healthd.slurm.nodestate import NodeInfo
from healthd.slurm.reasons import Reasons
from healthd.store.lock import ACTIVE_LOCK as LOCK_NAME
from healthd.store.lock import StateLock

Cli = Callable[..., tuple[int, str, str]]


def _engine(tmp_path: Path, ran: list[str], extra: str = "") -> Engine:
    def run(name: str) -> Callable[[CheckContext[Any]], list[Finding]]:
        return lambda ctx: ran.append(name) or []

    specs = [
        CheckSpec(name="plain", description="", settings=CheckSettings, run=run("plain")),
        CheckSpec(name="stress", description="", settings=CheckSettings, run=run("stress"), active=True),
    ]
    text = f'[paths]\nstate_dir = "{tmp_path}/state"\n[slurm]\nenabled = false\n{extra}'
    return Engine(parse_config(text, "t.toml", {"plain": CheckSettings, "stress": CheckSettings}), specs)


def test_an_ordinary_pass_never_runs_an_active_check(tmp_path: Path) -> None:
    ran: list[str] = []
    engine = _engine(tmp_path, ran)
    for only in (None, ["stress"], ["plain", "stress"]):
        outcome = run_pass(engine, PassRequest(None if only is None else tuple(only)))
        assert "stress" not in {r.check for r in outcome.result.results}
    assert ran == ["plain", "plain"]


def test_an_active_pass_runs_the_active_checks_alone_and_a_whole_one_runs_all(tmp_path: Path) -> None:
    ran: list[str] = []
    outcome = run_pass(_engine(tmp_path, ran), PassRequest(tier=Tier.ACTIVE))
    assert ran == ["stress"]
    assert [r.check for r in outcome.result.results] == ["stress"]
    outcome = run_pass(_engine(tmp_path, ran), PassRequest(tier=Tier.ALL))
    assert sorted(r.check for r in outcome.result.results) == ["plain", "stress"]


def test_one_active_run_at_a_time_each_recorded(tmp_path: Path) -> None:
    ran: list[str] = []
    engine = _engine(tmp_path, ran)
    with StateLock(tmp_path / "state", 1.0, name=LOCK_NAME):
        assert start(engine, None, "epilog") == NotStarted("another active pass is running on this node")
    assert ran == []
    assert not isinstance(start(engine, None, "epilog of job 7"), NotStarted)
    assert ran == ["stress"]
    assert engine.state.file("active").load()["by"] == "epilog of job 7"


def test_a_diagnostic_longer_than_its_budget_is_named_and_the_daemon_waits_for_it(tmp_path: Path) -> None:
    engine = _engine(tmp_path, [], "[checks.stress]\ntimeout = 300\n[active]\nwhen_drained = true\n")
    assert misfit(engine, 200, "[active] epilog_timeout") == (
        "[checks.stress] timeout = 300s exceeds [active] epilog_timeout = 200s"
    )
    assert misfit(engine, 300, "[active] epilog_timeout") is None
    # The daemon's watchdog budget grows by a last Slurm read and a whole pass as long as the diagnostic.
    assert daemon_budget(engine) == engine.config.slurm.timeout + pass_budget(engine.config, checks=300)
    assert daemon_budget(_engine(tmp_path, [])) == 0


def test_a_dry_run_daemon_starts_no_diagnostic_and_records_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[Any] = []
    monkeypatch.setattr("healthd.cycle.activerun.start", lambda *args, **kwargs: started.append(args))
    ran: list[str] = []
    engine = _engine(tmp_path, ran, "[active]\nwhen_drained = true\n")
    prefix = engine.config.slurm.reason_prefix
    drained = NodeInfo("n1", "IDLE", frozenset({"DRAIN"}), f"{prefix} X_FAILED gpu0", "root", ("gpu",))
    outcome = run_pass(engine, PassRequest(dry_run=True))._replace(node=drained)
    caplog.set_level(logging.INFO, logger="healthd.test-active")
    assert after_pass(engine, outcome, True, logging.getLogger("healthd.test-active")) is outcome
    assert started == [] and ran == ["plain"] and "last_run" not in engine.state.file("active").load()
    assert "dry run: node" in caplog.text and "would run the active checks now" in caplog.text
    configured = _engine(tmp_path, ran, "[active]\nwhen_drained = true\n[policy]\ndry_run = true\n")
    assert after_pass(configured, outcome, False, logging.getLogger("healthd.test-active")) is outcome
    assert started == [], "[policy] dry_run is a dry run too"


def test_an_ordinary_pass_resumes_nothing_while_another_process_runs_the_active_checks(tmp_path: Path) -> None:
    engine = _engine(tmp_path, [])
    engine.state.file("policy").save(PolicyState(took_out=(FindingRef("plain/CODE/x"),)).to_dict())
    with StateLock(tmp_path / "state", 0.0, name=LOCK_NAME):  # as activerun.start holds it through the diagnostic
        decision = run_pass(engine).action.decision
    assert (decision.action, decision.intended) == (Action.HOLD, Action.RESUME)
    assert decision.explanation == "not resuming: active checks are running on this node (active.lock is held)"
    assert run_pass(engine).action.decision.action is Action.RESUME, "lock free: the clean pass resumes"


def test_ordinary_passes_keep_the_count_of_a_failing_active_check(tmp_path: Path) -> None:
    def failing(ctx: CheckContext[Any]) -> list[Finding]:
        return [ctx.finding(Status.WARNING, "STRESS_FAILED", "gpu0", "failed")]

    specs = [
        CheckSpec(name="plain", description="", settings=CheckSettings, run=lambda ctx: []),
        CheckSpec(name="stress", description="", settings=CheckSettings, run=failing, active=True),
    ]
    text = f'[paths]\nstate_dir = "{tmp_path}/state"\n[slurm]\nenabled = false\n[policy]\nfail_passes = 2\n'
    engine = Engine(parse_config(text, "t.toml", {"plain": CheckSettings, "stress": CheckSettings}), specs)
    assert dict(run_pass(engine, PassRequest(tier=Tier.ACTIVE)).state.fail_streaks) == {"stress": 1}
    assert dict(run_pass(engine).state.fail_streaks) == {"stress": 1}
    outcome = run_pass(engine, PassRequest(tier=Tier.ACTIVE))
    assert outcome.action.decision.action is Action.DRAIN_AFTER_JOBS, outcome.action.decision


def test_the_hook_trusts_the_daemons_pass_until_a_pass_with_the_diagnostic_is_due(tmp_path: Path) -> None:
    engine = _engine(tmp_path, [], "[checks.stress]\ntimeout = 300\n[active]\nwhen_drained = true\n")
    interval = engine.config.daemon.interval
    assert fresh_for(engine) == interval + pass_budget(engine.config) + daemon_budget(engine)
    assert fresh_for(engine) > interval + 300
    plain = _engine(tmp_path, [])
    assert fresh_for(plain) == interval + pass_budget(plain.config)


def _node(state: str, *flags: str) -> NodeInfo:
    return NodeInfo("n1", state, frozenset(flags), "", "", ("gpu",))


@pytest.mark.parametrize(
    ("node", "why"),
    [
        (_node("IDLE", "DRAIN"), None),
        (_node("IDLE"), "n1 is IDLE, not drained"),
        (_node("MIXED", "DRAIN"), "n1 is MIXED+DRAIN: jobs may still run"),
        (_node("ALLOCATED", "DRAIN"), "n1 is ALLOCATED+DRAIN: jobs may still run"),
        (_node("COMPLETING", "DRAIN"), "n1 is COMPLETING+DRAIN: jobs may still run"),
        # A job's epilog still runs (a GPU reset script, a process holding a GPU): a diagnostic would fail for it.
        (_node("IDLE", "DRAIN", "COMPLETING"), "n1 is IDLE+COMPLETING+DRAIN: a job's epilog is still running"),
        (_node("DOWN", "DRAIN"), "n1 is DOWN+DRAIN"),
        (_node("IDLE", "DRAIN", "REBOOT_REQUESTED"), "n1 is IDLE+DRAIN+REBOOT_REQUESTED: a reboot is pending"),
        (_node("IDLE", "DRAIN", "POWERING_DOWN"), "n1 is IDLE+DRAIN+POWERING_DOWN: powered down"),
    ],
)
def test_only_an_idle_drained_node_may_run_active_checks(node: NodeInfo, why: Optional[str]) -> None:
    said = refusal(node)
    assert said == why if why is None else said is not None and said.startswith(why)


@pytest.mark.parametrize(
    ("node", "why"),
    [
        (_node("IDLE", "COMPLETING"), None),
        (_node("IDLE", "COMPLETING", "DRAIN"), None),
        # Seen on the test cluster with two jobs on one node, during the first one's epilog.
        (_node("ALLOCATED", "COMPLETING"), "n1 is ALLOCATED+COMPLETING: another job is still on it"),
        (_node("MIXED", "COMPLETING"), "n1 is MIXED+COMPLETING: another job is still on it"),
        (_node("IDLE"), "n1 is IDLE, not completing: a job could start"),
        (_node("IDLE", "COMPLETING", "REBOOT_REQUESTED"), "n1 is IDLE+COMPLETING+REBOOT_REQUESTED: a reboot"),
        (_node("IDLE", "COMPLETING", "MAINTENANCE"), "n1 is in a maintenance reservation"),
    ],
)
def test_the_epilog_runs_active_checks_only_when_no_other_job_is_on_the_node(
    node: NodeInfo, why: Optional[str]
) -> None:
    said = epilog_refusal(node)
    assert said == why if why is None else said is not None and said.startswith(why)


@pytest.mark.parametrize(
    ("reason", "flags", "why"),
    [
        ("healthd: LEMON 9 incidents", {"DRAIN"}, "a person returns it"),
        ("healthd: REPAIR XID_79 gpu0 x3", {"DRAIN"}, "a person returns it"),
        ("healthd: XID_79 gpu0", {"DRAIN", "COMPLETING"}, "a job's epilog is still running"),
        ("healthd: XID_79 gpu0", {"DRAIN"}, None),
    ],
)
def test_the_daemon_runs_no_diagnostic_on_a_drain_no_pass_lifts_or_beside_an_epilog(
    reason: str, flags: set[str], why: Optional[str]
) -> None:
    node = NodeInfo("n1", "IDLE", frozenset(flags), reason, "root", ("gpu",))
    said = daemon_skip(node, Reasons(), None, 0.0, 0.0)
    assert said is None if why is None else said is not None and why in said


STATES = st.sampled_from(["IDLE", "MIXED", "ALLOCATED", "COMPLETING", "DOWN"])
FLAGS = st.frozensets(st.sampled_from(["DRAIN", "COMPLETING", "REBOOT_REQUESTED", "POWERED_DOWN", "MAINTENANCE"]))
REASONS = st.sampled_from(["", "healthd: XID_79 gpu0", "burn-in", "healthd: LEMON x", "healthd: REPAIR XID_79 gpu0 x3"])


@given(
    state=STATES,
    flags=FLAGS,
    reason=REASONS,
    read=st.booleans(),
    last=st.none() | st.floats(0, 2e6),
    now=st.floats(0, 2e6),
    interval=st.floats(0, 1e6),
)
def test_the_daemon_starts_active_checks_only_on_its_own_idle_drain_once_per_interval(
    state: str, flags: frozenset[str], reason: str, read: bool, last: Optional[float], now: float, interval: float
) -> None:
    node = NodeInfo("n1", state, flags, reason, "root", ("gpu",)) if read else None
    # Healthd's own drain that a pass may lift: not a lemon's or a repair's, which wait for a person.
    ours = read and state == "IDLE" and "DRAIN" in flags and reason == "healthd: XID_79 gpu0"
    settled = not flags & {"COMPLETING", "REBOOT_REQUESTED", "POWERED_DOWN", "MAINTENANCE"}
    elapsed = last is None or now >= last + interval or last + interval - now > interval
    assert (daemon_skip(node, Reasons(), last, now, interval) is None) == (ours and settled and elapsed)
    left = interval_left(last, now, interval)
    assert 0 <= left <= interval and (left == 0) == elapsed


def test_check_active_refuses_without_slurm_and_runs_when_forced(
    tmp_path: Path, write_config: Callable[[str], Path], cli: Cli
) -> None:
    dcgmi = Dcgmi(tmp_path)
    dcgmi.prints("level2-pcie-fail.json", rc=226)
    config = str(write_config(f'[checks.dcgm]\ndcgmi = "{dcgmi.tool}"\nlevel = 2\n'))
    code, _, err = cli("check", "--once", "--active", "--config", config)
    assert code == EX_TEMPFAIL and "[slurm] enabled = false" in err
    assert cli("check", "--once", "--only", "dcgm", "--config", config)[0] == 0
    assert dcgmi.levels == [], "neither the refused active pass nor an ordinary one ran dcgmi"
    code, out, _ = cli("check", "--once", "--active", "--force", "--config", config)
    assert code == 1 and "DCGM_PCIE_FAILED" in out
    assert dcgmi.levels == ["2", "2"]
    assert cli("check", "--once", "--force", "--config", config)[0] == EX_USAGE


def test_an_active_expectation_takes_the_nodes_active_lock(
    tmp_path: Path, write_config: Callable[[str], Path], cli: Cli
) -> None:
    # --expect runs on a copy of the state directory; its active pass still waits for no one's
    # diagnostic but its own: the node's active.lock, which a real active pass holds.
    dcgmi = Dcgmi(tmp_path)
    dcgmi.prints("level2-pcie-fail.json", rc=226)
    config = write_config(f'[checks.dcgm]\ndcgmi = "{dcgmi.tool}"\nlevel = 2\n')
    trial = ("check", "--active", "--force", "--expect", "dcgm: level = 2", "--config", str(config))
    with StateLock(config.parent / "state", 0.0, name=LOCK_NAME):  # as a real active pass holds it
        code, _, err = cli(*trial)
    assert code == EX_TEMPFAIL and "another active pass is running on this node" in err
    assert dcgmi.levels == [], "no diagnostic beside the running one"
    code, out, _ = cli(*trial)
    assert code == 1 and "DCGM_PCIE_FAILED" in out and dcgmi.levels == ["2", "2"]  # as many runs as --active alone
