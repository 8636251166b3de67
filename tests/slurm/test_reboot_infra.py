"""Reboots, power saving and reservations: the adapter's parsing of real 22.05 captures, and the real cluster.

The test cluster simulates its machines (tests/healthd_testkit/cluster.py): RebootProgram stops
the node's slurmd, gives the node a new boot id under ``cluster.procfs(node)`` and
starts slurmd again with a new boot time; SuspendProgram and ResumeProgram power a
node off and on the same way. So ``scontrol reboot`` and power saving run through
slurmctld for real, and what these tests assert is what Slurm 22.05 does.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any, Callable

import pytest
from healthd_testkit.paths import FIXTURES as ALL_FIXTURES
from healthd_testkit.waiting import wait_for

from healthd.boot import read_boot_id
from healthd.config.models import SlurmSettings
from healthd.slurm.adapter import SlurmClient, SlurmError, parse_show_node_json, parse_show_node_line
from healthd.slurm.nodestate import NodeInfo

CAPTURES = ALL_FIXTURES / "slurm"
REBOOT_REASON = "healthd: REBOOT XID_79 gpu0 (+1 more)"


def _capture(name: str) -> NodeInfo:
    return parse_show_node_line((CAPTURES / f"show-node-22.05-{name}.txt").read_text())


def _local(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S").timestamp()


# -- the parser over real captures ----------------------------------------------------


@pytest.mark.parametrize(
    ("capture", "state", "flags", "reason", "next_state"),
    [
        (
            "healthd-reboot-requested",
            "ALLOCATED",
            {"DRAIN", "REBOOT_REQUESTED"},
            "healthd: REBOOT XID_79 gpu0",
            "DOWN",
        ),
        (
            "healthd-reboot-issued",
            "DOWN",
            {"DRAIN", "REBOOT_ISSUED"},
            "healthd: REBOOT XID_79 gpu0 : reboot issued",
            "DOWN",
        ),
        ("healthd-reboot-complete", "DOWN", set(), "healthd: REBOOT XID_79 gpu0 : reboot issued : reboot complete", ""),
        ("drain-then-reboot-requested", "ALLOCATED", {"DRAIN", "REBOOT_REQUESTED"}, "healthd: REBOOT XID_79 gpu0", ""),
        ("drain-then-reboot-complete", "IDLE", {"DRAIN"}, "healthd: REBOOT XID_79 gpu0 : reboot issued", ""),
        ("power-down", "IDLE", {"POWER_DOWN"}, "", ""),
        ("powering-down", "IDLE", {"POWERING_DOWN"}, "", ""),
        ("powered-down", "IDLE", {"POWERED_DOWN"}, "", ""),
        ("powered-down-drain", "IDLE", {"DRAIN", "POWERED_DOWN"}, "healthd: TEST", ""),
        ("powering-up", "IDLE", {"NOT_RESPONDING", "POWERING_UP"}, "", ""),
        ("maint-reservation", "IDLE", {"MAINTENANCE", "RESERVED"}, "", ""),
        (
            "maint-reservation-drain",
            "IDLE",
            {"DRAIN", "MAINTENANCE", "RESERVED"},
            "healthd: MOUNT_MISSING /scratch",
            "",
        ),
        ("reserved", "IDLE", {"RESERVED"}, "", ""),
    ],
)
def test_parse_captured_reboot_power_and_reservation_lines(
    capture: str, state: str, flags: set[str], reason: str, next_state: str
) -> None:
    node = _capture(capture)
    assert (node.state, set(node.flags), node.reason, node.next_state) == (state, flags, reason, next_state)
    assert node.partitions == ("batch",)


def test_node_properties_name_each_state() -> None:
    requested, issued = _capture("healthd-reboot-requested"), _capture("healthd-reboot-issued")
    assert requested.reboot_requested and "REBOOT_ISSUED" not in requested.flags and requested.reboot_pending
    assert requested.busy and requested.drained
    assert "REBOOT_ISSUED" in issued.flags and not issued.reboot_requested and issued.down and issued.out
    complete = _capture("healthd-reboot-complete")
    assert not complete.reboot_pending and complete.down and not complete.drained
    for name in ("power-down", "powering-down", "powered-down", "powering-up"):
        assert _capture(name).power_saving, name
    assert "POWERED_DOWN" in _capture("powered-down").flags and "POWERED_DOWN" not in _capture("powering-down").flags
    assert "NOT_RESPONDING" in _capture("powering-up").flags
    maint, reserved = _capture("maint-reservation"), _capture("reserved")
    assert maint.maintenance and maint.reserved and not maint.out
    assert reserved.reserved and not reserved.maintenance
    for node in (maint, reserved, complete):
        assert not node.power_saving
    assert not _capture("maint-reservation").reboot_pending


def test_boot_time_is_read_and_moves_with_a_reboot() -> None:
    before, after = _capture("healthd-reboot-requested"), _capture("healthd-reboot-complete")
    assert before.boot_time == _local("2026-11-24T11:12:40")
    assert after.boot_time == _local("2026-11-24T12:22:01")
    # The reason was stamped after the new boot registered: how a policy tells "rebooted since".
    assert after.reason_time is not None and after.reason_time >= after.boot_time
    # 22.05 prints BootTime=None while a node powers up.
    assert _capture("powering-up").boot_time is None


def test_json_boot_time_and_next_state_in_every_documented_shape() -> None:
    def node(**fields: Any) -> dict[str, Any]:
        return {"name": "n1", "state": ["IDLE"], "partitions": ["batch"], **fields}

    document = {
        "nodes": [
            node(boot_time=1700000000, next_state_after_reboot=["DOWN"]),  # 23.02
            node(boot_time={"set": True, "infinite": False, "number": 1700000001}, next_state_after_reboot=["INVALID"]),
            node(boot_time={"set": False, "number": 0}, next_state_after_reboot="invalid"),  # older parsers
            node(),
        ]
    }
    nodes = parse_show_node_json(json.dumps(document))
    assert [(n.boot_time, n.next_state) for n in nodes] == [
        (1700000000.0, "DOWN"),
        (1700000001.0, ""),
        (None, ""),
        (None, ""),
    ]


def test_reboot_refuses_a_next_state_slurm_does_not_know() -> None:
    client = SlurmClient(SlurmSettings())
    with pytest.raises(ValueError, match="nextstate must be one of DOWN, RESUME, not 'DRAIN'"):
        client.reboot("node1", REBOOT_REASON, nextstate="DRAIN")
    assert client.calls == []


# -- the real cluster -------------------------------------------------------------------


def _client(cluster: Any) -> SlurmClient:
    return SlurmClient(SlurmSettings(conf=cluster.conf, timeout=10))


def _node(cluster: Any, name: str) -> NodeInfo:
    return _client(cluster).show_node(name)


def _hold(cluster: Any, node: str, seconds: float, what: str, predicate: Callable[[str], bool]) -> None:
    """``predicate(node_state)`` holds at every look for ``seconds`` (a state that must last, not flicker)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        state = cluster.node_state(node)
        assert predicate(state), f"{node} {what}: became {state} ({cluster.reason(node)!r})"
        time.sleep(0.5)


