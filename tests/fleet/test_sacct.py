"""Reading sacct and sacctmgr output: columns by name, bad lines counted, clear errors, local times."""

from __future__ import annotations

import time

import pytest

from healthd.fleet.analyze import analyze
from healthd.fleet.sacct import FleetInputError, LocalTimes, tres_gpus

EVENTS = ["Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User"]


def test_columns_are_found_by_name_in_any_order_and_extra_ones_ignored() -> None:
    jobs = [
        "Extra|End|NodeList|State|JobID|User|NNodes|AllocTRES|Start|Future",
        "x|2024-03-01T11:00:00|gpu01|COMPLETED|7|alice|1|cpu=1,gres/gpu=8,node=1|2024-03-01T10:00:00|y",
    ]
    report = analyze(jobs, EVENTS)
    assert report.runs == 1
    assert [(b.gpus, b.runs, b.job_hours) for b in report.buckets] == [(8, 1, 1.0)]


def test_a_missing_column_names_it_and_gives_the_sacct_command() -> None:
    with pytest.raises(FleetInputError) as caught:
        analyze(["JobID|User|State|Start|End|NNodes|NodeList", "1|a|COMPLETED|x|y|1|n"], EVENTS, jobs_source="j.txt")
    message = str(caught.value)
    assert "j.txt: no column AllocTRES" in message
    assert "sacct -a -X -D -P -o JobID,JobName,User,Partition,State,ExitCode,Submit,Start,End" in message


def test_a_missing_event_column_gives_the_sacctmgr_command() -> None:
    with pytest.raises(FleetInputError, match=r"no column Reason .*\n  sacctmgr -P show event"):
        analyze(["JobID|User|State|Start|End|NNodes|NodeList|AllocTRES"], ["Cluster|NodeName|TimeStart|TimeEnd"])


@pytest.mark.parametrize("text", ["", "\n\n"])
def test_an_empty_input_is_a_clear_message(text: str) -> None:
    with pytest.raises(FleetInputError, match=r"jobs is empty: expected the parsable output"):
        analyze(text.splitlines(), EVENTS)


def test_bad_lines_are_counted_with_the_first_line_numbers_and_the_rest_is_read() -> None:
    header = "JobID|User|State|Start|End|NNodes|NodeList|AllocTRES"
    good = "1|a|COMPLETED|2024-03-01T10:00:00|2024-03-01T11:00:00|1|n1|gres/gpu=8"
    bad = [
        "2|a|COMPLETED|yesterday|2024-03-01T11:00:00|1|n1|gres/gpu=8",  # line 3
        "3|a|COMPLETED",  # 4
        "4|a|COMPLETED|2024-03-01T10:00:00|2024-03-01T11:00:00|two|n1|gres/gpu=8",  # 5
        "5|a|FAILED|2024-03-01T10:00:00|2024-03-01T11:00:00|2|n[1-|gres/gpu=16",  # 6
        "6|a|COMPLETED|2024-03-01T12:00:00|2024-03-01T11:00:00|1|n1|gres/gpu=8",  # 7: ends before it starts
        "7|a|COMPLETED|2024-03-01T10:00:00|2024-03-01T11:00:00|1|n1|gres/gpu=x",  # 8
    ]
    pending = "8|a|PENDING|Unknown|Unknown|1|None assigned|"
    report = analyze([header, good, *bad, good, pending], EVENTS)
    assert report.runs == 2
    assert report.jobs.bad == 6
    assert [n for n, _ in report.jobs.first_bad] == [3, 4, 5, 6, 7]
    assert "yesterday" in report.jobs.first_bad[0][1]
    assert report.jobs.skipped == 1


def test_a_pipe_inside_the_submit_line_stays_in_it() -> None:
    header = "JobID|User|State|Start|End|NNodes|NodeList|AllocTRES|SubmitLine"
    line = "1|a|COMPLETED|2024-03-01T10:00:00|2024-03-01T11:00:00|1|n1|gres/gpu=8|sbatch -x n2 --wrap 'a | b'"
    report = analyze([header, line], EVENTS)
    assert report.jobs.bad == 0
    assert {v.node: v.signals.excluded_by_jobs for v in report.verdicts}["n2"] == 1


def test_times_are_local_per_tz(monkeypatch: pytest.MonkeyPatch) -> None:
    for zone, expected in (("UTC", 1709287200.0), ("America/New_York", 1709287200.0 + 5 * 3600)):
        monkeypatch.setenv("TZ", zone)
        time.tzset()
        assert LocalTimes()("2024-03-01T10:00:00") == expected
    monkeypatch.undo()
    time.tzset()


def test_a_daylight_saving_day_reads_each_hour_in_its_own_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        times = LocalTimes()
        # 2024-03-31: clocks go from 02:00 CET to 03:00 CEST; 01:59:59 and 03:00:00 are one second apart.
        assert times("2024-03-31T03:00:00") - times("2024-03-31T01:59:59") == 1  # type: ignore[operator]
    finally:
        monkeypatch.undo()
        time.tzset()


def test_gpu_counts_from_alloc_tres() -> None:
    assert tres_gpus("billing=8,cpu=96,gres/gpu=8,mem=1T,node=1") == 8
    assert tres_gpus("cpu=4,gres/gpu:a100=2,gres/gpu=2") == 2
    assert tres_gpus("cpu=4,gres/gpu:a100=2,gres/gpu:h100=4") == 6
    assert tres_gpus("cpu=4,mem=1G") == 0
    with pytest.raises(ValueError):
        tres_gpus("gres/gpu=many")
