"""``healthd.fleet.live.collect`` against stand-in sacct and sacctmgr: exact arguments, environment, deadline, errors.

The stand-ins are shell scripts that record their arguments (one per line) and the
environment they got, then print, fail or sleep as the test says. The real commands
against the test cluster's slurmdbd are in ``test_live_cluster.py``.
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Iterator

import pytest

from healthd.fleet.live import Accounting, AccountingError, collect
from healthd.fleet.sacct import EVENT_FIELDS, SACCT_FIELDS, SUBMIT_FIELDS

SINCE = datetime.datetime(2024, 5, 1, 8, 0, 0)
UNTIL = datetime.datetime(2024, 5, 31, 8, 0, 0)

# What the stand-in sacct prints: a sacct --json document whose every job names its user.
JOBS_JSON = '{"jobs": [{"job_id": 1, "user": "alice"}]}\n'
STAND_IN = """#!/bin/sh
for arg in "$@"; do printf '%s\\n' "$arg"; done > {record}.args
{{ cat {record}.args; echo ---; }} >> {record}.calls
printf 'SLURM_CONF=%s\\nTZ=%s\\nPATH=%s\\n' "${{SLURM_CONF-unset}}" "${{TZ-unset}}" "$PATH" > {record}.env
sleep {sleep}
cat {record}.out
cat {record}.err >&2
exit {code}
"""


def stand_in(bin_dir: Path, name: str, out: str = "", err: str = "", code: int = 0, sleep: float = 0) -> Path:
    """Write ``bin_dir/name``: it records ``name.args`` and ``name.env``, prints ``name.out`` and ``name.err``."""
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    (bin_dir / f"{name}.out").write_text(out)
    (bin_dir / f"{name}.err").write_text(err)
    path.write_text(STAND_IN.format(record=bin_dir / name, code=code, sleep=sleep))
    path.chmod(0o755)
    return path


def calls(bin_dir: Path, name: str) -> list[list[str]]:
    """The arguments of every call of the stand-in, in order."""
    text = (bin_dir / f"{name}.calls").read_text()
    return [call.splitlines() for call in text.split("---\n") if call]


def recorded(bin_dir: Path, name: str) -> tuple[list[str], dict[str, str]]:
    args = (bin_dir / f"{name}.args").read_text().splitlines()
    env = dict(line.split("=", 1) for line in (bin_dir / f"{name}.env").read_text().splitlines())
    return args, env


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "bin"
    stand_in(directory, "sacct", out=JOBS_JSON)
    stand_in(directory, "sacctmgr", out="Cluster|NodeName\nc|node1\n")
    return directory


@pytest.fixture
def local_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The process's local time is UTC+2 (POSIX TZ: the offset is written west of Greenwich)."""
    monkeypatch.setenv("TZ", "TEST-2")
    time.tzset()
    yield "TEST-2"
    monkeypatch.undo()
    time.tzset()


