"""Which Slurm reads a pass makes, on the real cluster: every partition for the breaker, and a node someone else holds.

docs/scale.md: the combined read of a faulty pass covers every partition, so one the
node has just joined counts, and a node out by another's hand costs one read of the
node alone per faulty pass, counted here both as adapter calls and by slurmctld (sdiag).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterator

import pytest

from healthd.plan.shard import shard
from healthd.slurm.adapter import GROUP_FIELDS, NODE_FIELDS, sinfo_format

pytestmark = pytest.mark.slurm

MOUNT = ("CRITICAL", "MOUNT_MISSING", "/scratch")
_GROUPS = sinfo_format(GROUP_FIELDS)
_EVERY_PARTITION = ("sinfo", "-h", "--all", "-O", _GROUPS)
# Every partition's size and host list (one PARTITION_INFO): whether the breaker counts it whole or by shards.
_SIZES = ("-o", "--all", "show", "partition")
_SIZES_3 = _SIZES[:3]
_RPC = re.compile(r"^\s*(REQUEST_[A-Z_]+)\s*\(\s*\d+\)\s*count:(\d+)", re.MULTILINE)
# What healthd's reads and writes are to slurmctld; the cluster's own traffic is left out.
_HEALTHD_RPCS = ("REQUEST_NODE_INFO", "REQUEST_NODE_INFO_SINGLE", "REQUEST_PARTITION_INFO", "REQUEST_UPDATE_NODE")


def _node_read(node: str) -> tuple[str, ...]:
    return ("sinfo", "-h", "--all", "-N", "-n", node, "-O", sinfo_format(NODE_FIELDS))


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
    """A second partition ``gpu`` holding node2 (the cluster's ``batch`` holds every node); removed afterwards."""
    cluster.run("scontrol", "create", "PartitionName=gpu", "Nodes=node2")
    try:
        yield "gpu"
    finally:
        cluster.run("scontrol", "delete", "PartitionName=gpu", check=False)


def test_the_combined_read_counts_a_partition_the_node_has_just_joined(
    cluster: Any, healthd_on: Any, gpu_partition: str
) -> None:
    """No partition memory: a partition the node joined after its last read holds the take-out at once."""
    # With 0.67, batch (3 nodes) lets 2 out, gpu (2 nodes) 1.
    hd = healthd_on("node1", policy="max_out_fraction = 0.67", slurm="reconcile_interval = 0")
    client = hd.client()
    hd.cycle(client=client)
    assert client.calls == [_node_read("node1")], "the reconcile read of a healthy node: node1 is in batch alone"

    # Then node1 joins gpu, where node2 is already out with healthd's reason.
    cluster.run("scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=healthd: MOUNT_MISSING /scratch")
    cluster.run("scontrol", "update", f"PartitionName={gpu_partition}", "Nodes=node1,node2")
    hd.faults(MOUNT)
    client = hd.client()
    outcome = hd.cycle(client=client)
    assert client.calls[:2] == [_node_read("node1"), _SIZES], "the node, then its partitions as they are now"
    assert outcome.action.held, outcome.action
    assert f"partition {gpu_partition}" in outcome.action.decision.explanation
    assert not cluster.reason("node1").startswith("healthd: ")
    assert "partitions" not in _policy(hd)


def test_a_node_drained_by_an_administrator_costs_one_node_read_per_faulty_pass(cluster: Any, healthd_on: Any) -> None:
    cluster.run("scontrol", "update", "NodeName=node3", "State=DRAIN", "Reason=admin: bad DIMM ticket 42")
    hd = healthd_on("node3", policy="max_out_fraction = 0.34")
    hd.faults(MOUNT)
    client = hd.client()
    assert hd.cycle(client=client).action.decision.action.value == "none"
    assert client.calls == [_node_read("node3")], "nothing known yet: the node alone, before any breaker read"
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
        _SIZES_3,
        ("sinfo", "-h", "-p"),
        ("update", "NodeName=node3", "State=DRAIN"),
        _SIZES_3,
        ("sinfo", "-h", "-p"),
        ("update", "NodeName=node3", "State=DOWN"),
    ]
    assert cluster.reason("node3").startswith("healthd: MOUNT_MISSING /scratch")


def test_a_reason_with_a_newline_on_one_node_blocks_no_other_nodes_take_out(cluster: Any, healthd_on: Any) -> None:
    """slurmctld keeps a reason verbatim and sinfo prints it so: the lines after its first are not rows.

    One such reason anywhere in the cluster used to fail every read of the partitions' groups,
    so no node could be taken out. Here node3 carries one, and node1 goes out past it.
    """
    reason = "admin: RMA pending\nticket 42 | see jira"
    cluster.run("scontrol", "update", "NodeName=node3", "State=DRAIN", f"Reason={reason}")
    assert f"|node3|{reason}\n" in cluster.run(*_EVERY_PARTITION).stdout, "sinfo prints the reason over two lines"

    # 0.34 of 3 nodes lets one out: node3 is the administrator's and does not count, so node1 keeps
    # its place, and the breaker's read after the drain sees node3's reason too.
    hd = healthd_on("node1", policy="max_out_fraction = 0.34")
    hd.faults(MOUNT)
    client = hd.client()
    outcome = hd.cycle(client=client)
    assert outcome.action.errors == ()
    assert outcome.action.decision.action.value == "take_out_now" and outcome.action.applied, outcome.action
    assert [call[:3] for call in client.calls] == [
        _node_read("node1")[:3],
        _SIZES_3,
        ("sinfo", "-h", "-p"),
        ("update", "NodeName=node1", "State=DRAIN"),
        _SIZES_3,
        ("sinfo", "-h", "-p"),
        ("update", "NodeName=node1", "State=DOWN"),
    ]
    assert cluster.reason("node1").startswith("healthd: MOUNT_MISSING /scratch")

    # node3's own reads find it, with its whole reason, and leave it to the administrator.
    own = healthd_on("node3", policy="max_out_fraction = 0.34")
    own.faults(MOUNT)
    left = own.cycle()
    assert left.action.errors == ()
    assert left.action.decision.action.value == "none" and "not healthd's" in left.action.decision.explanation
    assert left.node is not None and left.node.reason == reason
    client = own.client()
    assert client.node("node3").reason == reason, "sinfo -N -n node3"
    # scontrol -o prints the first line, the stamp, then the rest: the first line is what it gives.
    assert client.show_node("node3").reason == reason.split("\n")[0], "scontrol -o show node node3"
    assert f"|node3|{reason}\n" in cluster.run(*_EVERY_PARTITION).stdout, "node3's reason left as it was"


