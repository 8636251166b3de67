"""End-to-end scenarios against the real Slurm cluster: real nodes, real jobs, real state changes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from healthd_testkit.releases import every_release

from healthd.cycle.render import action_lines
from healthd.slurm.adapter import GROUP_FIELDS, NODE_FIELDS, sinfo_format
from healthd.slurm.command import STANDARD_BIN_DIRS
from healthd.slurm.problem import SlurmFailure

pytestmark = pytest.mark.slurm

MOUNT = ("CRITICAL", "MOUNT_MISSING", "/scratch")
REASON = "healthd: MOUNT_MISSING /scratch"


def _node_read(node: str) -> tuple[str, ...]:
    """The one call a pass makes to read its node: sinfo for that node alone (docs/scale.md)."""
    return ("sinfo", "-h", "--all", "-N", "-n", node, "-O", sinfo_format(NODE_FIELDS))


# The first read of a pass that will meet the circuit breaker: every partition's groups, the node among them.
_BOTH_READ = ("sinfo", "-h", "--all", "-O", sinfo_format(GROUP_FIELDS))
# Every partition's size and host list (one PARTITION_INFO): whether the breaker counts it whole or by shards.
_SIZES = ("-o", "--all", "show")


def _slurmd_start(cluster: Any, node: str) -> str:
    for token in cluster.show(node).split():
        if token.startswith("SlurmdStartTime="):
            return str(token)
    return ""


@every_release
def test_critical_requeues_job_and_keeps_node_out_after_slurmd_restart(cluster: Any, healthd_on: Any) -> None:
    job = cluster.submit("node1")
    hd = healthd_on("node1")
    hd.faults(MOUNT)
    outcome = hd.cycle()
    assert outcome.exit_code == 2
    assert outcome.action.decision.action.value == "take_out_now"
    assert outcome.action.applied and not outcome.action.errors
    assert cluster.reason("node1").startswith("healthd: MOUNT_MISSING /scratch [")
    cluster.wait(lambda: cluster.state("node1") == "drained", 20, "node1 drained")
    assert cluster.job_state(job) == "PENDING"
    assert cluster.job_field(job, "Restarts") == "1"

    before = _slurmd_start(cluster, "node1")
    time.sleep(1.1)  # SlurmdStartTime has a resolution of one second
    cluster.stop("node1")
    cluster.start_slurmd("node1")
    cluster.wait(lambda: _slurmd_start(cluster, "node1") != before, 20, "node1's slurmd to re-register")
    time.sleep(1)
    assert cluster.state("node1") == "drained"
    assert cluster.reason("node1").startswith("healthd: MOUNT_MISSING /scratch")

    # An administrator's note (printed after the reason) must not make the reason look changed.
    cluster.run("scontrol", "update", "NodeName=node1", "Comment=rack 12 swap pending")
    assert cluster.show("node1").endswith("Comment=rack 12 swap pending")
    client = hd.client()
    again = hd.cycle(client=client)
    assert again.action.decision.action.value == "none"
    assert client.calls == [_node_read("node1")], "an unchanged pass must send no write RPC"


@every_release
def test_warning_drains_after_jobs_then_healthy_resumes(cluster: Any, healthd_on: Any) -> None:
    job = cluster.submit("node2")
    hd = healthd_on("node2")
    hd.faults(("WARNING", "IB_SYMBOL_ERRORS", "mlx5_0:1"))
    outcome = hd.cycle()
    assert outcome.exit_code == 1
    assert outcome.action.decision.action.value == "drain_after_jobs" and outcome.action.applied
    assert cluster.state("node2") == "draining"
    assert cluster.job_state(job) == "RUNNING"
    cluster.run("scancel", job)
    cluster.wait(lambda: cluster.state("node2") == "drained", 20, "node2 drained after its job")

    hd.faults()
    healthy = hd.cycle()
    assert healthy.exit_code == 0
    assert healthy.action.decision.action.value == "resume" and healthy.action.applied
    # RESUME marks the node not-responding (idle*) until slurmctld's next ping answers.
    cluster.wait(lambda: cluster.state("node2") == "idle", 20, "node2 idle")
    assert cluster.reason("node2") == ""

    client = hd.client()
    quiet = hd.cycle(client=client)
    assert quiet.action.decision.action.value == "none"
    assert client.calls == [], "a healthy pass with nothing out or pending reads nothing from Slurm"


@every_release
def test_admin_drained_node_is_left_alone(cluster: Any, healthd_on: Any) -> None:
    job = cluster.submit("node3")
    cluster.run("scontrol", "update", "NodeName=node3", "State=DRAIN", "Reason=admin: bad DIMM ticket 42")
    # Read the node on every pass, so the clean half below really looks at it.
    hd = healthd_on("node3", slurm="reconcile_interval = 0")
    hd.faults(MOUNT)
    client = hd.client()
    outcome = hd.cycle(client=client)
    assert outcome.action.decision.action.value == "none"
    assert "not healthd's" in outcome.action.decision.explanation
    assert all(call[0] != "update" for call in client.calls)
    assert cluster.reason("node3").startswith("admin: bad DIMM ticket 42 [root@")
    assert cluster.state("node3") == "draining", "no DOWN: the admin's drain lets the job finish"
    assert cluster.job_state(job) == "RUNNING"
    hd.faults()
    client = hd.client()
    clean = hd.cycle(client=client)
    assert clean.action.decision.action.value == "none"
    assert client.calls == [_node_read("node3")], "the node was read, and only read"
    assert clean.action.node_state == "ALLOCATED+DRAIN"
    assert cluster.state("node3") == "draining" and cluster.job_state(job) == "RUNNING"
    cluster.run("scancel", job)
    cluster.wait(lambda: cluster.state("node3") == "drained", 20, "node3 drained after its job")
    assert hd.cycle().action.decision.action.value == "none"
    assert cluster.reason("node3").startswith("admin: bad DIMM ticket 42 [root@")


def test_admin_resume_acknowledges_event_and_new_event_drains(cluster: Any, healthd_on: Any) -> None:
    hd = healthd_on("node1")
    event1 = {"status": "CRITICAL", "code": "XID_79", "subject": "gpu0", "details": {"event": "boot1:1042"}}
    hd.faults(event1)
    assert hd.cycle().action.applied
    cluster.wait(lambda: cluster.state("node1") == "drained", 20, "node1 drained")

    cluster.run("scontrol", "update", "NodeName=node1", "State=RESUME")
    cluster.wait(lambda: cluster.state("node1") == "idle", 20, "node1 resumed by the admin")
    after = hd.cycle()
    assert after.exit_code == 0
    assert [a.key for a in after.action.acknowledged] == ["fault/XID_79/gpu0"]
    finding = after.document["checks"][0]["findings"][0]
    assert finding["status"] == "OK" and finding["details"]["acknowledged"] is True
    assert finding["details"]["acknowledged_status"] == "CRITICAL"
    assert cluster.state("node1").startswith("idle")
    assert hd.cycle().action.decision.action.value == "none"

    event2 = dict(event1, details={"event": "boot1:2077"})
    hd.faults(event1, event2)
    again = hd.cycle()
    assert again.action.decision.action.value == "take_out_now" and again.action.applied
    cluster.wait(lambda: cluster.state("node1") == "drained", 20, "node1 drained by the new event")


def test_ack_without_event_lapses_when_the_finding_clears(cluster: Any, healthd_on: Any) -> None:
    hd = healthd_on("node2")
    hd.faults(MOUNT)
    assert hd.cycle().action.applied
    cluster.run("scontrol", "update", "NodeName=node2", "State=RESUME")
    assert hd.cycle().exit_code == 0
    assert cluster.state("node2").startswith("idle")
    hd.faults()
    hd.cycle()
    assert json.loads((hd.state_dir / "acks.json").read_text()) == {"acks": []}
    hd.faults(MOUNT)
    assert hd.cycle().action.applied
    assert cluster.state("node2") == "drained"


def test_action_pending_while_slurmctld_is_down(cluster: Any, healthd_on: Any) -> None:
    job = cluster.submit("node3")
    hd = healthd_on("node3")
    hd.faults(MOUNT)
    cluster.stop("slurmctld")
    try:
        started = time.monotonic()
        outcome = hd.cycle()
        assert time.monotonic() - started < 20
        assert outcome.exit_code == 2
        assert outcome.action.pending and not outcome.action.applied
        # The failure travels as a value (kind, command, detail) to the document and the headline.
        [failure] = outcome.action.slurm_errors
        assert failure.kind is SlurmFailure.UNREACHABLE and failure.command.startswith("sinfo ")
        assert "Unable to contact slurm controller" in failure.detail and failure.detail.startswith("sinfo: ")
        assert outcome.action.errors == (failure.message,)
        assert outcome.document["action"]["slurm_errors"] == [failure.to_dict(0)]
        headline = action_lines(outcome.document, time.time())[0]
        assert headline.startswith(f"action: PENDING: take the node out now (CRITICAL from fault; reason '{REASON}")
        assert f": Slurm not reachable ({failure.detail}); next try in " in headline, headline
        saved = json.loads((hd.state_dir / "policy.json").read_text())
        assert saved["pending"]["action"] == "take_out_now"
        client = hd.client()
        backing_off = hd.cycle(client=client)
        assert backing_off.action.pending and client.calls == [], "within the backoff no RPC is attempted"
    finally:
        cluster.start_ctld()
    cluster.wait(lambda: cluster.state("node3") == "allocated", 30, "node3 known again, its job still running")
    assert cluster.job_state(job) == "RUNNING"
    # A new process (fresh Engine) after the backoff has passed: the pending action is applied.
    hd.faults()
    hd.faults({"status": "UNKNOWN", "code": "CHECK_TIMEOUT", "subject": "fault"})
    late = hd.cycle(now=time.time() + 600)
    assert late.action.applied, late.action
    assert late.action.decision.action.value == "take_out_now"
    cluster.wait(lambda: cluster.state("node3") == "drained", 20, "node3 drained after slurmctld returned")
    assert json.loads((hd.state_dir / "policy.json").read_text())["pending"] is None
    assert cluster.job_state(job) == "PENDING" and cluster.job_field(job, "Restarts") == "1"


@every_release
def test_circuit_breaker_holds_the_second_node(cluster: Any, healthd_on: Any) -> None:
    policy = "max_out_fraction = 0.34"
    first = healthd_on("node1")
    first.policy = policy
    first.faults(MOUNT)
    client = first.client()
    assert first.cycle(client=client).action.applied
    # Before any breaker read the node alone, then its partitions' sizes and the partition; the drain,
    # the breaker's confirmation, the DOWN (docs/scale.md, "Breaker shards").
    assert [call[:3] for call in client.calls] == [
        _node_read("node1")[:3],
        _SIZES,
        ("sinfo", "-h", "-p"),
        ("update", "NodeName=node1", "State=DRAIN"),
        _SIZES,
        ("sinfo", "-h", "-p"),
        ("update", "NodeName=node1", "State=DOWN"),
    ]
    job = cluster.submit("node2")
    second = healthd_on("node2")
    second.policy = policy
    second.faults(MOUNT)
    second.cycle()  # its first breaker read: the partition is counted whole
    client = second.client()
    outcome = second.cycle(client=client, now=time.time() + 600)  # past its backoff, within the window
    assert client.calls == [_BOTH_READ], "a held node: one sinfo (two RPCs) answers for the node and the breaker"
    assert outcome.action.decision.action.value == "hold"
    assert outcome.action.decision.intended.value == "take_out_now"
    assert not outcome.action.applied
    held = [f for f in outcome.result.findings if f.code == "DRAIN_HELD"]
    assert held and held[0].status.name == "CRITICAL" and held[0].subject == "node2"
    assert cluster.state("node2") == "allocated" and cluster.job_state(job) == "RUNNING"
    assert cluster.state("node1") == "drained"
    # While held, the next pass does not read the whole node table again (C13).
    client = second.client()
    again = second.cycle(client=client)
    assert again.action.decision.action.value == "hold"
    assert [f.code for f in again.result.findings if f.code == "DRAIN_HELD"] == ["DRAIN_HELD"]
    assert client.calls == [_node_read("node2")]
    assert cluster.job_state(job) == "RUNNING"


def test_dry_run_changes_nothing(cluster: Any, healthd_on: Any) -> None:
    job = cluster.submit("node3")
    hd = healthd_on("node3")
    hd.faults(MOUNT)
    client = hd.client()
    outcome = hd.cycle(dry_run=True, client=client)
    assert outcome.action.decision.action.value == "take_out_now"
    assert outcome.action.dry_run and not outcome.action.applied and not outcome.action.pending
    assert all(call[0] != "update" for call in client.calls)
    assert cluster.state("node3") == "allocated"
    assert cluster.job_state(job) == "RUNNING"


def test_cli_check_json_and_ack(cluster: Any, healthd_on: Any, cli: Any) -> None:
    hd = healthd_on("node2")
    config = str(hd.cli_config("/no/such/mount"))
    code, out, _ = cli("check", "--once", "--json", "--only", "mounts", "--config", config)
    document = json.loads(out)
    assert code == 2 and document["exit_code"] == 2
    assert document["action"]["decision"] == "take_out_now" and document["action"]["applied"] is True
    assert cluster.state("node2") == "drained"
    assert cluster.reason("node2").startswith("healthd: MOUNT_MISSING /no/such/mount [")

    # A partial pass of another check proves nothing about the mount: no resume.
    code, out, _ = cli("check", "--once", "--json", "--only", "services", "--config", config)
    document = json.loads(out)
    assert code == 0 and document["action"]["decision"] == "none", document["action"]
    assert "mounts" in document["action"]["explanation"]
    assert cluster.state("node2") == "drained"
    code, out, _ = cli("check", "--once", "--json", "--only", "mounts", "--config", config)
    assert code == 2 and json.loads(out)["action"]["decision"] == "none", "already out: nothing sent"

    code, out, _ = cli("ack", "MOUNT_MISSING", "--config", config)
    assert code == 0 and "acknowledged CRITICAL mounts MOUNT_MISSING /no/such/mount" in out
    code, out, _ = cli("check", "--once", "--json", "--only", "mounts", "--config", config)
    document = json.loads(out)
    assert code == 0
    assert document["action"]["decision"] == "resume" and document["action"]["applied"] is True
    cluster.wait(lambda: cluster.state("node2") == "idle", 20, "node2 idle")


@every_release
def test_slurmd_runs_healthd_as_health_check_program(cluster: Any, healthd_on: Any) -> None:
    job = cluster.submit("node3")
    hd = healthd_on("node3")
    # No node_name: the hook must find its node from SLURMD_NODENAME alone.
    hd.cli_config("/no/such/hook/mount", node_name=False).rename(cluster.hook_config)
    assert "node_name" not in cluster.hook_config.read_text()
    cluster.hook_nodes.write_text("node3\n")
    try:
        cluster.wait(lambda: cluster.state("node3") == "drained", 40, "slurmd's health check to drain node3")
    finally:
        cluster.hook_nodes.unlink()
    assert cluster.reason("node3").startswith("healthd: MOUNT_MISSING /no/such/hook/mount [")
    assert cluster.job_state(job) == "PENDING" and cluster.job_field(job, "Restarts") == "1"
    log = Path(cluster.hook_log).read_text()
    assert "node3: CRITICAL" in log and "take_out_now" in log


def _refusing_scontrol(directory: Path) -> Path:
    """A bin_dir whose scontrol is the real one, except that each ``update`` names a node slurmctld does not have.

    slurmctld itself then refuses the write, with its own message; reads go through unchanged.
    """
    real = next(d / "scontrol" for d in STANDARD_BIN_DIRS if (d / "scontrol").is_file())
    directory.mkdir()
    wrapper = directory / "scontrol"
    wrapper.write_text(
        f'#!/bin/sh\nif [ "$1" = update ]; then shift 2; exec {real} update NodeName=no-such-node "$@"; fi\n'
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    (directory / "sinfo").symlink_to(real.parent / "sinfo")
    return directory


def test_a_write_slurmctld_refuses_is_one_phrase_and_a_value(cluster: Any, healthd_on: Any, tmp_path: Path) -> None:
    hd = healthd_on("node2", slurm=f'bin_dir = "{_refusing_scontrol(tmp_path / "bin")}"')
    hd.faults(MOUNT)
    outcome = hd.cycle()
    assert outcome.action.pending and not outcome.action.applied
    assert cluster.state("node2").startswith("idle") and cluster.reason("node2") == ""
    [failure] = outcome.action.slurm_errors
    assert failure.kind is SlurmFailure.REJECTED
    assert failure.command == f"scontrol update NodeName=node2 State=DRAIN Reason={REASON}"
    assert failure.detail == "scontrol: slurm_update error: Invalid node name specified", failure
    [entry] = outcome.document["action"]["slurm_errors"]
    assert entry == {"kind": "rejected", "command": failure.command, "detail": failure.detail, "error": 0}
    headline = action_lines(outcome.document, time.time())[0]
    assert f": Slurm refused the change ({failure.detail}); next try in " in headline, headline
