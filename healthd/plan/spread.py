"""Stable per-node spreading of Slurm work, so that the nodes of a fleet-wide fault do not call slurmctld at once.

Pure. Both spreads come from a hash of the node's name, never from a random draw:
the same node waits the same time on every pass and every start, and a fleet's
delays are spread evenly (docs/scale.md, "Spread").
"""

from __future__ import annotations

import zlib


def fraction(node: str) -> float:
    """A stable number in [0, 1) for ``node`` (CRC-32 of its name, in steps of 1/1000)."""
    return (zlib.crc32(node.encode("utf-8")) % 1000) / 1000


def act_delay(node: str, bound: float) -> float:
    """How long a pass on ``node`` that may act waits before its first Slurm call: in ``[0, bound)``."""
    return fraction(node) * bound


def jitter(node: str) -> float:
    """A stable factor in [0.75, 1.25) that stretches ``node``'s circuit-breaker backoff."""
    return 0.75 + fraction(node) / 2