def _settle_boot(cluster: Any, node: str, before: int) -> Any:
    boot = cluster.wait_booted(node, count=before + 1, timeout=60)
    cluster.wait_state(node, lambda s: "REBOOT" not in s and "POWER" not in s, 30, "registered after boot")
    return boot


def test_asap_reboot_waits_for_the_job_then_the_machine_boots_once(cluster: Any) -> None:
    node, client = "node2", _client(cluster)
    boots, old_id = len(cluster.boots(node)), cluster.boot_id(node)
    # slurmctld shows no BootTime until the node's slurmd has registered once after a restart.
    wait_for(lambda: _node(cluster, node).boot_time is not None, 30, "node2's boot time in slurmctld")
    old_boot_time = _node(cluster, node).boot_time
    job = cluster.submit(node, 6)
    client.reboot(node, REBOOT_REASON)  # ASAP, nextstate=DOWN: the adapter's default
    assert client.calls[-1] == ("reboot", "ASAP", "nextstate=DOWN", f"reason={REBOOT_REASON}", node)
    requested = _node(cluster, node)
    assert requested.reboot_requested and requested.drained and requested.busy
    assert (requested.reason, requested.next_state) == (REBOOT_REASON, "DOWN")  # one argument, spaces and all
    assert cluster.state(node) == "draining@"
    _hold(cluster, node, 2, "waits for its job", lambda s: "REBOOT_REQUESTED" in s)
    assert cluster.job_state(job) == "RUNNING" and cluster.boots(node)[boots:] == []
    issued = cluster.wait_state(node, lambda s: "REBOOT_ISSUED" in s, 30, "reboot issued after the job")
    assert issued == "DOWN+DRAIN+REBOOT_ISSUED"
    assert cluster.job_state(job) == "COMPLETED"
    assert cluster.reason(node).startswith(f"{REBOOT_REASON} : reboot issued [root@")
    boot = _settle_boot(cluster, node, boots)
    assert [b.how for b in cluster.boots(node)[boots:]] == ["reboot"]  # exactly one boot
    assert boot.boot_id != old_id and cluster.boot_id(node) == boot.boot_id
    # healthd reads the boot id from [paths] procfs: the node's own procfs root.
    assert read_boot_id(cluster.procfs(node)) == boot.boot_id
    after = _node(cluster, node)
    assert after.boot_time is not None and old_boot_time is not None and after.boot_time > old_boot_time
    assert after.boot_time >= int(boot.at) - 2
    # nextstate=DOWN: slurmctld leaves the node DOWN with "... : reboot complete" when it
    # registers (fixtures/slurm/show-node-22.05-healthd-reboot-complete.txt), but it loses
    # DRAIN there, and with ReturnToService=2 the next ping returns it to service.
    cluster.wait_state(node, lambda s: s == "IDLE", 15, "returned to service by ReturnToService=2")
    assert cluster.reason(node) == ""
    log = (cluster.root / "log" / "slurmctld.log").read_text()
    assert f"node {node} returned to service" in log


