"""healthd as Slurm's Prolog= and Epilog= on the real test cluster (healthd/cycle/prolog.py, epilog.py).

The cluster's slurm.conf runs ``healthd prolog``/``epilog`` through a wrapper, only on
nodes listed in ``prolog-nodes`` and with that node's ``job-NODE.toml``. The epilog's
events are written to the real kernel log (/dev/kmsg) by the job itself, on a random
PCI address (this run's marker); they are application Xids (13), graded OK, so nothing
left in the ring buffer can alarm a later healthd on this machine.

The triage tests run jobs of real unprivileged users (``sbatch --uid``), who cannot
write the kernel log: there the node's kernel log is a root-owned file in the kernel's
record format (``[paths] kmsg``) and the test appends the driver's line while the
user's job runs, on a GPU of a sysfs tree (``[paths] sysfs``) that lists NVIDIA GPUs.
"""

from __future__ import annotations

import json
import os
import pwd
import random
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from healthd_testkit.cluster import GRES_NODE
from healthd_testkit.dcgmi import Dcgmi
from healthd_testkit.jobnode import job_node, missing_mount_node
from healthd_testkit.paths import run_healthd
from healthd_testkit.releases import every_release
from healthd_testkit.xid import Node as XidNode

pytestmark = [pytest.mark.slurm, pytest.mark.root]


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


@every_release
def test_a_critical_prolog_requeues_the_job_and_drains_with_healthds_reason(cluster: Any, tmp_path: Path) -> None:
    missing_mount_node(cluster, "node1", tmp_path, "/healthd-test-not-mounted")
    out = cluster.run("sbatch", "--parsable", "--requeue", "-w", "node1", "-o", "/dev/null", "--wrap", "sleep 30")
    job = out.stdout.strip().split(";")[0]
    cluster.wait_state("node1", lambda s: "DRAIN" in s, 60, "drained by the prolog")
    cluster.wait(lambda: cluster.job_state(job) == "PENDING", 30, f"job {job} requeued")
    assert cluster.reason("node1").startswith("healthd: MOUNT_MISSING /healthd-test-not-mounted"), cluster.reason(
        "node1"
    )
    assert "MOUNT_MISSING" in cluster.job_log("node1").read_text()


@every_release
def test_a_clean_prolog_starts_the_job_and_the_epilog_records_its_xids(cluster: Any, tmp_path: Path) -> None:
    state = job_node(cluster, "node2", tmp_path)
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


# Real unprivileged accounts for the jobs: no home, no shell, no password.
USERS = ("healthd-job-a", "healthd-job-b", "healthd-job-c")
# A job's states once its epilog has ended (Slurm shows COMPLETING until then).
ENDED = ("CANCELLED", "COMPLETED", "FAILED", "")
# The node's NVIDIA GPUs in the triage tests' sysfs, in NVML's order (by PCI address).
GPUS = ("0000:3b:00.0", "0000:5e:00.0")


def _let_users_in(cluster: Any) -> None:
    """Search permission (o+x, never read) on the directories down to slurmd's spool, for users' job scripts.

    Again before each node's jobs: a slurmd restarted by an earlier test (a simulated reboot)
    makes its spool directory anew, and a user's batch script there then fails at once.
    """
    for directory in [*cluster.root.glob("spool*"), *(cluster.root / "spool").glob("*"), cluster.root,
                      *cluster.root.parents]:  # fmt: skip
        if directory == Path(tempfile.gettempdir()):
            break
        if directory.is_dir():
            directory.chmod(directory.stat().st_mode | stat.S_IXOTH)


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory, host_guard: Any) -> Any:
    """A Slurm cluster of this module's own, in place of the session's (conftest's ``cluster`` uses it here).

    Users' jobs must run side by side for minutes here; in the session's cluster, what earlier
    tests did to the simulated machines (reboots, slurmd restarted in new namespaces, nodes
    powered down and up) ended some users' jobs at once in a full run.
    """
    from healthd_testkit import cluster as cluster_module

    why = cluster_module.missing_prerequisite()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("slurm-jobs")
    own = cluster_module.Cluster(root=root, healthd_bin=Path(sys.executable).with_name("healthd"))
    with cluster_module.running(own, host_guard.allow_slurm_conf):
        yield own


