"""End to end: the whole `check --once --json` document for the healthy fixture node, against a golden file.

Every installed check runs from captured data: mounts and kernel modules from procfs,
GPUs from an NVML snapshot, InfiniBand and PCIe from sysfs, Xids from a kmsg capture.
The golden file holds the checks it names, and it names every check that
fixtures/h100-node.toml configures; each of those must give exactly its recorded result.
A check the golden file does not name (one added since, or a third party's) runs too, with
its defaults or its table, and must leave the healthy node healthy: it runs, or does not
apply, with no finding worse than OK. A new check therefore needs neither file to pass,
and joins the golden document when its table is added to the fixture node. Run with
HEALTHD_UPDATE_GOLDEN=1 to rewrite the golden file after a deliberate change (it then
holds every installed check), and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from healthd_testkit.paths import FIXTURES, REPO, fixture_node_config

from healthd.checks.plugin import BrokenCheck, CheckSpec, discover
from healthd.cli.main import main
from healthd.cli.schema import PassOut
from healthd.config.defaults import toml_module

GOLDEN = REPO / "fixtures/golden/h100-node.json"


def normalise(doc: dict[str, Any]) -> dict[str, Any]:
    """Blank what differs between runs: times, the node name and the version."""
    doc = {**doc, "started_at": "*", "duration_seconds": 0, "node": "*", "healthd_version": "*"}
    doc["checks"] = [{**c, "duration_seconds": 0} for c in doc["checks"]]
    return doc


def installed_checks(active: bool = False) -> list[str]:
    """Every check registered under the ``healthd.checks`` entry points (the ordinary or the active ones).

    A new check cannot fall outside.
    """
    specs = discover()
    broken = [s.name for s in specs if isinstance(s, BrokenCheck)]
    assert not broken, f"checks that fail to load: {broken}"
    return sorted(s.name for s in specs if isinstance(s, CheckSpec) and s.active == active)


def configured_checks() -> set[str]:
    """The checks whose tables fixtures/h100-node.toml holds (the active ``dcgm`` among them)."""
    return set(toml_module().loads((FIXTURES / "h100-node.toml").read_text()).get("checks", {}))


def test_healthy_fixture_node_matches_golden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    checks = installed_checks()
    config = str(fixture_node_config(tmp_path))
    code = main(["check", "--once", "--json", "--only", ",".join(checks), "--config", config])
    doc = json.loads(capsys.readouterr().out)
    PassOut.model_validate(doc)
    got = normalise(doc)
    if os.environ.get("HEALTHD_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())
    recorded = {c["name"] for c in golden["checks"]}
    configured = configured_checks() & set(checks)  # the active ones have their own test below
    assert configured <= recorded, "the golden document holds every check the fixture node configures"
    assert recorded <= set(checks), "the golden document holds only installed checks"
    others = [(c["name"], c["state"], c["status"]) for c in doc["checks"] if c["name"] not in recorded]
    assert [(name, status) for name, state, status in others if state in ("ran", "not_applicable")] == [
        (name, "OK") for name, _, _ in others
    ], "a check the golden file does not hold leaves the healthy node healthy"
    assert {**got, "checks": [c for c in got["checks"] if c["name"] in recorded]} == golden
    assert code == 0 and doc["status"] == "OK"
    assert sorted(c["name"] for c in doc["checks"]) == checks, "every installed check ran in the pass"
    assert all(c["state"] == "ran" for c in doc["checks"] if c["name"] in recorded), "every recorded check runs"


def test_fixture_node_runs_its_active_checks_only_in_an_active_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    active = installed_checks(active=True)
    assert active, "the dcgm check is active"
    config = str(fixture_node_config(tmp_path))
    # --force: the fixture node has no Slurm to say it is idle and drained ([slurm] enabled = false).
    code = main(["check", "--once", "--json", "--active", "--force", "--config", config])
    doc = json.loads(capsys.readouterr().out)
    PassOut.model_validate(doc)
    assert code == 0 and doc["status"] == "OK"
    # Ran, and found nothing but OK notes (the bandwidths the nccl and ib_bandwidth checks measured).
    faults = [(c["name"], c["state"], [f for f in c["findings"] if f["status"] != "OK"]) for c in doc["checks"]]
    assert faults == [(name, "ran", []) for name in active]
