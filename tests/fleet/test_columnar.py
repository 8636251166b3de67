"""The DuckDB engine (``healthd.fleet.columnar``, the ``fleet`` extra) gives the report the Python reader gives.

Each input is analysed twice, by the Python reader alone and with DuckDB counting the plain
runs, and the two ``--json`` documents are compared whole, to the bit. The inputs: the
capture of the test cluster, synthetic fleets with submit lines (jobs whose runs the Python
reader must keep), and a file of every kind of line DuckDB must leave to the Python reader.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any, Optional

import pytest
from healthd_testkit import synth
from healthd_testkit.paths import FIXTURES

from healthd.fleet import columnar
from healthd.fleet.analyze import FleetSettings, analyze
from healthd.fleet.columnar import JobsFile
from healthd.fleet.render import document
from healthd.fleet.sacct import JOB_COLUMNS, USER_TEXT, FleetInputError, file_lines, open_table, sacct_command

pytest.importorskip("duckdb")
ACCOUNTING = FIXTURES / "slurm" / "accounting"
HEADER = "JobID|User|Partition|State|ExitCode|Submit|Start|End|Elapsed|NNodes|NodeList|AllocTRES"
EVENTS = "Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User"


def both(
    jobs: Path, events: list[str], submit: Optional[Path] = None, scripts: Optional[str] = None, **settings: Any
) -> tuple[Any, Any]:
    """The documents of the Python reader and of DuckDB with it (jobs and submit lines); asserts DuckDB can read."""
    given = FleetSettings(**settings)
    lines = None if submit is None else (lambda: file_lines(submit))
    python = analyze(file_lines(jobs), events, given, submit_lines=lines, scripts=scripts)
    assert columnar.usable(jobs) and (submit is None or columnar.usable(submit))
    duck = analyze(JobsFile(jobs), events, given, submit_lines=lines, scripts=scripts)
    return json.loads(json.dumps(document(python))), json.loads(json.dumps(document(duck)))


def test_the_capture_of_the_test_cluster() -> None:
    events = (ACCOUNTING / "sacctmgr-events-22.05-take-out.txt").read_text().split("\n")
    python, duck = both(ACCOUNTING / "sacct-22.05-take-out.txt", events)
    assert python == duck and python["runs"] > 0


@pytest.mark.parametrize("seed", [3, 11])
def test_synthetic_fleets_with_submit_lines(tmp_path: Path, seed: int) -> None:
    fleet = synth.plant(synth.FleetSpec(nodes=80, days=30, runs=20_000, events=800, incident_lemons=3, seed=seed))
    jobs, submit = tmp_path / "jobs.txt", tmp_path / "submit.txt"
    jobs.write_text("\n".join(synth.job_lines(fleet)) + "\n")
    submit.write_text("\n".join(synth.submit_lines(fleet)) + "\n")
    events = list(synth.event_lines(fleet))
    python, duck = both(jobs, events, submit)
    assert python == duck
    assert python["runs"] > 15_000 and python["attributed_failures"] and python["lemon_nodes"]


def test_every_line_the_python_reader_must_read(tmp_path: Path) -> None:
    good = "|0:0|2024-03-01T00:00:00|{start}|{end}|00:00:00|{nnodes}|{nodes}|{tres}"
    rows = [
        ("1", "a", "p", "COMPLETED", "2024-03-01T01:00:00", "2024-03-01T05:00:00", "1", "n01", "gres/gpu=8"),
        ("2", "a", "p", "FAILED", "2024-03-01T01:00:00", "2024-03-01T04:59:00", "1", "n02", "gres/gpu=8"),
        ("3", "b", "p", "COMPLETED", "2024-03-01T01:00:00", "2024-03-01T05:00:00", "2", "n[01-02]", "gres/gpu=16"),
        ("4", "b", "p", "COMPLETED", "2024-03-01T01:00:00", "2024-03-01T05:00:00", "007", "n01", "gres/gpu=8"),
        ("5", "b", "p", "COMPLETED", "2024-03-01T01:00:00", "2024-13-01T05:00:00", "1", "n01", "gres/gpu=8"),
        ("6", "b", "p", "COMPLETED", "2024-03-01T01:00:00", "2024-03-01T05:00:60", "1", "n01", "gres/gpu=8"),
        ("7", "b", "p", "COMPLETED", "2024-03-01T06:00:00", "2024-03-01T05:00:00", "1", "n01", "gres/gpu=8"),
        ("8", "b", "p", "COMPLETED", "@1709254800", "@1709258400", "1", "n03", "gres/gpu=8"),
        ("9", "b", "p", "COMPLETED", "@17092548x0", "@1709258400", "1", "n03", "gres/gpu=8"),
        ("1x", "b", "p", "COMPLETED", "2024-03-01T01:00:00", "2024-03-01T05:00:00", "1", "n01", "gres/gpu=8"),
        ("10", "b", "p", "RUNNING", "2024-03-01T01:00:00", "Unknown", "1", "n01", "gres/gpu=8"),
        ("11", "b", "p", "COMPLETED", "2024-03-01T01:00:00", "2024-03-01T05:00:00", "1", "n01", "gres/gpu=-8"),
        ("12", "b", "p", "COMPLETED", "2024-03-01T01:00:00", "2024-03-01T05:00:00", "2", "n[02-01]", "gres/gpu=16"),
        ("13", "c", "q", "NODE_FAIL", "2024-03-01T01:00:00", "2024-03-01T05:00:00", "2", "n[01-02]", "gres/gpu=16"),
        ("14", "c", "q", "COMPLETED", "2024-03-09T01:00:00", "2024-03-09T05:00:00", "1", "n04", "gres/gpu=8"),
        ("15", "c", "q", "COMPLETED", "2024-02-09T01:00:00", "2024-02-09T05:00:00", "1", "n04", "gres/gpu=8"),
        ("16_3", "c", "q", "COMPLETED", "2024-03-01T01:00:00", "2024-03-01T05:00:00", "1", "n05", "gres/gpu:h100=4"),
    ]
    lines = [HEADER]
    for job, user, partition, state, start, end, nnodes, nodes, tres in rows:
        fields = good.format(start=start, end=end, nnodes=nnodes, nodes=nodes, tres=tres)
        lines.append(f"{job}|{user}|{partition}|{state}{fields}")
    lines.append("17|c|q|COMPLETED|0:0|x|2024-03-01T01:00:00|2024-03-01T05:00:00|0|1|n01")  # a field short
    lines.append("18|c|q|COMPLETED|0:0|x|2024-03-01T01:00:00|2024-03-01T05:00:00|0|1|n01|gres/gpu=8|")  # sacct -p
    lines.append("19|c|q|COMPLETED|0:0|x|2024-03-01T01:00:00|2024-03-01T05:00:00|0|1|n01|gres/gpu=8|x|y")
    lines.append("20|c|q|COMPLETED|0:0|x|2024-03-01T01:00:00|2024-03-01T05:00:00|0|1|n06|")  # no AllocTRES
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("\n".join(lines) + "\n")
    events = [EVENTS, "c|n02|2024-03-01T04:58:00|Unknown|DRAIN|healthd: XID_79 gpu0|root(0)"]
    python, duck = both(jobs, events, since=1709251200.0, until=1709856000.0)  # 2024-03-01 to 03-08 UTC
    assert python == duck
    assert python["inputs"]["jobs"]["bad_lines"] >= 8 and python["attributed_failures"]


def test_a_file_with_a_carriage_return_is_left_to_the_python_reader(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.txt"
    row = "1|al\rice|p|COMPLETED|0:0|x|2024-03-01T01:00:00|2024-03-01T05:00:00|0|1|n01|gres/gpu=8"
    jobs.write_text(f"{HEADER}\n{row}\n", newline="")
    assert not columnar.usable(jobs), "DuckDB would end a line at the \\r"
    report = analyze(JobsFile(jobs), [EVENTS])
    assert report.runs == 1 and report.jobs.bad == 0


def test_a_field_duckdb_would_read_as_null_leaves_the_file_to_the_python_reader(tmp_path: Path) -> None:
    """A line with one field too many, that field the byte DuckDB reads as NULL: a bad line for both engines."""
    jobs = tmp_path / "jobs.txt"
    row = "1|alice|p|COMPLETED|0:0|x|2024-03-01T01:00:00|2024-03-01T05:00:00|0|1|n01|gres/gpu=8"
    jobs.write_text(f"{HEADER}\n{row}\n2{row[1:]}|\x02\n")
    assert not columnar.usable(jobs)
    python = analyze(file_lines(jobs), [EVENTS])
    duck = analyze(JobsFile(jobs), [EVENTS])
    assert json.loads(json.dumps(document(python))) == json.loads(json.dumps(document(duck)))
    assert duck.runs == 1 and duck.jobs.bad == 1


SUBMIT = "JobID|SubmitLine"


def _submit_shapes(tmp_path: Path) -> tuple[Path, Path, str]:
    """Jobs, submit lines of every shape the Python reader reads, and one job's batch script."""
    runs = [(1, "bob", "n01"), (2, "bob", "n01"), (2, "bob", "n01"), (5, "eve", "n01"), (6, "ann", "n02")]
    runs += [(7, "ann", "n03"), (8, "ann", "n02"), (9, "ann", "n01")]
    row = "{}|{}|p|COMPLETED|0:0|x|2024-03-01T01:00:00|2024-03-01T05:00:00|0|1|{}|gres/gpu=8"
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("\n".join([HEADER, *(row.format(*run) for run in runs)]) + "\n")
    submit = tmp_path / "submit.txt"
    lines = [
        SUBMIT,
        "before the first record",  # a bad line
        "1|sbatch -x n09 a.sh",
        "2|sbatch --exclude=n[03-04] a.sh",
        "2|sbatch --exclude=n[03-04] a.sh",
        "5|sbatch --wrap 'echo",  # eve's submit line, with newlines in it:
        "1|sbatch -x n07 a.sh",  # a record forged for bob's job 1
        "404|sbatch -w n08 a.sh",  # and for a job that does not exist
        "-w n01'",  # a continuation line asking for a node
        "6|sbatch run.sh",  # its batch script pins it (below)
        "7|sbatch --wrap 'a|b' -vw n03",  # a "|" in the line, bundled short options
        "8|sbatch --exclusive run.sh|",  # sacct -p's closing "|"
        "9|sbatch run.sh",
    ]
    submit.write_text("\n".join(lines) + "\n")
    return jobs, submit, "Batch Script for 6\n" + "-" * 80 + "\n#!/bin/sh\n#SBATCH --nodelist=n02\nexit 1\n\n"


