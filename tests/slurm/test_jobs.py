"""healthd as Slurm's Prolog= and Epilog= on the real test cluster (checks/job_commands.py).

The cluster's slurm.conf runs ``healthd prolog``/``epilog`` through a wrapper, only on
nodes listed in ``prolog-nodes`` and with that node's ``job-NODE.toml``. The epilog's
events are written to the real kernel log (/dev/kmsg) by the job itself, on a random
PCI address (this run's marker); they are application Xids (13), graded OK, so nothing
left in the ring buffer can alarm a later healthd on this machine.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from healthd_testkit.dcgmi import Dcgmi
from healthd_testkit.paths import run_healthd

pytestmark = [pytest.mark.slurm, pytest.mark.root]


def _node(
    cluster: Any, node: str, tmp_path: Path, extra: str = "", kmsg: str = "/dev/kmsg", jobs: str = "prolog_timeout = 20"
) -> Path:
    """The node's job config; the prolog gets 20 s (a loaded test machine is no production node) unless `jobs`."""
    state = tmp_path / node / "state"
    state.mkdir(parents=True)
    config = cluster.job_config(node)
    config.write_text(
        f"""
[paths]
state_dir = "{state}"
kmsg = "{kmsg}"
[slurm]
conf = "{cluster.conf}"
node_name = "{node}"
timeout = 8
act_splay = 0
[policy]
max_out_fraction = 1.0
[checks.xid]
source = "kmsg"
accept_userspace_kmsg = true
[checks.jobs]
{jobs}
{extra}
"""
    )
    config.chmod(0o600)
    cluster.prolog_nodes.write_text(f"{node}\n")
    return state


def _history(state: Path, kind: str) -> list[dict[str, Any]]:
    config = state.parent / "read.toml"
    config.write_text(f'[paths]\nstate_dir = "{state}"\n[slurm]\nenabled = false\n')
    done = run_healthd("history", "--jsonl", "--config", str(config))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    return [e for e in map(json.loads, out.splitlines()) if e["kind"] == kind]


def _xid_job(cluster: Any, node: str, pci: str) -> str:
    line = f"<4>NVRM: Xid (PCI:{pci}): 13, pid=1, name=python, Graphics SM Warp Exception on (GPC 1, TPC 2, SM 0)"
    out = cluster.run("sbatch", "--parsable", "-w", node, "-o", "/dev/null", "--wrap", f"echo '{line}' > /dev/kmsg")
    job = out.stdout.strip().split(";")[0]
    cluster.wait(lambda: cluster.job_state(job) in ("COMPLETED", "FAILED", ""), 60, f"job {job} done")
    return job


def _short_job(cluster: Any, node: str) -> str:
    job = cluster.run("sbatch", "--parsable", "-w", node, "-o", "/dev/null", "--wrap", "true").stdout.strip()
    cluster.wait(lambda: cluster.job_state(job) in ("COMPLETED", "FAILED", ""), 60, f"job {job} done")
    return job


def _marker() -> str:
    return f"0abe:{random.randint(0x10, 0xEF):02x}:{random.randint(0, 0x1F):02x}"


def test_a_critical_prolog_requeues_the_job_and_drains_with_healthds_reason(cluster: Any, tmp_path: Path) -> None:
    _node(
        cluster,
        "node1",
        tmp_path,
        '[checks.mounts]\nexpect = [{path = "/healthd-test-not-mounted"}]\n',
        jobs='prolog_timeout = 20\nprolog_checks = ["mounts"]',
    )
    out = cluster.run("sbatch", "--parsable", "--requeue", "-w", "node1", "-o", "/dev/null", "--wrap", "sleep 30")
    job = out.stdout.strip().split(";")[0]
    cluster.wait_state("node1", lambda s: "DRAIN" in s, 60, "drained by the prolog")
    cluster.wait(lambda: cluster.job_state(job) == "PENDING", 30, f"job {job} requeued")
    assert cluster.reason("node1").startswith("healthd: MOUNT_MISSING /healthd-test-not-mounted"), cluster.reason(
        "node1"
    )
    assert "MOUNT_MISSING" in cluster.job_log("node1").read_text()


