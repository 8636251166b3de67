"""Cold ``healthd check --once`` wall time and peak RSS, each run a fresh process.

Usage: python bench/bench_check_once.py [--runs N] [--config PATH] [-- EXTRA healthd ARGS]
Prints the median and best wall time and the largest peak RSS over the runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def one_run(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one child process."""
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.execv(command[0], command)
    _, status, usage = os.wait4(pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1, 2, 3):
        raise SystemExit(f"{' '.join(command)} failed with status {status}")
    return elapsed, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--config", default=None)
    parser.add_argument("extra", nargs="*")
    args = parser.parse_args()
    healthd = os.path.join(os.path.dirname(sys.executable), "healthd")
    command = [healthd, "check", "--once", "--dry-run", *args.extra]
    if args.config:
        command += ["--config", args.config]
    one_run(command)  # warm the page cache: "cold" means a new process, not a cold disk
    samples = [one_run(command) for _ in range(args.runs)]
    walls = [s[0] for s in samples]
    print(f"command: {' '.join(command)}")
    print(f"runs: {args.runs}")
    print(f"wall median: {statistics.median(walls) * 1000:.0f} ms, best: {min(walls) * 1000:.0f} ms")
    print(f"peak RSS max: {max(s[1] for s in samples):.1f} MiB")
    print(f"python: {sys.version.split()[0]}, cpus: {os.cpu_count()}")


if __name__ == "__main__":
    main()
