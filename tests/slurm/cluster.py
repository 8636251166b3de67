"""A throwaway three-node Slurm cluster on localhost, for the tests and the benchmark.

munged, one slurmctld and three slurmd (``slurmd -N nodeK``) run with every port and
path under one temporary directory. Only processes started here are ever stopped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

NODES = ("node1", "node2", "node3")

HOOK_WRAPPER = """#!/bin/sh
# Runs healthd as HealthCheckProgram only on nodes listed in hook-nodes (one per line).
test -f {nodes} || exit 0
/bin/grep -qx "$SLURMD_NODENAME" {nodes} || exit 0
exec {healthd} check --once --only mounts --config {config} >>{log} 2>&1
"""


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def missing_prerequisite() -> Optional[str]:
    """Why the cluster cannot run here, or None."""
    if shutil.which("slurmctld") is None and not Path("/usr/sbin/slurmctld").exists():
        return "slurmctld is not installed (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the test cluster needs root (slurmd runs as root)"
    return None


def _munge_running() -> bool:
    return (
        subprocess.run("munge -n | unmunge", shell=True, capture_output=True, timeout=10, check=False).returncode == 0
    )


@dataclass
class Cluster:
    """The running cluster; ``env`` points client commands at its slurm.conf."""

    root: Path
    healthd_bin: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    munged: Optional[subprocess.Popen[bytes]] = None

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    @property
    def hook_nodes(self) -> Path:
        return self.root / "hook-nodes"

    @property
    def hook_config(self) -> Path:
        return self.root / "hook.toml"

    @property
    def hook_log(self) -> Path:
        return self.root / "hook.log"

    def write_conf(self) -> None:
        ctld_port, slurmd_base, *_ = _free_ports(2)
        node_ports = _free_ports(len(NODES))
        wrapper = self.root / "healthcheck.sh"
        wrapper.write_text(
            HOOK_WRAPPER.format(
                nodes=self.hook_nodes, healthd=self.healthd_bin, config=self.hook_config, log=self.hook_log
            )
        )
        wrapper.chmod(0o755)
        for sub in ("state", "spool", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        nodes = "\n".join(
            f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs=1 RealMemory=100 State=UNKNOWN"
            for name, port in zip(NODES, node_ports)
        )
        self.conf.write_text(
            f"""ClusterName=healthdtest
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_base}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation={self.root}/state
SlurmdSpoolDir={self.root}/spool/%n
SlurmctldPidFile={self.root}/slurmctld.pid
SlurmdPidFile={self.root}/slurmd-%n.pid
SlurmctldLogFile={self.root}/log/slurmctld.log
SlurmdLogFile={self.root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=2
MinJobAge=300
SlurmdTimeout=30
MessageTimeout=5
HealthCheckProgram={wrapper}
HealthCheckInterval=3
HealthCheckNodeState=ANY
{nodes}
PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
        )

    # -- daemons -----------------------------------------------------------------

    def start_munge(self) -> None:
        if _munge_running():
            return
        for directory in ("/run/munge", "/var/log/munge", "/var/lib/munge", "/etc/munge"):
            Path(directory).mkdir(parents=True, exist_ok=True)
            shutil.chown(directory, "munge", "munge")
        if not Path("/etc/munge/munge.key").exists():
            subprocess.run(["mungekey", "--create"], check=True, timeout=30)
            shutil.chown("/etc/munge/munge.key", "munge", "munge")
        self.munged = subprocess.Popen(
            ["munged", "--foreground", "--force"],
            user="munge",
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(_munge_running, 15, "munged to answer")

    def start_ctld(self) -> None:
        self.procs["slurmctld"] = subprocess.Popen(
            ["slurmctld", "-D", "-f", str(self.conf)],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(lambda: self.run("scontrol", "ping", check=False).returncode == 0, 20, "slurmctld to answer")

    def start_slurmd(self, node: str) -> None:
        self.procs[node] = subprocess.Popen(
            ["slurmd", "-D", "-f", str(self.conf), "-N", node],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def start(self) -> None:
        self.write_conf()
        self.start_munge()
        self.start_ctld()
        for node in NODES:
            self.start_slurmd(node)
        wait_for(lambda: all(self.state(n) == "idle" for n in NODES), 30, "all nodes idle")

    def shutdown(self) -> None:
        """Stop everything started here; jobs first, so no slurmstepd or job process outlives a failed run."""
        if self.procs.get("slurmctld") is not None and self.procs["slurmctld"].poll() is None:
            self.run("scancel", "--full", "-u", "root", check=False)
            # Shut down anyway after a while: stopping slurmd below ends what is left of the steps.
            with contextlib.suppress(TimeoutError):
                wait_for(lambda: not self.run("squeue", "-h", check=False).stdout.strip(), 15, "jobs cancelled")
        for name in list(self.procs):
            if name != "slurmctld":
                self.stop(name)
        self.stop("slurmctld")
        if self.munged is not None and self.munged.poll() is None:
            self.munged.terminate()
            self.munged.wait(timeout=10)

    # -- client commands ---------------------------------------------------------

    def wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        wait_for(predicate, timeout, what)

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=30, check=check)

    def state(self, node: str) -> str:
        """The long node state as sinfo prints it (``idle``, ``draining``, ``drained``, ``down``...).

        The ``*`` suffix (not responding) is dropped: Slurm sets it for a moment after
        every DOWN and RESUME until its next ping answers.
        """
        out = self.run("sinfo", "-h", "-N", "-n", node, "-o", "%T", check=False).stdout.split()
        return out[0].rstrip("*") if out else ""

    def reason(self, node: str) -> str:
        line = self.run("scontrol", "-o", "show", "node", node).stdout.strip()
        _, sep, reason = line.partition(" Reason=")
        return reason if sep else ""

    def show(self, node: str) -> str:
        return self.run("scontrol", "-o", "show", "node", node).stdout.strip()

    def submit(self, node: str, seconds: int = 300) -> str:
        out = self.run("sbatch", "--parsable", "--requeue", "-w", node, "-o", "/dev/null", "--wrap", f"sleep {seconds}")
        job = out.stdout.strip().split(";")[0]
        wait_for(lambda: self.job_state(job) == "RUNNING", 20, f"job {job} running")
        return job

    def job_state(self, job: str) -> str:
        out = self.run("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()
        if out:
            return out
        line = self.run("scontrol", "-o", "show", "job", job, check=False).stdout
        for token in line.split():
            if token.startswith("JobState="):
                return token.split("=", 1)[1]
        return ""

    def job_field(self, job: str, key: str) -> str:
        line = self.run("scontrol", "-o", "show", "job", job).stdout
        for token in line.split():
            if token.startswith(f"{key}="):
                return token.split("=", 1)[1]
        return ""

    def reset(self) -> None:
        """Cancel every job and bring every node back to idle with no reason."""
        self.run("scancel", "--full", "-u", "root", check=False)
        wait_for(lambda: not self.run("squeue", "-h", check=False).stdout.strip(), 20, "no jobs left")
        for node in NODES:
            if node not in self.procs or self.procs[node].poll() is not None:
                self.start_slurmd(node)
            if self.state(node) != "idle":
                self.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
        wait_for(lambda: all(self.state(n) == "idle" for n in NODES), 30, "all nodes idle after reset")
        if self.hook_nodes.exists():
            self.hook_nodes.unlink()


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
