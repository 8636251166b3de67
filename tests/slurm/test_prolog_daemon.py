"""The prolog from the running daemon's pass and the kernel log since it (healthd/cycle/prolog.py), real cluster.

Each case runs on two nodes with the same kernel log (a root-owned file in the kernel's
record format, ``[paths] kmsg``, beside a sysfs tree listing two NVIDIA GPUs and a
procfs with a boot id): node1 beside a daemon whose last pass is recorded (this test
process holds ``daemon.lock`` and records the pass, as ``healthd run`` does after each),
node2 without one, which runs the full prolog. The daemon's pass is a real pass
(``healthd check --once``, acting on the cluster). Both prologs must give the same exit
code and leave their node in the same Slurm state with the same reason; node1's must
have taken the path the case is about.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import pytest
from healthd_testkit.checks import only_checks
from healthd_testkit.jobnode import job_node
from healthd_testkit.paths import run_healthd
from healthd_testkit.xid import BOOT_B
from healthd_testkit.xid import Node as XidNode

from healthd.config.load import sha256_hex
from healthd.cycle.daemonpass import DaemonClaim

pytestmark = [pytest.mark.slurm, pytest.mark.root]

GPUS = ("0000:3b:00.0", "0000:5e:00.0")
FRESH_FOR = 300.0


def _fallen(gpu: int) -> str:
    """The driver's line for Xid 79 (GPU fallen off the bus: CRITICAL in NVIDIA's catalog) on GPU ``gpu``."""
    return f"NVRM: Xid (PCI:{GPUS[gpu][:-2]}): 79, pid=1234, name=python, GPU has fallen off the bus."


class Side:
    """One node's kernel log (two NVIDIA GPUs in its sysfs), procfs, state directory and config."""

    def __init__(self, cluster: Any, node: str, tmp_path: Path) -> None:
        self.cluster, self.node, self.config = cluster, node, cluster.job_config(node)
        machine = tmp_path / node / "machine"
        self.fake = XidNode(machine)
        for bdf in GPUS:
            self.fake.gpu(bdf)
        self.fake.log("Linux version 6.1")
        paths = f'sysfs = "{machine / "sys"}"\nprocfs = "{machine / "proc"}"'
        jobs = 'prolog_timeout = 20\nprolog_checks = ["xid"]'
        extra = only_checks("xid", "jobs")
        self.state = job_node(cluster, node, tmp_path, extra, kmsg=str(self.fake.kmsg), jobs=jobs, paths=paths)
        self.claim: Optional[DaemonClaim] = None

    def daemon_pass(self, age: float = 0.0) -> None:
        """A real pass of the node, recorded as the running daemon's ``age`` s ago (this process holds the lock)."""
        done = run_healthd("check", "--once", "--json", "--config", str(self.config))
        document = json.loads(done.stdout)
        self.claim = DaemonClaim(self.state)
        assert self.claim.acquire(5)
        config_sha256 = sha256_hex(self.config.read_bytes())
        now = time.time() - age
        self.claim.record(document, fresh_for=FRESH_FOR, config_sha256=config_sha256, dry_run=False, now=now)

    def prolog(self, gpus: Optional[str]) -> tuple[int, str]:
        """``healthd-prolog`` as slurmd starts it, with a job's environment; (exit code, output)."""
        env = {**os.environ, "SLURM_JOB_ID": "4242", "SLURM_JOB_USER": "root"}
        env.pop("SLURM_JOB_GPUS", None)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        if gpus is not None:
            env["SLURM_JOB_GPUS"] = gpus
        argv = [str(Path(sys.executable).with_name("healthd-prolog")), "--config", str(self.config)]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
        return done.returncode, done.stdout + done.stderr

    def outcome(self) -> tuple[bool, str]:
        """Whether Slurm has the node draining or drained, and why (without the ``[user@time]`` Slurm appends)."""
        drained = "DRAIN" in self.cluster.node_state(self.node)
        return drained, self.cluster.reason(self.node).split(" [")[0] if drained else ""

    def release(self) -> None:
        if self.claim is not None:
            self.claim.release()


# (case, the job's SLURM_JOB_GPUS, the exit code, whether node1 takes the fresh path, drained)
CASES = [
    ("clean", None, 0, True, False),
    ("critical_after_the_pass", "0", 2, True, True),
    ("critical_in_the_pass", "0", 2, True, True),
    ("critical_on_another_gpu", "1", 0, True, True),
    ("stale_pass", "0", 2, False, True),
    ("pass_of_another_boot", "0", 2, False, True),
]


