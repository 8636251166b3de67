"""``healthd fleet report`` (and ``backtest``) on a synthetic fleet, each engine against the code before.

Generates a synthetic fleet (``healthd/fleet/sample.py``: 3,000 nodes of 8 GPUs, 330
days) into three files once (jobs, events, submit lines), then runs each command in a fresh
process per engine (``--engines``, default DuckDB then the Python reader) and, with ``--before
TREE`` (a ``git archive`` of the code before), on that code first, in the same run. Each run's
CPU seconds (user and system, DuckDB's threads included), wall seconds and peak RSS are its
own (``wait4``); the ratios are of CPU seconds, and the documents are compared whole (the
exit status is 1 when the engines' differ). Run:

    .venv/bin/python bench/bench_fleet.py [--runs 4000000] [--events 100000] [--dir DIR] [--backtest]
        [--backtest-only] [--engines duckdb,python] [--before TREE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple, Optional

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
    # Each file under a temporary name, renamed when whole: a run started meanwhile (the files
    # exist) would otherwise time a submit-line file still being written.
    for path, lines in ((jobs, synth.job_lines), (event_file, synth.event_lines), (submit, synth.submit_lines)):
        part = path.with_name(path.name + ".part")
        with part.open("w") as out:
            out.writelines(line + "\n" for line in lines(fleet))
        part.replace(path)
    print(f"generated in {time.perf_counter() - started:.1f} s: {jobs} ({jobs.stat().st_size / 1e6:.0f} MB)")
    return jobs, event_file, submit


class Timed(NamedTuple):
    """One command's CPU seconds (user + system, DuckDB's threads included), wall seconds and peak RSS."""

    cpu: float
    wall: float
    peak_mb: float
    found: Optional[dict[str, Any]]  # its JSON document, None when it failed


def timed(command: str, *inputs: str, tree: Optional[Path] = None) -> Timed:
    """``healthd fleet COMMAND --json`` in a fresh process, measured by its own rusage (``wait4``).

    On a shared machine the wall time varies with the others' load, the CPU time much less.
    ``tree``: the code to run (default: this one).
    """
    healthd = Path(sys.executable).with_name("healthd")
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join((str(tree), str(tree / "checks"), env.get("PYTHONPATH", "")))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen([str(healthd), "fleet", command, "--json", *inputs], stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        found = json.loads(out.read()) if proc.returncode == 0 else None
        if found is None:
            print(err.read().decode(errors="replace"), file=sys.stderr)
    return Timed(usage.ru_utime + usage.ru_stime, elapsed, usage.ru_maxrss / 1024, found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4_000_000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "healthd-bench-fleet")
    parser.add_argument("--backtest", action="store_true", help="time fleet backtest too")
    parser.add_argument("--backtest-only", action="store_true", help="time fleet backtest alone, not the report")
    parser.add_argument("--engines", default="duckdb,python", help="the --engine values to time, in order")
    parser.add_argument("--before", type=Path, metavar="TREE", help="the code before, to time the same commands on")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    jobs, events, submit = generate(args.dir, args.runs, args.events)
    inputs = ("--jobs", str(jobs), "--events", str(events), "--submit-lines", str(submit))
    same = True
    commands = ("backtest",) if args.backtest_only else ("report", "backtest") if args.backtest else ("report",)
    for command in commands:
        before = None if args.before is None else _shown(command, "before", timed(command, *inputs, tree=args.before))
        first: Optional[Timed] = None
        for engine in args.engines.split(","):
            now = _shown(command, engine, timed(command, *inputs, "--engine", engine))
            first = first or now
            same = same and now.found == first.found
            if before is not None and before.found is not None:
                print(
                    f"fleet {command} {engine}: {now.cpu / before.cpu:.3f} of the CPU before; the document "
                    f"{'the same as' if now.found == before.found else 'differs from'} the code before's, "
                    f"{'the same as' if now.found == first.found else 'DIFFERS from'} the first engine's"
                )
    return 0 if same else 1


def _shown(command: str, label: str, run: Timed) -> Timed:
    found = run.found
    what = "FAILED"
    if found is not None and command == "report":
        attributed, lemons = len(found["attributed_failures"]), len(found["lemon_nodes"])
        what = f"{found['runs']} runs, {attributed} attributed, {lemons} lemons"
    elif found is not None:
        what = f"{len(found['steps'])} steps, {len(found['drains'])} drains"
    print(f"fleet {command} {label}: {run.cpu:.1f} s of CPU, {run.wall:.1f} s wall, {run.peak_mb:.0f} MB peak ({what})")
    return run


if __name__ == "__main__":
    sys.exit(main())
