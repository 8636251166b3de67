"""``sacct --json`` read as the ``-P`` table: the same runs, times and requeues, and the job names kept apart.

The fixtures are one capture of the test cluster (Slurm 22.05.8, openapi/dbv0.0.38) in both
forms (``tests/fleet/test_live_cluster.py`` with ``HEALTHD_UPDATE_ACCOUNTING=1``). Newer Slurm
(data_parser v0.0.40, 23.11) prints ``state.current`` as a list of words; that form is made
here from the 22.05 capture by that one change.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.paths import FIXTURES

from healthd.fleet import sacct_json
from healthd.fleet.analyze import FleetReport, analyze

ACCOUNTING = FIXTURES / "slurm" / "accounting"
JSON_JOBS = ACCOUNTING / "sacct-json-22.05-take-out.json"
PARSABLE_JOBS = ACCOUNTING / "sacct-22.05-take-out.txt"
EVENTS = ACCOUNTING / "sacctmgr-events-22.05-take-out.txt"
Cli = Callable[..., tuple[int, str, str]]


def report_of(document: dict[str, Any]) -> FleetReport:
    found = sacct_json.read(json.dumps(document), "sacct --json")
    return analyze(found.lines, EVENTS.read_text().splitlines(), job_names=found.names)


def outcome(report: FleetReport) -> tuple[object, ...]:
    attributed = tuple((a.job_id, a.node, a.cause, a.state, a.end) for a in report.attributed)
    return report.runs, report.failed_runs, report.start, report.end, attributed, report.jobs.bad


def test_json_and_parsable_captures_of_one_window_give_the_same_report() -> None:
    from_json = report_of(json.loads(JSON_JOBS.read_text()))
    from_p = analyze(PARSABLE_JOBS.read_text().splitlines(), EVENTS.read_text().splitlines())
    assert outcome(from_json) == outcome(from_p)
    assert from_json.runs == 4 and [a.cause for a in from_json.attributed] == ["MOUNT_MISSING"]


def test_the_newer_list_form_of_the_state_reads_the_same() -> None:
    document = json.loads(JSON_JOBS.read_text())
    for job in document["jobs"]:
        job["state"]["current"] = [job["state"]["current"]]
    assert outcome(report_of(document)) == outcome(report_of(json.loads(JSON_JOBS.read_text())))


def test_job_names_are_kept_whole_and_apart_from_the_rows() -> None:
    document = json.loads(JSON_JOBS.read_text())
    found = sacct_json.read(json.dumps(document), "sacct --json")
    names = {str(job["job_id"]): job["name"] for job in document["jobs"]}
    hostile = next(name for name in names.values() if "|" in name)
    assert "\n" in hostile and found.names == names
    assert all(hostile not in line for line in found.lines)


def test_a_record_that_cannot_be_read_is_a_bad_line_naming_it() -> None:
    document = json.loads(JSON_JOBS.read_text())
    del document["jobs"][1]["time"]
    document["jobs"][2]["nodes"] = "node2|node3"
    document["jobs"][3]["user"] = None  # 22.05, for a user without an association
    report = report_of(document)
    assert report.jobs.bad == 3 and report.runs == 1
    whys = [why for _, why in report.jobs.first_bad]
    assert whys == [
        "job record 2: no key 'time'",
        "job record 3: NodeList holds a vertical bar or a newline, which no Slurm-written field has",
        "job record 4: no user (a user without an association in 22.05's JSON): read with sacct -P",
    ]


def test_a_document_without_jobs_is_refused(tmp_path: Path, cli: Cli) -> None:
    jobs = tmp_path / "jobs.json"
    jobs.write_text('{"meta": {}, "errors": []}')
    code, _, err = cli("fleet", "report", "--jobs", str(jobs), "--events", str(EVENTS))
    assert code == 65 and "no list 'jobs'" in err and str(jobs) in err


@pytest.mark.parametrize("jobs", [JSON_JOBS, PARSABLE_JOBS])
def test_the_report_reads_either_form_and_names_jobs_from_json(jobs: Path, cli: Cli) -> None:
    code, out, err = cli("fleet", "report", "--jobs", str(jobs), "--events", str(EVENTS), "--json")
    assert (code, err) == (0, "")
    attributed = json.loads(out)["attributed_failures"]
    assert [a["job_id"] for a in attributed] == ["1"]
    if jobs == JSON_JOBS:
        assert attributed[0]["job_name"].startswith("train|alice|")
    else:
        assert "job_name" not in attributed[0]
