"""``healthd fleet report`` (and ``backtest``) on a synthetic fleet, each engine against the code before.

Generates a synthetic fleet (``healthd/fleet/sample.py``: 3,000 nodes of 8 GPUs, 330
days) into three files once (jobs, events, submit lines), then runs each command in a fresh
process per engine (``--engines``, default DuckDB then the Python reader) and, with ``--before
TREE`` (a ``git archive`` of the code before), on that code first, in the same run. Each run's
CPU seconds (user and system, DuckDB's threads included), wall seconds and peak RSS are its
own (``wait4``); the ratios are of CPU seconds, and the documents are compared whole (the
exit status is 1 when the engines' differ). Run:

    .venv/bin/python bench/bench_fleet.py [--runs 4000000] [--events 100000] [--dir DIR] [--backtest]
        [--commands report,backtest] [--backtest-only] [--engines duckdb,python] [--before TREE]
        [--scale-copies K --copy-dir DIR] [--limit-mb MB] [--every SECONDS]

``--scale-copies K`` times a fleet K times the generated one, made from its files in
minutes instead of generated in an hour (``scaled``: K renamed copies, 3,000 more nodes
each; bench/README.md says what it changes). ``--limit-mb`` follows each command's resident
memory and the input it has read, a line every ``--every`` seconds, and stops it past the
limit (``Watch``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Optional

HERE = Path(__file__).resolve().parent


def _synth() -> Any:
    """The synthetic fleet of healthd/fleet/sample.py (``healthd fleet sample``)."""
    from healthd.fleet import sample

    return sample


def _spec(runs: int, events: int) -> Any:
    """The generated fleet: 3,000 nodes of 8 GPUs, 330 days, 800 users, 40 planted lemons."""
    return _synth().FleetSpec(
        nodes=NODES,
        days=330,
        runs=runs,
        events=events,
        users=USERS,
        rate_per_node_day=0.006,
        incident_lemons=30,
        lemon_factor=10,
        silent_lemons=10,
        buggy_users=20,
        seed=7,
    )


NODES, USERS = 3000, 800


def generate(directory: Path, runs: int, events: int) -> tuple[Path, Path, Path]:
    # "v2": the job fields without JobName and SubmitLine, which come apart (docs/fleet.md, "Inputs").
    jobs, event_file = directory / f"jobs-v2-{runs}.txt", directory / f"events-v2-{events}.txt"
    submit = directory / f"submit-v2-{runs}.txt"
    if jobs.exists() and event_file.exists() and submit.exists():
        return jobs, event_file, submit
    synth = _synth()
    fleet = synth.plant(_spec(runs, events))
    started = time.perf_counter()
    # Each file under a temporary name, renamed when whole: a run started meanwhile (the files
    # exist) would otherwise time a submit-line file still being written.
    for path, lines in ((jobs, synth.job_lines), (event_file, synth.event_lines), (submit, synth.submit_lines)):
        _written(path, (line + "\n" for line in lines(fleet)))
    print(f"generated in {time.perf_counter() - started:.1f} s: {jobs} ({jobs.stat().st_size / 1e6:.0f} MB)")
    return jobs, event_file, submit


def _written(path: Path, lines: Iterable[str]) -> None:
    """``lines`` written under a temporary name, renamed to ``path`` when whole."""
    part = path.with_name(path.name + ".part")
    with part.open("w", buffering=1 << 20) as out:
        out.writelines(lines)
    part.replace(path)


class Copy:
    """How copy ``number`` of a generated fleet renames its nodes, users and job ids, and shifts its times.

    Node ``gpuN`` becomes ``gpu(number * NODES + N)`` and ``userU`` ``user(number * USERS + U)``,
    all at one width; job ids move by ``number * id_step``; times by ``number`` hours, so
    that a copy's incidents are not at the same second as its source's (which would make
    every incident one shared by as many nodes as there are copies: ``causes.shared_incidents``).
    """

    def __init__(self, number: int, copies: int, id_step: int) -> None:
        self.nodes, self.users, self.ids = number * NODES, number * USERS, number * id_step
        self.node_width = max(4, len(str(NODES * copies - 1)))
        self.user_width = max(3, len(str(USERS * copies - 1)))
        self.shift = number * 3600
        self._lists: dict[str, str] = {}
        self._names: dict[str, str] = {}
        self._submit: dict[str, str] = {}
        self._hours: dict[str, str] = {}

    def node_list(self, text: str) -> str:
        """``gpu0791`` or ``gpu[0001-0004]`` renamed: every number in a list is a node's."""
        return _renamed(self._lists, _NUMBER, text, lambda m: self._node(m.group()))

    def _node(self, digits: str) -> str:
        return f"{self.nodes + int(digits):0{self.node_width}d}"

    def user(self, text: str) -> str:
        return _renamed(self._names, _NUMBER, text, lambda m: f"{self.users + int(m.group()):0{self.user_width}d}")

    def job(self, text: str) -> str:
        return str(int(text) + self.ids)

    def submit_line(self, text: str) -> str:
        """The nodes a submit line names (``-x gpuN``, ``-w gpuN``: sample.py writes single names) renamed."""
        return _renamed(self._submit, _SUBMIT_NODE, text, lambda m: self._node(m.group()))

    def time(self, text: str) -> str:
        """``YYYY-MM-DDTHH:MM:SS`` moved by whole hours (this machine's zone: UTC, no DST)."""
        if not self.shift or len(text) != 19:
            return text
        hour = self._hours.get(text[:13])
        if hour is None:
            epoch = time.mktime(time.strptime(text[:13], "%Y-%m-%dT%H"))
            hour = self._hours[text[:13]] = time.strftime("%Y-%m-%dT%H", time.localtime(epoch + self.shift))
        return hour + text[13:]


