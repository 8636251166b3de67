"""Active checks never run in an ordinary pass; an active pass runs them alone, and only when allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from healthd_testkit.dcgmi import Dcgmi

from healthd.active import refusal
from healthd.config import parse_config
from healthd.engine import Engine
from healthd.exitcodes import EX_TEMPFAIL, EX_USAGE
from healthd.model import Finding, Tier
from healthd.nodestate import NodeInfo
from healthd.pipeline import run_pass
from healthd.plugin import CheckContext, CheckSettings, CheckSpec

Cli = Callable[..., tuple[int, str, str]]


def _engine(tmp_path: Path, ran: list[str]) -> Engine:
    def run(name: str) -> Callable[[CheckContext[Any]], list[Finding]]:
        return lambda ctx: ran.append(name) or []

    specs = [
        CheckSpec(name="plain", description="", settings=CheckSettings, run=run("plain")),
        CheckSpec(name="stress", description="", settings=CheckSettings, run=run("stress"), active=True),
    ]
    text = f'[paths]\nstate_dir = "{tmp_path}/state"\n[slurm]\nenabled = false\n'
    return Engine(parse_config(text, "t.toml", {"plain": CheckSettings, "stress": CheckSettings}), specs)


def test_an_ordinary_pass_never_runs_an_active_check(tmp_path: Path) -> None:
    ran: list[str] = []
    engine = _engine(tmp_path, ran)
    for only in (None, ["stress"], ["plain", "stress"]):
        outcome = run_pass(engine, only=only)
        assert "stress" not in {r.check for r in outcome.result.results}
    assert ran == ["plain", "plain"]


def test_an_active_pass_runs_the_active_checks_alone(tmp_path: Path) -> None:
    ran: list[str] = []
    outcome = run_pass(_engine(tmp_path, ran), tier=Tier.ACTIVE)
    assert ran == ["stress"]
    assert [r.check for r in outcome.result.results] == ["stress"]


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
        (_node("DOWN", "DRAIN"), "n1 is DOWN+DRAIN"),
    ],
)
def test_only_an_idle_drained_node_may_run_active_checks(node: NodeInfo, why: Optional[str]) -> None:
    said = refusal(node)
    assert said == why if why is None else said is not None and said.startswith(why)


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
