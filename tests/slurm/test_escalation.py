"""Repeat failures on the real cluster: the third time sends the node to repair, and only a repair brings it back.

The fault check injects the same fault on the same GPU pass after pass; between
repeats the fault clears and healthd resumes the node, which is the drain/resume
ping-pong of a lemon node that escalation exists to stop (docs/history.md).
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from healthd.cli.main import main

pytestmark = pytest.mark.slurm


def _fault(uuid: str = "GPU-aaaa") -> dict[str, Any]:
    return {"status": "CRITICAL", "code": "XID_48", "subject": "0000:3b:00", "details": {"uuid": uuid}}


def _fail_and_recover(cluster: Any, hd: Any, uuid: str = "GPU-aaaa") -> Any:
    hd.faults(_fault(uuid))
    outcome = hd.cycle()
    hd.faults()
    return outcome


def _ack_repaired(hd: Any, subject: str) -> int:
    config = hd.root / "ack.toml"
    # The node's own name: its state directory is node2's (healthd.store.statenode).
    config.write_text(f'[paths]\nstate_dir = "{hd.state_dir}"\n[slurm]\nenabled = false\nnode_name = "{hd.node}"\n')
    return main(["ack", "--repaired", subject, "--config", str(config)])


def test_the_third_repeat_sends_the_node_to_repair_until_ack_repaired(
    cluster: Any, healthd_on: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    hd = healthd_on("node2")
    for repeat in (1, 2):
        outcome = _fail_and_recover(cluster, hd)
        assert outcome.action.applied and outcome.action.decision.reason == "healthd: XID_48 0000:3b:00", repeat
        assert hd.cycle().action.decision.action.value == "resume"
        cluster.wait(lambda: cluster.state("node2") == "idle", 20, "node2 back after a clean pass")

    third = _fail_and_recover(cluster, hd)
    assert third.action.applied
    assert third.action.decision.reason == "healthd: REPAIR XID_48 0000:3b:00 x3"
    assert cluster.reason("node2").startswith("healthd: REPAIR XID_48 0000:3b:00 x3 [")
    for _ in range(3):
        clean = hd.cycle()
        assert clean.exit_code == 0 and clean.action.decision.action.value == "none", clean.action
    assert cluster.state("node2") in ("drained", "down"), "clean passes do not bring a node in repair back"
    assert cluster.reason("node2").startswith("healthd: REPAIR")

    assert _ack_repaired(hd, "0000:5d:00") == 1, "another GPU's repair changes nothing"
    capsys.readouterr()
    assert _ack_repaired(hd, "GPU-aaaa") == 0, "the unit (the GPU's UUID) names the repair too"
    assert "the next clean pass puts the node back" in capsys.readouterr().out
    assert hd.cycle().action.decision.action.value == "resume"
    cluster.wait(lambda: cluster.state("node2") == "idle", 20, "node2 back after the repair")

    # The count starts again after the repair: the next fault is an ordinary one.
    again = _fail_and_recover(cluster, hd)
    assert again.action.decision.reason == "healthd: XID_48 0000:3b:00"


def test_a_replaced_gpu_starts_its_count_again(cluster: Any, healthd_on: Any) -> None:
    hd = healthd_on("node3")
    for _ in range(2):
        assert _fail_and_recover(cluster, hd, "GPU-old").action.applied
        hd.cycle()
    # Same PCI address, new UUID: the GPU was swapped, its history is not the new one's.
    swapped = _fail_and_recover(cluster, hd, "GPU-new")
    assert swapped.action.decision.reason == "healthd: XID_48 0000:3b:00"
    assert json.loads((hd.state_dir / "policy.json").read_text())["repair"] is None


def test_on_repair_gets_the_history_on_stdin(cluster: Any, healthd_on: Any, tmp_path: Path) -> None:
    received = tmp_path / "ticket.json"
    hook = tmp_path / "ticket.sh"
    hook.write_text(f"#!/bin/sh\nexec /bin/cat > {received}\n")
    hook.chmod(stat.S_IRWXU)
    hd = healthd_on("node1", slurm="")
    config = hd.config_text() + f'[escalation]\nrepeats = 2\n[remediation]\non_repair = "{hook}"\n'
    hd.config_text = lambda node_name=True: config  # type: ignore[method-assign]
    _fail_and_recover(cluster, hd)
    hd.cycle()
    assert not received.exists(), "the first fault is no repair"
    outcome = _fail_and_recover(cluster, hd)
    assert outcome.action.decision.reason == "healthd: REPAIR XID_48 0000:3b:00 x2"
    ticket = json.loads(received.read_text())
    assert ticket["node"] == "node1" and ticket["repair"]["unit"] == "GPU-aaaa" and ticket["repair"]["count"] == 2
    assert [e["kind"] for e in ticket["events"] if e["kind"] in ("raised", "cleared")] == [
        "raised",
        "cleared",
        "raised",
    ]