def test_a_clean_prolog_starts_the_job_and_the_epilog_records_its_xids(cluster: Any, tmp_path: Path) -> None:
    state = _node(cluster, "node2", tmp_path)
    pci = _marker()
    job = _xid_job(cluster, "node2", pci)
    assert cluster.job_state(job) == "COMPLETED"
    cluster.wait(lambda: any(e["subject"] == pci for e in _history(state, "job_xid")), 30, "the epilog's record")
    recorded = [e for e in _history(state, "job_xid") if e["subject"] == pci]
    assert [(e["code"], e["details"]["job"], e["details"]["user"], e["details"]["group"]) for e in recorded] == [
        ("XID_13", job, "root", "GPC 1 TPC 2")
    ]
    assert [e["subject"] for e in _history(state, "job_start")] == [job]
    assert cluster.state("node2") == "idle"


def test_the_same_application_xid_under_three_jobs_drains_after_jobs(cluster: Any, tmp_path: Path) -> None:
    state = _node(cluster, "node3", tmp_path)
    pci = _marker()
    for number in (1, 2):
        _xid_job(cluster, "node3", pci)
        cluster.wait(lambda n=number: len(_history(state, "job_xid")) >= n, 30, "the epilog's record")
        assert cluster.state("node3") == "idle", "fewer than three jobs drain nothing"
    _xid_job(cluster, "node3", pci)
    cluster.wait_state("node3", lambda s: "DRAIN" in s, 30, "drained after the third job")
    assert cluster.reason("node3").startswith(f"healthd: APP_XID_SUSPECT {pci} GPC 1 TPC 2"), cluster.reason("node3")


def test_a_prolog_at_its_deadline_exits_0(cluster: Any, tmp_path: Path, hung_mount: str) -> None:
    # The kernel log behind a hung FUSE mount: opening it blocks in the kernel for good.
    _node(cluster, "node1", tmp_path, kmsg=f"{hung_mount}/kmsg", jobs="prolog_timeout = 1")
    env = {**os.environ, "SLURM_JOB_ID": "77", "SLURM_JOB_USER": "alice"}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("healthd-prolog")), "--config", str(cluster.job_config("node1"))],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert done.returncode == 0, done
    assert "UNKNOWN PROLOG_TIMEOUT" in done.stdout
    # And through slurmd: the job runs on the node, which stays in service.
    job = cluster.submit("node1", seconds=1)
    assert cluster.state("node1") in ("allocated", "mixed", "idle")
    assert cluster.job_state(job) in ("RUNNING", "COMPLETED", "COMPLETING")


def test_the_epilog_runs_the_active_checks_only_when_configured(cluster: Any, tmp_path: Path) -> None:
    dcgmi = Dcgmi(tmp_path)
    dcgmi.prints("level2-pcie-fail.json", rc=226)
    _node(cluster, "node3", tmp_path, f'[checks.dcgm]\ndcgmi = "{dcgmi.tool}"\nlevel = 2\n')
    config = cluster.job_config("node3")

    def ended(job: str) -> bool:
        return f"healthd epilog: job {job}: " in cluster.job_log("node3").read_text()

    job = _short_job(cluster, "node3")
    cluster.wait(lambda: ended(job), 30, "the epilog")
    assert dcgmi.levels == [] and cluster.state("node3") == "idle", "not configured: not run"

    config.write_text(config.read_text() + "[active]\nat_epilog = true\n")
    job = _short_job(cluster, "node3")
    cluster.wait_state("node3", lambda s: "DRAIN" in s, 30, "drained by the epilog's active checks")
    assert dcgmi.levels == ["2", "2"], "run once the job ended, and rerun before the failure counts"
    assert cluster.reason("node3").startswith("healthd: DCGM_PCIE_FAILED GPU 1"), cluster.reason("node3")
    said = f"healthd epilog: job {job}: active checks: WARNING: drain_after_jobs"
    assert said in cluster.job_log("node3").read_text()
