"""``healthd fleet report`` and ``healthd fleet lemons`` through the real CLI, offline."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional

import pytest
from healthd_testkit import synth
from healthd_testkit.paths import REPO
from healthd_testkit.spooled import spool_of

from healthd.fleet.live import Accounting
from healthd.fleet.schema import FleetReportOut, json_schema

Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture(scope="module")
def fleet_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[synth.Fleet, Path, Path]:
    directory = tmp_path_factory.mktemp("fleet")
    fleet = synth.plant(synth.FleetSpec(days=60, runs=40_000, seed=11))
    jobs, events = directory / "jobs.txt", directory / "events.txt"
    jobs.write_text("\n".join(synth.job_lines(fleet)) + "\n")
    events.write_text("\n".join(synth.event_lines(fleet)) + "\n")
    return fleet, jobs, events


def test_the_table_shows_mttf_projection_causes_and_lemons(
    cli: Cli, fleet_files: tuple[synth.Fleet, Path, Path]
) -> None:
    fleet, jobs, events = fleet_files
    code, out, err = cli("fleet", "report", "--jobs", str(jobs), "--events", str(events))
    assert (code, err) == (0, "")
    assert "healthd fleet report: 40000 job runs" in out
    assert "   100000 GPUs: MTTF" in out
    assert "XID_79" in out
    for node in fleet.incident_lemons + fleet.silent_lemons:
        assert f"\n{node} " in out


def test_json_follows_the_documented_schema(cli: Cli, fleet_files: tuple[synth.Fleet, Path, Path]) -> None:
    fleet, jobs, events = fleet_files
    code, out, _ = cli(
        "fleet", "report", "--jobs", str(jobs), "--events", str(events), "--json",
        "--checkpoint-interval", "20m", "--restart-overhead", "5m",
    )  # fmt: skip
    assert code == 0
    document = json.loads(out)
    FleetReportOut.model_validate(document)
    assert document["settings"]["checkpoint_interval_seconds"] == 1200
    assert {"job_id", "node", "cause", "state", "gpus", "end"} == set(document["attributed_failures"][0])
    assert {"gpus", "runs", "job_hours", "failures", "mttf_hours"} == set(document["mttf"][0])
    lemons = [entry["node"] for entry in document["lemon_nodes"]]
    assert set(fleet.incident_lemons) | set(fleet.silent_lemons) <= set(lemons)
    scores = [entry["score"] for entry in document["lemon_nodes"]]
    assert scores == sorted(scores, reverse=True)


def test_the_schema_file_is_up_to_date() -> None:
    assert (REPO / "docs/fleet-report.schema.json").read_text() == json_schema()


def test_lemons_lists_the_flagged_nodes(cli: Cli, fleet_files: tuple[synth.Fleet, Path, Path]) -> None:
    fleet, jobs, events = fleet_files
    code, out, _ = cli("fleet", "lemons", "--jobs", str(jobs), "--events", str(events))
    assert code == 0
    listed = {line.split()[0] for line in out.splitlines()}
    assert set(fleet.incident_lemons) | set(fleet.silent_lemons) <= listed


def test_inputs_that_cannot_be_analysed_exit_with_clear_messages(cli: Cli, tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    events = tmp_path / "events.txt"
    events.write_text("Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User\n")
    code, _, err = cli("fleet", "report", "--jobs", str(empty), "--events", str(events))
    assert code == 65 and f"{empty} is empty" in err and "sacct -a -X -D -P" in err
    nocol = tmp_path / "nocol.txt"
    nocol.write_text("JobID|State\n1|FAILED\n")
    code, _, err = cli("fleet", "report", "--jobs", str(nocol), "--events", str(events))
    assert code == 65 and "no column User, Start, End, NNodes, NodeList, AllocTRES" in err
    code, _, err = cli("fleet", "report", "--jobs", str(tmp_path / "absent"), "--events", str(events))
    assert code == 66 and "absent" in err
    assert cli("fleet", "report", "--jobs", str(empty))[0] == 64
    assert cli("fleet", "report", "--live", "--jobs", str(empty), "--events", str(events))[0] == 64
    assert cli("fleet", "report", "--jobs", str(empty), "--events", str(events), "--window-before", "soon")[0] == 64
    assert cli("fleet", "lemons", "--apply", "--jobs", str(empty), "--events", str(events))[0] == 64
    code, _, err = cli("fleet", "report", "--jobs", str(empty), "--events", str(events), "--min-nodes", "0")
    assert code == 64 and "--min-nodes 0: must be between 1 and 1000000" in err
    code, _, err = cli("fleet", "report", "--jobs", str(empty), "--events", str(events), "--min-days", "-1")
    assert code == 64 and "--min-days -1: must be between 0 and 1000000" in err


def test_header_only_inputs_say_there_is_nothing_to_analyse(cli: Cli, tmp_path: Path) -> None:
    jobs, events = tmp_path / "jobs.txt", tmp_path / "events.txt"
    jobs.write_text("JobID|User|State|Start|End|NNodes|NodeList|AllocTRES\n")
    events.write_text("Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User\n")
    code, out, _ = cli("fleet", "report", "--jobs", str(jobs), "--events", str(events))
    assert code == 0 and "no data: no finished job runs in the input" in out
    assert "None" not in out and "\n  window " not in out  # not "window None .. None (0.0 days)"
    window = ("--since", "2024-01-01", "--until", "2024-02-01")
    code, out, _ = cli("fleet", "report", "--jobs", str(jobs), "--events", str(events), *window)
    assert code == 0 and "(31.0 days)" in out and "no data: no finished job runs in this window" in out


def test_the_lemon_table_shows_what_the_test_weighed_and_explains_its_columns(
    cli: Cli, fleet_files: tuple[synth.Fleet, Path, Path]
) -> None:
    """A silent lemon has no incident and no failure attributed to it: its row shows the failures beyond expected."""
    fleet, jobs, events = fleet_files
    code, out, _ = cli("fleet", "report", "--jobs", str(jobs), "--events", str(events))
    assert code == 0
    document = json.loads(cli("fleet", "report", "--jobs", str(jobs), "--events", str(events), "--json")[1])
    lines = out.splitlines()
    header = next(line.split() for line in lines if line.startswith("node "))
    assert header == ["node", "score", "outs", "runs", "failed", "expected", "beyond", "caused", "excl", "xids"]
    rows = {
        line.split()[0]: dict(zip(header, line.split()))
        for line in lines
        if line.split()[:1] in ([n] for n in fleet.silent_lemons)
    }
    for entry in document["lemon_nodes"]:
        if entry["node"] in fleet.silent_lemons:
            signals = entry["signals"]
            beyond = signals["single_node_failures"] - signals["expected_single_node_failures"]
            row = rows[entry["node"]]
            assert abs(float(row["beyond"]) - beyond) <= 0.051 and beyond > 10
            assert row["caused"] == f"{signals['single_node_failures_caused']}+{signals['multi_node_failures_caused']}"
    for column in ("score", "outs", "excl", "beyond"):
        assert any(line.startswith(f"  {column} ") and len(line.split()) > 4 for line in lines), column


def test_bad_lines_are_reported_in_the_table(cli: Cli, tmp_path: Path) -> None:
    jobs, events = tmp_path / "jobs.txt", tmp_path / "events.txt"
    good = "1|a|COMPLETED|2024-03-01T10:00:00|2024-03-01T11:00:00|1|n1|gres/gpu=8"
    jobs.write_text("JobID|User|State|Start|End|NNodes|NodeList|AllocTRES\n" + good + "\nbroken\n" + good + "\n")
    events.write_text("Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User\n")
    code, out, _ = cli("fleet", "report", "--jobs", str(jobs), "--events", str(events))
    assert code == 0
    assert f"{jobs}: 1 bad line(s) skipped; first: line 3 (1 fields, the header has 8)" in out


def test_a_window_that_ends_before_it_starts_is_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    jobs, events = tmp_path / "jobs.txt", tmp_path / "events.txt"
    jobs.write_text("JobID|User|State|Start|End|NNodes|NodeList|AllocTRES\n")
    events.write_text("Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User\n")
    files = ("--jobs", str(jobs), "--events", str(events))
    code, out, err = cli("fleet", "report", *files, "--since", "2024-06-01", "--until", "2024-05-01", "--json")
    assert (code, out) == (64, "")
    assert "--since 2024-06-01 is not before --until 2024-05-01: the window is empty" in err
    assert cli("fleet", "report", *files, "--since", "2024-05-01", "--until", "2024-05-01")[0] == 64
    code, _, err = cli("fleet", "report", *files, "--since", "999999999w")
    assert code == 64 and "--since '999999999w': out of range (1970 to 9999)" in err
    code, _, err = cli("fleet", "report", *files, "--until", "999999999w")
    assert code == 64 and "--until '999999999w': out of range" in err
    assert cli("fleet", "report", *files, "--since", "2024-05-01", "--until", "2024-06-01")[0] == 0


def test_submit_lines_give_the_exclusion_signal(cli: Cli, tmp_path: Path) -> None:
    jobs, events, submit = tmp_path / "jobs.txt", tmp_path / "events.txt", tmp_path / "submit.txt"
    jobs.write_text(
        "JobID|User|State|Start|End|NNodes|NodeList|AllocTRES\n"
        "1|a|COMPLETED|2024-03-01T10:00:00|2024-03-01T11:00:00|1|n1|gres/gpu=8\n"
    )
    events.write_text("Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User\n")
    submit.write_text("JobID|SubmitLine\n1|sbatch -x n7 a.sh\n")
    files = ("--jobs", str(jobs), "--events", str(events))
    code, out, err = cli("fleet", "report", *files, "--submit-lines", str(submit), "--json", "--alpha", "0.999")
    assert code == 0, err
    document = json.loads(out)
    FleetReportOut.model_validate(document)
    assert document["inputs"]["submit_lines"]["records"] == 1
    code, out, err = cli("fleet", "report", *files, "--json")
    assert code == 0 and json.loads(out)["inputs"]["submit_lines"] is None
    code, _, err = cli("fleet", "report", *files, "--submit-lines", "-")
    assert code == 64 and "--submit-lines is read twice" in err
    old = tmp_path / "old.txt"
    old.write_text("JobID|JobName|User|State|Start|End|NNodes|NodeList|AllocTRES\n")
    code, _, err = cli("fleet", "report", "--jobs", str(old), "--events", str(events))
    assert code == 65 and "column JobName holds text a job's owner chooses" in err


def test_check_once_imports_nothing_of_the_fleet(write_config: Callable[..., Path]) -> None:
    config = write_config("[checks.mounts]\nexpect = []\n")
    probe = (
        "import sys\nfrom healthd.cli.main import main\n"
        f"main(['check', '--once', '--config', {str(config)!r}, '--only', 'mounts'])\n"
        "loaded = [m for m in sys.modules if m.startswith(('healthd.fleet', 'hostlist'))]\n"
        "print('LOADED', loaded, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert "LOADED []" in proc.stderr, proc.stderr


def test_live_hands_the_collected_texts_to_the_same_analysis(
    cli: Cli, write_config: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--live`` calls ``healthd.fleet.live.collect`` (tested against slurmdbd on its own); here a stand-in."""
    import datetime as dt

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls: list[tuple[Path, dt.datetime, dt.datetime, float]] = []

    def collect(
        bin_dir: Path, since: dt.datetime, until: dt.datetime, timeout: float, conf: Optional[Path]
    ) -> Accounting:
        calls.append((bin_dir, since, until, timeout))
        jobs = "JobID|User|State|Start|End|NNodes|NodeList|AllocTRES\n"
        start, end = f"{until - dt.timedelta(hours=1):%Y-%m-%dT%H:%M:%S}", f"{until:%Y-%m-%dT%H:%M:%S}"
        jobs += f"1|a|NODE_FAIL|{start}|{end}|1|node1|gres/gpu=8\n"
        events = "Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User\n"
        events += f"c|node1|{until:%Y-%m-%dT%H:%M:%S}|Unknown|DRAIN|healthd: XID_79 gpu0|root(0)\n"
        return Accounting(jobs, events, "JobID|SubmitLine\n1|sbatch -x node2 a.sh\n")

    import healthd.fleet.live

    monkeypatch.setattr(healthd.fleet.live, "spool", spool_of(collect))
    asked: list[list[str]] = []
    monkeypatch.setattr(healthd.fleet.live, "batch_scripts", lambda _, jobs, *__, **___: asked.append(jobs) or "")
    config = write_config(f'[slurm]\nbin_dir = "{bin_dir}"\n')
    code, out, err = cli(
        "fleet", "report", "--live", "--since", "2d", "--until", "1h", "--json", "--config", str(config)
    )
    assert code == 0, err
    ((where, since, until, timeout),) = calls
    assert where == bin_dir and timeout == 300
    assert dt.timedelta(hours=46, minutes=59) < until - since < dt.timedelta(hours=47, minutes=1)
    document = json.loads(out)
    attributed = document["attributed_failures"]
    assert [(a["node"], a["cause"], a["state"]) for a in attributed] == [("node1", "XID_79", "NODE_FAIL")]
    assert document["inputs"]["submit_lines"]["records"] == 1, "the submit lines collected are read too"
    assert asked == [["1"]], "the batch job's script is asked for"


