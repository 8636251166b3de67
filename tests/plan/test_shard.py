"""Breaker shards (healthd.plan.shard): a large partition's limit kept by each node reading only its own shard."""

from __future__ import annotations

import pytest
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
    """Every node computes the same shards, at most one per place under the limit, each node in one of them."""
    names = [f"n{i:04d}" for i in range(size)]
    shards = {shard(name, list(reversed(names)), fraction) for name in names}
    assert 1 <= len(shards) <= allowed_out(size, fraction)
    assert sorted(n for s in shards for n in s) == names, "each node in exactly one shard"
    assert all(shard(mate, names, fraction) == s for s in shards for mate in s), "every mate agrees"


@pytest.mark.parametrize("fraction", [0.1, 0.34])
def test_a_node_joining_or_leaving_moves_no_other_node(fraction: float) -> None:
    """1,000 nodes and the 1,001st (the same number of shards): every other node keeps its shard-mates.

    Were shards runs of a sorted list, the newcomer would shift every boundary after it, and
    nodes confirming before and after it joined would count against different shards.
    """
    names = [f"n{i:04d}" for i in range(1001)]
    assert allowed_out(1000, fraction) == allowed_out(1001, fraction)
    for name in names[:1000]:
        assert set(shard(name, names, fraction)) - {"n1000"} == set(shard(name, names[:1000], fraction)), name


def test_a_node_not_in_the_list_has_no_shard() -> None:
    assert shard("x", ["a", "b"], 0.5) == ()


def test_neighbours_fall_into_different_shards() -> None:
    """A rack of ten consecutive names in 1,000 nodes at 0.1 (100 shards): eight shards here, not one holding nine."""
    names = [f"n{i:04d}" for i in range(1000)]
    rack = names[500:510]
    assert len({shard(name, names, 0.1) for name in rack}) >= 8


def test_a_shard_mate_out_holds_the_node_though_the_partition_has_room() -> None:
    """30 nodes at 0.1: three shards of about ten, one node out each; the limit of the whole (3) is theirs to share."""
    settings = PolicySettings(max_out_fraction=0.1, breaker_shard_above=0)
    now = 1_800_000_000.0
    names = [f"n{i:02d}" for i in range(30)]
    mates = shard("n03", names, 0.1)
    mate = next(n for n in mates if n != "n03")
    stranger = next(n for n in names if n not in mates)
    whole = PartitionView("p", 30, ((True, now - 60, "n03"),))
    mine = shard_view(whole, shard(mate, names, 0.1))
    other = shard_view(whole, shard(stranger, names, 0.1))
    assert mine.size == len(mates) and mine.limit == 1 and other.out == ()
    why = over_limit(mate, {"p": mine}, settings, now)
    assert why.startswith(f"partition p: 1 of the {len(mates)} nodes of this node's breaker shard"), why
    assert over_limit(stranger, {"p": other}, settings, now) == ""
    assert over_limit(mate, {"p": whole}, settings, now) == "", "counted whole, the partition had room"


@given(
    drains=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 28)), min_size=1, max_size=20, unique_by=lambda d: d[1]
    ),
    fraction=st.sampled_from([0.1, 0.2, 0.34]),
    sizes=st.tuples(st.integers(29, 31), st.integers(29, 31)),
    change=st.floats(1, 5),
    draw=st.data(),
)
def test_shards_never_keep_more_than_the_partition_limit(
    drains: list[tuple[int, int]], fraction: float, sizes: tuple[int, int], change: float, draw: st.DataObject
) -> None:
    """Any interleaving of drains and confirming reads, each node reading only its shard's nodes.

    As the whole-partition property in test_policy.py: a node reads 1.2 s or more after
    its drain (whole-second stamps of one clock) and resumes if ``breaker_confirm``, over
    its shard's view, says so. The partition gains or loses nodes at ``change`` (29 to 31
    members, the draining nodes among all of them), so reads before and after it cut
    different shards. However they interleave, the partition keeps no more nodes than the
    larger of its two limits, and with no change no shard keeps more than one.
    """
    names = [f"n{i:02d}" for i in range(max(sizes))]
    before, after = names[: sizes[0]], names[: sizes[1]]
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
        mates = shard(name, before if at < change else after, fraction)
        seen = [groups[m] for m in mates if m in groups]
        view = shard_view(group_views(seen, ("p",), Reasons())["p"], mates)
        if breaker_confirm(name, {"p": view}, settings):
            del groups[name]
        else:
            kept.add(name)
    assert len(kept) <= max(allowed_out(size, fraction) for size in sizes), (kept, sizes)
    if sizes[0] == sizes[1]:
        assert all(len(kept & set(shard(name, before, fraction))) <= 1 for name in before)
    assert kept, "the first node to drain always keeps its place"


def test_whether_the_last_read_was_sharded_survives_the_state_file() -> None:
    """What the next faulty pass reads first depends on it (plan._first_read): kept between passes."""
    for sharded in (True, False):
        state = PolicyState(sharded=sharded)
        assert PolicyState.from_dict(state.to_dict()).sharded is sharded
    assert "sharded" not in PolicyState().to_dict(), "a file of the version before reads and writes back the same"
