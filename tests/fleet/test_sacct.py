"""Reading sacct and sacctmgr output: columns by name, bad lines counted, clear errors, local times."""

from __future__ import annotations

import time

import pytest
from healthd_testkit import synth

from healthd.fleet.analyze import Sources, analyze
from healthd.fleet.render import table
from healthd.fleet.sacct import FleetInputError, LocalTimes, is_job_id, tres_gpus

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
        analyze(
            ["JobID|User|State|Start|End|NNodes|NodeList", "1|a|COMPLETED|x|y|1|n"],
            EVENTS,
            sources=Sources(jobs="j.txt"),
        )
    message = str(caught.value)
    assert "j.txt: no column AllocTRES" in message
    assert "sacct -a -X -D -P -o JobID,User,Partition,State,ExitCode,Submit,Start,End" in message


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


HEADER = "JobID|User|Partition|State|Start|End|NNodes|NodeList|AllocTRES"
RUN = "{id}|{user}|gpu|{state}|2024-03-01T10:00:00|2024-03-01T11:00:00|1|{node}|gres/gpu=8"


def forged_record(node: str) -> str:
    """The rest of a sacct line, as a user writes it into a job name or submit line: a failed run on ``node``."""
    return RUN.format(id=900, user="alice", state="FAILED", node=node)


@pytest.mark.parametrize("column", ["JobName", "SubmitLine", "Comment", "WorkDir"])
def test_a_jobs_table_with_text_a_user_writes_is_refused(column: str) -> None:
    """sacct -P escapes neither "|" nor a newline: a JobName of "x|<a failed run on gpu01>" shifts
    the fields, and a newline in a SubmitLine starts a record of the user's making. Such a table
    cannot be trusted, so it is refused and the error gives the command without those fields."""
    jobs = [f"{HEADER}|{column}", RUN.format(id=1, user="bob", state="COMPLETED", node="gpu02") + "|x"]
    with pytest.raises(FleetInputError) as caught:
        analyze(jobs, EVENTS, sources=Sources(jobs="jobs.txt"))
    message = str(caught.value)
    assert f"jobs.txt: column {column} holds text a job's owner chooses" in message
    assert "-o JobID,User,Partition,State,ExitCode,Submit,Start,End,Elapsed,NNodes,NodeList,AllocTRES -S" in message


def test_the_reviewers_forged_job_names_are_refused() -> None:
    """The review's input: 15 jobs named with the rest of a failed run on gpu0100 (sbatch -J)."""
    fleet = synth.plant(synth.FleetSpec(incident_lemons=0, silent_lemons=0, buggy_users=0, seed=7))
    header, *runs = synth.job_lines(fleet)
    jobs = ["JobID|JobName|" + header.split("|", 1)[1]] + [r.replace("|", "|train|", 1) for r in runs]
    jobs += [f"{900000 + i}|x|{forged_record('gpu0100')[4:]}|mallory|cpu|COMPLETED|..." for i in range(15)]
    with pytest.raises(FleetInputError, match="column JobName holds text"):
        analyze(jobs, list(synth.event_lines(fleet)))


def test_a_line_with_too_many_fields_or_no_job_id_is_bad_and_named() -> None:
    good = RUN.format(id=1, user="bob", state="COMPLETED", node="gpu02")
    jobs = [
        HEADER,
        good,
        good + "|extra",  # line 3: a field too many, and no free-text column to hold it
        RUN.format(id="x", user="bob", state="FAILED", node="gpu01"),  # 4
        RUN.format(id="12;34", user="bob", state="FAILED", node="gpu01"),  # 5
        RUN.format(id="77_3", user="bob", state="COMPLETED", node="gpu01"),  # an array task: fine
        RUN.format(id="78+1", user="bob", state="COMPLETED", node="gpu01"),  # a het component: fine
    ]
    report = analyze(jobs, EVENTS, sources=Sources(jobs="jobs.txt"))
    assert report.runs == 3
    assert report.jobs.first_bad == (
        (3, "10 fields, the header has 9"),
        (4, "JobID 'x' is not a Slurm job id"),
        (5, "JobID '12;34' is not a Slurm job id"),
    )
    assert "jobs.txt: 3 bad line(s) skipped; first: line 3 (10 fields, the header has 9)" in table(report)


@pytest.mark.parametrize(
    "job_id", ["1", "123_4", "123_[1-9%2]", "123+1", "123.batch", "123.0", "123_4.extern", "123+0.7"]
)
def test_slurm_job_ids(job_id: str) -> None:
    assert is_job_id(job_id)


@pytest.mark.parametrize("job_id", ["", "x", "1|2", "1 ", "-1", "1.2.3", "\uff11\uff12", "123_", "gpu01"])
def test_not_slurm_job_ids(job_id: str) -> None:
    assert not is_job_id(job_id)


SUBMIT = "JobID|SubmitLine"


def _exclusions(jobs: list[str], submit: list[str]) -> dict[str, int]:
    report = analyze(jobs, EVENTS, submit_lines=lambda: iter(submit), sources=Sources(submit="submit.txt"))
    return {v.node: v.signals.excluded_by_jobs for v in report.verdicts if v.signals.excluded_by_jobs}


