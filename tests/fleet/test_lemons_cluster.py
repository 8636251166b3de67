"""Issue 23's scenario 6 on the real test cluster with accounting: a user cannot make a lemon of a node they chose.

A real unprivileged user (the ``intruder`` account) runs 20 jobs that fail, each pinned
to node2 with ``srun -w node2``, and 60 that succeed elsewhere (``-x node2``). The plain
lemon test judges node2's failures against the user's own fleet-wide rate (one in four),
which the pinning defeats: node2 looked like a lemon with no incident at all, and
``fleet lemons --drain --apply`` drained it as LEMON. Now the pinned runs are no
evidence, the one user behind the excess is left out, and the report says so.

The user submits for real, through its own munge socket: the test cluster's munged
listens in the session's private directory, so a second munged with the same key
listens in a directory the user can reach (credentials carry the caller's uid, which
munged reads from the socket, so slurmctld sees the user). ``srun``, because a batch
script lives under slurmd's spool directory in the session's private directory, where
the user's job could not run it (sbatch's jobs fail with exit code 13 there).
"""

from __future__ import annotations

import datetime
import json
import pwd
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from healthd_testkit.waiting import wait_for

import healthd.fleet.cache
from healthd.fleet import sacct_json
from healthd.fleet.live import collect

pytestmark = pytest.mark.slurm

FAILING, ELSEWHERE = 20, 60
PLACED = (
    "failed runs were placed on it by their own request (a node list, on the submit line or in #SBATCH lines, "
    "or -x of every other node): the user's choice, not evidence"
)


