"""What ``healthd prolog`` adds to a job's start when slurmd runs it: start delays on the real test cluster.

Usage (root; slurm-wlm and munge installed):

    .venv/bin/python bench/bench_prolog_cluster.py [--runs 10]

It starts the test suite's three-node cluster (tests/healthd_testkit/cluster.py), whose
``Prolog=`` runs healthd's prolog on the nodes listed in its ``prolog-nodes`` file and
exits at once on the others; the benchmark's wrapper runs ``healthd-prolog``, as
slurm.conf does on a node (docs/jobs.md), and notes how long it ran under slurmd.
node1 has a running ``healthd run`` with a fresh pass beside its prolog; node2 has
none. A job's start delay is from just before ``sbatch`` to the first line of its
batch script (``date``), which runs after the prolog. Each round times one job per
node with its prolog and one without (the node left out of ``prolog-nodes``: Prolog=
is then a shell that exits 0), alternating, so the difference is the prolog as slurmd
runs it. Medians over the rounds, and the median of each round's difference.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The test cluster's Prolog= wrapper, running healthd-prolog as slurm.conf does on a node (docs/jobs.md)
# rather than `healthd prolog`, and noting when it started and ended, in slurmd's process tree.
PROLOG = """#!/bin/sh
test -f {nodes} || exit 0
/bin/grep -qx "$SLURMD_NODENAME" {nodes} || exit 0
start=$(/bin/date +%s.%N)
{prolog} --config {root}/job-"$SLURMD_NODENAME".toml >>{root}/job-"$SLURMD_NODENAME".log 2>&1
code=$?
echo "$start $(/bin/date +%s.%N)" >>{root}/prolog-times-"$SLURMD_NODENAME"
exit $code
"""


def _testkit() -> Any:
    """The test suite's throwaway cluster and its waiting helper."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from healthd_testkit import cluster

    return cluster


def _config(cluster: Any, node: str, root: Path) -> Path:
    config = cluster.job_config(node)
    # Slurm on (the pass and the prolog act as on a node); a long interval keeps the daemon's one pass fresh.
    config.write_text(
        f'[paths]\nstate_dir = "{root / node}"\n[slurm]\nconf = "{cluster.conf}"\nnode_name = "{node}"\n'
        '[daemon]\ninterval = 3600\n[checks.xid]\nsource = "kmsg"\n'
        # This development machine's clock is not disciplined: the host check would drain the node.
        "[checks.host]\nenabled = false\n"
    )
    config.chmod(0o600)
    return config


def _durations(path: Path) -> list[float]:
    """Each prolog's run time, from the wrapper's start and end stamps."""
    return [float(end) - float(start) for start, end in (line.split() for line in path.read_text().splitlines())]


def _delay(cluster: Any, node: str, out: Path) -> float:
    """Seconds from just before ``sbatch`` to the job's script running; waits for the job (and its epilog) to end."""
    out.unlink(missing_ok=True)
    submitted = time.time()
    done = cluster.run("sbatch", "--parsable", "-w", node, "-o", "/dev/null", "--wrap", f"date +%s.%N > {out}")
    job = done.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while not out.exists() or cluster.job_state(job) not in ("COMPLETED", ""):
        if time.monotonic() > deadline:
            raise SystemExit(f"job {job} on {node} did not end: {cluster.job_state(job)} {cluster.reason(node)}")
        time.sleep(0.05)
    return float(out.read_text().strip()) - submitted


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    module = _testkit()
    why = module.missing_prerequisite()
    if why:
        print(f"cannot start the test cluster: {why}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="healthd-bench-") as tmp:
        root = Path(tmp)
        cluster = module.Cluster(root=root / "cluster", healthd_bin=Path(sys.executable).with_name("healthd"))
        cluster.root.mkdir()
        cluster.start()
        daemon = None
        try:
            healthd = str(Path(sys.executable).with_name("healthd"))
            (cluster.root / "prolog.sh").write_text(
                PROLOG.format(nodes=cluster.prolog_nodes, prolog=f"{healthd}-prolog", root=cluster.root)
            )
            beside = _config(cluster, "node1", root)
            _config(cluster, "node2", root)
            daemon = subprocess.Popen([healthd, "run", "--config", str(beside)], stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 60
            while not (root / "node1" / "daemon-pass.json").exists():
                if time.monotonic() > deadline:
                    raise SystemExit("the daemon recorded no pass")
                time.sleep(0.1)
            times: dict[str, list[float]] = {}
            for _ in range(args.runs):
                for node, what in (("node1", "daemon running, its pass fresh"), ("node2", "no daemon")):
                    for prolog in (True, False):
                        cluster.prolog_nodes.write_text(f"{node}\n" if prolog else "")
                        key = f"{node} ({what}): {'healthd prolog' if prolog else 'no prolog'}"
                        times.setdefault(key, []).append(_delay(cluster, node, root / "started"))
            log = cluster.job_log("node1").read_text()
            assert "(daemon's pass)" in log, log
            ran = {node: _durations(cluster.root / f"prolog-times-{node}") for node in ("node1", "node2")}
        finally:
            if daemon is not None:
                daemon.terminate()
                daemon.wait()
            cluster.shutdown()
    for key, delays in times.items():
        print(f"{key}: job start delay median {statistics.median(delays) * 1000:.0f} ms ({len(delays)} jobs)")
    for node, what in (("node1", "daemon running, its pass fresh"), ("node2", "no daemon")):
        with_prolog, without = (times[f"{node} ({what}): {p}"] for p in ("healthd prolog", "no prolog"))
        added = statistics.median(a - b for a, b in zip(with_prolog, without)) * 1000
        print(f"{node} ({what}): the prolog adds {added:.0f} ms to a job's start (median of the rounds' differences)")
        print(f"{node} ({what}): the prolog ran {statistics.median(ran[node]) * 1000:.0f} ms under slurmd (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
