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
        "job record 3: NodeList holds a vertical bar or a control character, which no Slurm-written field has",
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


BUILT_24_11 = ACCOUNTING / "sacct-json-24.11-built.json"  # shaped as 24.11 prints, not captured (README)


def test_24_11_wrapped_numbers_give_the_job_ids_sacct_p_prints() -> None:
    """24.11 wraps array.task_id and het.job_offset as {set, infinite, number}: task 1 of array 8 is 8_1, not 11."""
    header, *rows = sacct_json.read(BUILT_24_11.read_text(), "sacct --json").lines
    assert header.startswith("JobID|")
    assert [row.split("|")[0] for row in rows] == ["8_1", "8_2", "13+0", "13+1", "15"]
    assert [row.split("|")[3] for row in rows] == ["FAILED", "FAILED", "COMPLETED", "COMPLETED", "FAILED"]


def test_an_array_tasks_pin_is_matched_by_its_job_id_in_24_11_json() -> None:
    """The submit-line signal joins on JobID: with the raw ids (11, 12) the pinned tasks' records matched no run."""
    found = sacct_json.read(BUILT_24_11.read_text(), "sacct --json")
    submit = ["JobID|SubmitLine", *(f"8_{task}|sbatch --array=1-2 -w node2 train.sh" for task in (1, 2))]
    report = analyze(found.lines, EVENTS.read_text().splitlines(), submit_lines=lambda: iter(submit))
    assert report.jobs.bad == 0 and report.runs == 5
    assert report.submit_lines is not None and report.submit_lines.bad == 0
    node2 = next(v.signals for v in report.verdicts if v.node == "node2")
    assert (node2.pinned_runs, node2.pinned_failures) == (2, 2)


@pytest.mark.parametrize(
    ("value", "number"),
    [
        (7, 7),
        ({"set": True, "infinite": False, "number": 7}, 7),
        ({"set": False, "infinite": False, "number": 0}, None),  # NO_VAL: absent
        ({"set": True, "infinite": True, "number": 0}, float("inf")),  # INFINITE: no limit
        (None, None),
    ],
)
def test_a_number_is_read_plain_or_wrapped(value: Any, number: Any) -> None:
    assert sacct_json.number(value) == number


@pytest.mark.parametrize("value", [True, "7", 7.5, {"set": True, "infinite": False, "number": "7"}])
def test_what_is_no_number_is_refused(value: Any) -> None:
    with pytest.raises(ValueError):
        sacct_json.number(value)


def test_an_infinite_or_negative_count_is_a_bad_record() -> None:
    document = json.loads(BUILT_24_11.read_text())
    document["jobs"][0]["array"]["task_id"] = {"set": True, "infinite": True, "number": 0}
    document["jobs"][1]["time"]["end"] = -5
    report = report_of(document)
    assert report.jobs.bad == 2
    assert [why for _, why in report.jobs.first_bad] == [
        "job record 1: array.task_id inf is not a count",
        "job record 2: time '-5' is not epoch seconds",
    ]


@pytest.mark.parametrize("release", ["24.11", "26.05"])
def test_real_captures_of_newer_releases_read_every_array_task(release: str) -> None:
    """Captured from the release's own cluster (fixtures/slurm/README.md): every record reads, each task by its id.

    Their TRES lists hold ``energy`` with count -2, slurmdb's NO_CONSUME_VAL64 printed as a signed
    number: a sentinel, not a bad record.
    """
    text = (ACCOUNTING / f"sacct-json-{release}-array-take-out.json").read_text()
    rows = sacct_json.read(text, "capture").lines[1:]
    assert rows and not [row for row in rows if "@!" in row], rows
    ids = sorted(row.split("|", 1)[0] for row in rows)
    array = ids[0].split("_")[0]
    assert ids == [f"{array}_0", f"{array}_1"]
