"""Remediation on the real cluster: healthd has Slurm reboot a node for a reboot-class fault.

The test cluster's RebootProgram simulates the machine (tests/healthd_testkit/cluster.py): a
new boot id under ``cluster.procfs(node)``, which healthd reads through
``[paths] procfs``, and slurmd started again. The reboot runs through slurmctld for
real: it waits for the node's job, and the node comes back drained with healthd's
reason until a clean pass in the new boot resumes it (docs/remediation.md).
"""

from __future__ import annotations

from typing import Any

import pytest
from healthd_testkit.releases import every_release

from healthd.cycle.render import action_lines
from healthd.store.history import History
from healthd.store.historyschema import Kind

pytestmark = pytest.mark.slurm

XID_79 = {
    "status": "CRITICAL",
    "code": "XID_79",
    "subject": "0000:3b:00",
    "details": {"remedy": "reboot", "uuid": "GPU-aaaa"},
}
REASON = "healthd: REBOOT XID_79 0000:3b:00"


def _healthd(cluster: Any, healthd_on: Any, node: str, extra: str = "[remediation]\nreboot = true\n") -> Any:
    """healthd on ``node``, reading the node's own boot id, with ``extra`` config."""
    hd = healthd_on(node, policy="max_out_fraction = 1.0\nclean_passes = 2")
    text = hd.config_text().replace("[paths]\n", f'[paths]\nprocfs = "{cluster.procfs(node)}"\n', 1) + extra
    hd.config_text = lambda node_name=True: text
    return hd


def _kinds(hd: Any) -> list[str]:
    history = History.open(hd.state_dir)
    try:
        return [e.kind.value for e in history.events(since=0) if e.kind in (Kind.REBOOT_REQUESTED, Kind.REBOOT_DONE)]
    finally:
        history.close()


@every_release
def test_the_reboot_waits_for_the_job_and_the_node_returns_only_after_a_clean_pass(
    cluster: Any, healthd_on: Any
) -> None:
    node = "node1"
    hd = _healthd(cluster, healthd_on, node)
    reboots, boots, old_id = len(cluster.reboots(node)), len(cluster.boots(node)), cluster.boot_id(node)
    job = cluster.submit(node, 8)
    hd.faults(XID_79)

    asked = hd.cycle()
    assert asked.action.decision.action.value == "reboot" and asked.action.applied
    assert asked.action.steps == ("drain", "reboot")
    assert "Slurm reboots it after its jobs" in action_lines(asked.document, asked.result.started_at)[0]
    info = hd.client().show_node(node)
    assert info.drained and info.reboot_requested and info.busy and info.reason == REASON
    assert cluster.job_state(job) == "RUNNING", "no DOWN: the job keeps running"

    # Passes while the job runs send nothing, with or without the fault.
    assert hd.cycle().action.steps == ()
    hd.faults()
    waiting = hd.cycle()
    assert waiting.action.steps == () and "reboot" in waiting.action.decision.explanation
    assert cluster.reboots(node)[reboots:] == [] and cluster.job_state(job) == "RUNNING"

    cluster.wait_booted(node, count=boots + 1, timeout=60)
    cluster.wait_state(node, lambda s: "REBOOT" not in s, 30, "registered after the reboot")
    assert cluster.job_state(job) == "COMPLETED", "the reboot waited for the job to end"
    assert len(cluster.reboots(node)) == reboots + 1 and cluster.boot_id(node) != old_id
    assert cluster.node_state(node) == "IDLE+DRAIN" and cluster.reason(node).startswith(f"{REASON} : reboot issued")

    first = hd.cycle()
    assert first.action.decision.action.value == "hold" and first.action.steps == ()
    assert cluster.node_state(node) == "IDLE+DRAIN", "one clean pass of the two needed: still out"
    second = hd.cycle()
    assert second.action.decision.action.value == "resume" and second.action.applied
    cluster.wait_state(node, lambda s: s == "IDLE", 15, "resumed by healthd")
    assert len(cluster.reboots(node)) == reboots + 1, "exactly one reboot"
    assert _kinds(hd) == ["reboot_requested", "reboot_done"]


