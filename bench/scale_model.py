"""The controller load healthd puts on slurmctld at 10k, 50k and 100k nodes, from measured per-RPC costs.

Usage:
    python bench/scale_model.py [--full-ms 14.7] [--partition-ms 2.0] [--single-ms 0.16] [--update-ms 1.2]
                                [--fraction 0.1] [--interval 300] [--reconcile 3600] [--act-splay 10]

The defaults are slurmctld's own time per request at 10,003 nodes on Slurm 22.05,
from bench/bench_scale.py (docs/scale.md, "Measured"). Reads that pack the node
table (REQUEST_NODE_INFO) or the partitions' node lists (REQUEST_PARTITION_INFO)
are scaled linearly with the node count; a single-node read and an update are not.
The model is docs/scale.md, "Model"; the table it prints is there too. A second table
gives the held nodes' first hour in a partition counted by shards (docs/scale.md,
"Breaker shards"), at quiet single-node and partition read costs.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

MEASURED_NODES = 10_000
BREAKER_BASE, BREAKER_MAX = 30.0, 600.0  # healthd.plan.breaker: the held node's backoff


@dataclass(frozen=True)
class Costs:
    """slurmctld milliseconds per request at ``nodes`` nodes."""

    nodes: int
    full: float
    partition: float
    single: float
    update: float

    def scaled(self, nodes: int) -> Costs:
        k = nodes / self.nodes
        return Costs(nodes, self.full * k, self.partition * k, self.single, self.update)

    @property
    def node_read(self) -> float:  # sinfo -N -n NAME: NODE_INFO_SINGLE + PARTITION_INFO
        return self.single + self.partition

    @property
    def breaker_read(self) -> float:  # sinfo [-p P | --all]: NODE_INFO (packs the table) + PARTITION_INFO
        return self.full + self.partition

    @property
    def held(self) -> float:  # a node that finds the breaker full: one read for the node and the breaker
        return self.breaker_read

    @property
    def taken_out(self) -> float:  # that read, DRAIN, settle, the confirming breaker read, DOWN
        return 2 * self.breaker_read + 2 * self.update


# RPCs per node: every sinfo is NODE_INFO(_SINGLE) + PARTITION_INFO; an update is one.
HELD_RPCS, TAKEN_OUT_RPCS = 2, 6


def breaker_reads_in_first_hour(interval: float) -> int:
    """Combined re-reads of a node held for an hour after the fault's first pass, one pass every ``interval``.

    A pass re-reads once the backoff (30 s doubling to 600 s; the jitter averages out)
    has run out, so a backoff shorter than the interval ends at the next pass.
    """
    count, delay, next_check, at = 0, BREAKER_BASE, BREAKER_BASE, interval
    while at <= 3600:
        if at >= next_check:
            count += 1
            delay = min(delay * 2, BREAKER_MAX)
            next_check = at + delay
        at += interval
    return count


def row(c: Costs, fraction: float, interval: float, reconcile: float, act_splay: float) -> dict[str, str]:
    n = c.nodes
    out = int(n * fraction)
    mass = (out * c.taken_out + (n - out) * c.held) / 1000  # seconds of slurmctld time
    rpcs = (out * TAKEN_OUT_RPCS + (n - out) * HELD_RPCS) / n
    # Each pass a node read; a re-read after the backoff is the combined read in its place.
    passes = 3600 // interval
    reads = breaker_reads_in_first_hour(interval)
    held_hour = (n - out) * ((passes - reads) * c.node_read + reads * c.breaker_read) / 1000
    reconcile_hour = n * 3600 / reconcile * c.node_read / 1000
    # The window a fleet-wide fault must be spread over to keep slurmctld under half a core.
    window = 2 * mass
    # The hook without HealthCheckNodeState=CYCLE: every slurmd runs it on the same tick, and the act
    # splay is the only spread; with CYCLE (or the daemon's splay) the fault arrives over the interval.
    tick_cores = mass / act_splay
    spread_cores = mass / interval
    return {
        "nodes": f"{n:,}",
        "held ms/node": f"{c.held:.1f}",
        "out ms/node": f"{c.taken_out:.1f}",
        "RPCs/node": f"{rpcs:.1f}",
        "ms/node": f"{mass * 1000 / n:.1f}",
        "mass failure (s)": f"{mass:,.0f}",
        "held, 1st hour (s)": f"{held_hour:,.0f}",
        "reconcile (s/h)": f"{reconcile_hour:.1f}",
        "spread needed (s)": f"{window:,.0f}",
        "cores, same tick": f"{tick_cores:.1f}",
        "cores, CYCLE": f"{spread_cores:.2f}",
    }


# Counted by shards (docs/scale.md, "Breaker shards"): every read is a single-node read or a
# partition read, at the field notes' quiet 100,000-node costs, which do not grow with the table.
QUIET_SINGLE_MS, QUIET_PARTITION_MS = 0.19, 0.35


def shard_held_hour(nodes: int, fraction: float, interval: float, mates_read: float) -> float:
    """slurmctld seconds the held nodes of a fleet-wide fault cost in its first hour, counted by shards.

    Each pass reads the node alone (NODE_INFO_SINGLE + PARTITION_INFO); a pass that finds the
    backoff run out reads the partitions' sizes (one PARTITION_INFO) and then ``mates_read``
    shard-mates alone until it meets one out: 1 when the shard-mate that held it is read first,
    about half the shard (``0.5 / fraction``) in name order.
    """
    node_read = QUIET_SINGLE_MS + QUIET_PARTITION_MS
    passes = 3600 // interval
    reads = breaker_reads_in_first_hour(interval)
    recheck = node_read + QUIET_PARTITION_MS + mates_read * node_read
    held = nodes - int(nodes * fraction)
    return held * ((passes - reads) * node_read + reads * recheck) / 1000


def shard_rows(fraction: float, interval: float, sizes: tuple[int, ...]) -> None:
    """The held nodes' first hour counted by shards, holder first against name order."""
    print("\n| nodes | held, 1st hour, holder first (s) | held, 1st hour, name order (s) |")
    print("|---|---|---|")
    for n in sizes:
        first = shard_held_hour(n, fraction, interval, 1.0)
        ordered = shard_held_hour(n, fraction, interval, 0.5 / fraction)
        print(f"| {n:,} | {first:,.0f} | {ordered:,.0f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full-ms", type=float, default=14.7, help="REQUEST_NODE_INFO (whole table) at 10k nodes")
    parser.add_argument("--partition-ms", type=float, default=2.0, help="REQUEST_PARTITION_INFO at 10k nodes")
    parser.add_argument("--single-ms", type=float, default=0.16, help="REQUEST_NODE_INFO_SINGLE")
    parser.add_argument("--update-ms", type=float, default=1.2, help="REQUEST_UPDATE_NODE (a drain)")
    parser.add_argument("--fraction", type=float, default=0.10, help="[policy].max_out_fraction")
    parser.add_argument("--interval", type=float, default=300.0, help="seconds between passes (daemon or hook)")
    parser.add_argument("--reconcile", type=float, default=3600.0, help="[slurm].reconcile_interval")
    parser.add_argument("--act-splay", type=float, default=10.0, help="[slurm].act_splay")
    args = parser.parse_args()
    base = Costs(MEASURED_NODES, args.full_ms, args.partition_ms, args.single_ms, args.update_ms)
    sizes = (10_000, 50_000, 100_000)
    rows = [row(base.scaled(n), args.fraction, args.interval, args.reconcile, args.act_splay) for n in sizes]
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(r[k] for k in keys) + " |")
    # A node out by another's hand whose checks keep failing: the combined read each faulty pass
    # before healthd remembered it (PolicyState.skips_breaker), the node read alone now.
    for n in sizes:
        c = base.scaled(n)
        print(
            f"out by another's hand, per faulty pass at {n:,}: {c.breaker_read:.1f} ms before, {c.node_read:.2f} ms now"
        )
    shard_rows(args.fraction, args.interval, sizes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
