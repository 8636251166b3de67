"""Cold ``healthd check --once`` wall time and peak RSS, each run a fresh process.

    python bench/bench_check_once.py [--runs 20] [--fixture-node | --config PATH]

``--fixture-node`` runs every check against the fixture H100 node
(fixtures/h100-node.toml, with a private state directory), which is how the README
figure is taken; without it, the checks run against this machine, still with a
private state directory and Slurm off. Prints the median and best wall time and the
largest peak RSS; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


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


def fixture_node_config(directory: Path) -> Path:
    text = (REPO / "fixtures/h100-node.toml").read_text()
    text = text.replace("[paths]\n", f'[paths]\nstate_dir = "{directory / "state"}"\n', 1)
    # Programs are named by absolute path only: the fixture paths are made absolute here.
    text = text.replace('"fixtures/', f'"{REPO}/fixtures/')
    path = directory / "h100-node.toml"
    path.write_text(text)
    return path


def this_machine_config(directory: Path) -> Path:
    """Built-in defaults, except what would touch the host: the state directory and Slurm."""
    path = directory / "healthd.toml"
    path.write_text(f'[paths]\nstate_dir = "{directory / "state"}"\n[slurm]\nenabled = false\n')
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--config", default=None)
    where.add_argument("--fixture-node", action="store_true")
    args = parser.parse_args()
    healthd = os.path.join(os.path.dirname(sys.executable), "healthd")
    with tempfile.TemporaryDirectory() as tmp:
        command = [healthd, "check", "--once", "--dry-run"]
        if args.fixture_node:
            os.chdir(REPO)
            command += ["--config", str(fixture_node_config(Path(tmp)))]
        elif args.config:
            command += ["--config", args.config]
        else:
            command += ["--config", str(this_machine_config(Path(tmp)))]
        one_run(command)  # "cold" means a new process each time, not a cold page cache
        samples = [one_run(command) for _ in range(args.runs)]
    walls = [s[0] for s in samples]
    print(f"command: {' '.join(command)}")
    print(f"runs: {args.runs}")
    print(f"wall median: {statistics.median(walls) * 1000:.0f} ms, best: {min(walls) * 1000:.0f} ms")
    print(f"peak RSS max: {max(s[1] for s in samples):.1f} MiB")
    print(f"python: {sys.version.split()[0]}, cpus: {os.cpu_count()}")


if __name__ == "__main__":
    main()
