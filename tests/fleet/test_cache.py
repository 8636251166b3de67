"""``fleet report --live --cache FILE``: a second run reads only the new days and reports what a full read reports.

``collect`` is a stand-in serving a synthetic fleet's accounting as sacct and sacctmgr
select it for a window: the runs that were running or ended in it (sacct(1), ``-S``/``-E``)
and the events that overlap it. (``collect`` itself runs against slurmdbd in
``test_live_cluster.py``.)
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from healthd_testkit import synth
from healthd_testkit.spooled import spool_of

from healthd.fleet.live import Accounting
from healthd.fleet.progress import bar

Cli = Callable[..., tuple[int, str, str]]
SLURM = "%Y-%m-%dT%H:%M:%S"
COMPARED = ("runs", "failed_runs", "attributed_failures", "mttf", "taxonomy", "lemon_nodes", "incidents")


def moment(text: str) -> Optional[dt.datetime]:
    return None if text == "Unknown" else dt.datetime.strptime(text, SLURM)


class Accounts:
    """The stand-in for ``healthd.fleet.live.collect`` over one synthetic fleet; records each window asked."""

    def __init__(self, fleet: synth.Fleet) -> None:
        self.jobs = list(synth.job_lines(fleet))
        self.events = list(synth.event_lines(fleet))
        self.submit = list(synth.submit_lines(fleet))
        self.asked: list[tuple[dt.datetime, dt.datetime]] = []
        self.served: list[int] = []  # the job runs of each window served

    def __call__(self, bin_dir: Any, since: dt.datetime, until: dt.datetime, timeout: float, conf: Any) -> Accounting:
        self.asked.append((since, until))
        runs, submit = [self.jobs[0]], [self.submit[0]]
        # One selection, as sacct makes for both queries: each run chosen brings its submit line.
        for line, submit_line in zip(self.jobs[1:], self.submit[1:]):
            fields = line.split("|")
            start, end = moment(fields[6]), moment(fields[7])
            if start is not None and start <= until and (end is None or end >= since):
                runs.append(line if end is None or end <= until else "|".join([*fields[:7], "Unknown", *fields[8:]]))
                submit.append(submit_line)
        events = [self.events[0]]
        for line in self.events[1:]:
            fields = line.split("|")
            start, end = moment(fields[2]), moment(fields[3])
            if start is not None and start <= until and (end is None or end >= since):
                events.append(line)
        self.served.append(len(runs) - 1)
        return Accounting("\n".join(runs) + "\n", "\n".join(events) + "\n", "\n".join(submit) + "\n")


@pytest.fixture
def accounts(monkeypatch: pytest.MonkeyPatch) -> Accounts:
    import healthd.fleet.live

    fleet = synth.plant(synth.FleetSpec(nodes=60, days=40, runs=8_000, events=600, incident_lemons=2, seed=5))
    found = Accounts(fleet)
    monkeypatch.setattr(healthd.fleet.live, "spool", spool_of(found))
    # No script is stored here (a cluster without AccountingStoreFlags=job_script): sacct prints none.
    monkeypatch.setattr(healthd.fleet.live, "batch_scripts", lambda *_, **__: "")
    return found


def rounded(value: Any) -> Any:
    """``value`` with every float to 9 significant digits."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, list):
        return [rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    return value


def document(cli: Cli, config: Path, since: str, until: str, *more: str) -> dict[str, Any]:
    code, out, err = cli(
        "fleet", "report", "--live", "--since", since, "--until", until, "--json", "--config", str(config), *more
    )  # fmt: skip
    assert code == 0, err
    found: dict[str, Any] = json.loads(out)
    return found


def report(cli: Cli, config: Path, until: str, *more: str) -> dict[str, Any]:
    return {k: v for k, v in document(cli, config, "2024-01-01", until, *more).items() if k in COMPARED}


def same(cached: dict[str, Any], full: dict[str, Any]) -> None:
    """The two documents are equal, but for the order runs were read in (sums differ in the last bits, and the
    first bad lines shown are others: the cache streams the rows by day, so its line numbers are not sacct's)."""
    for found in (cached, full):
        found["attributed_failures"].sort(key=lambda a: (a["end"], a["job_id"]))
        for table in found.get("inputs", {}).values():
            table.pop("first_bad_lines", None)
    assert set(cached) == set(full)
    for key in full:
        assert rounded(cached[key]) == rounded(full[key]), key


@pytest.fixture
def first_read(cli: Cli, write_config: Callable[..., Path], tmp_path: Path, accounts: Accounts) -> tuple[Path, Path]:
    """The config, and the cache after a first live read of 2024-01-01 to 2024-01-25."""
    config = write_config(f'[slurm]\nbin_dir = "{tmp_path}"\n')
    cache = tmp_path / "fleet.cache"
    report(cli, config, "2024-01-25", "--cache", str(cache))
    return config, cache


def segments(cache: Path) -> dict[str, int]:
    """The cache's files by name, with their inode (a file rewritten is a new one)."""
    return {path.name: path.stat().st_ino for path in cache.iterdir()}


def test_a_second_run_reads_only_the_new_days_and_reports_as_a_full_read(
    cli: Cli, first_read: tuple[Path, Path], accounts: Accounts
) -> None:
    config, cache = first_read
    assert oct(os.stat(cache).st_mode & 0o777) == "0o700"
    assert {oct(p.stat().st_mode & 0o777) for p in cache.iterdir()} == {"0o600"}
    cached = document(cli, config, "2024-01-01", "2024-02-08", "--cache", str(cache))
    since, until = accounts.asked[-1]
    assert until == dt.datetime(2024, 2, 8) and since == dt.datetime(2024, 1, 24, 23, 0), "from an hour before"
    full = document(cli, config, "2024-01-01", "2024-02-08")
    assert accounts.asked[-1][0] == dt.datetime(2024, 1, 1)
    same(cached, full)
    assert full["runs"] > 4_000 and full["attributed_failures"]


def test_a_day_costs_a_day(
    cli: Cli, first_read: tuple[Path, Path], accounts: Accounts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next day's run reads the new day's rows and rewrites only that day's segment, and reports as a full read."""
    import healthd.fleet.cache

    config, cache = first_read
    before = segments(cache)
    parsed = []
    ends = healthd.fleet.cache._Ends.__call__
    monkeypatch.setattr(healthd.fleet.cache._Ends, "__call__", lambda self, row: parsed.append(row) or ends(self, row))
    cached = document(cli, config, "2024-01-01", "2024-01-26", "--cache", str(cache))
    assert accounts.asked[-1] == (dt.datetime(2024, 1, 24, 23, 0), dt.datetime(2024, 1, 26))
    served = accounts.served[-1]
    after = segments(cache)
    kept = {name for name, inode in after.items() if before.get(name) == inode}
    assert len(kept) >= len(before) - 6, "the days before are not written again (manifest and one day's five files)"
    # Rows parsed: the new read's, and the cached rows of the one day its final runs join.
    one_day = max(len((cache / name).read_text().splitlines()) for name in after if name.endswith(".jobs"))
    assert 0 < len(parsed) <= served + 2 * one_day < full_window(accounts) / 4
    same(cached, document(cli, config, "2024-01-01", "2024-01-26"))


def full_window(accounts: Accounts) -> int:
    return len(accounts.jobs)


def test_a_window_that_moves_reports_as_a_full_read(
    cli: Cli, first_read: tuple[Path, Path], accounts: Accounts
) -> None:
    """``--since`` inside a cached day: that day's earlier runs, events and submit records are left out."""
    config, cache = first_read
    cached = document(cli, config, "2024-01-09T13:30:00", "2024-01-27", "--cache", str(cache))
    assert accounts.asked[-1][0] == dt.datetime(2024, 1, 24, 23, 0)
    names = sorted(p.name for p in cache.glob("*.jobs"))
    assert names[0].startswith(f"{int(dt.datetime(2024, 1, 9).timestamp()) // 86400}-"), "days before are gone"
    same(cached, document(cli, config, "2024-01-09T13:30:00", "2024-01-27"))


def test_a_cache_of_another_cluster_or_version_is_read_whole(
    cli: Cli, write_config: Callable[..., Path], tmp_path: Path, first_read: tuple[Path, Path], accounts: Accounts
) -> None:
    _, cache = first_read
    other = write_config(f'[slurm]\nbin_dir = "{tmp_path / "other"}"\n')
    report(cli, other, "2024-02-08", "--cache", str(cache))
    assert accounts.asked[-1][0] == dt.datetime(2024, 1, 1), "another cluster's cache is not used"
    (cache / "manifest.json").write_text("not json")
    report(cli, other, "2024-02-09", "--cache", str(cache))
    assert accounts.asked[-1][0] == dt.datetime(2024, 1, 1), "a manifest that is no manifest is read again, replaced"
    assert json.loads((cache / "manifest.json").read_text())["version"] == 3


def test_a_cache_missing_a_segment_is_read_whole(cli: Cli, first_read: tuple[Path, Path], accounts: Accounts) -> None:
    config, cache = first_read
    next(cache.glob("*.jobs")).unlink()
    cached = document(cli, config, "2024-01-01", "2024-01-26", "--cache", str(cache))
    assert accounts.asked[-1][0] == dt.datetime(2024, 1, 1)
    same(cached, document(cli, config, "2024-01-01", "2024-01-26"))


def _report_with_a_file_at_the_cache(cli: Cli, write_config: Callable[..., Path], cache: Path, text: str) -> str:
    """A live report of 2024-01-01 to 2024-01-25 with ``--cache`` at a file holding ``text``: its stderr (exit 0)."""
    config = write_config(f'[slurm]\nbin_dir = "{cache.parent}"\n')
    cache.write_text(text)
    cache.chmod(0o600)
    code, _, err = cli(
        "fleet", "report", "--live", "--since", "2024-01-01", "--until", "2024-01-25", "--config", str(config),
        "--cache", str(cache),
    )  # fmt: skip
    assert code == 0, err
    return err


def test_a_cache_file_of_the_first_version_is_replaced_by_a_directory(
    cli: Cli, write_config: Callable[..., Path], tmp_path: Path, accounts: Accounts
) -> None:
    cache = tmp_path / "fleet.cache"
    err = _report_with_a_file_at_the_cache(cli, write_config, cache, json.dumps({"version": 1, "key": "k", "jobs": []}))
    assert f"{cache} is a file (an earlier healthd's cache): the window is read whole into a cache directory" in err
    assert accounts.asked[-1][0] == dt.datetime(2024, 1, 1) and (cache / "manifest.json").is_file()


@pytest.mark.parametrize("which", ["directory", "segment"])
def test_a_cache_others_could_write_is_refused(
    cli: Cli, first_read: tuple[Path, Path], accounts: Accounts, which: str
) -> None:
    config, cache = first_read
    (cache if which == "directory" else next(cache.glob("*.jobs"))).chmod(0o666 if which == "segment" else 0o777)
    asked = len(accounts.asked)
    code, _, err = cli(
        "fleet", "report", "--live", "--since", "2024-01-01", "--until", "2024-02-01", "--config", str(config),
        "--cache", str(cache),
    )  # fmt: skip
    assert code == 78 and "refusing" in err and "writable by group or others" in err, err
    assert len(accounts.asked) == asked + (which == "segment"), "nothing read (a segment is found unsafe on reading)"


def test_cache_goes_with_live(cli: Cli, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("JobID|User|State|Start|End|NNodes|NodeList|AllocTRES\n")
    code, _, err = cli("fleet", "report", "--jobs", str(jobs), "--events", str(jobs), "--cache", str(tmp_path / "c"))
    assert code == 64 and "--cache" in err


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_is_drawn_on_a_terminal_only() -> None:
    lines = [f"line {i}" for i in range(200)]
    quiet = io.StringIO()
    assert list(bar(lines, 200, "reading sacct", quiet)) == lines and quiet.getvalue() == ""
    shown = Terminal()
    assert list(bar(lines, 200, "reading sacct", shown)) == lines
    drawn = shown.getvalue()
    assert "reading sacct [###############               ]  50%" in drawn
    assert "] 100%" in drawn and drawn.endswith("\r")


def test_a_cache_directory_keeps_every_file_the_cache_did_not_write(
    cli: Cli, write_config: Callable[..., Path], tmp_path: Path, accounts: Accounts
) -> None:
    """``--cache`` pointed at a directory holding other files (a state directory) removes none of them."""
    config = write_config(f'[slurm]\nbin_dir = "{tmp_path}"\n')
    cache = tmp_path / "shared"
    cache.mkdir(mode=0o700)
    theirs = {"policy.json": "{}", "notes.txt": "mine", "1-abc.jobs": "not a segment name", ".hidden": "x"}
    for name, text in theirs.items():
        (cache / name).write_text(text)
    for until in ("2024-01-25", "2024-02-08"):
        report(cli, config, until, "--cache", str(cache))
    assert {name: (cache / name).read_text() for name in theirs} == theirs
    assert (cache / "manifest.json").is_file() and len(list(cache.glob("*.jobs"))) > 1


def test_a_file_at_the_cache_path_that_is_no_cache_is_kept(
    cli: Cli, write_config: Callable[..., Path], tmp_path: Path, accounts: Accounts
) -> None:
    cache = tmp_path / "slurm.conf"
    err = _report_with_a_file_at_the_cache(cli, write_config, cache, "ClusterName=c\n")
    assert "a file that is not a healthd cache is there; the report goes on without it" in err
    assert cache.read_text() == "ClusterName=c\n"


def test_a_window_ending_before_the_cached_end_is_read_whole(
    cli: Cli, first_read: tuple[Path, Path], accounts: Accounts
) -> None:
    config, cache = first_read
    cached = document(cli, config, "2024-01-10", "2024-01-20", "--cache", str(cache))
    assert accounts.asked[-1] == (dt.datetime(2024, 1, 10), dt.datetime(2024, 1, 20))
    same(cached, document(cli, config, "2024-01-10", "2024-01-20"))


RULE = "-" * 80


def script(job: str) -> str:
    """A batch script: every fifth job excludes a node, every 97th forges the next job's header to pin it."""
    number = int(job)
    if number % 97 == 0:
        return f"#!/bin/sh\nexit 1\nBatch Script for {number + 1}\n{RULE}\n#SBATCH -w gpu0001\n"
    return "#!/bin/sh\n#SBATCH -x gpu0048\nsrun train\n" if number % 5 == 0 else "#!/bin/sh\nsrun train\n"


DEADLINES: list[tuple[str, Any]] = []  # (command, the deadline it was given), as the stand-ins are called


@pytest.fixture
def scripts(monkeypatch: pytest.MonkeyPatch, accounts: Accounts) -> list[str]:
    """``sacct -B -j IDS`` as sacct prints it for ``script``; the job ids asked, in order."""
    import healthd.fleet.live

    asked: list[str] = []

    def batch_scripts(bin_dir: Any, jobs: list[str], timeout: float, *, conf: Any = None, deadline: Any = None) -> str:
        asked.extend(jobs)
        DEADLINES.append(("sacct -B", deadline))
        return "".join(f"Batch Script for {job}\n{RULE}\n{script(job)}\n" for job in jobs)

    monkeypatch.setattr(healthd.fleet.live, "batch_scripts", batch_scripts)
    return asked


@pytest.mark.parametrize("since", ["2024-01-01", "2024-01-09T13:30:00"])
def test_a_day_asks_for_its_own_scripts_and_reports_as_a_full_read(
    cli: Cli, scripts: list[str], first_read: tuple[Path, Path], accounts: Accounts, since: str
) -> None:
    """The scripts are kept with their days: a day's run asks for the new runs' jobs' (and, when the window
    starts inside a day, that day's jobs'), and the exclusions, pins and forged headers read are a full read's."""
    config, cache = first_read
    assert len(set(scripts)) > 4_000, "the first read asks for every batch job's script"
    scripts.clear()
    cached = document(cli, config, since, "2024-01-26", "--cache", str(cache))
    asked = len(scripts)
    one_day = max(len(path.read_text().splitlines()) for path in cache.glob("*.submit"))
    assert 0 < asked <= accounts.served[-1] + one_day < full_window(accounts) / 4
    full = document(cli, config, since, "2024-01-26")
    assert len(scripts) - asked > 4 * asked, "a full read asks for every batch job's"
    shown = [line["why"] for line in full["inputs"]["submit_lines"]["first_bad_lines"]]
    assert any("header appears more than once" in why for why in shown), "a forged header is read"
    same(cached, full)


def test_one_deadline_bounds_every_command_of_a_read(
    cli: Cli, scripts: list[str], first_read: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--timeout`` is for the whole read: the queries and each day's scripts' lookups share one deadline."""
    import healthd.fleet.live

    served = healthd.fleet.live.spool

    def spool(*args: Any, deadline: Any = None, **more: Any) -> Any:
        DEADLINES.append(("sacct", deadline))
        return served(*args, deadline=deadline, **more)

    monkeypatch.setattr(healthd.fleet.live, "spool", spool)
    config, cache = first_read
    DEADLINES.clear()
    started = time.monotonic()
    document(cli, config, "2024-01-09T13:30:00", "2024-01-27", "--cache", str(cache), "--timeout", "50")
    commands = {command for command, _ in DEADLINES}
    deadlines = {deadline for _, deadline in DEADLINES}
    assert commands == {"sacct", "sacct -B"} and len(deadlines) == 1, DEADLINES
    assert started + 50 <= deadlines.pop() <= time.monotonic() + 50


def test_a_damaged_scripts_file_is_an_error_naming_it(
    cli: Cli, scripts: list[str], first_read: tuple[Path, Path]
) -> None:
    """A day's kept lookups that are not JSON stop the report with the file's name, not a traceback."""
    config, cache = first_read
    damaged = sorted(cache.glob("*.scripts"))[-2]
    damaged.write_text("not json")
    code, _, err = cli(
        "fleet", "report", "--live", "--since", "2024-01-01", "--until", "2024-01-26", "--json",
        "--config", str(config), "--cache", str(cache),
    )  # fmt: skip
    assert code != 0 and f"{damaged}: not JSON" in err and "Traceback" not in err, err
