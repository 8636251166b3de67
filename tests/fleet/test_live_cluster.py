"""``collect`` against the test cluster's real slurmdbd: a node that healthd takes out, as accounting records it.

A job runs on node1; healthd (the real CLI, the real ``mounts`` check) finds an
expected mount missing, a CRITICAL finding, and takes node1 out (DRAIN, then DOWN).
Around it, the kinds of rows an analysis must tell apart: a job that completes, one
that fails by itself, and a job killed by an administrator's DOWN of node3. Then
``collect`` reads the accounting of that window, and ``assert_take_out_attributed``
checks, on the raw rows, that the job's run ended on node1 at the take-out and that
node1's event carries healthd's reason.

``collect`` reads the runs with ``sacct --json`` (22.05 has it); ``sacctmgr --json`` is
refused by 22.05, so the events stay ``-P``. The same runs are also read with ``sacct -P``,
and both must say the same. ``HEALTHD_UPDATE_ACCOUNTING=1`` keeps the texts of the run as the
fixtures ``fixtures/slurm/accounting/sacct-22.05-take-out.txt``, ``sacct-json-22.05-take-out.json``
and ``sacctmgr-events-22.05-take-out.txt`` (see fixtures/slurm/README.md).
"""

from __future__ import annotations

import datetime
import json
import os
import time
from typing import Any, Callable

import pytest
from healthd_testkit.paths import FIXTURES, REPO
from healthd_testkit.waiting import wait_for

from healthd.fleet import sacct_json
from healthd.fleet.live import AccountingError, collect, sacct_args

pytestmark = pytest.mark.slurm

MOUNT = "/no/such/fleet/mount"
ADMIN_REASON = "admin: PSU swap, ticket 7"
# Where a take-out's event may start relative to the end of the run it killed: healthd's
# DRAIN and DOWN come seconds before slurmctld ends the run, but an event can also be
# older (a node drained earlier, then taken out) or stamped by slurmdbd a little late.
EVENT_BEFORE_END = datetime.timedelta(minutes=10)
EVENT_AFTER_END = datetime.timedelta(minutes=5)
SLURM_TIME = "%Y-%m-%dT%H:%M:%S"


def rows(text: str) -> list[dict[str, str]]:
    """``-P`` output as one dict per line; the last field may hold ``|`` (a SubmitLine)."""
    lines = [line for line in text.splitlines() if line]
    header = lines[0].split("|")
    return [dict(zip(header, line.split("|", len(header) - 1))) for line in lines[1:]]


def when(text: str) -> datetime.datetime:
    """A time of ``-P`` (local) or of ``sacct --json`` turned into rows (``@EPOCH``)."""
    if text.startswith("@"):
        return datetime.datetime.fromtimestamp(int(text[1:]))
    return datetime.datetime.strptime(text, SLURM_TIME)


def json_rows(text: str) -> str:
    """``sacct --json`` as the ``-P`` table healthd reads it into (``healthd.fleet.sacct_json``)."""
    return "\n".join(sacct_json.read(text, "sacct --json").lines) + "\n"


def run_key(row: dict[str, str]) -> tuple[object, ...]:
    """What the analysis reads of a run, comparable between -P and JSON rows."""
    times = tuple(None if row[t] == "Unknown" else when(row[t]) for t in ("Start", "End"))
    state = row["State"].split()[0]  # -P says "CANCELLED by 0", JSON "CANCELLED"
    return (*(row[f] for f in ("JobID", "User", "Partition", "NodeList", "NNodes")), state, *times)


HOSTILE_NAME = "train|alice|batch|FAILED|0:0\n1|x"