_NUMBER = re.compile(r"\d+")
_SUBMIT_NODE = re.compile(r"(?<=\bgpu)\d+\b")


def scaled(source: tuple[Path, Path, Path], runs: int, copies: int, directory: Path) -> tuple[Path, Path, Path]:
    """A fleet ``copies`` times the generated one in ``source``: more nodes, the same per-node mix.

    Streamed: each source line is read once and written ``copies`` times (``Copy``), line after
    line, each file renamed into place when whole. bench/README.md says what differs from a
    fleet generated at that size.
    """
    jobs, events, submit = source
    made = tuple(directory / f"{path.stem}x{copies}{path.suffix}" for path in source)
    if all(path.exists() for path in made):
        return made[0], made[1], made[2]
    started = time.perf_counter()
    id_step = 10 ** len(str(1000 + runs))  # sample.py numbers jobs from 1001, one or more runs each
    numbered = [Copy(number, copies, id_step) for number in range(copies)]
    fields = {jobs: _copy_jobs, events: _copy_events, submit: _copy_submit}
    for path, out in zip(source, made):
        with path.open(buffering=1 << 20) as lines:
            header = next(lines)
            _written(out, _chained(header, fields[path](header, lines, numbered)))
        print(f"{out}: {out.stat().st_size / 1e9:.1f} GB, {time.perf_counter() - started:.0f} s", flush=True)
    return made[0], made[1], made[2]


def _chained(first: str, rest: Iterable[str]) -> Iterator[str]:
    yield first
    yield from rest


def _copy_jobs(header: str, lines: Iterable[str], copies: list[Copy]) -> Iterator[str]:
    names = header.rstrip("\n").split("|")
    i_id, i_user, i_list = names.index("JobID"), names.index("User"), names.index("NodeList")
    times = [names.index(name) for name in ("Submit", "Start", "End")]
    for line in lines:
        fields = line.split("|")
        for copy in copies:
            out = list(fields)
            out[i_id], out[i_user], out[i_list] = (
                copy.job(fields[i_id]),
                copy.user(fields[i_user]),
                copy.node_list(fields[i_list]),
            )
            for i in times:
                out[i] = copy.time(fields[i])
            yield "|".join(out)


