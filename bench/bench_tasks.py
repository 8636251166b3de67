"""The kernel check's process-table walk (``healthd_checks.kernel.tasks.read_d_state``): time per pass.

    python bench/bench_tasks.py [--single 10000] [--multi 50] [--threads 200] [--runs 15] [--dir DIR]

Two tables: this machine's ``/proc``, and a synthetic procfs tree of ``--single``
single-threaded processes (as kernel threads and most daemons are) and ``--multi``
processes of ``--threads`` threads each (as training ranks and their data loaders are),
20,000 tasks by default, with one thread in D state. The synthetic tree lives in
``--dir`` (``/dev/shm`` where there is one), so its reads cost less than procfs's (which formats each file on
read): its figures compare the reader's own work, not the kernel's. Each figure is the
median wall and CPU time of ``--runs`` calls in this process, after one warm-up call.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from healthd_checks.kernel.tasks import read_d_state


def _stat(tid: int, name: str, state: str, threads: int) -> str:
    # proc(5): pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
    # utime stime cutime cstime priority nice num_threads itrealvalue starttime ... (52 fields)
    return (
        f"{tid} ({name}) {state} 1 {tid} {tid} 0 -1 4194560 48731 0 104 0 125 361 0 0 20 0 {threads} 0 "
        f"{100000 + tid} 172003328 3279 18446744073709551615 1 1 0 0 0 0 0 4096 1260 0 0 0 17" + " 0" * 13 + "\n"
    )


_STATUS = "Name:\t{name}\nState:\t{state}\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n"


def build(root: Path, single: int, multi: int, threads: int) -> None:
    """A procfs tree as the kernel lays it out (``PID/stat`` and ``PID/task/TID/stat``)."""
    pid = 1000
    for index in range(single + multi):
        count = 1 if index < single else threads
        process = root / str(pid)
        (process / "task").mkdir(parents=True)
        for tid in range(pid, pid + count):
            # The last thread of the last process sleeps in D: the walk must reach it.
            state = "D" if index == single + multi - 1 and tid == pid + count - 1 else "S"
            name = "worker" if count > 1 else "daemon"
            task = process / "task" / str(tid)
            task.mkdir()
            (task / "stat").write_text(_stat(tid, name, state, count))
            (task / "status").write_text(_STATUS.format(name=name, state=state))
        # The process's own files are its leader thread's (fs/proc/array.c: the leader's state).
        for name in ("stat", "status"):
            (process / name).write_text((process / "task" / str(pid) / name).read_text())
        pid += count + 7


def _tasks(procfs: Path) -> int:
    count = 0
    for pid in os.listdir(procfs):
        with contextlib.suppress(OSError):  # a task that is gone
            count += len(os.listdir(procfs / pid / "task")) if pid.isdigit() else 0
    return count


def measure(label: str, procfs: Path, runs: int) -> None:
    found = read_d_state(procfs).found  # warm-up (dentry cache)
    tasks = _tasks(procfs)
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        read_d_state(procfs)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    print(
        f"{label}: {tasks:,} tasks, {len(found)} in D; median {wall * 1000:.1f} ms wall, {cpu * 1000:.1f} ms CPU "
        f"({cpu / tasks * 1e6:.2f} us CPU per task)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--single", type=int, default=10_000)
    parser.add_argument("--multi", type=int, default=50)
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--runs", type=int, default=15)
    shm = "/dev/shm"  # memory-backed, as procfs is: building 60,000 files on a disk takes minutes
    parser.add_argument("--dir", default=shm if os.path.isdir(shm) else None, help="where to build the tree")
    args = parser.parse_args()
    measure("this machine's /proc", Path("/proc"), args.runs)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        build(Path(tmp), args.single, args.multi, args.threads)
        label = f"synthetic tree ({args.single:,} single-threaded, {args.multi} x {args.threads} threads)"
        measure(label, Path(tmp), args.runs)
    print(f"command: {' '.join(sys.argv)}; python {sys.version.split()[0]}, cpus {os.cpu_count()}")


if __name__ == "__main__":
    main()
