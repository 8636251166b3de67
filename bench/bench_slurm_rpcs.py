"""How many slurmctld RPCs does a healthy healthd pass cost? Reads sdiag before and after N passes.

Usage (root, slurm-wlm and munge installed):
    python bench/bench_slurm_rpcs.py [--passes 50] [--conf /path/to/slurm.conf --node NAME]

Without --conf it starts the three-node test cluster of tests/slurm in a temporary
directory and stops it afterwards. It prints the per-type RPC deltas and the
write and read RPCs per pass; the target is 0 writes and at most 1 read.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from healthd.checks.plugin import CheckContext, CheckSettings, CheckSpec
from healthd.config.models import parse_config
from healthd.cycle.engine import Engine
from healthd.cycle.pipeline import run_pass
from healthd.model import Finding

HERE = Path(__file__).resolve().parent
_RPC = re.compile(r"^\s*(REQUEST_[A-Z0-9_]+|MESSAGE_[A-Z0-9_]+)\s*\(\s*\d+\)\s*count:(\d+)")
WRITES = ("REQUEST_UPDATE_NODE", "REQUEST_JOB_REQUEUE", "REQUEST_KILL_JOB", "REQUEST_REBOOT_NODES")
IGNORED = ("REQUEST_STATS_INFO", "MESSAGE_NODE_REGISTRATION_STATUS", "REQUEST_PING")


def rpc_counts(env: dict[str, str]) -> dict[str, int]:
    out = subprocess.run(["sdiag"], env=env, capture_output=True, text=True, check=True, timeout=30).stdout
    counts: dict[str, int] = {}
    in_types = False
    for line in out.splitlines():
        if "by message type" in line:
            in_types = True
            continue
        if in_types and "by user" in line:
            break
        match = _RPC.match(line) if in_types else None
        if match:
            counts[match[1]] = int(match[2])
    return counts


class _Healthy(CheckSettings):
    pass


def _healthy(ctx: CheckContext[_Healthy]) -> list[Finding]:
    return []


def _cluster_module() -> Any:
    """The test suite's throwaway cluster (tests/healthd_testkit/cluster.py)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from healthd_testkit import cluster

    return cluster


def bench(conf: Path, node: str, passes: int, state_dir: Path, reconcile: float) -> None:
    env = {**os.environ, "SLURM_CONF": str(conf)}
    text = f'[paths]\nstate_dir = "{state_dir}"\n[slurm]\nconf = "{conf}"\nnode_name = "{node}"\n'
    text += f"reconcile_interval = {reconcile}\n"
    spec = CheckSpec(name="healthy", description="always healthy", settings=_Healthy, run=_healthy)
    engine = Engine(parse_config(text, "bench.toml", {"healthy": _Healthy}), [spec])
    run_pass(engine)  # warm up: the first pass may resume a node left drained by healthd
    before = rpc_counts(env)
    started = time.perf_counter()
    for _ in range(passes):
        outcome = run_pass(engine)
        assert outcome.action.errors == (), outcome.action.errors
    elapsed = time.perf_counter() - started
    after = rpc_counts(env)
    deltas = {k: after.get(k, 0) - before.get(k, 0) for k in sorted(set(after) | set(before))}
    deltas = {k: v for k, v in deltas.items() if v and k not in IGNORED}
    writes = sum(v for k, v in deltas.items() if k in WRITES)
    reads = sum(v for k, v in deltas.items() if k not in WRITES)
    for name, delta in deltas.items():
        print(f"  {name:<40} {delta:>6}")
    print(
        f"{passes} healthy passes on {node}: {writes / passes:.2f} write RPCs/pass, {reads / passes:.2f} read RPCs/pass"
    )
    print(f"mean cycle time {elapsed / passes * 1000:.1f} ms (in-process, includes scontrol fork/exec)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=50)
    parser.add_argument("--conf", type=Path, help="use this running cluster instead of starting one")
    parser.add_argument("--node", default="node1")
    parser.add_argument(
        "--reconcile-interval", type=float, default=3600.0, help="[slurm].reconcile_interval (0: read every pass)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="healthd-bench-") as tmp:
        if args.conf:
            bench(args.conf, args.node, args.passes, Path(tmp) / "state", args.reconcile_interval)
            return 0
        module = _cluster_module()
        why = module.missing_prerequisite()
        if why:
            print(f"cannot start the test cluster: {why}", file=sys.stderr)
            return 1
        cluster = module.Cluster(root=Path(tmp) / "cluster", healthd_bin=Path(sys.executable).with_name("healthd"))
        cluster.root.mkdir()
        try:
            cluster.start()
            bench(cluster.conf, args.node, args.passes, Path(tmp) / "state", args.reconcile_interval)
        finally:
            cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
