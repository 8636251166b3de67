"""What a fleet-wide fault costs slurmctld, measured with sdiag on a 10,000-node node table.

Usage (root, slurm-wlm and munge installed):
    python bench/bench_scale.py [--extra-nodes 10000] [--storm 200] [--splay 20] [--conf CONF]

Without --conf it starts the test cluster of tests/slurm with ``--extra-nodes``
never-registered nodes in its partition (they only grow slurmctld's tables) and
stops it afterwards. It prints, as slurmctld's own time per request from
``sdiag -r`` then ``sdiag``:

1. each Slurm read and write healthd (or an administrator) might make;
2. healthd's own CPU time to find its node and the breaker's view in the combined
   read's output, every partition's (``--all``, what healthd reads) or one
   partition's (``-p``, for comparison), with the host
   lists expanded (before) or only looked up (``hostlist.contains``), at the table's
   size and at 100,000 nodes (the same lines with a 100,000-node group);
3. a mass failure: the three real nodes fail at once (CRITICAL), taken out or held
   by the circuit breaker: RPCs and slurmctld milliseconds per node; then one node
   taken out, one held and one out by an administrator's hand, each alone;
4. a storm: ``--storm`` simultaneous passes of nodes that all find a fault while the
   breaker is full (each is held), at once and then spread by ``--splay`` seconds,
   with the latency of an unrelated ``squeue`` and sdiag's server threads and
   queue sampled meanwhile.

The figures go in docs/scale.md; bench/scale_model.py turns them into the model.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from healthd.checks.plugin import CheckContext, CheckSettings, CheckSpec
from healthd.config.models import parse_config
from healthd.cycle.engine import Engine
from healthd.cycle.pipeline import run_pass
from healthd.model import Finding, Status
from healthd.plan.breaker import group_views
from healthd.slurm.adapter import GROUP_FIELDS, NODE_FIELDS, node_in_groups, parse_sinfo_groups, sinfo_format
from healthd.slurm.hostlist import expand
from healthd.slurm.nodestate import NodeGroup
from healthd.slurm.reasons import Reasons

HERE = Path(__file__).resolve().parent
_RPC = re.compile(r"^\s*(REQUEST_[A-Z0-9_]+)\s*\(\s*\d+\)\s*count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)")
# slurmctld's own background traffic, not caused by the commands measured.
IGNORED = ("REQUEST_STATS_INFO", "REQUEST_PING", "REQUEST_RESET_STATS")


def sdiag(env: dict[str, str]) -> tuple[dict[str, tuple[int, int]], dict[str, int]]:
    """Per-type (count, total microseconds), and the server's gauges (threads, queue sizes)."""
    out = subprocess.run(["sdiag"], env=env, capture_output=True, text=True, check=True, timeout=60).stdout
    rpcs = {m[1]: (int(m[2]), int(m[3])) for m in map(_RPC.match, out.splitlines()) if m and m[1] not in IGNORED}
    gauges = {}
    for key in ("Server thread count", "Agent queue size", "Jobs pending"):
        match = re.search(rf"{key}:\s*(\d+)", out)
        if match:
            gauges[key] = int(match[1])
    return rpcs, gauges


def measure(env: dict[str, str], work: Callable[[], Any]) -> tuple[int, float, dict[str, tuple[int, int]]]:
    """Run ``work`` between ``sdiag -r`` and ``sdiag``: (RPC count, slurmctld ms, per type)."""
    subprocess.run(["sdiag", "-r"], env=env, capture_output=True, check=True, timeout=60)
    work()
    rpcs, _ = sdiag(env)
    return sum(c for c, _ in rpcs.values()), sum(t for _, t in rpcs.values()) / 1000, rpcs


def per_command(env: dict[str, str], repeat: int) -> None:
    groups = sinfo_format(GROUP_FIELDS)
    node_read = ["sinfo", "-h", "--all", "-N", "-n", "node1", "-O", sinfo_format(NODE_FIELDS)]
    commands = {
        "scontrol -o show node NAME": ["scontrol", "-o", "show", "node", "node1"],
        "scontrol -o show node (all)": ["scontrol", "-o", "show", "node"],
        "sinfo -N -n NAME -O ... (healthd's node read)": node_read,
        "sinfo --all -O ... (healthd's node + breaker read)": ["sinfo", "-h", "--all", "-O", groups],
        "sinfo -p P -O ... (breaker's confirm read)": ["sinfo", "-h", "-p", "batch", "-O", groups],
        "sinfo -h -p P -o '%T %D'": ["sinfo", "-h", "-p", "batch", "-o", "%T %D"],
        "scontrol -o show partition P": ["scontrol", "-o", "show", "partition", "batch"],
        "squeue -h": ["squeue", "-h"],
    }
    print(f"## Per command ({repeat} runs each): slurmctld time from sdiag")
    for name, argv in commands.items():
        started = time.perf_counter()

        def run(argv: list[str] = argv) -> None:
            for _ in range(repeat):
                subprocess.run(argv, env=env, capture_output=True, check=True, timeout=60)

        count, total, rpcs = measure(env, run)
        wall = (time.perf_counter() - started) / repeat * 1000
        types = ", ".join(f"{k.removeprefix('REQUEST_')} {t / c / 1000:.2f} ms" for k, (c, t) in rpcs.items())
        print(f"  {name:<48} {count / repeat:.0f} RPCs  {total / repeat:6.2f} ms  (wall {wall:.0f} ms; {types})")

    def writes() -> None:
        for _ in range(repeat):
            for state in ("DRAIN", "RESUME"):
                argv = ["scontrol", "update", "NodeName=node1", f"State={state}"]
                subprocess.run(argv + (["Reason=bench"] if state == "DRAIN" else []), env=env, check=True, timeout=60)

    count, total, _ = measure(env, writes)
    print(f"  {'scontrol update (DRAIN, RESUME)':<48} {count / repeat / 2:.0f} RPCs  {total / repeat / 2:6.2f} ms")