def test_a_node_drained_before_a_plain_reboot_stays_drained_after_it(cluster: Any) -> None:
    node, client = "node1", _client(cluster)
    boots = len(cluster.boots(node))
    job = cluster.submit(node, 4)
    cluster.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=healthd: XID_79 gpu0")
    client.reboot(node, REBOOT_REASON, asap=False, nextstate=None)
    assert client.calls[-1] == ("reboot", f"reason={REBOOT_REASON}", node)
    requested = _node(cluster, node)
    assert requested.reboot_requested and requested.drained and requested.next_state == ""
    assert cluster.job_state(job) == "RUNNING"
    _settle_boot(cluster, node, boots)
    after = _node(cluster, node)
    assert (after.state, set(after.flags)) == ("IDLE", {"DRAIN"})
    assert after.reason == f"{REBOOT_REASON} : reboot issued"
    # DRAIN is durable: it outlives the ping that returns a DOWN node to service.
    _hold(cluster, node, 5, "stays drained after the reboot", lambda s: s == "IDLE+DRAIN")
    client.resume(node)
    cluster.wait_state(node, lambda s: s == "IDLE", 15, "resumed")


def test_reboot_with_nextstate_resume_returns_the_node_and_clears_the_reason(cluster: Any) -> None:
    node, client = "node2", _client(cluster)
    boots = len(cluster.boots(node))
    client.reboot(node, REBOOT_REASON, nextstate="RESUME")
    _settle_boot(cluster, node, boots)
    cluster.wait_state(node, lambda s: s == "IDLE", 15, "resumed after the reboot")
    assert cluster.reason(node) == ""
    assert len(cluster.reboots(node)) >= 1 and cluster.boots(node)[-1].how == "reboot"


def test_cancel_reboot_withdraws_a_pending_reboot_and_its_drain(cluster: Any) -> None:
    node, client = "node3", _client(cluster)
    boots = len(cluster.boots(node))
    job = cluster.submit(node, 300)
    client.reboot(node, REBOOT_REASON)
    assert _node(cluster, node).reboot_requested
    client.cancel_reboot(node)
    after = _node(cluster, node)
    assert (after.state, set(after.flags), after.reason) == ("ALLOCATED", set(), "")
    cluster.run("scancel", job)
    cluster.wait_state(node, lambda s: s == "IDLE", 20, "idle after the job")
    time.sleep(3)
    assert cluster.boots(node)[boots:] == []