@pytest.fixture(scope="module")
def users(slurm_cluster: Any) -> tuple[str, ...]:
    """Three real unprivileged users, created with useradd if missing and left in place (harmless).

    Their jobs' scripts lie in slurmd's spool, under the session's private temporary
    directories: those get search permission (o+x, never read) so that a job can start.
    """
    _let_users_in(slurm_cluster)
    for name in USERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            # Exit 9 ("already exists") is another test run creating it at the same moment: fine.
            argv = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
            subprocess.run(argv, check=False)
        assert pwd.getpwnam(name).pw_uid != 0
    return USERS


class Triage:
    """A node of the triage tests: its kernel-log file and sysfs (root's), its state, and its users' jobs."""

    def __init__(self, cluster: Any, node: str, tmp_path: Path, jobs: str = "") -> None:
        self.cluster, self.node = cluster, node
        _let_users_in(cluster)
        self.fake = XidNode(tmp_path / "machine")
        for bdf in GPUS:
            self.fake.gpu(bdf)
        self.fake.log("Linux version 6.1")
        paths = f'sysfs = "{tmp_path / "machine" / "sys"}"'
        settings = f'prolog_timeout = 20\nprolog_checks = ["jobs"]\n{jobs}'
        self.state = job_node(cluster, node, tmp_path, kmsg=str(self.fake.kmsg), jobs=settings, paths=paths)

    def start(self, user: str, *options: str, prolog: bool = True) -> str:
        """A job of ``user`` that runs until cancelled; returns once its script runs (its prolog noted its position).

        A prolog that missed its 1 s deadline on this loaded test machine (its position
        not noted) is not what these tests are about: that job is ended and another started.
        """
        for _ in range(3):
            job = self.submit(user, *options)
            self.cluster.wait(lambda j=job: self.launched(j, user), 60, f"the batch script of job {job}")
            if not prolog or self.positioned(job):
                return job
            self.end(job)
        raise AssertionError(f"three prologs on {self.node} in a row noted no kernel-log position")

    def submit(self, user: str, *options: str) -> str:
        """``sbatch`` a job of ``user`` on the node that runs until cancelled; returns its id."""
        # --gid as well: with --uid alone the job keeps root's group, and slurmd's script is not its to run.
        argv = ["sbatch", "--parsable", f"--uid={user}", f"--gid={user}", "--chdir=/tmp", "--oversubscribe"]
        out = self.cluster.run(*argv, "-w", self.node, *options, "-o", "/dev/null", "--wrap", "sleep 300")
        return str(out.stdout.strip().split(";")[0])

    def positioned(self, job: str) -> bool:
        """Whether the job's prolog noted where the kernel log stood."""
        starts = [e for e in _history(self.state, "job_start") if e["details"]["job"] == job]
        return any(isinstance(e["details"].get("kmsg_seq"), int) for e in starts)

    def launched(self, job: str, user: str = "") -> bool:
        """Whether slurmd has started the job's script as its user (after the prolog), by slurmd's log.

        With ``user``, only a launch as that user's uid counts: slurmctld restarted without its
        state by an earlier test numbers jobs from 1 again, and the log keeps the old job's line.
        """
        log = self.cluster.root / "log" / f"slurmd-{self.node}.log"
        uid = str(pwd.getpwnam(user).pw_uid) if user else ""
        return f"Launching batch job {job} for UID {uid}" in log.read_text(errors="replace")

    def xid(self, gpu: int = 0, code: int = 31) -> None:
        """The driver's line for an application Xid on GPU ``gpu``, as the kernel would log it."""
        self.fake.log(f"NVRM: Xid (PCI:{GPUS[gpu][:-2]}): {code}, pid=4242, name=python, Ch 00000010, MMU Fault")

    def end(self, *jobs: str) -> None:
        """Cancel the jobs and wait for their epilogs (Slurm shows a job COMPLETING until its epilog has ended)."""
        self.cluster.run("scancel", *jobs)
        for job in jobs:
            self.cluster.wait(lambda j=job: self.cluster.job_state(j) in ENDED, 60, f"the epilog of job {job}")

    def events(self) -> str:
        """The node's job events, for a failing assertion to show."""
        kinds = ("job_start", "job_end", "job_xid")
        return json.dumps([(e["kind"], e["at"], e["details"]) for k in kinds for e in _history(self.state, k)])

    def recorded(self, kind: str) -> list[str]:
        """The jobs of the node's ``kind`` events (``job_start``, ``job_xid``, ``job_end``), in order."""
        return [e["details"]["job"] for e in _history(self.state, kind)]

    def run_job(self, user: str, xid: bool = True) -> str:
        job = self.start(user)
        if xid:
            self.xid()
        self.end(job)
        return job