def _copy_events(header: str, lines: Iterable[str], copies: list[Copy]) -> Iterator[str]:
    names = header.rstrip("\n").split("|")
    i_node = names.index("NodeName")
    times = [names.index(name) for name in ("TimeStart", "TimeEnd")]
    for line in lines:
        fields = line.split("|")
        for copy in copies:
            out = list(fields)
            out[i_node] = copy.node_list(fields[i_node])
            for i in times:
                out[i] = copy.time(fields[i])
            yield "|".join(out)


def _copy_submit(header: str, lines: Iterable[str], copies: list[Copy]) -> Iterator[str]:
    for line in lines:
        job, _, rest = line.partition("|")
        for copy in copies:
            yield f"{copy.job(job)}|{copy.submit_line(rest)}"


def _renamed(memo: dict[str, str], pattern: re.Pattern[str], text: str, new: Callable[[re.Match[str]], str]) -> str:
    """``pattern.sub(new, text)``, once per distinct ``text`` (a copy's lists, users and submit lines repeat)."""
    found = memo.get(text)
    if found is None:
        found = memo[text] = pattern.sub(new, text)
    return found


class Timed(NamedTuple):
    """One command's CPU seconds (user + system, DuckDB's threads included), wall seconds and peak RSS."""

    cpu: float
    wall: float
    peak_mb: float
    found: Optional[dict[str, Any]]  # its JSON document, None when it failed
    stopped: bool = False  # stopped by the watcher: past --limit-mb


def timed(command: str, *inputs: str, tree: Optional[Path] = None, watch: Optional[Watch] = None) -> Timed:
    """``healthd fleet COMMAND --json`` in a fresh process, measured by its own rusage (``wait4``).

    On a shared machine the wall time varies with the others' load, the CPU time much less.
    ``tree``: the code to run (default: this one); ``watch``: its memory followed (``Watch``).
    """
    healthd = Path(sys.executable).with_name("healthd")
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join((str(tree), str(tree / "checks"), env.get("PYTHONPATH", "")))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen([str(healthd), "fleet", command, "--json", *inputs], stdout=out, stderr=err, env=env)
        follower = None
        if watch is not None:
            # A pidfd, opened before wait4 can reap the command: it names this process alone, so
            # the watcher never reads or kills another that reuses the pid.
            handle = os.pidfd_open(proc.pid)
            follower = threading.Thread(target=watch.follow, args=(handle, proc.pid, started), daemon=True)
            follower.start()
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - started
        if follower is not None:
            follower.join()
            os.close(handle)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        found = json.loads(out.read()) if proc.returncode == 0 else None
        if found is None:
            print(err.read().decode(errors="replace")[-4000:], file=sys.stderr)
    stopped = watch is not None and watch.stopped
    return Timed(usage.ru_utime + usage.ru_stime, elapsed, usage.ru_maxrss / 1024, found, stopped)


class Watch:
    """A command's resident memory and input read, sampled each second from /proc; stopped past ``limit_mb``.

    Stopped too when the machine has less than ``FLOOR_MB`` of memory available, or the temporary
    directory (where DuckDB spills) less than ``DISK_FLOOR_GB`` free, whatever its own size:
    others share this machine, which has no swap.

    Prints a line every ``every`` seconds: where the memory went as the input was read
    (``rchar``: the bytes its read calls returned, DuckDB's included, of ``inputs`` bytes).
    """

    def __init__(self, limit_mb: Optional[float], every: float, inputs: float) -> None:
        self.limit_mb, self.every, self.inputs = limit_mb, every, inputs
        self.stopped = False

    def follow(self, handle: int, pid: int, started: float) -> None:
        """Samples the command ``handle`` (its pidfd) is, until it ends; ``pid`` only reads its /proc."""
        self.stopped = False
        shown = started
        while True:
            if select.select([handle], [], [], 1.0)[0]:
                return  # it ended: a pidfd is readable once its process has
            rss, read = _rss_mb(pid), _read_bytes(pid)
            if rss is None:
                return
            now = time.perf_counter()
            past = (self.limit_mb is not None and rss > self.limit_mb) or _short()
            if now - shown >= self.every or past:
                shown = now
                print(
                    f"  {now - started:6.0f} s: {rss:7.0f} MB resident, {read / 1e9:6.2f} GB read "
                    f"({100 * read / self.inputs:.0f}% of the inputs)",
                    flush=True,
                )
            if past:
                self.stopped = True
                free = shutil.disk_usage(tempfile.gettempdir()).free / 1e9
                print(
                    f"  stopped: past {self.limit_mb} MB, {_available_mb():.0f} MB available, {free:.0f} GB free",
                    flush=True,
                )
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(handle, signal.SIGKILL)
                return