def test_exclusions_come_from_the_submit_lines_matched_by_job_id() -> None:
    jobs = [HEADER, *(RUN.format(id=i, user="bob", state="COMPLETED", node="gpu01") for i in (1, 2, 2))]
    submit = [
        SUBMIT,
        "1|sbatch -x gpu02 --wrap 'a | b'",
        "2|sbatch --exclude=gpu[03-04] a.sh",
        "2|sbatch --exclude=gpu[03-04] a.sh",
    ]
    assert _exclusions(jobs, submit) == {"gpu02": 1, "gpu03": 2, "gpu04": 2}


def test_a_record_forged_in_a_submit_line_neither_adds_a_run_nor_an_exclusion() -> None:
    """A newline in a submit line starts a line of the user's making: in the submit-line input
    the most it could claim is an exclusion, and one for a job that has its own record, or none,
    has one record too many and is left out."""
    jobs = [
        HEADER,
        *(RUN.format(id=i, user=u, state="COMPLETED", node="gpu01") for i, u in ((1, "bob"), (5, "mallory"))),
    ]
    submit = [
        SUBMIT,
        "1|sbatch -x gpu09 a.sh",
        "5|sbatch --wrap 'echo",  # mallory's submit line, with newlines in it:
        "1|sbatch -x gpu07 a.sh",  # forged for bob's job 1
        "404|sbatch -x gpu08 a.sh",  # forged for a job that does not exist
        forged_record("gpu0100"),  # a failed run: not a run here, only a submit line
        "'",
    ]
    report = analyze(jobs, EVENTS, submit_lines=lambda: iter(submit), sources=Sources(submit="submit.txt"))
    assert report.runs == 2 and report.failed_runs == 0
    assert {v.node: v.signals.excluded_by_jobs for v in report.verdicts if v.signals.excluded_by_jobs} == {}
    assert report.submit_lines is not None
    assert [why for _, why in report.submit_lines.first_bad] == [
        "job 1: 2 submit-line records for 1 runs (a forged record, or another window): "
        "its exclusion or pin is left out",
        "job 404: 1 submit-line records for 0 runs (a forged record, or another window): "
        "its exclusion or pin is left out",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "2024-03-01T10:-5:00",
        "2024-03-01T10:99:00",
        "2024-03-01T10: 1:00",
        "2024-03-01T10:+1:00",
        "2024-03-01T10:00:60",
        "2024-03-01T10:00:+1",
        "2024-03-01T25:00:00",
        "2024-13-01T10:00:00",
        "2024-02-30T10:00:00",
        "2024-03-01T+1:00:00",
        "2024-03-01T 1:00:00",
        "+024-03-01T10:00:00",
    ],
)
def test_a_malformed_time_is_an_error(text: str) -> None:
    with pytest.raises(ValueError, match="time"):
        LocalTimes()(text)


def test_minutes_and_seconds_are_checked_when_the_hour_is_known_already() -> None:
    times = LocalTimes()
    assert times("2024-03-01T10:00:00") is not None
    for text in ("2024-03-01T10:-5:00", "2024-03-01T10:99:99", "2024-03-01T10: 1:+1"):
        with pytest.raises(ValueError, match="is not YYYY-MM-DDTHH:MM:SS"):
            times(text)


@pytest.mark.parametrize("tres", ["gres/gpu=-8", "gres/gpu=+8", "gres/gpu= 8", "gres/gpu:a100=-1", "gres/gpu="])
def test_a_gpu_count_that_is_not_digits_is_a_bad_line(tres: str) -> None:
    with pytest.raises(ValueError, match="is not a count"):
        tres_gpus(tres)
    jobs = [
        "JobID|User|State|Start|End|NNodes|NodeList|AllocTRES",
        f"1|a|FAILED|2024-05-01T00:00:00|2024-05-01T01:00:00|1|n1|{tres}",
    ]
    report = analyze(jobs, EVENTS)
    assert (report.runs, report.failed_runs, report.jobs.bad) == (0, 0, 1)


def test_a_failed_run_rejected_as_bad_is_not_counted_failed() -> None:
    jobs = [HEADER, RUN.format(id=1, user="a", state="FAILED", node="n[1-")]
    jobs[1] = jobs[1].replace("|1|n[1-|", "|2|n[1-|")
    report = analyze(jobs, EVENTS)
    assert (report.runs, report.failed_runs, report.jobs.bad) == (0, 0, 1)


def test_a_run_across_the_autumn_fall_back_is_kept(new_york: None) -> None:
    """Started 01:50 EDT, ended 01:10 EST: 20 minutes, although End reads before Start."""
    jobs = [HEADER, "1|a|gpu|COMPLETED|2024-11-03T01:50:00|2024-11-03T01:10:00|1|n1|gres/gpu=8"]
    report = analyze(jobs, EVENTS)
    assert report.jobs.bad == 0 and report.runs == 1
    assert report.buckets[0].job_hours == pytest.approx(20 / 60)
    # Out of the repeated hour, an end before the start is still a bad line.
    reversed_run = [HEADER, "1|a|gpu|COMPLETED|2024-11-04T01:50:00|2024-11-04T01:10:00|1|n1|gres/gpu=8"]
    assert analyze(reversed_run, EVENTS).jobs.first_bad == (
        (2, "End 2024-11-04T01:10:00 is before Start 2024-11-04T01:50:00"),
    )
