"""``fleet report --live --cache DIR``: what a daily run costs against a full read, on bench_fleet.py's fleet.

The fleet of ``bench_fleet.py`` (its files, generated once into ``--dir``) is served by
stand-in ``sacct`` and ``sacctmgr`` scripts that select a window's runs and events as the
real ones do (``-S``/``-E``: running or ended in it; a run ending after the window's end
is still running), and refuse ``--json`` as a sacct without the serializer does, so the
``-P`` path is read. Each figure is one fresh process of the code measured, its own CPU
seconds and peak RSS (``RUSAGE_SELF``: the stand-ins' work is slurmdbd's, not healthd's):

- "read": ``inputs.read_live`` entered and its rows drained, without the analysis: what the
  collection and the cache cost. A full read of the window without a cache; the first
  read with the cache (the window less its last day, which builds the cache); then the
  incremental day (the whole window, with the cache). ``served``: the rows sacct and sacctmgr
  printed (slurmdbd's work); ``stand_in_cpu``: the stand-ins' CPU, which is a scan of the whole
  fleet's files at every call, not a model of slurmdbd's;
- "report": the same, analysed (``analyze``), full and incremental.

``--before TREE`` runs the same on the code before (a ``git archive`` of it) in the same run,
and prints the ratios. Run:

    nice -n 10 .venv/bin/python bench/bench_fleet_cache.py [--runs 1000000] [--events 25000] [--dir DIR]
        [--scratch DIR] [--before TREE] [--no-report]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_fleet import generate  # noqa: E402 (the same fleet as bench_fleet.py)

# The stand-ins: one Python script answering as sacct or sacctmgr by its name.
STAND_IN = """#!{python}
import sys
JOBS, SUBMIT, EVENTS, SERVED = {jobs!r}, {submit!r}, {events!r}, {served!r}
args = sys.argv[1:]
served = 0
def value(flag):
    return args[args.index(flag) + 1]
if sys.argv[0].endswith("sacctmgr"):
    since = next(a for a in args if a.startswith("Start="))[6:]
    until = next(a for a in args if a.startswith("End="))[4:]
    with open(EVENTS) as f:
        sys.stdout.write(next(f))
        for line in f:
            fields = line.split("|")
            if fields[2] <= until and (fields[3] in ("Unknown", "") or fields[3] >= since):
                sys.stdout.write(line)
                served += 1
    open(SERVED, "a").write(f"{{served}}\\n")
    sys.exit(0)
if "--json" in args:
    sys.stderr.write("sacct: unrecognized option '--json'\\n")
    sys.exit(1)
since, until, submit = value("-S"), value("-E"), "SubmitLine" in value("-o")
out = sys.stdout
with open(JOBS) as jobs, open(SUBMIT) as lines:
    header = next(jobs)
    out.write(next(lines) if submit else header)
    for line, submit_line in zip(jobs, lines):
        fields = line.split("|")
        start, end = fields[6], fields[7]
        if start <= until and end >= since:
            if submit:
                out.write(submit_line)
            else:
                out.write(line if end <= until else "|".join([*fields[:7], "Unknown", *fields[8:]]))
            served += 1
open(SERVED, "a").write(f"{{served}}\\n")
"""

# One measurement in a fresh process of the code measured: prints its JSON on the last line.
DRIVER = """
import json, resource, sys
from pathlib import Path
from healthd.fleet import inputs
from healthd.fleet.analyze import FleetSettings, analyze
mode, bin_dir, cache, since, until = sys.argv[1:6]
how = inputs.Live(Path(bin_dir), None, 3600.0, Path(cache) if cache else None, "python")
settings = FleetSettings(since=float(since), until=float(until))
with inputs.read_live(how, settings, float(until)) as found:
    if mode == "read":
        rows = sum(1 for _ in found.jobs) + sum(1 for _ in found.events)
        rows += 0 if found.submit is None else sum(1 for _ in found.submit())
        shown = {"rows": rows}
    else:
        report = analyze(found.jobs, found.events, settings, found.sources, found.submit, job_names=found.names,
                         scripts=found.scripts)
        shown = {"runs": report.runs, "failed": report.failed_runs}
usage, served = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({**shown, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024,
                  "stand_in_cpu": served.ru_utime + served.ru_stime}))
"""


# sacct -B -j IDS (the batch scripts, a thousand job ids a call): each job's record with NONE, as
# on a cluster without AccountingStoreFlags=job_script (src/sacct/options.c, _print_script); a
# shell answers, since a thousand Python starts would be the bench.
SCRIPTS = """#!/bin/sh
case " $* " in
*" -B "*)
    IFS=,
    for id in $3; do printf 'Batch Script for %s\\n%s\\nNONE\\n\\n' "$id" {rule}; done
    exit 0;;