def test_the_same_fault_after_the_reboot_is_an_ordinary_take_out(cluster: Any, healthd_on: Any) -> None:
    node = "node2"
    hd = _healthd(cluster, healthd_on, node)
    reboots, boots = len(cluster.reboots(node)), len(cluster.boots(node))
    hd.faults(XID_79)
    assert hd.cycle().action.steps == ("drain", "reboot")
    cluster.wait_booted(node, count=boots + 1, timeout=60)
    cluster.wait_state(node, lambda s: "REBOOT" not in s, 30, "registered after the reboot")
    after = hd.cycle()
    assert after.action.decision.action.value == "drain_after_jobs", "already out: only the reason changes"
    assert after.action.steps == ("drain",)
    assert cluster.reason(node).startswith("healthd: XID_79 0000:3b:00")
    assert hd.cycle().action.steps == ()
    assert len(cluster.reboots(node)) == reboots + 1, "no second reboot for the same fault"


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ("", "healthd: XID_79 0000:3b:00"),  # reboot is off by default: an ordinary take-out
        ("[escalation]\nrepeats = 1\n[remediation]\nreboot = true\n", "healthd: REPAIR XID_79 0000:3b:00 x1"),
    ],
    ids=["reboot-off-by-default", "node-in-repair"],
)
def test_no_reboot_when_off_or_in_repair(cluster: Any, healthd_on: Any, extra: str, reason: str) -> None:
    node = "node3"
    hd = _healthd(cluster, healthd_on, node, extra=extra)
    reboots = len(cluster.reboots(node))
    hd.faults(XID_79)
    out = hd.cycle()
    assert out.action.decision.reason == reason
    assert out.action.decision.action.value == "take_out_now" and out.action.steps == ("drain", "down")
    assert "REBOOT" not in cluster.node_state(node) and cluster.reboots(node)[reboots:] == []
    assert _kinds(hd) == []


SMI = """#!/bin/sh
echo "$*" >> {log}
case "$1" in
--query-compute-apps=pid,gpu_bus_id) ;;
--gpu-reset) echo "GPU $3 was successfully reset." ;;
*) exit 2 ;;
esac
"""


def test_a_reset_class_fault_resets_the_gpu_once_the_node_is_out_and_idle(
    cluster: Any, healthd_on: Any, tmp_path: Any
) -> None:
    """nvidia-smi is a stand-in (no GPU here) run as a real subprocess; Slurm is real."""
    node = "node2"
    smi, log = tmp_path / "bin" / "nvidia-smi", tmp_path / "bin" / "calls.log"
    smi.parent.mkdir()
    smi.write_text(SMI.format(log=log))
    smi.chmod(0o755)
    hd = _healthd(cluster, healthd_on, node, extra=f'[remediation]\nreset = true\nnvidia_smi = "{smi}"\n')
    remap = {  # what the gpu check reports when NVML says the GPU needs a reset (checks/healthd_checks/gpu/check.py)
        "status": "CRITICAL",
        "code": "GPU_RESET_REQUIRED",
        "subject": "gpu3",
        "details": {"remedy": "reset", "pci": "00000000:3B:00.0"},
    }
    job = cluster.submit(node, 300)
    hd.faults(remap)
    out = hd.cycle()
    assert out.action.steps == ("drain", "down") and not log.exists(), "the take-out first: no reset under a job"
    cluster.wait(lambda: cluster.job_state(job) != "RUNNING", 20, "the job killed by the take-out")
    reset = hd.cycle()
    assert reset.action.steps == ("reset",)
    assert log.read_text().splitlines() == [
        "--query-compute-apps=pid,gpu_bus_id --format=csv,noheader",
        "--gpu-reset -i 00000000:3B:00.0",
    ]
    assert hd.cycle().action.steps == (), "one reset per finding"
    history = History.open(hd.state_dir)
    try:
        resets = [e for e in history.events(since=0) if e.kind is Kind.ACTION and e.code == "gpu_reset"]
    finally:
        history.close()
    assert [(e.status, e.subject) for e in resets] == [("done", node)]
    hd.faults()
    hd.cycle()
    assert hd.cycle().action.decision.action.value == "resume"
    cluster.wait_state(node, lambda s: s == "IDLE", 15, "resumed after the reset and clean passes")