def _find(groups: list[NodeGroup], name: str, how: str) -> tuple[str, ...]:
    """The node's partitions in the groups: every host list expanded (before), or only looked up (now)."""
    if how == "expand":
        return tuple(dict.fromkeys(g.partition for g in groups if name in expand(g.nodelist)))
    info = node_in_groups(groups, name)
    return info.partitions if info is not None else ()


def healthd_cpu(env: dict[str, str], repeat: int) -> None:
    """healthd's CPU for the combined read's answer: parse, find the node, the breaker's view; memo cleared each run."""
    print(f"## healthd CPU for the combined read's output (node1, {repeat} runs each)")
    outputs = {
        scope: subprocess.run(
            ["sinfo", "-h", *flags, "-O", sinfo_format(GROUP_FIELDS)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        for scope, flags in (("--all", ["--all"]), ("-p batch", ["-p", "batch"]))
    }
    # The same lines with the 10,000-node group grown to 100,000 (sinfo's own host list form).
    big = {k: v.replace("n[00001-10000]", "n[000001-100000]") for k, v in outputs.items()}
    for label, texts in (("table", outputs), ("100,000", big)):
        for scope, text in texts.items():
            for how in ("expand", "contains"):
                started = time.perf_counter()
                for _ in range(repeat):
                    expand.cache_clear()  # a hook pass is a fresh process: nothing memoised
                    groups = parse_sinfo_groups(text)
                    partitions = _find(groups, "node1", how)
                    assert partitions == ("batch",), partitions
                    group_views(groups, partitions, Reasons())
                ms = (time.perf_counter() - started) / repeat * 1000
                print(f"  {label:>8} nodes, {scope:<9} {how:<8} {ms:6.2f} ms ({len(groups)} groups)")


class _Fault(CheckSettings):
    file: str = ""


def _fault(ctx: CheckContext[_Fault]) -> list[Finding]:
    if Path(ctx.settings.file).exists():
        return [ctx.finding(Status.CRITICAL, "MOUNT_MISSING", "/scratch", "not mounted (bench)")]
    return []


def _engine(conf: Path, node: str, root: Path, fault: Path, policy: str, splay: float) -> Engine:
    text = (
        f'[paths]\nstate_dir = "{root / node}"\n[slurm]\nconf = "{conf}"\nnode_name = "{node}"\n'
        f'act_splay = {splay}\ntimeout = 60\nbudget = 300\n[policy]\n{policy}\n[checks.fault]\nfile = "{fault}"\n'
    )
    spec = CheckSpec(name="fault", description="a fault file", settings=_Fault, run=_fault)
    return Engine(parse_config(text, "bench.toml", {"fault": _Fault}), [spec])


def _at_once(engines: list[Engine]) -> list[Any]:
    outcomes: list[Any] = [None] * len(engines)
    barrier = threading.Barrier(len(engines))

    def one(index: int) -> None:
        barrier.wait()
        outcomes[index] = run_pass(engines[index])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(engines))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def mass_failure(env: dict[str, str], conf: Path, root: Path) -> None:
    fault = root / "fault"
    print("## Mass failure: node1-3 find a CRITICAL fault in the same second (act_splay 0: the worst case)")
    for label, fraction in (("limit 1000 (10%): all taken out", 0.10), ("limit 1 (0.0001): one out, two held", 0.0001)):
        policy = f"max_out_fraction = {fraction}\nbreaker_settle = 2"
        engines = [_engine(conf, n, root / label[:9], fault, policy, 0) for n in ("node1", "node2", "node3")]
        for engine in engines:
            run_pass(engine)  # a healthy pass's reconcile read, as each node of a running fleet has made
        fault.write_text("")
        count, total, rpcs = measure(env, lambda engines=engines: _at_once(engines))
        print(f"  {label}: {count / 3:.1f} RPCs and {total / 3:.1f} ms per node")
        for name, (c, t) in rpcs.items():
            print(f"      {name:<32} {c:>4}  {t / 1000:8.1f} ms")
        fault.unlink()
        for engine in engines:
            run_pass(engine)  # the fault clears: healthd resumes what it took out


def one_at_a_time(env: dict[str, str], conf: Path, root: Path) -> None:
    """A node taken out, a node held by the breaker it filled, a node out by an administrator's hand: each pass alone.

    Each node has read itself once before (a healthy pass's reconcile read), as a node
    of a running fleet has.
    """
    fault = root / "fault"
    policy = "max_out_fraction = 0.0001\nbreaker_settle = 2"
    print("## One node at a time (limit 1): node1 taken out, node2 held, node3 out by an administrator")
    engines = [_engine(conf, n, root / "alone", fault, policy, 0) for n in ("node1", "node2", "node3")]
    for engine in engines:
        run_pass(engine)  # a healthy pass's reconcile read
    admin = ["scontrol", "update", "NodeName=node3", "State=DRAIN", "Reason=admin: bench"]
    subprocess.run(admin, env=env, check=True, timeout=60)
    fault.write_text("")
    # node3's first faulty pass meets the administrator's reason in the combined read (as every faulty
    # pass did before healthd remembered it); the next reads the node alone.
    cases = zip(("taken out", "held", "admin's, 1st faulty pass", "admin's, next faulty pass"), [*engines, engines[2]])
    for label, engine in cases:
        count, total, rpcs = measure(env, lambda engine=engine: run_pass(engine))
        types = ", ".join(f"{k.removeprefix('REQUEST_')} {c}" for k, (c, _) in rpcs.items())
        print(f"  {label}: {count} RPCs and {total:.1f} ms ({types})")
    fault.unlink()
    for engine in engines:
        run_pass(engine)
    subprocess.run(["scontrol", "update", "NodeName=node3", "State=RESUME"], env=env, check=True, timeout=60)


def storm(env: dict[str, str], conf: Path, root: Path, size: int, splay: float) -> None:
    """``size`` nodes find a fault while the breaker is full: every one is held (node read + breaker read)."""
    fault = root / "fault"
    fault.write_text("")
    policy = "max_out_fraction = 0.0001\nbreaker_settle = 2"
    keeper = _engine(conf, "node1", root / "storm", fault, policy, 0)
    assert run_pass(keeper).action.applied, "node1 fills the breaker's limit of 1"
    for spread in (0.0, splay):
        names = [f"n{i:05d}" for i in range(1, size + 1)]
        engines = [_engine(conf, n, root / f"storm-{spread}", fault, policy, spread) for n in names]
        latencies: list[float] = []
        threads: list[int] = []
        done = threading.Event()

        def watch(
            done: threading.Event = done, latencies: list[float] = latencies, threads: list[int] = threads
        ) -> None:
            while not done.is_set():
                started = time.perf_counter()
                subprocess.run(["squeue", "-h"], env=env, capture_output=True, timeout=60)
                latencies.append(time.perf_counter() - started)
                threads.append(sdiag(env)[1].get("Server thread count", 0))
                time.sleep(0.2)

        watcher = threading.Thread(target=watch)
        started = time.perf_counter()
        subprocess.run(["sdiag", "-r"], env=env, capture_output=True, check=True, timeout=60)
        watcher.start()
        outcomes = _at_once(engines)
        done.set()
        watcher.join()
        wall = time.perf_counter() - started
        rpcs, _ = sdiag(env)
        held = sum(1 for o in outcomes if o.action.held)
        count = sum(c for c, _ in rpcs.values())
        total = sum(t for _, t in rpcs.values()) / 1000
        print(
            f"## Storm: {size} passes, act_splay {spread:g} s: {held} held, wall {wall:.1f} s, "
            f"{count / size:.1f} RPCs and {total / size:.1f} ms per node; "
            f"squeue max {max(latencies):.2f} s (median {sorted(latencies)[len(latencies) // 2]:.2f} s, "
            f"{len(latencies)} samples); server threads max {max(threads)}"
        )
    fault.unlink()
    run_pass(keeper)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conf", type=Path, help="use this running test cluster instead of starting one")
    parser.add_argument("--extra-nodes", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--storm", type=int, default=200)
    parser.add_argument("--splay", type=float, default=20.0)
    args = parser.parse_args()
    logging.getLogger("healthd").setLevel(logging.CRITICAL)  # hundreds of DRAIN_HELD lines otherwise
    with tempfile.TemporaryDirectory(prefix="healthd-scale-") as tmp:
        root = Path(tmp)
        cluster = None
        conf = args.conf
        if conf is None:
            sys.path.insert(0, str(HERE.parent / "tests"))
            from healthd_testkit import cluster as module

            why = module.missing_prerequisite()
            if why:
                print(f"cannot start the test cluster: {why}", file=sys.stderr)
                return 1
            healthd_bin = Path(sys.executable).with_name("healthd")
            cluster = module.Cluster(root=root / "cluster", healthd_bin=healthd_bin, extra_nodes=args.extra_nodes)
            cluster.root.mkdir()
            cluster.start()
            conf = cluster.conf
        env = {**os.environ, "SLURM_CONF": str(conf)}
        try:
            per_command(env, args.repeat)
            healthd_cpu(env, args.repeat)
            mass_failure(env, conf, root)
            one_at_a_time(env, conf, root)
            storm(env, conf, root, args.storm, args.splay)
        finally:
            if cluster is not None:
                cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