def test_exact_commands_and_their_texts(bin_dir: Path, tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=c\n")
    texts = collect(bin_dir, SINCE, UNTIL, 10, conf=conf)
    jobs_text = JOBS_JSON  # the stand-in prints the same for both sacct calls
    assert texts == Accounting(jobs_text, "Cluster|NodeName\nc|node1\n", jobs_text)
    window = ["-S", "2024-05-01T08:00:00", "-E", "2024-05-31T08:00:00"]
    # No field a job's owner writes among the job fields: -P escapes nothing, so a JobName or
    # SubmitLine could forge records. The submit lines come on their own, keyed by JobID.
    # The job runs as JSON first (job names come safely, times as epoch seconds); a sacct that
    # prints JSON is not asked again.
    assert calls(bin_dir, "sacct") == [
        ["-a", "-X", "-D", "--json", *window],
        ["-a", "-X", "-D", "-P", "-o", "JobID,SubmitLine", *window],
    ]
    sacct, sacct_env = recorded(bin_dir, "sacct")
    sacctmgr, sacctmgr_env = recorded(bin_dir, "sacctmgr")
    assert sacctmgr == [
        "-P",
        "show",
        "event",
        "Start=2024-05-01T08:00:00",
        "End=2024-05-31T08:00:00",
        "Format=Cluster,NodeName,TimeStart,TimeEnd,State,User,Reason",
    ]
    assert sacct_env["SLURM_CONF"] == sacctmgr_env["SLURM_CONF"] == str(conf)
    assert sacct_env["PATH"] == "/usr/sbin:/usr/bin:/sbin:/bin", "a bare environment, as for scontrol"
    assert ",".join(SUBMIT_FIELDS) in sacct and f"Format={','.join(EVENT_FIELDS)}" in sacctmgr


def test_without_conf_the_commands_get_healthds_own_slurm_conf(
    bin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = tmp_path / "own-slurm.conf"
    monkeypatch.setenv("SLURM_CONF", str(own))
    collect(bin_dir, SINCE, UNTIL, 10)
    assert recorded(bin_dir, "sacct")[1]["SLURM_CONF"] == str(own)
    monkeypatch.delenv("SLURM_CONF")
    collect(bin_dir, SINCE, UNTIL, 10)
    assert recorded(bin_dir, "sacctmgr")[1]["SLURM_CONF"] == "unset"


def test_window_is_written_in_the_local_time_of_tz(bin_dir: Path, local_zone: str) -> None:
    utc = datetime.timezone.utc
    collect(bin_dir, SINCE.replace(tzinfo=utc), UNTIL.replace(hour=23, minute=30, tzinfo=utc), 10)
    args, env = recorded(bin_dir, "sacct")
    assert args[-4:] == ["-S", "2024-05-01T10:00:00", "-E", "2024-06-01T01:30:00"]
    assert env["TZ"] == local_zone, "the commands print their times in the same local time"
    args, _ = recorded(bin_dir, "sacctmgr")
    assert "Start=2024-05-01T10:00:00" in args and "End=2024-06-01T01:30:00" in args
    # A naive time is local time already: written as it is.
    collect(bin_dir, SINCE, UNTIL, 10)
    assert recorded(bin_dir, "sacct")[0][-3] == "2024-05-01T08:00:00"


def test_missing_binary_names_the_path(bin_dir: Path, tmp_path: Path) -> None:
    (bin_dir / "sacctmgr").unlink()
    with pytest.raises(AccountingError, match=f"sacctmgr not found in {bin_dir}"):
        collect(bin_dir, SINCE, UNTIL, 10)
    empty = tmp_path / "empty"
    with pytest.raises(AccountingError, match=f"sacct not found in {empty}"):
        collect(empty, SINCE, UNTIL, 10)


def test_binary_that_cannot_run(bin_dir: Path) -> None:
    # An interpreter that is not there: execve fails with ENOENT although the file exists.
    sacct = bin_dir / "sacct"
    sacct.write_text("#!/nonexistent/interpreter\n")
    # The shell that execs it says why, in its own words (dash: "not found", bash: "bad interpreter").
    with pytest.raises(AccountingError, match=f"^cannot run {sacct}: (not found|.*No such file or directory)$"):
        collect(bin_dir, SINCE, UNTIL, 10)


def test_failure_shows_the_command_and_its_stderr(bin_dir: Path) -> None:
    stand_in(bin_dir, "sacctmgr", err="sacctmgr: error: Unknown option: Format", code=1)
    with pytest.raises(AccountingError) as caught:
        collect(bin_dir, SINCE, UNTIL, 10)
    message = str(caught.value)
    assert message.startswith(f"`{bin_dir / 'sacctmgr'} -P show event Start=2024-05-01T08:00:00 ")
    assert "failed (exit status 1): sacctmgr: error: Unknown option: Format" in message
    assert "slurmdbd" not in message


# What 22.05's commands printed on the test cluster with slurmdbd stopped, and with no accounting.
@pytest.mark.parametrize(
    ("name", "err", "cause"),
    [
        (
            "sacct",
            "sacct: error: slurm_persist_conn_open_without_init: failed to open persistent connection to"
            " host:localhost:36473: Connection refused\nsacct: error: Sending PersistInit msg: Connection refused\n"
            "sacct: error: Problem talking to the database: Connection refused\n",
            "slurmdbd is not reachable",
        ),
        ("sacct", "Slurm accounting storage is disabled\n", "Slurm accounting is not enabled"),
        (
            "sacctmgr",
            "You are not running a supported accounting_storage plugin\n"
            "Only 'accounting_storage/slurmdbd' is supported.\n",
            "Slurm accounting is not enabled",
        ),
    ],
)
def test_failure_says_when_slurmdbd_is_not_there(bin_dir: Path, name: str, err: str, cause: str) -> None:
    stand_in(bin_dir, name, err=err, code=1)
    with pytest.raises(AccountingError, match=f"failed \\(exit status 1\\); {cause}"):
        collect(bin_dir, SINCE, UNTIL, 10)


@pytest.mark.slow  # seconds of sleeping stand-ins
def test_one_deadline_for_both_commands(bin_dir: Path) -> None:
    stand_in(bin_dir, "sacct", sleep=30)
    started = time.monotonic()
    with pytest.raises(AccountingError, match=r"`\S+/sacct -a .* did not answer within 0.3s: slurmdbd is slow or not"):
        collect(bin_dir, SINCE, UNTIL, 0.3)
    assert time.monotonic() - started < 5, "the stand-in was killed at the deadline, not waited for"
    # Each command alone is quicker than the timeout; together they are not.
    stand_in(bin_dir, "sacct", out=JOBS_JSON, sleep=0.5)
    stand_in(bin_dir, "sacctmgr", sleep=0.8)
    with pytest.raises(AccountingError, match=r"sacctmgr -P show event .* did not answer within 1s"):
        collect(bin_dir, SINCE, UNTIL, 1.0)


def test_bad_window_or_conf_runs_nothing(bin_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(AccountingError, match="empty window: it ends at 2024-05-01T08:00:00, not after its start"):
        collect(bin_dir, SINCE, SINCE, 10)
    missing = tmp_path / "no-slurm.conf"
    with pytest.raises(AccountingError, match=f"{missing} does not exist \\(\\[slurm\\].conf\\)"):
        collect(bin_dir, SINCE, UNTIL, 10, conf=missing)
    assert not (bin_dir / "sacct.args").exists()


NO_JSON = """#!/bin/sh
for arg in "$@"; do printf '%s ' "$arg"; done >> {record}.calls
echo >> {record}.calls
for arg in "$@"; do
  if [ "$arg" = --json ]; then echo "sacct: unrecognized option '--json'" >&2; exit 1; fi
done
echo 'JobID|State'
"""


def test_a_sacct_without_json_is_asked_for_the_parsable_table(bin_dir: Path) -> None:
    (bin_dir / "sacct").write_text(NO_JSON.format(record=bin_dir / "nojson"))
    texts = collect(bin_dir, SINCE, UNTIL, 10)
    assert texts.jobs == "JobID|State\n"
    asked = (bin_dir / "nojson.calls").read_text().splitlines()
    assert [line.split()[3] for line in asked] == ["--json", "-P", "-P"]


def test_json_without_a_user_is_read_again_with_p(bin_dir: Path) -> None:
    """22.05 prints ``"user": null`` for a user without an association; -P names the uid's user."""
    stand_in(bin_dir, "sacct", out='{"jobs": [{"job_id": 1, "user": null}]}\n')
    collect(bin_dir, SINCE, UNTIL, 10)
    assert [call[3] for call in calls(bin_dir, "sacct")] == ["--json", "-P", "-P"]


def test_a_sacct_json_failure_for_another_reason_is_not_hidden(bin_dir: Path) -> None:
    stand_in(bin_dir, "sacct", err="sacct: error: Problem talking to the database: Connection refused", code=1)
    with pytest.raises(AccountingError, match="slurmdbd is not reachable"):
        collect(bin_dir, SINCE, UNTIL, 10)
    assert len(calls(bin_dir, "sacct")) == 1


def test_accounting_fixtures_have_the_fields_collect_asks_for(fixtures: Path) -> None:
    directory = fixtures / "slurm" / "accounting"
    jobs = (directory / "sacct-22.05-take-out.txt").read_text().splitlines()
    events = (directory / "sacctmgr-events-22.05-take-out.txt").read_text().splitlines()
    submit_lines = (directory / "sacct-submit-lines-22.05-take-out.txt").read_text().splitlines()
    assert jobs[0].split("|") == list(SACCT_FIELDS)
    assert events[0].split("|") == list(EVENT_FIELDS)
    assert submit_lines[0].split("|") == list(SUBMIT_FIELDS)
    assert all(line.count("|") == len(SACCT_FIELDS) - 1 for line in jobs)
    assert all(line.count("|") == len(EVENT_FIELDS) - 1 for line in events)