def test_three_jobs_of_one_user_never_drain(cluster: Any, users: tuple[str, ...], tmp_path: Path) -> None:
    node = Triage(cluster, "node1", tmp_path)
    jobs = [node.run_job(users[0]) for _ in range(3)]
    assert node.recorded("job_xid") == jobs, "each job's own Xid, once"
    assert cluster.state("node1") == "idle", cluster.reason("node1")


def test_an_array_of_one_user_never_drains(cluster: Any, users: tuple[str, ...], tmp_path: Path) -> None:
    node = Triage(cluster, "node1", tmp_path)
    array = node.submit(users[0], "--array=1-3%1")  # its tasks one after another, each its own job id

    def task(number: int) -> tuple[str, str]:
        """The job id and state of task ``number`` ("" when Slurm no longer lists it)."""
        listed = cluster.run("squeue", "-h", "-r", "-j", array, "-o", "%i %A %T", check=False).stdout.splitlines()
        for line in listed:
            name, job, state = line.split()
            if name == f"{array}_{number}":
                return job, state
        return "", ""

    tasks = []
    for number in (1, 2, 3):
        cluster.wait(lambda n=number: task(n)[1] == "RUNNING", 60, f"task {number} of array {array} running")
        tasks.append(task(number)[0])
        cluster.wait(lambda: node.launched(tasks[-1], users[0]), 30, f"the batch script of job {tasks[-1]}")
        node.xid()
        cluster.run("scancel", f"{array}_{number}")
        cluster.wait(lambda n=number: task(n)[1] not in ("RUNNING", "COMPLETING"), 60, f"the epilog of {tasks[-1]}")
    recorded = node.recorded("job_xid")
    assert recorded and len(set(recorded)) == len(recorded) and set(recorded) <= set(tasks), (recorded, tasks)
    assert cluster.state("node1") == "idle", cluster.reason("node1")


def test_the_same_application_xid_under_jobs_of_two_users_drains_after_jobs(
    cluster: Any, users: tuple[str, ...], tmp_path: Path
) -> None:
    node = Triage(cluster, "node1", tmp_path)
    node.run_job(users[0])
    node.run_job(users[1])
    assert cluster.state("node1") == "idle", "fewer than three jobs drain nothing"
    node.run_job(users[0])
    cluster.wait_state("node1", lambda s: "DRAIN" in s, 30, "drained after the third job")
    assert cluster.reason("node1").startswith(f"healthd: APP_XID_SUSPECT {GPUS[0][:-2]}"), cluster.reason("node1")


def test_one_xid_beside_unconfined_jobs_is_nobodys(cluster: Any, users: tuple[str, ...], tmp_path: Path) -> None:
    # No GPU GRES on node2: no job was confined to some GPUs, so any of them may have caused it.
    node = Triage(cluster, "node2", tmp_path)
    jobs = [node.start(user) for user in users]
    node.xid()
    node.end(*jobs)
    assert node.recorded("job_xid") == [], node.events()
    assert cluster.state("node2") == "idle", cluster.reason("node2")


