"""``healthd fleet report`` at the study's scale: 4,000,000 job runs and 100,000 events.

Generates a synthetic fleet (``healthd/fleet/sample.py``: 3,000 nodes of 8 GPUs, 330
days) into three files once (jobs, events, submit lines), then times the analysis in a fresh process and reads
its peak RSS (``ru_maxrss`` of the child). The target is <= 60 s and <= 2 GB on a
2-core machine. With ``--backtest`` it then times ``healthd fleet backtest --json`` (weekly
steps) on the same files, in a fresh process, and prints the ratio to the report's time
(target <= 2x). ``--engine`` picks who counts the plain runs (docs/fleet.md, "At scale"), and
``--before TREE`` runs the same commands on the code before (a ``git archive`` of it) in the
same run and prints the ratios of CPU seconds. Run:

    .venv/bin/python bench/bench_fleet.py [--runs 4000000] [--events 100000] [--dir DIR] [--backtest]
        [--engine auto|duckdb|python] [--before TREE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent


def _synth() -> Any:
    """The synthetic fleet of healthd/fleet/sample.py (``healthd fleet sample``)."""
    from healthd.fleet import sample

    return sample


def generate(directory: Path, runs: int, events: int) -> tuple[Path, Path, Path]:
    # "v2": the job fields without JobName and SubmitLine, which come apart (docs/fleet.md, "Inputs").
    jobs, event_file = directory / f"jobs-v2-{runs}.txt", directory / f"events-v2-{events}.txt"
    submit = directory / f"submit-v2-{runs}.txt"
    if jobs.exists() and event_file.exists() and submit.exists():
        return jobs, event_file, submit
    synth = _synth()
    spec = synth.FleetSpec(
        nodes=3000,
        days=330,
        runs=runs,
        events=events,
        users=800,
        rate_per_node_day=0.006,
        incident_lemons=30,
        lemon_factor=10,
        silent_lemons=10,
        buggy_users=20,
        seed=7,
    )
    fleet = synth.plant(spec)
    started = time.perf_counter()
    with jobs.open("w") as out:
        out.writelines(line + "\n" for line in synth.job_lines(fleet))
    with event_file.open("w") as out:
        out.writelines(line + "\n" for line in synth.event_lines(fleet))
    with submit.open("w") as out:
        out.writelines(line + "\n" for line in synth.submit_lines(fleet))
    print(f"generated in {time.perf_counter() - started:.1f} s: {jobs} ({jobs.stat().st_size / 1e6:.0f} MB)")
    return jobs, event_file, submit


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


CPU: dict[str, float] = {}  # the CPU seconds of each command timed, by its label


def timed(
    command: str, *inputs: str, tree: Optional[Path] = None, label: str = ""
) -> tuple[float, float, Optional[dict[str, Any]]]:
    """Seconds, peak RSS of the children so far (MB), and the JSON of ``healthd fleet COMMAND --json``.

    Prints the CPU seconds of the command too: on a shared machine the wall time varies
    with the others' load, the CPU time much less. ``tree``: the code to run (default: this one).
    """
    healthd = Path(sys.executable).with_name("healthd")
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join((str(tree), str(tree / "checks"), env.get("PYTHONPATH", "")))
    cpu = cpu_seconds()
    started = time.perf_counter()
    proc = subprocess.run(
        [str(healthd), "fleet", command, "--json", *inputs], capture_output=True, text=True, check=False, env=env
    )
    elapsed = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    CPU[label or command] = cpu_seconds() - cpu
    print(f"fleet {command} {label}: {CPU[label or command]:.1f} s of CPU, {elapsed:.1f} s wall")
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return elapsed, peak_mb, None
    return elapsed, peak_mb, json.loads(proc.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4_000_000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "healthd-bench-fleet")
    parser.add_argument("--backtest", action="store_true", help="time fleet backtest too, and its ratio")
    parser.add_argument("--engine", default="auto", help="fleet's --engine (auto, duckdb, python)")
    parser.add_argument("--before", type=Path, metavar="TREE", help="the code before, to time the same commands on")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    jobs, events, submit = generate(args.dir, args.runs, args.events)
    inputs = ("--jobs", str(jobs), "--events", str(events), "--submit-lines", str(submit))
    if args.before is not None:
        before(args, inputs)
    elapsed, peak_mb, report = timed("report", *inputs, "--engine", args.engine)
    if report is None:
        return 1
    print(
        f"fleet report: {report['runs']} runs, {report['inputs']['events']['records']} events, "
        f"{len(report['attributed_failures'])} attributed, {len(report['lemon_nodes'])} lemons: "
        f"{elapsed:.1f} s, peak RSS {peak_mb:.0f} MB"
    )
    if args.backtest:
        replay, replay_mb, found = timed("backtest", *inputs, "--engine", args.engine)
        if found is None:
            return 1
        large = found["large_jobs"]
        print(
            f"fleet backtest: {len(found['steps'])} steps, {len(found['drains'])} drains, large-job failure rate "
            f"{large['failure_rate']} -> {large['failure_rate_with_draining']}: {replay:.1f} s, peak RSS "
            f"{replay_mb:.0f} MB (children so far), {replay / elapsed:.2f}x the report"
        )
    for command in ("report", "backtest"):
        if f"{command} before" in CPU and command in CPU:
            print(f"fleet {command}: {CPU[command] / CPU[f'{command} before']:.3f} of the CPU before")
    return 0


def before(args: argparse.Namespace, inputs: tuple[str, ...]) -> None:
    """The same commands on the code before, first (its peak RSS is then the children's so far)."""
    for command in ("report", "backtest") if args.backtest else ("report",):
        _, peak_mb, found = timed(command, *inputs, tree=args.before, label=f"{command} before")
        print(f"fleet {command} before: peak RSS {peak_mb:.0f} MB{'' if found else ', FAILED'}")


if __name__ == "__main__":
    sys.exit(main())