def assert_take_out_attributed(jobs: str, events: str, *, job: str, node: str, code: str) -> dict[str, str]:
    """The run of ``job`` on ``node`` ended by node failure, and ``node``'s event names healthd's ``code`` near its end.

    Checks the raw rows of ``collect``; returns the run's row.
    """
    runs = [r for r in rows(jobs) if r["JobID"] == job and r["NodeList"] == node]
    assert len(runs) == 1, f"one run of job {job} on {node}: {runs}"
    run = runs[0]
    assert run["State"] == "NODE_FAIL", run
    end = when(run["End"])
    reasons = [e for e in rows(events) if e["NodeName"] == node and e["Reason"].startswith(f"healthd: {code} ")]
    assert reasons, f"no event of {node} with a healthd {code} reason in:\n{events}"
    assert any(end - EVENT_BEFORE_END <= when(e["TimeStart"]) <= end + EVENT_AFTER_END for e in reasons), (
        f"no healthd event of {node} within [{end - EVENT_BEFORE_END}, {end + EVENT_AFTER_END}]: {reasons}"
    )
    return run


def sbatch(cluster: Any, node: str, command: str) -> str:
    out = cluster.run("sbatch", "--parsable", "-w", node, "-o", "/dev/null", "--wrap", command).stdout
    return str(out.strip().split(";")[0])