def test_one_xid_beside_cpu_only_jobs_on_a_gres_node_is_the_gpu_jobs_once(
    cluster: Any, users: tuple[str, ...], tmp_path: Path
) -> None:
    node = Triage(cluster, GRES_NODE, tmp_path)
    gpu_job = node.start(users[0], "--gres=gpu:1")
    cpu_jobs = [node.start(user) for user in users[1:]]
    # The GPU Slurm gave the job (SLURM_JOB_GPUS, as its prolog recorded it): not always the first,
    # when an earlier test's job still held it at allocation.
    (start,) = [e for e in _history(node.state, "job_start") if e["details"]["job"] == gpu_job]
    node.xid(gpu=int(start["details"]["gpus"][0]))
    node.end(gpu_job, *cpu_jobs)
    assert node.recorded("job_xid") == [gpu_job], node.events()
    assert cluster.state(GRES_NODE) == "idle", cluster.reason(GRES_NODE)


def test_an_old_xid_is_not_a_job_without_a_prolog_position(
    cluster: Any, users: tuple[str, ...], tmp_path: Path
) -> None:
    node = Triage(cluster, "node1", tmp_path)
    node.xid()  # logged before any of the jobs
    cluster.prolog_nodes.unlink()  # Prolog= and Epilog= enabled while the jobs run
    jobs = [node.start(user, prolog=False) for user in users]
    cluster.prolog_nodes.write_text("node1\n")
    node.end(*jobs)
    assert node.recorded("job_xid") == [], node.events()
    ends = [e for e in _history(node.state, "job_end") if e["details"]["job"] in jobs]
    assert {(e["status"], "no prolog position" in e["message"]) for e in ends} == {("UNKNOWN", True)}
    assert cluster.state("node1") == "idle", cluster.reason("node1")
    # Their windows closed where the log ended: a later job's own Xid is its.
    later = node.run_job(users[0])
    assert node.recorded("job_xid") == [later]


def test_a_prolog_at_its_deadline_exits_0(cluster: Any, tmp_path: Path, hung_mount: str) -> None:
    # The kernel log behind a hung FUSE mount: opening it blocks in the kernel for good.
    job_node(cluster, "node1", tmp_path, kmsg=f"{hung_mount}/kmsg", jobs="prolog_timeout = 1")
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
    job_node(cluster, "node3", tmp_path, f'[checks.dcgm]\ndcgmi = "{dcgmi.tool}"\nlevel = 2\n')
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


def test_buggy_jobs_and_administrator_resumes_never_send_a_node_to_repair(
    cluster: Any, users: tuple[str, ...], tmp_path: Path
) -> None:
    """Issue scenario: five buggy jobs of two users, with an administrator's resume after each drain,
    raised APP_XID_SUSPECT three times and sent the node to REPAIR. Application-Xid suspicion is
    no hardware unit's fault (docs/escalation.md): each raise drains after jobs, none escalates."""
    node = Triage(cluster, "node1", tmp_path)
    owners = [users[0], users[1], users[0], users[1], users[0]]
    drains = 0
    for number, user in enumerate(owners, start=1):
        node.run_job(user)
        if number < 3:
            continue
        cluster.wait_state("node1", lambda s: "DRAIN" in s, 30, f"drained after job {number}")
        reason = cluster.reason("node1")
        assert reason.startswith("healthd: APP_XID_SUSPECT"), reason
        drains += 1
        if number < len(owners):
            cluster.run("scontrol", "update", "NodeName=node1", "State=RESUME")
            cluster.wait_state("node1", lambda s: "DRAIN" not in s, 30, "back in service after the resume")
    assert drains == 3
    assert "REPAIR" not in cluster.reason("node1")
    assert "REPAIR" not in json.dumps(_history(node.state, "action"))
