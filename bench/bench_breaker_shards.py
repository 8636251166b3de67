"""What a take-out, a held node, a wave and a fleet-wide fault cost slurmctld at 10k-100k nodes, now and before.

Usage (root, slurm-wlm and munge installed):
    git archive main | tar -x -C /tmp/before      # the code before, for the same-run ratios
    python bench/bench_breaker_shards.py --before /tmp/before [--nodes 10000 50000 100000] [--sample 200]

For each table size it starts the test cluster of tests/slurm with the table grown to
that many nodes of 96 CPUs, 8 GPUs and features, in one partition: whole breaker
shards (``healthd.plan.shard`` at 0.1) of about ``--sample`` nodes in all are
never-registered nodes, the nodes whose passes run, and the rest are CLOUD nodes
(listed and drainable, never pinged: docs/scale.md, "Measured at 100,000 nodes").
Each scenario runs real passes (``run_pass``, a CRITICAL fault, ``act_splay`` 0) of
the named nodes against that one slurmctld, once with this tree's healthd and once
with the tree given by ``--before`` (in a child process each), and prints slurmctld's
own time from ``sdiag -r`` then ``sdiag``, its CPU time from /proc, and the longest pass:

1. a lone take-out (``max_out_fraction`` 0.1);
2. a held node: one node of the sample out, then a node its breaker counts with it (its shard-mate)
   (this code: a node of its shard at 0.1; before: any node, at a limit of one);
3. a wave: five shards of the sample (about 50 nodes) fail at once (4 passes at a time; 10 for the code before past
   20,000 nodes, whose passes pack the whole table);
4. the fleet-wide fault, this code only: every sample node fails (4 at a time), its
   shards taken out or held end to end. The fleet's figure is the sample's per-node
   cost times the table size: a shard's reads do not depend on the others (stated, not
   measured). The code before's fleet-wide figure is its measured lone take-out and held
   costs weighted 10% / 90%, times the table size (the same model as docs/scale.md's).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
_RPC = re.compile(r"^\s*(REQUEST_[A-Z0-9_]+)\s*\(\s*\d+\)\s*count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)")
IGNORED = ("REQUEST_STATS_INFO", "REQUEST_PING", "REQUEST_RESET_STATS")
THREADS = 4


def sdiag(env: dict[str, str]) -> dict[str, tuple[int, int]]:
    out = subprocess.run(["sdiag"], env=env, capture_output=True, text=True, check=True, timeout=120).stdout
    return {m[1]: (int(m[2]), int(m[3])) for m in map(_RPC.match, out.splitlines()) if m and m[1] not in IGNORED}


def drive(spec: dict[str, Any]) -> None:
    """In the child: the passes of ``spec["names"]``, ``THREADS`` at a time, with the healthd on PYTHONPATH."""
    from healthd.checks.plugin import CheckContext, CheckSettings, CheckSpec
    from healthd.config.models import parse_config
    from healthd.cycle.engine import Engine
    from healthd.cycle.pipeline import run_pass
    from healthd.model import Finding, Status

    logging.getLogger("healthd").setLevel(logging.CRITICAL)

    class Fault(CheckSettings):
        pass

    def fault(ctx: CheckContext[Fault]) -> list[Finding]:
        return [ctx.finding(Status.CRITICAL, "MOUNT_MISSING", "/scratch", "not mounted (bench)")]

    def engine(node: str) -> Engine:
        text = (
            f'[paths]\nstate_dir = "{spec["root"]}/{node}"\n[slurm]\nconf = "{spec["conf"]}"\nnode_name = "{node}"\n'
            f"act_splay = 0\ntimeout = 60\nbudget = 300\n[policy]\nmax_out_fraction = {spec['fraction']}\n"
            "breaker_settle = 1.2\n[checks.fault]\n"
        )
        return Engine(
            parse_config(text, "bench.toml", {"fault": Fault}),
            [CheckSpec(name="fault", description="", settings=Fault, run=fault)],
        )

    names = list(spec["names"])
    outcomes: dict[str, tuple[str, float]] = {}
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not names:
                    return
                name = names.pop(0)
            started = time.perf_counter()
            action = run_pass(engine(name)).action
            kind = "held" if action.held else "out" if action.applied else "pending" if action.pending else "none"
            # A node that lost its place after the drain sends RESUME, which 22.05 refuses for a node
            # that never registered ("Invalid node state specified"): the bench's nodes never do.
            kind = f"{kind} (RESUME refused)" if any("Invalid node state" in e for e in action.errors) else kind
            outcomes[name] = (kind, time.perf_counter() - started)

    threads = [threading.Thread(target=worker) for _ in range(min(THREADS, len(names)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(json.dumps(outcomes))


def cpu(pid: int) -> float:
    """The CPU seconds (user + system) process ``pid`` has used: slurmctld's own work, not its waits."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def passes(
    env: dict[str, str], tree: Path, ctld: int, conf: Path, root: Path, names: list[str], fraction: float
) -> dict[str, Any]:
    """Run the passes in a child on ``tree``'s healthd: slurmctld's RPCs, ms and CPU, and what each node did."""
    spec = {"conf": str(conf), "root": str(root), "names": names, "fraction": fraction}
    child_env = {**env, "PYTHONPATH": f"{tree}:{tree / 'checks'}"}
    subprocess.run(["sdiag", "-r"], env=env, capture_output=True, check=True, timeout=120)
    used = cpu(ctld)
    started = time.perf_counter()
    child = subprocess.run(
        [sys.executable, __file__, "--drive", json.dumps(spec)], env=child_env, capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    if child.returncode != 0:
        raise RuntimeError(child.stderr[-2000:])
    used = cpu(ctld) - used
    rpcs = sdiag(env)
    done = json.loads(child.stdout.strip().splitlines()[-1])
    walls = [w for _, w in done.values()]
    kinds = [k for k, _ in done.values()]
    return {
        "rpcs": sum(c for c, _ in rpcs.values()),
        "ms": sum(t for _, t in rpcs.values()) / 1000,
        "cpu_ms": used * 1000,
        "pass_max_s": max(walls),
        "types": {k.removeprefix("REQUEST_"): c for k, (c, _) in rpcs.items()},
        "wall": wall,
        "outcomes": {kind: kinds.count(kind) for kind in sorted(set(kinds))},
    }


def reset(env: dict[str, str], names: list[str]) -> None:
    """Put every sample node back in service (what healthd took out in the scenario before).

    UNDRAIN too: 22.05 refuses RESUME for a node that never registered.
    """
    from hostlist import collect_hostlist

    for state in ("RESUME", "UNDRAIN"):
        argv = ["scontrol", "update", f"NodeName={collect_hostlist(names)}", f"State={state}"]
        subprocess.run(argv, env=env, capture_output=True)


def pick(total: int, sample: int) -> list[tuple[str, ...]]:
    """Whole shards (``healthd.plan.shard`` at 0.1) of about ``sample`` nodes in all, none holding node1-3."""
    from healthd.plan.shard import shard

    members = ["node1", "node2", "node3", *module().Cluster(Path("."), Path("."), cloud_nodes=total - 3).cloud_names()]
    shards: list[tuple[str, ...]] = []
    for name in members[3 :: max(1, len(members) // sample)]:
        mates = shard(name, members, 0.1)
        if mates not in shards and not any(n.startswith("node") for n in mates):
            shards.append(mates)
        if sum(map(len, shards)) >= sample:
            return shards
    raise RuntimeError("not enough shards")


def module() -> Any:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from healthd_testkit import cluster

    return cluster


def one_size(total: int, sample: int, before: Path, root: Path) -> None:
    shards = pick(total, sample)
    names = [n for mates in shards for n in mates]
    cluster = module().Cluster(
        root=root / "cluster",
        healthd_bin=Path(sys.executable).with_name("healthd"),
        cloud_nodes=total - 3,
        cloud_sample=frozenset(names),
        ctld_timeout=900,
    )
    cluster.root.mkdir(parents=True)
    started = time.perf_counter()
    try:
        cluster.start()
    except BaseException:
        cluster.shutdown()
        raise
    env = {**os.environ, "SLURM_CONF": str(cluster.conf)}
    anchor, mate = shards[0][:2]
    wave = [n for mates in shards[1:6] for n in mates]
    trees = {"now": HERE.parent, "before": before}
    ctld = cluster.procs["slurmctld"].pid
    print(
        f"# {total:,} nodes (slurmctld up in {time.perf_counter() - started:.0f} s); {anchor} and its shard-mate {mate}"
    )
    try:
        for side, tree in trees.items():
            base = root / side
            lone = passes(env, tree, ctld, cluster.conf, base / "lone", [anchor], 0.1)
            print(f"  {side:<6} lone take-out: {json.dumps(lone)}")
            # Held: the anchor stays out; its shard-mate counts it (with a limit of one before, in its shard now).
            held_fraction = 0.1 if side == "now" else 1.5 / total
            held = passes(env, tree, ctld, cluster.conf, base / "held", [mate], held_fraction)
            print(f"  {side:<6} held: {json.dumps(held)}")
            reset(env, names)
            # The code before packs the table twice a node: a wave of 10 past 20k nodes, to spare this machine.
            count = len(wave) if side == "now" or total <= 20000 else 10
            waved = passes(env, tree, ctld, cluster.conf, base / "wave", wave[:count], 0.1)
            print(f"  {side:<6} wave of {count}: {json.dumps(waved)}")
            reset(env, names)
            if side == "now":
                fleet = passes(env, tree, ctld, cluster.conf, base / "fleet", names, 0.1)
                per = fleet["ms"] / len(names)
                print(
                    f"  {side:<6} fleet-wide sample ({len(names)} nodes): {json.dumps(fleet)}; "
                    f"{per:.2f} ms/node -> {per * total / 1000:.0f} s of slurmctld for {total:,} nodes (extrapolated)"
                )
            else:
                model = (0.1 * lone["ms"] + 0.9 * held["ms"]) * total / 1000
                print(f"  {side:<6} fleet-wide, 10% lone take-outs + 90% held, x {total:,}: {model:.0f} s (model)")
            reset(env, names)
    finally:
        cluster.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--before", type=Path, help="a tree of the code before (git archive main)")
    parser.add_argument("--nodes", type=int, nargs="+", default=[10000, 50000, 100000])
    parser.add_argument("--sample", type=int, default=200)
    parser.add_argument("--drive", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        drive(json.loads(args.drive))
        return 0
    if args.before is None:
        parser.error("--before is required")
    for total in args.nodes:
        with tempfile.TemporaryDirectory(prefix="healthd-shards-") as tmp:
            one_size(total, args.sample, args.before.resolve(), Path(tmp))
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