FLOOR_MB, DISK_FLOOR_GB = 2048, 8


def _short() -> bool:
    """Whether the machine is short of memory or of temporary disk space."""
    return _available_mb() < FLOOR_MB or shutil.disk_usage(tempfile.gettempdir()).free < DISK_FLOOR_GB * 1e9


def _available_mb() -> float:
    for line in Path("/proc/meminfo").read_text().split("\n"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("inf")


def _rss_mb(pid: int) -> Optional[float]:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.split("\n"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None  # a zombie: it ended


def _read_bytes(pid: int) -> int:
    try:
        io = Path(f"/proc/{pid}/io").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in io.split("\n") if line.startswith("rchar:")), 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4_000_000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "healthd-bench-fleet")
    parser.add_argument("--backtest", action="store_true", help="time fleet backtest too (--commands report,backtest)")
    parser.add_argument("--commands", default="report", help="the fleet commands to time, in order")
    parser.add_argument("--backtest-only", action="store_true", help="time fleet backtest alone, not the report")
    parser.add_argument("--engines", default="duckdb,python", help="the --engine values to time, in order")
    parser.add_argument("--before", type=Path, metavar="TREE", help="the code before, to time the same commands on")
    parser.add_argument(
        "--scale-copies",
        type=int,
        default=1,
        metavar="K",
        help="time K renamed copies of the fleet (Copy), in --copy-dir",
    )
    parser.add_argument("--copy-dir", type=Path, help="where the copies are written (default: --dir)")
    parser.add_argument("--limit-mb", type=float, help="stop a command whose resident memory passes this")
    parser.add_argument("--every", type=float, default=60.0, help="seconds between the watcher's lines (60)")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    files = generate(args.dir, args.runs, args.events)
    if args.scale_copies > 1:
        (args.copy_dir or args.dir).mkdir(parents=True, exist_ok=True)
        files = scaled(files, args.runs, args.scale_copies, args.copy_dir or args.dir)
    jobs, events, submit = files
    inputs = ("--jobs", str(jobs), "--events", str(events), "--submit-lines", str(submit))
    watch = Watch(args.limit_mb, args.every, sum(path.stat().st_size for path in files))
    same = True
    commands = ("backtest",) if args.backtest_only else ("report", "backtest") if args.backtest else None
    for command in commands or args.commands.split(","):
        before = None
        if args.before is not None:
            before = _shown(command, "before", timed(command, *inputs, tree=args.before, watch=watch))
        first: Optional[Timed] = None
        for engine in args.engines.split(","):
            now = _shown(command, engine, timed(command, *inputs, "--engine", engine, watch=watch))
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
    what = "STOPPED past --limit-mb" if run.stopped else "FAILED"
    if found is not None and command == "report":
        attributed, lemons = len(found["attributed_failures"]), len(found["lemon_nodes"])
        what = f"{found['runs']} runs, {attributed} attributed, {lemons} lemons"
    elif found is not None:
        what = f"{len(found['steps'])} steps, {len(found['drains'])} drains"
    print(f"fleet {command} {label}: {run.cpu:.1f} s of CPU, {run.wall:.1f} s wall, {run.peak_mb:.0f} MB peak ({what})")
    return run


if __name__ == "__main__":
    sys.exit(main())
