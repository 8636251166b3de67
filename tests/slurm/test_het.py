"""Heterogeneous jobs (``sbatch OPTIONS : OPTIONS``) across nodes, on each Slurm release.

They run on the configless cluster (healthd_testkit.cluster): its scheduler is
sched/backfill, which starts heterogeneous jobs (sched/builtin refuses them). A
heterogeneous job is one job per component: ``JOBID+N`` in squeue and sacct, each
component with a job id of its own (the leader's is JOBID, ``HetJobId`` in scontrol),
and slurmd runs Prolog= and Epilog= once per component on its node, with that
component's ``SLURM_JOB_ID``. Slurm starts, requeues and ends the components together.

The cluster has ``PrologFlags=Alloc`` (slurm.conf(5)), as docs/jobs.md advises: every
node of every component runs the Prolog as the job starts. Without it, slurmd runs the
Prolog on a node only when a task of the job starts there, and a batch script runs on the
first component's node only. The jobs start no step (``srun`` from a job in a Debian root
makes slurmctld resolve this machine's name, which the root's /etc/hosts may not know).
"""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.jobnode import job_node, missing_mount_node, warm_on_node
from healthd_testkit.livereport import attributed_live
from healthd_testkit.paths import run_healthd
from healthd_testkit.releases import every_release

pytestmark = [pytest.mark.slurm, pytest.mark.root]

MOUNT = "/no/such/het/mount"


def _submit_het(cluster: Any, command: str) -> str:
    """A heterogeneous job: component 0 on node1, component 1 on node2; its JobID (the leader's)."""
    for node in ("node1", "node2"):
        cluster.wait(lambda n=node: cluster.responding(n), 60, f"{node} responding")
    out = cluster.run(
        "sbatch", "--parsable", "--requeue", "-o", "/dev/null", "-w", "node1", ":", "-w", "node2", "--wrap", command
    )
    return out.stdout.strip().split(";")[0]


def _components(cluster: Any, job: str) -> dict[str, tuple[str, str]]:
    """Each component of the heterogeneous job as squeue lists it: ``JOBID+N`` -> (its own job id, its state)."""
    out = cluster.run("squeue", "-h", "-j", job, "-o", "%i %A %T", check=False).stdout
    rows = [line.split() for line in out.split("\n") if line.strip()]
    return {row[0]: (row[1], row[2]) for row in rows}


def _history(state: Path, kind: str) -> list[dict[str, Any]]:
    config = state.parent / "read.toml"
    config.write_text(f'[paths]\nstate_dir = "{state}"\n[slurm]\nenabled = false\n')
    done = run_healthd("history", "--jsonl", "--config", str(config))
    assert done.returncode == 0, done.stderr
    return [e for e in map(json.loads, done.stdout.split("\n")[:-1]) if e["kind"] == kind]


@every_release
def test_each_component_runs_healthds_prolog_and_epilog_on_its_node(configless_cluster: Any, tmp_path: Path) -> None:
    cluster = configless_cluster
    states = {node: job_node(cluster, node, tmp_path, slurm_conf=False, only=False) for node in ("node1", "node2")}
    for node in states:
        warm_on_node(cluster, node)
    job = _submit_het(cluster, "sleep 300")
    cluster.wait(
        lambda: [s for _, s in _components(cluster, job).values()] == ["RUNNING", "RUNNING"],
        60,
        "both components running",
    )
    ids = {name: own for name, (own, _) in _components(cluster, job).items()}
    assert set(ids) == {f"{job}+0", f"{job}+1"} and ids[f"{job}+0"] == job
    for node in ("node1", "node2"):
        cluster.wait(lambda s=states[node]: bool(_history(s, "job_start")), 30, f"{node}'s prolog record")
    cluster.run("scancel", job)
    cluster.wait(lambda: not _components(cluster, job), 60, f"het job {job} ended")
    for node, component in (("node1", f"{job}+0"), ("node2", f"{job}+1")):
        cluster.wait(lambda s=states[node]: bool(_history(s, "job_end")), 30, f"{node}'s epilog record")
        # Each node's prolog and epilog saw its own component's job id.
        assert [e["subject"] for e in _history(states[node], "job_start")] == [ids[component]]
        assert [e["subject"] for e in _history(states[node], "job_end")] == [ids[component]]
        assert cluster.state(node) == "idle"


@every_release
def test_a_critical_prolog_on_one_component_requeues_the_whole_job(configless_cluster: Any, tmp_path: Path) -> None:
    cluster = configless_cluster
    job_node(cluster, "node1", tmp_path, slurm_conf=False, only=False)
    missing_mount_node(cluster, "node2", tmp_path, MOUNT, slurm_conf=False, only=False)
    for node in ("node1", "node2"):
        warm_on_node(cluster, node)
    job = _submit_het(cluster, "sleep 300")
    cluster.wait_state("node2", lambda s: "DRAIN" in s, 60, "drained by the prolog")
    assert cluster.reason("node2").startswith(f"healthd: MOUNT_MISSING {MOUNT}"), cluster.reason("node2")
    # Slurm requeues the whole job, the healthy node's component too; the healthy node stays in service.
    cluster.wait(
        lambda: [s for _, s in _components(cluster, job).values()] == ["PENDING", "PENDING"], 30, "both requeued"
    )
    assert cluster.job_field(job, "Restarts") == "1"
    assert "DRAIN" not in cluster.node_state("node1")


@every_release
def test_a_take_out_requeues_the_job_and_the_live_report_attributes_its_component(
    configless_cluster: Any,
    write_config: Callable[..., Path],
    cli: Callable[..., tuple[int, str, str]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    cluster = configless_cluster
    monkeypatch.chdir("/")
    since = datetime.datetime.now().replace(microsecond=0) + datetime.timedelta(seconds=2)
    time.sleep(max(0.0, (since - datetime.datetime.now()).total_seconds()))
    job = _submit_het(cluster, "sleep 300")
    cluster.wait(
        lambda: [s for _, s in _components(cluster, job).values()] == ["RUNNING", "RUNNING"],
        60,
        "both components running",
    )

    # healthd on node2, as there: no [slurm] conf, the node's own commands.
    node_config = tmp_path / "node2.toml"
    node_config.write_text(
        f'[paths]\nstate_dir = "{tmp_path / "state"}"\n[slurm]\nnode_name = "node2"\ntimeout = 8\n'
        f'[policy]\nmax_out_fraction = 1.0\n[checks.mounts]\nexpect = [{{path = "{MOUNT}"}}]\n'
    )
    node_config.chmod(0o600)
    done = cluster.on_node(
        "node2", str(cluster.healthd_bin), "check", "--once", "--only", "mounts", "--config", str(node_config)
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert cluster.reason("node2").startswith(f"healthd: MOUNT_MISSING {MOUNT} [")
    cluster.wait(
        lambda: [s for _, s in _components(cluster, job).values()] == ["PENDING", "PENDING"], 30, "both requeued"
    )
    cluster.run("scancel", job)

    # The live report, from the controller's side (its slurm.conf; the release's commands).
    bin_dir = f'bin_dir = "{cluster.bin_dir}"' if cluster.chroot is not None else ""
    config = write_config(f"[slurm]\n{bin_dir}\n", slurm_cluster=cluster.conf)
    component = f"{job}+1"
    found = attributed_live(cli, config, since, {component}, "the component attributed in accounting")
    failure = found[component]
    assert (failure["node"], failure["state"], failure["cause"]) == ("node2", "NODE_FAIL", "MOUNT_MISSING")
    # The component on the healthy node failed with the job, not because of node1.
    assert all(a["node"] != "node1" for a in found.values()), found