def test_healthd_take_out_is_in_accounting(
    accounting_cluster: Any,
    write_config: Callable[..., Any],
    cli: Callable[..., tuple[int, str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = accounting_cluster
    # sacct --json records each job's working directory, sbatch's: "/", not this checkout's path.
    monkeypatch.chdir("/")
    # Accounting has whole seconds: a second's margin on each side of the window.
    since = datetime.datetime.now().replace(microsecond=0) - datetime.timedelta(seconds=1)
    # The report's window starts in the next whole second, after the events of earlier tests
    # on these nodes (ended by the cluster's reset): near this one's, they would be one incident.
    report_since = since + datetime.timedelta(seconds=2)
    time.sleep(max(0.0, (report_since - datetime.datetime.now()).total_seconds()))
    job = cluster.submit("node1")
    # A name with the -P separator and a newline: JSON carries it as a string, and it is shown.
    cluster.run("scontrol", "update", f"JobId={job}", f"JobName={HOSTILE_NAME}")
    admin_job = cluster.submit("node3")
    completes = sbatch(cluster, "node2", "true")
    fails = sbatch(cluster, "node2", "exit 3")
    ended = ("COMPLETED", "FAILED")
    cluster.wait(lambda: all(cluster.job_state(j) in ended for j in (completes, fails)), 30, "the short jobs to end")
    cluster.run("scontrol", "update", "NodeName=node3", "State=DOWN", f"Reason={ADMIN_REASON}")

    config = write_config(
        f"""
[slurm]
node_name = "node1"
[policy]
max_out_fraction = 1.0
[checks.mounts]
expect = [{{path = "{MOUNT}"}}]
""",
        slurm_cluster=cluster.conf,
    )
    code, out, err = cli("check", "--once", "--only", "mounts", "--config", str(config))
    assert code == 2, out + err
    assert cluster.reason("node1").startswith(f"healthd: MOUNT_MISSING {MOUNT} [")
    cluster.wait(lambda: cluster.job_state(job) == "PENDING", 30, f"job {job} requeued")
    # Requeued, the jobs wait for their node (-w): cancelled, their last runs end too.
    cluster.run("scancel", job, admin_job)
    ours = (completes, fails, admin_job, job)

    def accounted() -> tuple[str, str, str]:
        until = datetime.datetime.now().replace(microsecond=0) + datetime.timedelta(seconds=1)
        texts = collect(None, since, until, 30, conf=cluster.conf)
        assert sacct_json.is_json(texts.jobs), "22.05 has sacct --json: collect reads the runs through it"
        return json_rows(texts.jobs), texts.events, texts.submit_lines

    def settled() -> bool:
        # slurmctld hands job and node records to slurmdbd in the background.
        jobs, events, _ = accounted()
        ended = [r for r in rows(jobs) if r["JobID"] in ours and r["End"] != "Unknown"]
        return {r["JobID"] for r in ended} == set(ours) and f"healthd: MOUNT_MISSING {MOUNT}" in events

    wait_for(settled, 30, "the jobs and node1's event in accounting", interval=0.5)
    until = datetime.datetime.now().replace(microsecond=0) + datetime.timedelta(seconds=1)
    raw_json = collect(None, since, until, 30, conf=cluster.conf).jobs
    jobs, events, submit_lines = json_rows(raw_json), *accounted()[1:]
    assert_take_out_attributed(jobs, events, job=job, node="node1", code="MOUNT_MISSING")
    # The same window as sacct -P: the same runs (requeued ones too), the same times.
    parsable = cluster.run("sacct", *sacct_args(since, until)).stdout
    assert sorted(map(run_key, rows(jobs))) == sorted(map(run_key, rows(parsable)))
    # 22.05's sacctmgr has no --json (it came with 23.02): events are read with -P.
    refused = cluster.run("sacctmgr", "--json", "show", "event", check=False)
    assert refused.returncode != 0 and "unrecognized option" in refused.stderr, refused

    # The report run live on the same accounting names healthd's finding as the cause of the job's failure.
    window = ("--since", report_since.isoformat())
    code, out, err = cli("fleet", "report", "--live", *window, "--json", "--config", str(config))
    assert code == 0, err
    attributed = {a["job_id"]: a for a in json.loads(out)["attributed_failures"]}
    assert attributed[job]["node"] == "node1" and attributed[job]["state"] == "NODE_FAIL"
    assert attributed[job]["cause"] == "MOUNT_MISSING"
    assert attributed[job]["job_name"] == HOSTILE_NAME, "the name, from sacct --json, whole"
    assert admin_job not in attributed, "an administrator's DOWN is no node-health cause"

    # The rows around it, as 22.05 records them.
    by_id = {(r["JobID"], r["NodeList"], r["State"]) for r in rows(jobs)}
    assert (completes, "node2", "COMPLETED") in by_id and (fails, "node2", "FAILED") in by_id
    assert (admin_job, "node3", "NODE_FAIL") in by_id
    admin_events = [e for e in rows(events) if e["NodeName"] == "node3" and e["Reason"] == ADMIN_REASON]
    assert admin_events and admin_events[0]["User"] == "root(0)", events

    submitted = {r["JobID"]: r["SubmitLine"] for r in rows(submit_lines)}
    assert submitted[job].startswith("sbatch ") and "-w node1" in submitted[job], submit_lines
    for text in (raw_json, parsable, events, submit_lines):
        assert str(cluster.root) not in text and str(config.parent) not in text, "fixtures must name no local path"
        assert str(REPO) not in text.replace("\\/", "/"), "fixtures must name no local path"
    if os.environ.get("HEALTHD_UPDATE_ACCOUNTING"):
        directory = FIXTURES / "slurm" / "accounting"
        directory.mkdir(exist_ok=True)
        (directory / "sacct-22.05-take-out.txt").write_text(parsable)
        (directory / "sacct-json-22.05-take-out.json").write_text(raw_json)
        (directory / "sacctmgr-events-22.05-take-out.txt").write_text(events)
        (directory / "sacct-submit-lines-22.05-take-out.txt").write_text(submit_lines)


def test_slurmdbd_not_reachable(accounting_cluster: Any) -> None:
    cluster = accounting_cluster
    until = datetime.datetime.now()
    since = until - datetime.timedelta(days=1)
    cluster.stop("slurmdbd")
    try:
        with pytest.raises(AccountingError, match="slurmdbd is not reachable") as caught:
            collect(None, since, until, 30, conf=cluster.conf)
    finally:
        cluster.start_dbd()
    assert "sacct -a -X -D --json" in str(caught.value)
    texts = collect(None, since, until, 30, conf=cluster.conf)
    # JSON, or -P where a job of the day has a user without an association (docs/fleet.md, "Inputs").
    assert sacct_json.is_json(texts.jobs) or texts.jobs.startswith("JobID|User|Partition|")
    assert texts.submit_lines.startswith("JobID|SubmitLine")
