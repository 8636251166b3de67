"""``fleet backtest`` with DuckDB (``healthd.fleet.columnar_backtest``) gives the replay of every run's document.

Each input is replayed twice, by the Python reader alone (every run seen by the replay)
and with DuckDB tallying the plain runs by step, and the two ``--json`` documents are
compared whole, to the bit. The inputs: the capture of the test cluster, a synthetic fleet
with planted lemons and submit lines, and a file whose keys are first seen on lines of
either reader and whose runs end on step boundaries.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import pytest
from healthd_testkit import synth
from healthd_testkit.paths import FIXTURES

from healthd.fleet.analyze import FleetSettings
from healthd.fleet.backtest import BacktestSettings, backtest
from healthd.fleet.backtest_render import document
from healthd.fleet.columnar import JobsFile
from healthd.fleet.columnar_backtest import Session
from healthd.fleet.sacct import JOB_COLUMNS, file_lines, open_table, sacct_command

pytest.importorskip("duckdb")
ACCOUNTING = FIXTURES / "slurm" / "accounting"
HEADER = "JobID|User|Partition|State|ExitCode|Submit|Start|End|Elapsed|NNodes|NodeList|AllocTRES"
EVENTS = "Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User"
DAY = 86400.0


def both(
    jobs: Path, events: list[str], options: BacktestSettings, submit: Optional[Path] = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The backtest documents of the Python reader alone and of DuckDB with it."""
    lines = None if submit is None else (lambda: file_lines(submit))
    settings = FleetSettings()
    python = backtest(file_lines(jobs), events, settings, options, submit_lines=lines)
    duck = backtest(JobsFile(jobs), events, settings, options, submit_lines=lines)
    return json.loads(json.dumps(document(python))), json.loads(json.dumps(document(duck)))


def test_the_capture_of_the_test_cluster() -> None:
    events = (ACCOUNTING / "sacctmgr-events-22.05-take-out.txt").read_text().split("\n")
    python, duck = both(ACCOUNTING / "sacct-22.05-take-out.txt", events, BacktestSettings(2.0, 1))
    assert python == duck and python["steps"]


def test_a_synthetic_fleet_with_lemons_and_submit_lines(tmp_path: Path) -> None:
    spec = synth.FleetSpec(nodes=120, days=60, runs=30_000, events=1_500, incident_lemons=4, lemon_factor=15, seed=5)
    fleet = synth.plant(spec)
    jobs, submit = tmp_path / "jobs.txt", tmp_path / "submit.txt"
    jobs.write_text("\n".join(synth.job_lines(fleet)) + "\n")
    submit.write_text("\n".join(synth.submit_lines(fleet)) + "\n")
    python, duck = both(jobs, list(synth.event_lines(fleet)), BacktestSettings(7 * DAY, 64), submit)
    assert python == duck
    assert python["drains"] and python["large_jobs"]["runs"] > 0 and python["large_jobs"]["held_drained_node"] > 0


def _line(job: str, user: str, state: str, start: str, end: str, nodes: str, gpus: int) -> str:
    nnodes = "2" if "[" in nodes else "1"
    return f"{job}|{user}|p|{state}|0:0|{start}|{start}|{end}|00:00:00|{nnodes}|{nodes}|gres/gpu={gpus}"


def _mixed_lines() -> list[str]:
    """Keys first seen on a failed (Python) line or a plain (DuckDB) one, runs ending on and by step boundaries."""
    lines = [HEADER, _line("1", "a", "COMPLETED", "2024-03-01T00:00:00", "2024-03-01T01:00:00", "n01", 8)]
    for day in range(1, 29):
        for node in range(1, 7):
            # Each (node, user) key's first run alternates between a failed one and a plain one.
            failed = (day + node) % 3 == 0 or (node == 2 and day % 2 == 0)
            start = f"2024-03-{day:02d}T00:00:00"
            # Day 8 00:00:00 is the first step exactly: a run ending then falls in the step after.
            end = f"2024-03-{day + 1:02d}T00:00:00" if day % 7 == 0 else f"2024-03-{day:02d}T23:59:59"
            state = "FAILED" if failed else "COMPLETED"
            lines.append(_line(f"{day * 10 + node}", f"u{node % 4}", state, start, end, f"n0{node}", 8))
        lines.append(
            _line(
                f"9{day}",
                "big",
                "COMPLETED",
                f"2024-03-{day:02d}T01:00:00",
                f"2024-03-{day:02d}T02:00:00",
                "n[01-02]",
                16,
            )
        )
    return lines


def test_keys_first_seen_by_either_reader_and_runs_ending_on_a_step(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("\n".join(_mixed_lines()) + "\n")
    events = [EVENTS, "c|n02|2024-03-03T00:00:00|2024-03-03T01:00:00|DOWN|gpu xid 79|root"]
    for options in (BacktestSettings(7 * DAY, 16), BacktestSettings(DAY + 0.25, 9)):
        python, duck = both(jobs, events, options)
        assert python == duck and len(python["steps"]) >= 3


def test_only_the_runs_the_replay_scores_go_to_the_python_reader(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.txt"
    jobs.write_text(
        "\n".join(
            [
                HEADER,
                _line("1", "a", "COMPLETED", "2024-03-01T00:00:00", "2024-03-01T01:00:00", "n01", 8),
                _line("2", "a", "FAILED", "2024-03-01T00:00:00", "2024-03-01T01:00:00", "n01", 8),
                _line("3", "b", "COMPLETED", "2024-03-01T00:00:00", "2024-03-01T01:00:00", "n[01-02]", 16),
                # Job 4 ran once small and once large (requeued): both its runs go to Python.
                _line("4", "b", "COMPLETED", "2024-03-01T00:00:00", "2024-03-01T01:00:00", "n01", 8),
                _line("4", "b", "COMPLETED", "2024-03-02T00:00:00", "2024-03-02T01:00:00", "n[01-02]", 24),
                _line("5", "c", "COMPLETED", "2024-03-01T00:00:00", "2024-03-01T01:00:00", "n02", 8),
            ]
        )
        + "\n"
    )
    table = open_table(file_lines(jobs), "jobs", JOB_COLUMNS, sacct_command(), "")
    with Session(20) as session:
        counted = session.count(jobs, table, (None, None), frozenset({"5"}))
        assert counted is not None
        # Lines 3 (failed), 5 and 6 (job 4, which had a large run) and 7 (job 5, pinned by its request).
        assert [number for number, _ in counted.others] == [3, 5, 6, 7]
        assert counted.records == 2  # the plain runs: jobs 1 and 3
        assert [found[:3] for found in session.plain_keys()] == [("n01", "a", "p")]