@pytest.fixture
def as_user(accounting_cluster: Any, intruder: tuple[int, int], host_guard: Any) -> Iterator[Callable[..., int]]:
    """``as_user(*argv)``: run a Slurm client command as the unprivileged user against the test cluster."""
    cluster = accounting_cluster
    uid, gid = intruder
    where = Path(tempfile.mkdtemp(prefix="healthd-lemons-"))
    where.chmod(0o755)
    socket = where / "munge.socket"
    munged = subprocess.Popen(
        [
            "munged", "--foreground", "--force", f"--socket={socket}",
            f"--key-file={cluster.munge_socket.parent / 'munge.key'}", f"--pid-file={where / 'munged.pid'}",
            f"--log-file={where / 'munged.log'}", f"--seed-file={where / 'munged.seed'}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        conf = where / "slurm.conf"
        conf.write_text(cluster.conf.read_text().replace(str(cluster.munge_socket), str(socket)))
        conf.chmod(0o644)
        host_guard.allow_slurm_conf(conf)
        env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": str(conf), "LC_ALL": "C"}
        ready = ["munge", "-n", "-S", str(socket)]
        wait_for(lambda: subprocess.run(ready, capture_output=True, check=False).returncode == 0, 15, "munged")

        def run(*argv: str) -> int:
            user = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *argv]
            return subprocess.run(user, env=env, cwd="/", capture_output=True, timeout=60, check=False).returncode

        yield run
    finally:
        munged.terminate()
        munged.wait(timeout=15)
        shutil.rmtree(where)


def test_a_user_pinning_failing_jobs_to_a_node_makes_no_lemon_and_it_is_not_drained(
    accounting_cluster: Any,
    intruder: tuple[int, int],
    as_user: Callable[..., int],
    write_config: Callable[..., Path],
    cli: Callable[..., tuple[int, str, str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = accounting_cluster
    user = pwd.getpwuid(intruder[0]).pw_name
    # The report's window starts after the events of earlier tests (as in test_live_cluster).
    since = datetime.datetime.now().replace(microsecond=0) + datetime.timedelta(seconds=1)
    time.sleep(max(0.0, (since - datetime.datetime.now()).total_seconds()))
    assert [as_user("srun", "-w", "node2", "false") for _ in range(FAILING)] == [1] * FAILING
    assert [as_user("srun", "-x", "node2", "true") for _ in range(ELSEWHERE)] == [0] * ELSEWHERE

    def accounted() -> Any:
        until = datetime.datetime.now().replace(microsecond=0) + datetime.timedelta(seconds=1)
        return collect(None, since, until, 30, conf=cluster.conf)

    def runs(text: str) -> list[dict[str, str]]:
        """The runs as rows by column name, whichever form ``collect`` read them in."""
        header, *lines = sacct_json.lines_of(text, "sacct")[0]
        return [dict(zip(header.split("|"), line.split("|"))) for line in lines]

    def ended() -> bool:
        rows = runs(accounted().jobs)
        return sum(1 for r in rows if r["User"] == user and r["End"] != "Unknown") == FAILING + ELSEWHERE

    wait_for(ended, 30, "the user's runs in accounting", interval=0.5)
    texts = accounted()
    # The user has no association: 22.05's JSON has no name for them (null), so collect read -P.
    assert not sacct_json.is_json(texts.jobs)
    failed = [r for r in runs(texts.jobs) if (r["User"], r["Partition"], r["State"]) == (user, "batch", "FAILED")]
    assert len(failed) == FAILING
    assert texts.submit_lines.count("srun -w node2 false") == FAILING
    config = write_config("", slurm_cluster=cluster.conf)
    window = ("--live", "--since", since.isoformat(), "--config", str(config))

    code, out, err = cli("fleet", "lemons", *window, "--drain", "--apply")
    assert code == 0, err
    assert cluster.state("node2") == "idle" and "LEMON" not in cluster.reason("node2"), out
    assert "drained" not in out.replace("not drained", "")
    held = next(line for line in out.splitlines() if line.startswith("not flagged node2 "))
    assert f"{FAILING} of its {FAILING} {PLACED}" in held

    # With the floors lowered to this three-node cluster, the pin alone keeps node2 from being flagged.
    lowered = ("--min-nodes", "1", "--min-days", "0")
    code, out, err = cli("fleet", "report", *window, *lowered, "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["lemon_nodes"] == []
    (held_back,) = document["lemon_test"]["held_back"]
    assert held_back["node"] == "node2" and held_back["plain_q_value"] <= 0.05, "the plain test flags it"
    assert held_back["why"] == [f"{FAILING} of its {FAILING} {PLACED}"]

    # From --cache, read in two steps, the same document as a full read: runs are final a second
    # after their end here (OVERLAP, an hour on a real cluster), so the first step keeps them by day.
    monkeypatch.setattr(healthd.fleet.cache, "OVERLAP", 1.0)
    until = max(r["End"] for r in runs(texts.jobs))
    first = datetime.datetime.fromisoformat(min(r["End"] for r in failed))
    middle = first + (datetime.datetime.fromisoformat(until) - first) / 2
    window_to = (*window[:3], "--config", str(config), *lowered, "--json")
    stored = ("--cache", str(tmp_path / "fleet.cache"))
    assert cli("fleet", "report", *window_to, "--until", middle.isoformat(timespec="seconds"), *stored)[0] == 0
    assert len(list((tmp_path / "fleet.cache").glob("*.jobs"))) >= 1
    cached = cli("fleet", "report", *window_to, "--until", until, *stored)
    full = cli("fleet", "report", *window_to, "--until", until)
    assert cached[0] == full[0] == 0, cached[2] + full[2]
    assert comparable(json.loads(cached[1])) == comparable(json.loads(full[1]))

    # Without the submit lines the pin is unseen: the one user behind the failures is left out.
    jobs, events = tmp_path / "jobs.txt", tmp_path / "events.txt"
    jobs.write_text(texts.jobs)
    events.write_text(texts.events)
    code, out, err = cli("fleet", "report", "--jobs", str(jobs), "--events", str(events), *lowered, "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["lemon_nodes"] == []
    (held_back,) = document["lemon_test"]["held_back"]
    assert held_back["node"] == "node2"
    assert held_back["why"][0].startswith(f"{FAILING} of its {FAILING} counted failures are one user's ({user})")


def comparable(document: Any) -> Any:
    """``document`` with floats to 9 digits and lists in one order: a cache gives the runs in another order."""
    if isinstance(document, float):
        return float(f"{document:.9g}")
    if isinstance(document, list):
        return sorted((comparable(v) for v in document), key=repr)
    if isinstance(document, dict):
        return {k: comparable(v) for k, v in document.items()}
    return document


SCRIPTED, EXCLUDING, OTHERWISE = 8, 8, 24


def test_two_users_whose_own_requests_put_their_failing_jobs_on_a_node_make_no_lemon(
    accounting_cluster: Any,
    intruder: tuple[int, int],
    as_user: Callable[..., int],
    write_config: Callable[..., Path],
    cli: Callable[..., tuple[int, str, str]],
) -> None:
    """Two users (root and the unprivileged one) each put failing jobs on node2 by their own request,
    in the two ways the submit line does not show as a pin: ``#SBATCH --nodelist=node2`` inside the
    batch script (the submit line is only ``sbatch pinned.sh``), and ``-x`` of every other node of
    the partition. Leaving out one user no longer hides it (the other's failures stand out alone);
    reading what each job asked for does: all their failures there are placed by request."""
    cluster = accounting_cluster
    scripts = Path(tempfile.mkdtemp(prefix="healthd-pinning-"))
    try:
        scripts.chmod(0o755)
        script = scripts / "pinned.sh"
        script.write_text("#!/bin/sh\n#SBATCH --nodelist=node2\n#SBATCH --output=/dev/null\nexit 1\n")
        script.chmod(0o644)
        since = datetime.datetime.now().replace(microsecond=0) + datetime.timedelta(seconds=1)
        time.sleep(max(0.0, (since - datetime.datetime.now()).total_seconds()))

        def as_root(*argv: str) -> int:
            return subprocess.run(argv, env=cluster.env, cwd="/", capture_output=True, timeout=60).returncode

        for run in (as_root, as_user):
            # Side by side, each job waited on by its own sbatch: ``--wait`` looks at the job
            # only every few seconds (2 s, then longer; sbatch.c's _job_wait), one after the
            # other they took 4 s a job.
            with ThreadPoolExecutor(SCRIPTED) as pool:
                waits = [pool.submit(run, "sbatch", "--wait", str(script)) for _ in range(SCRIPTED)]
            assert all(wait.result() != 0 for wait in waits)
            assert all(run("srun", "-x", "node1,node3", "false") == 1 for _ in range(EXCLUDING))
            assert all(run("srun", "-x", "node2", "true") == 0 for _ in range(OTHERWISE))
    finally:
        shutil.rmtree(scripts)

    def placed() -> int:
        until = datetime.datetime.now().replace(microsecond=0) + datetime.timedelta(seconds=1)
        text = collect(None, since, until, 30, conf=cluster.conf).jobs
        header, *lines = sacct_json.lines_of(text, "sacct")[0]
        rows = [dict(zip(header.split("|"), line.split("|"))) for line in lines]
        return sum(1 for r in rows if r["NodeList"] == "node2" and r["State"].startswith("FAILED"))

    wait_for(lambda: placed() == 2 * (SCRIPTED + EXCLUDING), 30, "the failed runs on node2 in accounting", interval=0.5)
    config = write_config("", slurm_cluster=cluster.conf)
    lowered = ("--min-nodes", "1", "--min-days", "0")
    code, out, err = cli(
        "fleet", "report", "--live", "--since", since.isoformat(), "--config", str(config), *lowered, "--json"
    )
    assert code == 0, err
    document = json.loads(out)
    assert document["lemon_nodes"] == []
    (held_back,) = document["lemon_test"]["held_back"]
    assert held_back["node"] == "node2" and held_back["plain_q_value"] <= 0.05, "the plain test flags it"
    failures = 2 * (SCRIPTED + EXCLUDING)
    assert held_back["why"] == [f"{failures} of its {failures} {PLACED}"]
    assert not any(note.startswith("no batch scripts") for note in document["lemon_test"]["notes"])
