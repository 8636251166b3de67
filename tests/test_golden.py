"""End to end: the whole `check --once --json` document for the healthy fixture node, against a golden file.

Every check that can run from captured data runs: mounts and kernel modules from
procfs, GPUs from an NVML snapshot, InfiniBand and PCIe from sysfs, Xids from a
kmsg capture. Run with HEALTHD_UPDATE_GOLDEN=1 to rewrite the golden file after a
deliberate change, and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from healthd_testkit.paths import REPO, fixture_node_config

from healthd.checks.plugin import BrokenCheck, CheckSpec, discover
from healthd.cli.main import main
from healthd.cli.schema import PassOut

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
    assert got == json.loads(GOLDEN.read_text())
    assert code == 0 and doc["status"] == "OK"
    assert sorted(c["name"] for c in doc["checks"]) == checks, "every installed check is in the golden document"
    assert all(c["state"] == "ran" for c in doc["checks"]), "every check runs on the fixture node"


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
    assert [(c["name"], c["state"], c["findings"]) for c in doc["checks"]] == [(name, "ran", []) for name in active]
