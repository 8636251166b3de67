"""``fleet report --live`` on each Slurm release's accounting: an array task killed by healthd's take-out.

A two-task array runs on node1 (``--oversubscribe``: one CPU per node); healthd (the
real CLI, the real ``mounts`` check) takes node1 out, both tasks end ``NODE_FAIL``
and are requeued, then cancelled. The live report must name healthd's finding as the
cause of each task's failure, with the task's id as Slurm writes it (``JOB_TASK``).
24.11 and later write the array's task id in ``sacct --json`` as
``{"set": true, "infinite": false, "number": N}``, not as a bare number.
"""

from __future__ import annotations

import datetime
import os
import time
from typing import Any, Callable

import pytest
from healthd_testkit.livereport import attributed_live
from healthd_testkit.paths import FIXTURES
from healthd_testkit.releases import every_release

from healthd.fleet.live import sacct_json_args

pytestmark = pytest.mark.slurm

MOUNT = "/no/such/fleet/array/mount"


def _keep_accounting(cluster: Any, since: datetime.datetime) -> None:
    """With ``HEALTHD_UPDATE_ACCOUNTING=1``, the release's ``sacct --json`` of the window as a fixture."""
    if not os.environ.get("HEALTHD_UPDATE_ACCOUNTING") or cluster.chroot is None:
        return
    until = datetime.datetime.now().replace(microsecond=0) + datetime.timedelta(seconds=1)
    raw = cluster.run("sacct", *sacct_json_args(since, until)).stdout
    assert str(cluster.root) not in raw.replace("\\/", "/"), "fixtures must name no local path"
    path = FIXTURES / "slurm" / "accounting" / f"sacct-json-{cluster.version}-array-take-out.json"
    path.write_text(raw)


def _tasks(cluster: Any, array: str) -> list[str]:
    """``JOB_TASK`` of each task of the array that squeue lists, with its state."""
    out = cluster.run("squeue", "-h", "-r", "-j", array, "-o", "%i %T", check=False).stdout
    return [line for line in out.split("\n") if line.strip()]


@every_release
def test_live_report_attributes_each_array_task_to_healthds_take_out(
    accounting_cluster: Any,
    write_config: Callable[..., Any],
    cli: Callable[..., tuple[int, str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = accounting_cluster
    monkeypatch.chdir("/")
    # The report's window starts after the events of earlier tests on node1 (ended by the reset).
    since = datetime.datetime.now().replace(microsecond=0) + datetime.timedelta(seconds=2)
    time.sleep(max(0.0, (since - datetime.datetime.now()).total_seconds()))
    cluster.wait(lambda: cluster.responding("node1"), 60, "node1 responding")
    out = cluster.run(
        "sbatch", "--parsable", "--requeue", "--oversubscribe", "--array=0-1", "-w", "node1", "-o", "/dev/null",
        "--wrap", "sleep 300",
    )  # fmt: skip
    array = out.stdout.strip().split(";")[0]
    tasks = [f"{array}_0", f"{array}_1"]
    cluster.wait(lambda: sorted(_tasks(cluster, array)) == [f"{t} RUNNING" for t in tasks], 60, "both tasks running")

    bin_dir = f'bin_dir = "{cluster.bin_dir}"' if cluster.chroot is not None else ""
    config = write_config(
        f'[slurm]\nnode_name = "node1"\n{bin_dir}\n[policy]\nmax_out_fraction = 1.0\n'
        f'[checks.mounts]\nexpect = [{{path = "{MOUNT}"}}]\n',
        slurm_cluster=cluster.conf,
    )
    code, out, err = cli("check", "--once", "--only", "mounts", "--config", str(config))
    assert code == 2, out + err
    assert cluster.reason("node1").startswith(f"healthd: MOUNT_MISSING {MOUNT} [")
    cluster.wait(lambda: all(line.endswith(" PENDING") for line in _tasks(cluster, array)), 30, "tasks requeued")
    cluster.run("scancel", array)

    found = attributed_live(cli, config, since, tasks, "both tasks attributed in accounting")
    _keep_accounting(cluster, since)
    for task in tasks:
        failure = found[task]
        assert (failure["node"], failure["state"], failure["cause"]) == ("node1", "NODE_FAIL", "MOUNT_MISSING")
