"""Breaker shards: a large partition's limit split into slots of one node each, so a node reads only its slot.

Pure. A partition of more than ``[policy].breaker_shard_above`` nodes is too large for
every node to read whole: slurmctld packs its whole node table for any read of
many nodes (docs/scale.md, "Reads"), so a fleet-wide fault cost it N whole-table
packs, O(N^2). Instead the partition's ``allowed_out`` places become that many
shards, and each shard may have one node out. A node's shard is a consistent hash
of its name into that many shards (``_bucket``): every node computes the same
shards from the same member list, a change of members moves few nodes between
shards, and nodes with neighbouring names (a rack, a switch) fall into different
shards, so a fault of a few neighbours takes them out as the whole partition's
count would, where shards of consecutive names would hold all but one of them.
A node reads only the nodes of its own shard, each with a single-node read, so its cost does
not grow with the partition. The sum of the shards' limits is the partition's,
so the promise that at most ``max_out_fraction`` of it goes out at once holds as
before; ``breaker.breaker_confirm`` settles each shard's race as it settles a
partition's (docs/scale.md, "Breaker shards").
"""

from __future__ import annotations

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

    ``members`` in any order. The partition's n nodes make ``allowed_out(n)`` shards, and
    each node's shard is a jump consistent hash of its name (``_bucket``): the shards hold
    about ``1 / fraction`` nodes each, not exactly as many.
    """
    names = set(members)
    if node not in names:
        return ()
    shards = allowed_out(len(names), fraction)
    mine = _bucket(node, shards)
    return tuple(sorted(name for name in names if _bucket(name, shards) == mine))


def _bucket(name: str, buckets: int) -> int:
    """The shard of ``name`` among ``buckets``: the jump consistent hash of a 64-bit hash of the name.

    Lamping and Veach, "A Fast, Minimal Memory, Consistent Hash Algorithm" (2014). A node's
    shard depends on its own name and the number of shards alone, not on the other members:
    a node joining or leaving the partition moves no other node, and one more shard takes
    about 1/S of the nodes into the new shard and moves no other. Nodes that confirm across
    a change of membership then disagree about few shards, so at most as many nodes keep
    their places as the larger of the two limits (tests/plan/test_shard.py); shards cut by
    position in a sorted list would shift all their boundaries at once.
    """
    # Here, not at the top: hashlib loads OpenSSL's libcrypto (about 12 M instructions), and only a
    # partition counted by shards needs it; a healthy pass never does (tests/cli/test_cli.py).
    import hashlib

    key = int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "big")
    bucket, jump = -1, 0
    while jump < buckets:
        bucket = jump
        # The paper's 64-bit linear congruential step, then a jump ahead by the inverse of a uniform draw.
        key = (key * 2862933555777941757 + 1) % (1 << 64)
        jump = int((bucket + 1) * ((1 << 31) / ((key >> 33) + 1)))
    return bucket


def shard_view(view: PartitionView, members: Sequence[str]) -> PartitionView:
    """``view`` (of the shard's nodes, or of more) cut down to the shard ``members``, with the shard's limit."""
    inside = set(members)
    return view._replace(
        size=len(inside),
        out=tuple(entry for entry in view.out if entry[2] in inside),
        codes=tuple(entry for entry in view.codes if entry[0] in inside),
        limit=SHARD_LIMIT,
    )
