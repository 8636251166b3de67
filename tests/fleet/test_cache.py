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

    def __call__(self, bin_dir: Any, since: dt.datetime, until: dt.datetime, timeout: float, conf: Any) -> Accounting:
        self.asked.append((since, until))
        runs = [self.jobs[0]]
        ids = set()
        for line in self.jobs[1:]:
            fields = line.split("|")
            start, end = moment(fields[6]), moment(fields[7])
            if start is not None and start <= until and (end is None or end >= since):
                runs.append(line if end is None or end <= until else "|".join([*fields[:7], "Unknown", *fields[8:]]))
                ids.add(fields[0])
        events = [self.events[0]]
        for line in self.events[1:]:
            fields = line.split("|")
            start, end = moment(fields[2]), moment(fields[3])
            if start is not None and start <= until and (end is None or end >= since):
                events.append(line)
        submit = [self.submit[0], *(line for line in self.submit[1:] if line.split("|", 1)[0] in ids)]
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


def report(cli: Cli, config: Path, until: str, *more: str) -> dict[str, Any]:
    code, out, err = cli(
        "fleet", "report", "--live", "--since", "2024-01-01", "--until", until, "--json", "--config", str(config), *more
    )
    assert code == 0, err
    return {key: value for key, value in json.loads(out).items() if key in COMPARED}


@pytest.fixture
def first_read(cli: Cli, write_config: Callable[..., Path], tmp_path: Path, accounts: Accounts) -> tuple[Path, Path]:
    """The config, and the cache after a first live read of 2024-01-01 to 2024-01-25."""
    config = write_config(f'[slurm]\nbin_dir = "{tmp_path}"\n')
    cache = tmp_path / "fleet.cache"
    report(cli, config, "2024-01-25", "--cache", str(cache))
    return config, cache


def test_a_second_run_reads_only_the_new_days_and_reports_as_a_full_read(
    cli: Cli, first_read: tuple[Path, Path], accounts: Accounts
) -> None:
    config, cache = first_read
    assert oct(os.stat(cache).st_mode & 0o777) == "0o600"
    cached = report(cli, config, "2024-02-08", "--cache", str(cache))
    since, until = accounts.asked[-1]
    assert until == dt.datetime(2024, 2, 8) and since == dt.datetime(2024, 1, 24, 23, 0), "from an hour before"
    full = report(cli, config, "2024-02-08")
    assert accounts.asked[-1][0] == dt.datetime(2024, 1, 1)
    # The same runs, though not in the same order (the cached ones come first).
    for document in (cached, full):
        document["attributed_failures"].sort(key=lambda a: (a["end"], a["job_id"]))
    for key in COMPARED:  # sums in another order differ in the last bits
        assert rounded(cached[key]) == rounded(full[key]), key
    assert full["runs"] > 4_000 and full["attributed_failures"]


def test_a_cache_of_another_cluster_or_no_cache_is_read_whole(
    cli: Cli, write_config: Callable[..., Path], tmp_path: Path, first_read: tuple[Path, Path], accounts: Accounts
) -> None:
    _, cache = first_read
    other = write_config(f'[slurm]\nbin_dir = "{tmp_path / "other"}"\n')
    report(cli, other, "2024-02-08", "--cache", str(cache))
    assert accounts.asked[-1][0] == dt.datetime(2024, 1, 1), "another cluster's cache is not used"
    cache.write_text("not json")
    report(cli, other, "2024-02-09", "--cache", str(cache))
    assert accounts.asked[-1][0] == dt.datetime(2024, 1, 1), "a file that is no cache is read again, and replaced"
    assert json.loads(cache.read_text())["version"] == 1


def test_a_cache_others_could_write_is_refused(cli: Cli, first_read: tuple[Path, Path], accounts: Accounts) -> None:
    config, cache = first_read
    cache.chmod(0o666)
    asked = len(accounts.asked)
    code, _, err = cli(
        "fleet", "report", "--live", "--since", "2024-01-01", "--until", "2024-02-01", "--config", str(config),
        "--cache", str(cache),
    )  # fmt: skip
    assert code == 78 and f"refusing {cache}" in err and "writable by group or others" in err
    assert len(accounts.asked) == asked, "nothing read"


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
