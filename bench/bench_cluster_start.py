"""What does Slurm accounting add to the test cluster's start? Times Cluster.start() with and without it.

Usage (root; slurm-wlm, munge, slurmdbd and mariadb-server installed):
    python bench/bench_cluster_start.py [--runs 5]

Each run starts the three-node test cluster of the test suite (tests/healthd_testkit/
cluster.py) in a new temporary directory and stops it: alternately without accounting
and with it (a new MariaDB datadir, mariadbd, slurmdbd, ``sacctmgr add cluster``). It
prints the median and range of start and shutdown for each, which is what one test
session pays once.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _cluster_module() -> Any:
    """The test suite's throwaway cluster (tests/healthd_testkit/cluster.py)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from healthd_testkit import cluster

    return cluster


def once(module: Any, accounting: bool) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="healthd-bench-") as tmp:
        cluster = module.Cluster(
            root=Path(tmp), healthd_bin=Path(sys.executable).with_name("healthd"), accounting=accounting
        )
        started = time.monotonic()
        try:
            cluster.start()
            start = time.monotonic() - started
        finally:
            stopping = time.monotonic()
            cluster.shutdown()
        return start, time.monotonic() - stopping


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    module = _cluster_module()
    why = module.missing_prerequisite() or module.missing_accounting()
    if why:
        print(f"cannot start the test cluster with accounting: {why}", file=sys.stderr)
        return 1
    times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(args.runs):
        for accounting in (False, True):
            times[accounting].append(once(module, accounting))
    for accounting, runs in times.items():
        starts, stops = [r[0] for r in runs], [r[1] for r in runs]
        print(
            f"{'with' if accounting else 'without'} accounting: start median {statistics.median(starts):.2f} s"
            f" ({min(starts):.2f} to {max(starts):.2f}), shutdown median {statistics.median(stops):.2f} s"
            f" ({min(stops):.2f} to {max(stops):.2f}), {len(runs)} runs"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