def test_a_large_partition_is_counted_by_shards_without_packing_the_node_table(cluster: Any, healthd_on: Any) -> None:
    """Above ``breaker_shard_above`` nodes each node counts its shard, read node by node (docs/scale.md).

    batch's 3 nodes at 0.67 let 2 out: two shards, a pair and a single node (by a hash of the
    names, healthd.plan.shard). The pair's second node is held by the first, though counted
    whole the partition had room; the single node goes out in its own shard. No pass makes
    slurmctld pack the whole node table (REQUEST_NODE_INFO).
    """
    policy = "max_out_fraction = 0.67\nbreaker_shard_above = 2"
    names = ("node1", "node2", "node3")
    single = next(n for n in names if shard(n, names, 0.67) == (n,))
    first, second = (n for n in names if n != single)
    actions = {}
    harnesses = {}
    for node in (first, second, single):
        hd = healthd_on(node, policy=policy)
        hd.faults(MOUNT)
        outcome = None

        def one_pass(hd: Any = hd) -> None:
            nonlocal outcome
            outcome = hd.cycle()

        rpcs = _rpcs(cluster, one_pass)
        assert outcome is not None
        assert "REQUEST_NODE_INFO" not in rpcs, (node, rpcs)
        actions[node] = outcome.action
        assert _policy(hd)["sharded"] is True
        harnesses[node] = hd
    held_hd = harnesses[second]
    assert actions[first].applied and actions[single].applied
    assert actions[second].held and not actions[second].applied
    assert "1 of the 2 nodes of this node's breaker shard" in actions[second].decision.explanation
    held = _policy(held_hd)["held"]
    assert held["attempts"] == 1 and 22.5 <= held["next_check"] - held["since"] <= 37.5, "30 s, stretched 0.75-1.25"

    # Within its backoff the held node reads only itself; after it, its shard again: never the whole table.
    for later, reads in ((10, {"REQUEST_NODE_INFO_SINGLE": 1, "REQUEST_PARTITION_INFO": 1}), (600, None)):
        outcome = None

        def again(later: float = later) -> None:
            nonlocal outcome
            outcome = held_hd.cycle(now=held["since"] + later)

        rpcs = _rpcs(cluster, again)
        assert outcome is not None and outcome.action.held, outcome
        assert "REQUEST_NODE_INFO" not in rpcs and (reads is None or rpcs == reads), (later, rpcs)
    assert [cluster.reason(n).startswith("healthd: ") for n in names] == [n != second for n in names]


def test_a_held_node_reads_the_shard_mate_that_held_it_first(cluster: Any, healthd_on: Any) -> None:
    """A held node's re-read after its backoff starts at the shard-mate that held it: one node read, not half the shard.

    At 0.34 batch's 3 nodes are one shard with one place. node1 goes out; node2, reading its
    shard-mates in name order after itself, reads node3 and then node1 before it is held, and
    remembers node1 (``held.by``). After its backoff it reads node1 first and is held again
    after that one read: its own node read and node1's, two NODE_INFO_SINGLE where the shard
    in name order took three (docs/scale.md, "Breaker shards").
    """
    policy = "max_out_fraction = 0.34\nbreaker_shard_above = 2"
    assert shard("node2", ("node1", "node2", "node3"), 0.34) == ("node1", "node2", "node3")
    holder = healthd_on("node1", policy=policy)
    holder.faults(MOUNT)
    assert holder.cycle().action.applied
    held_hd = healthd_on("node2", policy=policy)
    held_hd.faults(MOUNT)
    outcome = None

    def first_pass() -> None:
        nonlocal outcome
        outcome = held_hd.cycle()

    first = _rpcs(cluster, first_pass)
    assert outcome is not None and outcome.action.held, outcome
    assert first["REQUEST_NODE_INFO_SINGLE"] == 3, first  # itself, then node3 and node1
    held = _policy(held_hd)["held"]
    assert held["by"] == ["node1"]

    def after_backoff() -> None:
        nonlocal outcome
        outcome = held_hd.cycle(now=held["since"] + 600)

    again = _rpcs(cluster, after_backoff)
    assert outcome is not None and outcome.action.held, outcome
    assert again["REQUEST_NODE_INFO_SINGLE"] == 2 and "REQUEST_NODE_INFO" not in again, again
    assert _policy(held_hd)["held"]["by"] == ["node1"]
    assert cluster.reason("node1").startswith("healthd: ") and not cluster.reason("node2").startswith("healthd: ")