esac
exec {python} {stand_in} "$@"
"""


def stand_ins(directory: Path, jobs: Path, events: Path, submit: Path) -> Path:
    bin_dir = directory / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    text = STAND_IN.format(
        python=sys.executable, jobs=str(jobs), submit=str(submit), events=str(events), served=str(bin_dir / "served")
    )
    for name in ("sacct.py", "sacctmgr"):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (bin_dir / "sacct").write_text(SCRIPTS.format(python=sys.executable, stand_in=bin_dir / "sacct.py", rule="-" * 80))
    (bin_dir / "sacct").chmod(0o755)
    return bin_dir


def span(jobs: Path) -> tuple[float, float]:
    """The first and last end among the runs (epoch seconds, local time as sacct prints it)."""
    import datetime

    first, last = "9999", ""
    with jobs.open() as handle:
        next(handle)
        for line in handle:
            end = line.split("|", 8)[7]
            first, last = min(first, end), max(last, end)
    read = datetime.datetime.fromisoformat
    return read(first).timestamp(), read(last).timestamp()


def measure(tree: Optional[Path], mode: str, bin_dir: Path, cache: Optional[Path], window: tuple[float, float]) -> Any:
    served = bin_dir / "served"
    served.write_text("")
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join((str(tree), str(tree / "checks")))
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, mode, str(bin_dir), str(cache or ""), *map(str, window)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=str(tree or HERE.parent),  # python -c puts the working directory first on sys.path
    )
    if proc.returncode != 0:
        raise SystemExit(f"{mode} failed: {proc.stderr[-2000:]}")
    found: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    found["served"] = sum(int(n) for n in served.read_text().split())  # rows the stand-ins printed
    return found


def series(name: str, tree: Optional[Path], bin_dir: Path, scratch: Path, window: tuple[float, float], report: bool):
    """Full read, first cached read, incremental day; and the reports, full and incremental."""
    since, until = window
    cache = scratch / f"cache-{name}"
    shutil.rmtree(cache, ignore_errors=True)
    if cache.is_file():
        cache.unlink()
    found = {"full read": measure(tree, "read", bin_dir, None, window)}
    found["first cached read"] = measure(tree, "read", bin_dir, cache, (since, until - 86400))
    kept = scratch / f"kept-{name}"
    _copy(cache, kept)
    found["incremental day"] = measure(tree, "read", bin_dir, cache, window)
    if report:
        found["full report"] = measure(tree, "report", bin_dir, None, window)
        _copy(kept, cache)
        found["incremental report"] = measure(tree, "report", bin_dir, cache, window)
    for label, figures in found.items():
        print(f"{name:6} {label:20} {figures['cpu']:7.1f} s CPU {figures['rss_mb']:7.0f} MB  {figures}", flush=True)
    return found


def _copy(source: Path, target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    if target.is_file():
        target.unlink()
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        shutil.copy2(source, target)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--events", type=int, default=25_000)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "healthd-bench-fleet")
    parser.add_argument("--scratch", type=Path, help="the stand-ins and caches (default: --dir; --dir may be shared)")
    parser.add_argument("--before", type=Path, metavar="TREE", help="the code before, measured the same way")
    parser.add_argument("--no-report", action="store_true", help="the reads only, not the analysis")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    jobs, events, submit = generate(args.dir, args.runs, args.events)
    scratch = args.scratch or args.dir
    scratch.mkdir(parents=True, exist_ok=True)
    bin_dir = stand_ins(scratch, jobs, events, submit)
    first, last = span(jobs)
    window = (first, last - 3600)  # the last day's runs are partly still running at the end
    trees = [("now", None), *([("before", args.before)] if args.before else [])]
    results = {name: series(name, tree, bin_dir, scratch, window, not args.no_report) for name, tree in trees}
    for name, found in results.items():
        ratio = found["incremental day"]["cpu"] / found["full read"]["cpu"]
        print(f"{name}: incremental day / full read: {ratio:.3f} of the CPU")
        if "full report" in found:
            ratio = found["incremental report"]["cpu"] / found["full report"]["cpu"]
            print(f"{name}: incremental report / full report: {ratio:.3f} of the CPU")
    if "before" in results:
        for label in results["now"]:
            now, before = results["now"][label], results["before"][label]
            cpu, rss = now["cpu"] / before["cpu"], now["rss_mb"] / before["rss_mb"]
            print(f"{label}: {cpu:.3f} of the CPU before, {rss:.2f} of its peak RSS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