def test_an_issued_reboot_cannot_be_cancelled(cluster: Any) -> None:
    node, client = "node3", _client(cluster)
    boots = len(cluster.boots(node))
    client.reboot(node, REBOOT_REASON)
    cluster.wait_state(node, lambda s: "REBOOT_ISSUED" in s, 20, "reboot issued")
    with pytest.raises(SlurmError, match="cancel_reboot"):
        client.cancel_reboot(node)
    _settle_boot(cluster, node, boots)


def test_power_saving_stops_the_machine_and_scontrol_reboot_ignores_it(cluster: Any) -> None:
    node, client = "node3", _client(cluster)
    boots = len(cluster.boots(node))
    cluster.run("scontrol", "update", f"NodeName={node}", "State=POWER_DOWN")
    cluster.wait_state(node, lambda s: "POWERING_DOWN" in s, 15, "powering down")
    assert cluster.state(node) == "idle%"
    cluster.wait_state(node, lambda s: s == "IDLE+POWERED_DOWN", 40, "powered down")
    assert cluster.state(node) == "idle~"
    cluster.wait_machines_settled()
    assert not cluster.slurmd_running(node)  # the machine is off: nothing on it runs a check
    off = _node(cluster, node)
    assert "POWERED_DOWN" in off.flags and off.power_saving and not off.out
    # slurmctld accepts both requests, but a reboot of a powered-down node never happens.
    client.drain(node, "healthd: TEST")
    assert set(_node(cluster, node).flags) == {"DRAIN", "POWERED_DOWN"}
    client.reboot(node, REBOOT_REASON)
    _hold(cluster, node, 3, "ignores the reboot", lambda s: "REBOOT" not in s and "POWERED_DOWN" in s)
    client.resume(node)
    cluster.run("scontrol", "update", f"NodeName={node}", "State=POWER_UP")
    up = cluster.wait_state(node, lambda s: "POWERING_UP" in s, 15, "powering up")
    assert "NOT_RESPONDING" in up
    boot = _settle_boot(cluster, node, boots)
    assert boot.how == "resume" and read_boot_id(cluster.procfs(node)) == boot.boot_id
    cluster.wait_state(node, lambda s: s == "IDLE", 15, "idle after power-up")


def test_reservations_flag_the_node_and_a_maintenance_one_says_so(cluster: Any) -> None:
    create = ("scontrol", "create", "reservation", "starttime=now", "duration=60", "users=root")
    cluster.run(*create, "reservationname=healthd_maint", "flags=maint", "nodes=node1")
    cluster.run(*create, "reservationname=healthd_resv", "nodes=node3")
    cluster.wait_state("node1", lambda s: "MAINTENANCE" in s, 30, "in the maintenance reservation")
    cluster.wait_state("node3", lambda s: "RESERVED" in s, 30, "in the reservation")
    maint, reserved = _node(cluster, "node1"), _node(cluster, "node3")
    assert maint.maintenance and maint.reserved and set(maint.flags) == {"MAINTENANCE", "RESERVED"}
    assert reserved.reserved and not reserved.maintenance
    assert (cluster.state("node1"), cluster.state("node3")) == ("maint", "reserved")
    # A drain works inside a maintenance window and shows as drained$ in sinfo.
    _client(cluster).drain("node1", "healthd: MOUNT_MISSING /scratch")
    assert set(_node(cluster, "node1").flags) == {"DRAIN", "MAINTENANCE", "RESERVED"}
    assert cluster.state("node1") == "drained$"


def test_reset_brings_back_nodes_left_rebooting_powered_down_or_reserved(cluster: Any) -> None:
    cluster.submit("node1", 300)
    _client(cluster).reboot("node1", REBOOT_REASON)
    cluster.run("scontrol", "update", "NodeName=node2", "State=POWER_DOWN")
    cluster.run(
        "scontrol", "create", "reservation", "reservationname=left_over", "starttime=now", "duration=60",
        "flags=maint", "nodes=node3", "users=root",
    )  # fmt: skip
    cluster.wait_state("node1", lambda s: "REBOOT_REQUESTED" in s, 5, "reboot pending")
    cluster.reset()
    nodes = ("node1", "node2", "node3")
    assert all(cluster.state(n) == "idle" for n in nodes), [cluster.node_state(n) for n in nodes]
    assert cluster.reservations() == []
    assert all(cluster.slurmd_running(n) for n in nodes)
    assert [b.how for b in cluster.boots("node2")][-1] == "resume"  # powered up again, not just resumed
