"""Which Slurm reads a pass makes, on the real cluster: the partitions it remembers, and a node someone else holds.

docs/scale.md: the combined read of a faulty pass covers only the partitions the
node was last seen in, and a node out by another's hand costs one read of the node
alone per faulty pass, counted here both as adapter calls and by slurmctld (sdiag).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterator

import pytest

from healthd.slurm import GROUP_FIELDS, NODE_FIELDS, sinfo_format

pytestmark = pytest.mark.slurm

MOUNT = ("CRITICAL", "MOUNT_MISSING", "/scratch")
_GROUPS = sinfo_format(GROUP_FIELDS)
_EVERY_PARTITION = ("sinfo", "-h", "--all", "-O", _GROUPS)
_RPC = re.compile(r"^\s*(REQUEST_[A-Z_]+)\s*\(\s*\d+\)\s*count:(\d+)", re.MULTILINE)
# What healthd's reads and writes are to slurmctld; the cluster's own traffic is left out.
_HEALTHD_RPCS = ("REQUEST_NODE_INFO", "REQUEST_NODE_INFO_SINGLE", "REQUEST_PARTITION_INFO", "REQUEST_UPDATE_NODE")


def _node_read(node: str) -> tuple[str, ...]:
    return ("sinfo", "-h", "--all", "-N", "-n", node, "-O", sinfo_format(NODE_FIELDS))


def _partitions_read(*names: str) -> tuple[str, ...]:
    return ("sinfo", "-h", "-p", ",".join(names), "-O", _GROUPS)


def _policy(hd: Any) -> dict[str, Any]:
    saved: dict[str, Any] = json.loads((hd.state_dir / "policy.json").read_text())
    return saved


def _rpcs(cluster: Any, work: Callable[[], object]) -> dict[str, int]:
    """healthd's RPCs to slurmctld while ``work`` runs, by type, from ``sdiag -r`` then ``sdiag``."""
    cluster.run("sdiag", "-r")
    work()
    counts = {kind: int(count) for kind, count in _RPC.findall(cluster.run("sdiag").stdout)}
    return {kind: count for kind, count in counts.items() if kind in _HEALTHD_RPCS and count}


@pytest.fixture
def gpu_partition(cluster: Any) -> Iterator[str]:
    """A second partition ``gpu`` holding node1 (the cluster's ``batch`` holds every node); removed afterwards."""
    cluster.run("scontrol", "create", "PartitionName=gpu", "Nodes=node1")
    try:
        yield "gpu"
    finally:
        cluster.run("scontrol", "delete", "PartitionName=gpu", check=False)


def _resume(hd: Any, cluster: Any) -> None:
    hd.faults()
    assert hd.cycle().action.decision.action.value == "resume"
    cluster.wait(lambda: cluster.state(hd.node) == "idle", 20, f"{hd.node} idle")


def test_the_combined_read_asks_for_the_partitions_the_node_was_last_seen_in(
    cluster: Any, healthd_on: Any, gpu_partition: str
) -> None:
    # Every pass reads the node, as the hourly reconcile read does on a healthy node.
    hd = healthd_on("node1", slurm="reconcile_interval = 0")
    client = hd.client()
    hd.cycle(client=client)
    assert client.calls == [_node_read("node1")]
    saved = _policy(hd)
    assert sorted(saved["partitions"]) == ["batch", "gpu"] and saved["partitions_read"] > 0

    hd.faults(MOUNT)
    client = hd.client()
    assert hd.cycle(client=client).action.applied
    assert client.calls[0] == _partitions_read(*saved["partitions"]), "the node's partitions only, not --all"
    assert [call[:3] for call in client.calls[1:]] == [
        ("update", "NodeName=node1", "State=DRAIN"),
        ("update", "NodeName=node1", "State=DOWN"),
    ]
    assert _policy(hd)["partitions_read"] == saved["partitions_read"], "a read of those partitions renews nothing"
    _resume(hd, cluster)

    # node1 leaves gpu: the read of its remembered partitions shows it, every partition is read, and learned.
    cluster.run("scontrol", "update", f"PartitionName={gpu_partition}", "Nodes=node2")
    hd.faults(MOUNT)
    client = hd.client()
    assert hd.cycle(client=client).action.applied
    assert client.calls[:2] == [_partitions_read(*saved["partitions"]), _EVERY_PARTITION]
    assert _policy(hd)["partitions"] == ["batch"]
    _resume(hd, cluster)

    # node1 joins gpu again: a read of the node alone shows every partition it is in.
    cluster.run("scontrol", "update", f"PartitionName={gpu_partition}", "Nodes=node1,node2")
    client = hd.client()
    hd.cycle(client=client)
    assert client.calls == [_node_read("node1")]
    assert sorted(_policy(hd)["partitions"]) == ["batch", "gpu"]
    hd.faults(MOUNT)
    client = hd.client()
    assert hd.cycle(client=client).action.applied
    assert client.calls[0] == _partitions_read(*_policy(hd)["partitions"])


def test_a_node_drained_by_an_administrator_costs_one_node_read_per_faulty_pass(cluster: Any, healthd_on: Any) -> None:
    cluster.run("scontrol", "update", "NodeName=node3", "State=DRAIN", "Reason=admin: bad DIMM ticket 42")
    hd = healthd_on("node3", policy="max_out_fraction = 0.34")
    hd.faults(MOUNT)
    client = hd.client()
    assert hd.cycle(client=client).action.decision.action.value == "none"
    assert client.calls == [_EVERY_PARTITION], "nothing known yet: the pass guessed a take-out"
    assert _policy(hd)["skips_breaker"] is True

    for _ in range(2):
        client = hd.client()
        outcome = None

        def one_pass(client: Any = client) -> None:
            nonlocal outcome
            outcome = hd.cycle(client=client)

        rpcs = _rpcs(cluster, one_pass)
        assert outcome is not None and outcome.action.decision.action.value == "none"
        assert "not healthd's" in outcome.action.decision.explanation
        assert client.calls == [_node_read("node3")]
        assert rpcs == {"REQUEST_NODE_INFO_SINGLE": 1, "REQUEST_PARTITION_INFO": 1}, "no table packed"
    assert cluster.reason("node3").startswith("admin: bad DIMM ticket 42")

    # The administrator resumes it while the fault persists: the next pass takes it out.
    cluster.run("scontrol", "update", "NodeName=node3", "State=RESUME")
    cluster.wait(lambda: cluster.state("node3") == "idle", 20, "node3 resumed by the admin")
    client = hd.client()
    outcome = hd.cycle(client=client)
    assert outcome.action.decision.action.value == "take_out_now" and outcome.action.applied
    assert [call[:3] for call in client.calls] == [
        _node_read("node3")[:3],
        ("sinfo", "-h", "-p"),
        ("update", "NodeName=node3", "State=DRAIN"),
        ("sinfo", "-h", "-p"),
        ("update", "NodeName=node3", "State=DOWN"),
    ]
    assert cluster.reason("node3").startswith("healthd: MOUNT_MISSING /scratch")
