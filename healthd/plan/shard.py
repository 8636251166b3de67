"""Breaker shards: a large partition's limit split into slots of one node each, so a node reads only its slot.

Pure. A partition of more than ``[policy].breaker_shard_above`` nodes is too large for
every node to read whole: slurmctld packs its whole node table for any read of
many nodes (docs/scale.md, "Reads"), so a fleet-wide fault cost it N whole-table
packs, O(N^2). Instead the partition's ``allowed_out`` places become that many
shards, and each shard may have one node out. A shard is a run of the members in
the order of a hash of their names (``_order``): every node computes the same
shards from the same member list, and nodes with neighbouring names (a rack, a
switch) fall into different shards, so a fault of a few neighbours takes them
out as the whole partition's count would, where shards of consecutive names
would hold all but one of them. A node reads
only the nodes of its own shard, each with a single-node read, so its cost does
not grow with the partition. The sum of the shards' limits is the partition's,
so the promise that at most ``max_out_fraction`` of it goes out at once holds as
before; ``breaker.breaker_confirm`` settles each shard's race as it settles a
partition's (docs/scale.md, "Breaker shards").
"""

from __future__ import annotations

import zlib
from bisect import bisect_left
from typing import Sequence

from healthd.plan.breaker import allowed_out
from healthd.slurm.nodestate import PartitionView

# Each shard may hold one node out: the partition's limit is the number of shards.
SHARD_LIMIT = 1


def sharded(size: int, shard_above: int) -> bool:
    """Whether a partition of ``size`` nodes is read shard by shard (``[policy].breaker_shard_above``)."""
    return size > shard_above


def shard(node: str, members: Sequence[str], fraction: float) -> tuple[str, ...]:
    """The nodes of ``node``'s shard, itself included, in name order; () if it is not a member.

    ``members`` in any order. The partition's n nodes make ``allowed_out(n)`` shards;
    the i-th node in ``_order`` is in shard ``i * shards // n``, so the shards' sizes
    differ by at most one and each holds about ``1 / fraction`` nodes.
    """
    keys = sorted(_order(name) for name in set(members))
    index = bisect_left(keys, _order(node))
    if index == len(keys) or keys[index][1] != node:
        return ()
    names = [name for _, name in keys]
    count = len(names)
    shards = allowed_out(count, fraction)
    slot = index * shards // count
    # Shard j holds the i with i * shards // count == j: from ceil(j * count / shards) up to the next one's.
    low = -(-slot * count // shards)
    high = -(-(slot + 1) * count // shards)
    return tuple(sorted(names[low:high]))


def _order(name: str) -> tuple[int, str]:
    """Where ``name`` sorts among its partition's members: by CRC-32 of the name, then by the name."""
    return zlib.crc32(name.encode("utf-8")), name


def shard_view(view: PartitionView, members: Sequence[str]) -> PartitionView:
    """``view`` (of the shard's nodes, or of more) cut down to the shard ``members``, with the shard's limit."""
    inside = set(members)
    return view._replace(
        size=len(inside),
        out=tuple(entry for entry in view.out if entry[2] in inside),
        codes=tuple(entry for entry in view.codes if entry[0] in inside),
        limit=SHARD_LIMIT,
    )