@pytest.mark.parametrize(("case", "gpus", "code", "fresh", "drained"), CASES, ids=[c[0] for c in CASES])
def test_the_prolog_from_the_daemons_pass_ends_as_the_full_prolog(
    cluster: Any, tmp_path: Path, case: str, gpus: Optional[str], code: int, fresh: bool, drained: bool
) -> None:
    sides = [Side(cluster, node, tmp_path) for node in ("node1", "node2")]
    try:
        for side in sides:
            if case == "critical_in_the_pass":
                side.fake.log(_fallen(0))
            side.daemon_pass(age=FRESH_FOR + 30 if case == "stale_pass" else 0.0)
            if case == "pass_of_another_boot":
                side.fake.new_boot(BOOT_B)
            if case in ("critical_after_the_pass", "stale_pass", "pass_of_another_boot"):
                side.fake.log(_fallen(0))
            if case == "critical_on_another_gpu":
                side.fake.log(_fallen(0))
        sides[1].release()  # node2: no daemon, the full prolog
        (code1, out1), (code2, out2) = sides[0].prolog(gpus), sides[1].prolog(gpus)
    finally:
        for side in sides:
            side.release()
    assert (code1, code2) == (code, code), (out1, out2)
    assert ("daemon's" in out1) is fresh, out1
    assert "daemon's" not in out2, out2
    outcomes = [side.outcome() for side in sides]
    assert outcomes[0] == outcomes[1], (outcomes, out1, out2)
    assert outcomes[0][0] is drained, (outcomes, out1, out2)
    if drained:
        assert outcomes[0][1].startswith("healthd: XID_79"), outcomes


def _prolog_line(cluster: Any, job: str) -> str:
    """What node1's prolog printed for ``job`` (its job log), once it has: its verdict, or its timeout."""
    said: list[str] = []

    def printed() -> bool:
        log = cluster.job_log("node1")  # made by the first prolog's output
        text = log.read_text() if log.exists() else ""
        said[:] = [line for line in text.split("\n") if f"prolog: job {job}: " in line]
        return bool(said)

    cluster.wait(printed, 60, f"node1's prolog to print its line for job {job}")
    return said[0]


def _job_past_the_prolog_s_first_second(cluster: Any, command: str, *options: str) -> str:
    """A job on node1 (``sbatch --wrap COMMAND``) whose prolog read its config within its first second.

    The prolog has 1 s to import its flow and read ``prolog_timeout`` (jobhook.py,
    DEFAULT_PROLOG_TIMEOUT); a machine busy with other tests can take longer, and the prolog
    then lets the job run (UNKNOWN PROLOG_TIMEOUT), as it must. Such a job proves nothing
    here: it is cancelled and another submitted, whose prolog judges the same kernel log.
    """
    for _ in range(3):
        out = cluster.run("sbatch", "--parsable", *options, "-w", "node1", "-o", "/dev/null", "--wrap", command)
        job = out.stdout.strip().split(";")[0]
        if "PROLOG_TIMEOUT" not in _prolog_line(cluster, job):
            return job
        cluster.run("scancel", job, check=False)
    pytest.fail("three prologs in a row passed their first second on this machine")


def test_a_job_behind_a_new_critical_xid_is_requeued_and_the_node_drained_by_the_daemons_pass_path(
    cluster: Any, tmp_path: Path
) -> None:
    """Through slurmd: a clean daemon pass, then Xid 79: the prolog drains with healthd's reason, Slurm requeues."""
    side = Side(cluster, "node1", tmp_path)
    try:
        side.daemon_pass()
        first = _job_past_the_prolog_s_first_second(cluster, "true")
        cluster.wait(lambda: cluster.job_state(first) in ("COMPLETED", ""), 60, f"job {first} done")
        side.fake.log(_fallen(0))
        job = _job_past_the_prolog_s_first_second(cluster, "sleep 30", "--requeue")
        cluster.wait_state("node1", lambda s: "DRAIN" in s, 60, "drained by the prolog")
        cluster.wait(lambda: cluster.job_state(job) == "PENDING", 30, f"job {job} requeued")
    finally:
        side.release()
    assert cluster.reason("node1").startswith("healthd: XID_79"), cluster.reason("node1")
    log = cluster.job_log("node1").read_text()
    assert f"job {first}: OK (daemon's pass), kernel log since: job allowed" in log, log
    assert f"job {job}: healthd: XID_79" in log and "(kernel log since the daemon's pass)" in log, log