# Every byte a user may put in the text of a submit line that is not the record separator itself.
HOSTILE = [bytes([b]) for b in [*range(0x01, 0x0A), *range(0x0B, 0x20), 0x7F]] + [b"\xff", b"\xc3", b"\xed\xa0\x80"]


@pytest.mark.parametrize("byte", HOSTILE, ids=lambda b: b.hex())
def test_a_hostile_byte_in_a_users_submit_line_forges_no_record(cli: Cli, tmp_path: Path, byte: bytes) -> None:
    """A submit line is its user's text: any byte but a newline in it stays inside its own record.

    The forgery: job 1's line ends ``<byte>2|sbatch -w n1 x.sh``, which read as a record of its
    own would pin job 2 (not this user's) to n1.
    """
    jobs, events = tmp_path / "jobs.txt", tmp_path / "events.txt"
    jobs.write_text(
        "JobID|User|State|Start|End|NNodes|NodeList|AllocTRES\n"
        "1|a|COMPLETED|2024-03-01T10:00:00|2024-03-01T11:00:00|1|n1|gres/gpu=8\n"
        "2|b|FAILED|2024-03-01T10:00:00|2024-03-01T11:00:00|1|n1|gres/gpu=8\n"
    )
    events.write_text("Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User\n")
    documents = []
    for filler in (byte, b"_"):
        submit = tmp_path / "submit.txt"
        line = b"1|sbatch " + filler + b"a.sh" + filler + b"2|sbatch -w n1 x.sh\n"
        submit.write_bytes(b"JobID|SubmitLine\n" + line + b"2|sbatch b.sh\n")
        files = ("--jobs", str(jobs), "--events", str(events), "--submit-lines", str(submit))
        code, out, err = cli("fleet", "report", *files, "--json", "--alpha", "0.999")
        assert code == 0, err
        documents.append(json.loads(out))
    assert documents[0]["inputs"]["submit_lines"] == documents[1]["inputs"]["submit_lines"]
    assert documents[0]["inputs"]["submit_lines"]["records"] == 2


def test_sample_writes_a_fleet_that_the_commands_it_suggests_can_read(cli: Cli, tmp_path: Path) -> None:
    """``fleet sample DIR``: the generator ships in the package, and each printed command runs as printed."""
    directory = tmp_path / "sample dir"
    code, out, err = cli("fleet", "sample", str(directory), "--nodes", "120", "--days", "30")
    assert (code, err) == (0, "")
    assert sorted(p.name for p in directory.iterdir()) == ["events.txt", "jobs.txt", "submit-lines.txt"]
    planted = out.split("incident lemons ", 1)[1].split(";", 1)[0].split(", ")
    suggested = [shlex.split(line) for line in out.splitlines() if line.startswith("  healthd fleet ")]
    assert [argv[2] for argv in suggested] == ["report", "lemons", "backtest"]
    for argv in suggested:
        code, shown, err = cli(*argv[1:])
        assert (code, err) == (0, ""), argv
        if argv[2] == "lemons":
            assert set(planted) & {line.split()[0] for line in shown.splitlines() if line.startswith("gpu")}
    assert (directory / "report.html").read_text().startswith("<!DOCTYPE html>")
    code, _, err = cli("fleet", "sample", str(directory), "--nodes", "2")
    assert code == 64 and "--nodes" in err
