"""Cold ``healthd check --once`` wall time, CPU time and peak RSS, each run a fresh process.

    python bench/bench_check_once.py [--runs 20] [--fixture-node | --nhc-equivalent | --config PATH]

``--fixture-node`` runs every check against the fixture H100 node
(fixtures/h100-node.toml, with a private state directory); ``--nhc-equivalent`` runs
only what LBNL NHC's usual checks do on this machine (mounts present, of the right
type, with free space and inodes; a service's process running; the other checks
disabled); without either, every check runs against this machine. Always with a
private state directory, Slurm off and ``--dry-run``.

Each healthd run alternates with a bare ``python -c pass`` of the same interpreter
(the interpreter floor), and the ratio of the medians is printed (bench_nhc.py compares
with LBNL NHC itself, given a checkout of it). The first run
is left out: it validates the config and caches it (``healthd.config.cache``); the
runs measured are a node's usual ones, with an unchanged config. Bytecode is
compiled first, as a wheel install does. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The fixture node's config is the one the end-to-end test runs (tests/test_golden.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from healthd_testkit.paths import REPO, fixture_node_config


def one_run(command: list[str]) -> tuple[float, float, float]:
    """Wall seconds, peak RSS (MiB) and CPU seconds of one child process."""
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
    return elapsed, usage.ru_maxrss / 1024, cpu_seconds(usage)


def compile_bytecode() -> None:
    """Compile healthd's modules, as installing a wheel does (an editable checkout may run without .pyc files)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "healthd"), str(REPO / "checks")], check=True)


def this_machine_config(directory: Path) -> Path:
    """Built-in defaults, except what would touch the host: the state directory and Slurm."""
    path = directory / "healthd.toml"
    path.write_text(f'[paths]\nstate_dir = "{directory / "state"}"\n[slurm]\nenabled = false\n')
    return path


def nhc_equivalent_config(directory: Path) -> Path:
    """What NHC's check_fs_mount_rw, check_fs_free, check_fs_inodes and check_ps_service do, here.

    The mounts every Linux machine has (/, /proc, /dev/shm, /run) and one service whose
    process is sure to run (the benchmark's own interpreter, by name).
    """
    process = Path(os.path.realpath(sys.executable)).name[:15]
    path = directory / "nhc-equivalent.toml"
    path.write_text(
        f'[paths]\nstate_dir = "{directory / "state"}"\n[slurm]\nenabled = false\n'
        "[checks.mounts]\n"
        'expect = [{ path = "/", rw = true }, { path = "/proc", fstype = "proc" },'
        ' { path = "/dev/shm", fstype = "tmpfs" }, { path = "/run" }]\n'
        "min_free_percent = 1\nmin_free_inodes_percent = 1\n"
        f'[checks.services]\nmanager = "process"\nexpect = ["bench"]\nprocess_names = {{ bench = ["{process}"] }}\n'
        # Every other installed check is off: NHC's usual checks do nothing more.
        + "".join(f"[checks.{name}]\nenabled = false\n" for name in installed_checks() if name not in NHC_LIKE)
    )
    return path


NHC_LIKE = ("mounts", "services")


def installed_checks() -> list[str]:
    from importlib.metadata import entry_points

    return sorted(ep.name for ep in entry_points(group="healthd.checks"))


def cpu_seconds(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--config", default=None)
    where.add_argument("--fixture-node", action="store_true")
    where.add_argument("--nhc-equivalent", action="store_true")
    args = parser.parse_args()
    compile_bytecode()
    healthd = os.path.join(os.path.dirname(sys.executable), "healthd")
    with tempfile.TemporaryDirectory() as tmp:
        command = [healthd, "check", "--once", "--dry-run"]
        if args.fixture_node:
            os.chdir(REPO)
            command += ["--config", str(fixture_node_config(Path(tmp)))]
        elif args.nhc_equivalent:
            command += ["--config", str(nhc_equivalent_config(Path(tmp)))]
        elif args.config:
            command += ["--config", args.config]
        else:
            command += ["--config", str(this_machine_config(Path(tmp)))]
        floor = [sys.executable, "-c", "pass"]
        one_run(command)  # validates and caches the config; "cold" means a new process, not a cold page cache
        samples, floors = [], []
        for _ in range(args.runs):
            samples.append(one_run(command))
            floors.append(one_run(floor))
    walls = [s[0] for s in samples]
    floor_wall = statistics.median(f[0] for f in floors)
    cpu = statistics.median(s[2] for s in samples)
    floor_cpu = statistics.median(f[2] for f in floors)
    print(f"command: {' '.join(command)}")
    print(f"runs: {args.runs}, each followed by `python -c pass`")
    print(f"wall median: {statistics.median(walls) * 1000:.0f} ms, best: {min(walls) * 1000:.0f} ms")
    print(f"interpreter floor: wall median {floor_wall * 1000:.0f} ms, CPU {floor_cpu * 1000:.0f} ms")
    print(
        f"ratio to the floor: wall {statistics.median(walls) / floor_wall:.1f}x, CPU {cpu / floor_cpu:.1f}x"
        f" (CPU median {cpu * 1000:.0f} ms)"
    )
    print(f"peak RSS max: {max(s[1] for s in samples):.1f} MiB (floor {max(f[1] for f in floors):.1f} MiB)")
    print(f"python: {sys.version.split()[0]}, cpus: {os.cpu_count()}")


if __name__ == "__main__":
    main()
