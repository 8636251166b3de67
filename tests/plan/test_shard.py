"""Breaker shards (healthd.plan.shard): a large partition's limit kept by each node reading only its own shard."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from healthd.config.models import PolicySettings
from healthd.plan.breaker import allowed_out, breaker_confirm, group_views, over_limit
from healthd.plan.shard import shard, shard_view
from healthd.plan.state import PolicyState
from healthd.slurm.nodestate import NodeGroup, PartitionView
from healthd.slurm.reasons import Reasons


@settings(deadline=None)
@given(size=st.integers(1, 200), fraction=st.sampled_from([0.01, 0.05, 0.1, 0.25, 0.34, 0.5, 1.0]))
def test_the_shards_split_the_partition_into_its_limit_of_slots(size: int, fraction: float) -> None:
    """Every node computes the same shards, one per place under the limit, of sizes within one of each other."""
    names = [f"n{i:04d}" for i in range(size)]
    shards = {shard(name, list(reversed(names)), fraction) for name in names}
    assert len(shards) == allowed_out(size, fraction)
    assert sorted(n for s in shards for n in s) == names, "each node in exactly one shard"
    assert all(name in shard(name, names, fraction) for name in names)
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1


def test_a_node_not_in_the_list_has_no_shard() -> None:
    assert shard("x", ["a", "b"], 0.5) == ()


def test_neighbours_fall_into_different_shards() -> None:
    """A rack of ten consecutive names in 1,000 nodes at 0.1 (100 shards): eight shards here, not one holding nine."""
    names = [f"n{i:04d}" for i in range(1000)]
    rack = names[500:510]
    assert len({shard(name, names, 0.1) for name in rack}) >= 8


def test_a_shard_mate_out_holds_the_node_though_the_partition_has_room() -> None:
    """30 nodes at 0.1: three shards of ten, one node out each; the limit of the whole (3) is theirs to share."""
    settings = PolicySettings(max_out_fraction=0.1, breaker_shard_above=0)
    now = 1_800_000_000.0
    names = [f"n{i:02d}" for i in range(30)]
    mates = shard("n03", names, 0.1)
    mate = next(n for n in mates if n != "n03")
    stranger = next(n for n in names if n not in mates)
    whole = PartitionView("p", 30, ((True, now - 60, "n03"),))
    mine = shard_view(whole, shard(mate, names, 0.1))
    other = shard_view(whole, shard(stranger, names, 0.1))
    assert mine.size == 10 and mine.limit == 1 and other.out == ()
    why = over_limit(mate, {"p": mine}, settings, now)
    assert why.startswith("partition p: 1 of the 10 nodes of this node's breaker shard"), why
    assert over_limit(stranger, {"p": other}, settings, now) == ""
    assert over_limit(mate, {"p": whole}, settings, now) == "", "counted whole, the partition had room"


@given(
    drains=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 29)), min_size=1, max_size=20, unique_by=lambda d: d[1]
    ),
    fraction=st.sampled_from([0.1, 0.2, 0.34]),
    draw=st.data(),
)
def test_shards_never_keep_more_than_the_partition_limit(
    drains: list[tuple[int, int]], fraction: float, draw: st.DataObject
) -> None:
    """Any interleaving of drains and confirming reads, each node reading only its shard's nodes.

    As the whole-partition property in test_policy.py: a node reads 1.2 s or more after
    its drain (whole-second stamps of one clock) and resumes if ``breaker_confirm``, over
    its shard's view, says so. However they interleave, no shard keeps more than one node
    and the partition no more than its limit.
    """
    size = 30
    names = [f"n{i:02d}" for i in range(size)]
    settings = PolicySettings(max_out_fraction=fraction, breaker_shard_above=0)
    events: list[tuple[float, str, str]] = []
    for second, index in drains:
        at = second + draw.draw(st.floats(0, 0.99), label=f"offset {index}")
        events.append((at, "drain", names[index]))
        events.append((at + 1.2 + draw.draw(st.floats(0, 3), label=f"delay {index}"), "read", names[index]))
    events.sort()
    groups: dict[str, NodeGroup] = {}
    kept: set[str] = set()
    for at, kind, name in events:
        if kind == "drain":
            groups[name] = NodeGroup("p", 1, "IDLE", frozenset({"DRAIN"}), "healthd: X", float(int(at)), name)
            continue
        mates = shard(name, names, fraction)
        seen = [groups[m] for m in mates if m in groups]
        view = shard_view(group_views(seen, ("p",), Reasons())["p"], mates)
        if breaker_confirm(name, {"p": view}, settings):
            del groups[name]
        else:
            kept.add(name)
    assert len(kept) <= allowed_out(size, fraction)
    assert all(len(kept & set(shard(name, names, fraction))) <= 1 for name in names)
    assert kept, "the first node to drain always keeps its place"


def test_whether_the_last_read_was_sharded_survives_the_state_file() -> None:
    """What the next faulty pass reads first depends on it (plan._first_read): kept between passes."""
    for sharded in (True, False):
        state = PolicyState(sharded=sharded)
        assert PolicyState.from_dict(state.to_dict()).sharded is sharded
    assert "sharded" not in PolicyState().to_dict(), "a file of the version before reads and writes back the same"