def test_submit_lines_of_every_shape_read_by_duckdb_give_the_python_readers_report(tmp_path: Path) -> None:
    jobs, submit, scripts = _submit_shapes(tmp_path)
    python, duck = both(jobs, [EVENTS], submit, scripts)
    assert python == duck
    assert python["inputs"]["submit_lines"]["bad_lines"] >= 3


def test_duckdb_hands_the_python_reader_only_the_records_that_may_ask_for_nodes(tmp_path: Path) -> None:
    _, submit, _ = _submit_shapes(tmp_path)
    scan = columnar.submit_scan(submit, frozenset({"6"}))
    assert scan is not None
    assert scan.records == 10
    # Not 12 ("--exclusive") nor 13 (no option); 6 by "--wrap" (the superset), 10 for its batch script.
    assert [number for number, _ in scan.lines] == [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    assert scan.per_job == {"1": 2, "2": 2, "5": 1, "404": 1, "6": 1, "7": 1}
    without = columnar.submit_scan(submit, frozenset())
    assert without is not None and [number for number, _ in without.lines] == [2, 3, 4, 5, 6, 7, 8, 9, 11]


def _row(job: str, start: str, end: str, node: str = "n01", state: str = "COMPLETED") -> str:
    return f"{job}|a|p|{state}|0:0|x|{start}|{end}|00:00:00|1|{node}|gres/gpu=8"


def test_the_other_lines_stream_from_duckdb_in_order_while_the_python_reader_reads_them(tmp_path: Path) -> None:
    """DuckDB hands the lines for the Python reader as they are read, not as one list held whole."""
    rows = [_row(str(job), "2024-03-01T01:00:00", "2024-03-01T05:00:00") for job in range(1, 30_001)]
    rows[10] = _row("11", "2024-03-01T01:00:00", "2024-03-01T05:00:00", state="FAILED")
    rows[25_000] = _row("25001", "2024-03-01T01:00:00", "Unknown", state="RUNNING")
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("\n".join([HEADER, *rows]) + "\n")
    table = open_table(file_lines(jobs), "jobs", JOB_COLUMNS, sacct_command(), USER_TEXT)
    with columnar.counting(jobs, table, (None, None), frozenset()) as counted:
        assert counted is not None and counted.records == 29_998
        others = counted.others
        assert not isinstance(others, (list, tuple))
        assert [number for number, _ in others] == [12, 25_002]


def test_a_run_far_from_the_files_first_and_last_lines_is_read_by_the_python_reader(tmp_path: Path) -> None:
    """DuckDB looks up the hours around the file's first and last lines; a run years away is the Python reader's."""
    rows = [_row(str(job), "2024-03-01T01:00:00", "2024-03-01T05:00:00") for job in range(1, 40_001)]
    rows[20_000] = _row("20001", "2019-06-01T01:00:00", "2019-06-01T03:00:00", "n02")
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("\n".join([HEADER, *rows]) + "\n")
    assert jobs.stat().st_size > 3 * 2**20  # more than the two ends DuckDB's hours are taken from
    table = open_table(file_lines(jobs), "jobs", JOB_COLUMNS, sacct_command(), USER_TEXT)
    counted = columnar.count(jobs, table, (None, None), frozenset())
    assert counted is not None and counted.records == 39_999 and [n for n, _ in counted.others] == [20_002]
    python, duck = both(jobs, [EVENTS])
    assert python == duck and python["runs"] == 40_000


def test_the_cycle_collector_is_paused_while_the_analysis_runs_and_restored_after(tmp_path: Path) -> None:
    """Each collection walks the analysis's millions of keys and counters again: paused, then as it was."""
    seen: list[bool] = []

    class Watch:
        def run(self, run: Any, number: int) -> None:
            seen.append(gc.isenabled())

        def event(self, *_: Any) -> None:
            seen.append(gc.isenabled())

        def placed_runs(self, runs: Any) -> None:
            pass

        def count(self, *_: Any) -> None:
            return None

    jobs = tmp_path / "jobs.txt"
    jobs.write_text("\n".join([HEADER, _row("1", "2024-03-01T01:00:00", "2024-03-01T05:00:00")]) + "\n")
    assert gc.isenabled()
    analyze(
        file_lines(jobs), [EVENTS, "c|n02|2024-03-01T04:58:00|Unknown|DRAIN|healthd: XID_79|root(0)"], observer=Watch()
    )
    assert seen == [False, False] and gc.isenabled()
    gc.disable()
    try:
        analyze(file_lines(jobs), [EVENTS])
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_repeated_autumn_hour_reads_the_same_whatever_was_read_before(tmp_path: Path, new_york: None) -> None:
    """glibc's mktime reads 01:30 on the fall-back day by the offset of its call before; both engines read it once."""
    jobs = tmp_path / "jobs.txt"
    rows = [
        _row("1", "2024-11-03T05:00:00", "2024-11-03T06:00:00"),
        _row("2", "2024-11-03T01:30:00", "2024-11-03T02:30:00"),
    ]
    jobs.write_text("\n".join([HEADER, *rows]) + "\n")
    python, duck = both(jobs, [EVENTS])
    assert python == duck
    # 01:30 EDT to 02:30 EST is two hours; 05:00 to 06:00 one.
    assert sum(bucket["job_hours"] for bucket in python["mttf"]) == 3.0


def test_a_run_dated_near_year_9999_is_read_by_the_python_reader(tmp_path: Path) -> None:
    """A date whose margin overflows a date's range does not stop DuckDB counting the other runs."""
    jobs = tmp_path / "jobs.txt"
    rows = [_row("1", "2024-03-01T01:00:00", "2024-03-01T05:00:00"), _row("2", "9999-12-31T01:00:00", "Unknown")]
    jobs.write_text("\n".join([HEADER, *rows]) + "\n")
    table = open_table(file_lines(jobs), "jobs", JOB_COLUMNS, sacct_command(), USER_TEXT)
    counted = columnar.count(jobs, table, (None, None), frozenset())
    assert counted is not None and counted.records == 1 and [n for n, _ in counted.others] == [3]
    python, duck = both(jobs, [EVENTS])
    assert python == duck


def test_a_duckdb_error_while_the_lines_stream_is_the_reports_error(tmp_path: Path) -> None:
    """An error of DuckDB's after the count (a full spill disk; here the file gone) names the way around it."""
    jobs = tmp_path / "jobs.txt"
    rows = [_row("1", "2024-03-01T01:00:00", "2024-03-01T05:00:00"), _row("2", "2024-03-01T01:00:00", "Unknown")]
    jobs.write_text("\n".join([HEADER, *rows]) + "\n")
    table = open_table(file_lines(jobs), "jobs", JOB_COLUMNS, sacct_command(), USER_TEXT)
    with columnar.counting(jobs, table, (None, None), frozenset()) as counted:
        assert counted is not None and counted.records == 1
        jobs.unlink()
        with pytest.raises(FleetInputError, match="--engine python"):
            list(counted.others)
