"""A throwaway three-node Slurm cluster on localhost, for the tests and the benchmark.

munged, one slurmctld and three slurmd (``slurmd -N nodeK``) run with every port and
path under one temporary directory. Only processes started here are ever stopped.
munged is the cluster's own too (own key and socket, ``AuthInfo=socket=`` in slurm.conf):
a munged shared with another cluster on the same machine dies when that one shuts down.

The machines are simulated, so that reboots and power saving run for real in Slurm.
``RebootProgram``, ``SuspendProgram`` and ``ResumeProgram`` are small scripts under the
root that run this file (``python cluster.py reboot|suspend|resume ROOT [NODES]``). A
machine that goes off loses its slurmd; a machine that boots gets a new boot id under
its own procfs root (``<root>/procfs/<node>``, for a test's ``[paths] procfs``), a line in
``<root>/boots.log`` and a slurmd started in a new time namespace whose uptime starts at
zero. slurmctld counts a reboot or a power-up as done only when the node registers
with a boot time no older than its request; a plain slurmd restart keeps the machine's
real boot time, and the reboot times out.

With ``accounting=True`` the cluster also keeps Slurm accounting, as a site with
slurmdbd does: a private MariaDB server (its own datadir, socket and port, run as root
from ``mariadbd --no-defaults``, so no option file of the machine's MariaDB applies)
and a slurmdbd on its own port, both started before slurmctld, so that the cluster is
registered in the database once (``sacctmgr -i add cluster``) and slurmctld never
restarts for it. ``sacct`` and ``sacctmgr`` then answer with the cluster's ``env``.

With ``chroot`` set to a Debian root holding another Slurm release
(healthd_testkit.releases), every daemon and client command of the cluster runs
through ``chroot ROOT``: the cluster's own directory and the test's ``shared``
directories are bind-mounted at the same paths inside, and proc too, so that each
path means the same on both sides. ``bin_dir`` then holds wrappers (``scontrol`` runs
the root's scontrol) for healthd's ``[slurm] bin_dir``.

``scheduler`` is slurm.conf's SchedulerType: ``sched/builtin`` by default, whose FIFO
refuses heterogeneous jobs; ``sched/backfill`` runs them. With ``configless=True`` the
nodes are configless (slurmctld ``SlurmctldParameters=enable_configless``): each slurmd
starts with ``--conf-server`` and no slurm.conf, in a mount namespace of its own, as on
a machine of its own: a private ``/run`` (where slurmd links ``/run/slurm/conf`` to the
configuration it fetched and caches under its spool directory) and Slurm's default
munge socket there pointing at the cluster's munged, since slurmd talks to slurmctld
before it has the config that names the socket. Only the controller's side (this
file's client commands) reads ``slurm.conf``; ``on_node`` runs a command on a node as
its slurmd's children run, in that namespace, with no ``SLURM_CONF``.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, NamedTuple, Optional

if __package__ in (None, ""):  # run as a script: the simulated machines' programs start this file
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from healthd_testkit.net import free_ports
from healthd_testkit.paths import Below
from healthd_testkit.waiting import wait_for

NODES = ("node1", "node2", "node3")
# The node whose GPUs Slurm gives out as GRES (gres.conf), and their indices. The
# partition has OverSubscribe=YES, so jobs that ask (``--oversubscribe``) share a node.
GRES_NODE = "node3"
GRES_GPUS = (0, 1)
# How long slurmctld waits for a rebooted or resumed node to register with a new boot
# before it marks it DOWN; a simulated boot takes about 3 seconds.
RESUME_TIMEOUT = 60
# How long slurmctld shows a node POWERING_DOWN (``%``) before it counts it powered down.
SUSPEND_TIMEOUT = 5
# The simulated machine stays off this long, so that its new boot time (slurmd derives it
# from the uptime, in whole seconds) is surely later than slurmctld's reboot or resume
# request: slurmctld ignores a registration whose boot time is older than the request.
OFF_SECONDS = 2.0
# slurmctld powers nodes down by itself after this long idle: never within a test session.
SUSPEND_TIME = 86400
# The simulated machines' environment: slurmd and slurmctld pass their own to the programs.
MACHINE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
# The client commands a root's ``bin_dir`` wraps (tests and healthd call these).
CLIENT_COMMANDS = ("scontrol", "sinfo", "squeue", "sacct", "sacctmgr", "sbatch", "srun", "scancel", "sdiag", "sreport")

MACHINE_WRAPPER = """#!/bin/sh
# {role} of the test cluster: runs cluster.py, which simulates the machines.
exec {python} {script} {action} {root} "$@"
"""

HOOK_WRAPPER = """#!/bin/sh
# Runs healthd as HealthCheckProgram only on nodes listed in hook-nodes (one per line).
test -f {nodes} || exit 0
/bin/grep -qx "$SLURMD_NODENAME" {nodes} || exit 0
exec {healthd} check --once --only mounts --config {config} >>{log} 2>&1
"""

# A configless node's own machine: run with ``unshare --mount`` (private propagation), it
# mounts a /run of its own under the root $3 ("" for this machine's Slurm; mounted from
# outside, as sid's root has no mount(8)), points Slurm's default munge socket (slurm.conf(5)
# AuthInfo) at the cluster's ($1), writes its pid to $2 for on_node and execs the rest
# (slurmd, through chroot for a root). /etc/slurm is hidden too: the client commands read a
# slurm.conf there before the one slurmd caches, and on a machine that is a Slurm node it
# would be the machine's own.
NODE_NAMESPACE = """\
socket=$1 pidfile=$2 root=$3
shift 3
mount -t tmpfs -o mode=755 healthd-node "$root/run" || exit 1
if [ -d "$root/etc/slurm" ]; then mount -t tmpfs -o mode=755 healthd-node-etc "$root/etc/slurm" || exit 1; fi
mkdir -p "$root/run/munge"
ln -s "$socket" "$root/run/munge/munge.socket.2"
echo $$ > "$pidfile"
exec "$@"
"""

# Debian 12's packages for accounting (slurmdbd(8) and its MySQL/MariaDB storage).
ACCOUNTING_PROGRAMS = ("slurmdbd", "mariadbd", "mariadb-install-db")
# The database slurmdbd keeps (slurmdbd.conf(5) StorageLoc; this is its default name).
ACCOUNTING_DB = "slurm_acct_db"
# A small InnoDB: the default log file alone is 96 MiB, written out at install.
MARIADB_SIZES = ("--innodb-log-file-size=4M", "--innodb-buffer-pool-size=16M")

# Runs `healthd prolog`/`healthd epilog` only on nodes listed in prolog-nodes, with that node's
# config (job-NODE.toml): other tests' jobs start as if there were no Prolog= or Epilog=.
JOB_WRAPPER = """#!/bin/sh
test -f {nodes} || exit 0
/bin/grep -qx "$SLURMD_NODENAME" {nodes} || exit 0
exec {healthd} {action} --config {root}/job-"$SLURMD_NODENAME".toml >>{root}/job-"$SLURMD_NODENAME".log 2>&1
"""


@contextlib.contextmanager
def running(cluster: Cluster, allow: Callable[[Path], None]) -> Iterator[Cluster]:
    """``cluster`` started, its slurm.conf let past the host guard (``allow``), stopped however the block ends."""
    allow(cluster.conf)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.shutdown()


def missing_prerequisite() -> Optional[str]:
    """Why the cluster cannot run here, or None."""
    if shutil.which("slurmctld") is None and not Path("/usr/sbin/slurmctld").exists():
        return "slurmctld is not installed (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the test cluster needs root (slurmd runs as root)"
    return None


def _munge_running(socket: Path, prefix: tuple[str, ...] = ()) -> bool:
    encoded = subprocess.run([*prefix, "munge", "-n", "-S", str(socket)], capture_output=True, timeout=10, check=False)
    if encoded.returncode != 0:
        return False
    decoded = subprocess.run(
        [*prefix, "unmunge", "-S", str(socket)], input=encoded.stdout, capture_output=True, timeout=10, check=False
    )
    return decoded.returncode == 0


def _spawn(argv: list[str], env: Optional[dict[str, str]] = None) -> subprocess.Popen[bytes]:
    """A daemon of the cluster, in the foreground of its own session, its output to its log file only."""
    return subprocess.Popen(argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def missing_accounting() -> Optional[str]:
    """Why the cluster cannot keep accounting here, or None."""
    missing = [name for name in ACCOUNTING_PROGRAMS if shutil.which(name, path=MACHINE_PATH) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install slurmdbd mariadb-server)"
    return None


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


class Boot(NamedTuple):
    """One simulated boot, as logged in ``<root>/boots.log``: ``how`` is "reboot" or "resume"."""

    node: str
    at: float
    boot_id: str
    how: str


@dataclass
class Cluster:
    """The running cluster; ``env`` points client commands at its slurm.conf."""

    root: Path
    healthd_bin: Path
    # Nodes defined in slurm.conf (and the partition) that never register: they grow
    # slurmctld's node table to a large cluster's size for the scale benchmark
    # (bench/bench_scale.py) and cost nothing else.
    extra_nodes: int = 0
    # More nodes of a large GPU cluster (96 CPUs, 8 GPUs, features) in State=CLOUD: listed and
    # drainable, never pinged, so slurmctld holds a 100,000-node table on one machine (UNKNOWN
    # nodes that many exhaust its threads). Only for bench/bench_breaker_shards.py.
    cloud_nodes: int = 0
    # Of those, the names that are never-registered nodes instead (State=UNKNOWN): nodes that
    # healthd's passes may take out (it leaves powered-down CLOUD nodes alone). With them,
    # SlurmdTimeout=0: slurmctld would otherwise set them DOWN for not responding, and healthd
    # leaves a node DOWN by another's hand alone too.
    cloud_sample: frozenset[str] = frozenset()
    # How long slurmctld may take to answer its first ping: about 70 s with a 100,000-node table.
    ctld_timeout: float = 20.0
    accounting: bool = False
    # A root holding another Slurm release (healthd_testkit.releases), and the directories
    # of this machine its daemons see at the same paths (the tests' temporary directory).
    chroot: Optional[Path] = None
    shared: tuple[Path, ...] = ()
    # slurm.conf's SchedulerType, and whether the nodes run configless (the module's docstring).
    scheduler: str = "sched/builtin"
    configless: bool = False
    # slurm.conf's PrologFlags (``Alloc``: the Prolog runs on every node of a job at allocation).
    prolog_flags: str = ""
    # ``24.11``: the release of slurmd that runs (set by start()).
    version: str = ""
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    mounts: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    munged: Optional[subprocess.Popen[bytes]] = None
    db_port: int = 0
    dbd_port: int = 0

    conf = Below("slurm.conf")

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    @property
    def prefix(self) -> tuple[str, ...]:
        """What every command of the cluster starts with: ``chroot ROOT``, or nothing for this machine's Slurm."""
        return () if self.chroot is None else ("/usr/sbin/chroot", str(self.chroot))

    def _env(self, base: Optional[dict[str, str]] = None) -> Optional[dict[str, str]]:
        """A command's environment: ``base``; inside a root, only the machine's PATH and SLURM_CONF."""
        if self.chroot is None:
            return base
        return {"PATH": MACHINE_PATH, "SLURM_CONF": str(self.conf), "LC_ALL": "C"}

    bin_dir = Below("bin")

    hook_nodes = Below("hook-nodes")
    hook_config = Below("hook.toml")
    hook_log = Below("hook.log")
    prolog_nodes = Below("prolog-nodes")

    def job_config(self, node: str) -> Path:
        return self.root / f"job-{node}.toml"

    def job_log(self, node: str) -> Path:
        return self.root / f"job-{node}.log"

    munge_socket = Below("munge", "munge.socket")

    @property
    def name(self) -> str:
        """slurm.conf's ClusterName, also the cluster's name in accounting."""
        return "healthdtest"

    @property
    def dbd_conf(self) -> Path:
        # slurmdbd has no option for its config: it reads slurmdbd.conf next to SLURM_CONF.
        return self.root / "slurmdbd.conf"

    db_dir = Below("mariadb")

    # -- the simulated machines --------------------------------------------------

    def procfs(self, node: str) -> Path:
        """The node's own procfs root, for ``[paths] procfs``.

        It holds what a boot changes and healthd reads: ``sys/kernel/random/boot_id``
        and ``stat`` (``btime`` only). Checks that read other procfs files (mountinfo,
        the process table, modules) need the real /proc.
        """
        return self.root / "procfs" / node

    def boot_id(self, node: str) -> str:
        return (self.procfs(node) / "sys" / "kernel" / "random" / "boot_id").read_text().strip()

    def boots(self, node: Optional[str] = None) -> list[Boot]:
        """The simulated boots so far (of ``node``, or of every node), oldest first."""
        return [b for b in read_boots(self.root) if node is None or b.node == node]

    def reboots(self, node: Optional[str] = None) -> list[Boot]:
        """The boots that RebootProgram made (``scontrol reboot``), oldest first."""
        return [b for b in self.boots(node) if b.how == "reboot"]

    def in_transition(self, node: str) -> bool:
        """The simulated machine is going off or booting (its slurmd stopped or not yet running again)."""
        return transition_marker(self.root, node).exists()

    def wait_booted(self, node: str, count: int = 1, timeout: float = 30) -> Boot:
        """Wait until ``node`` has booted ``count`` times in all and its slurmd runs; returns the last boot."""
        wait_for(
            lambda: len(self.boots(node)) >= count and not self.in_transition(node) and self.slurmd_running(node),
            timeout,
            f"boot #{count} of {node}",
        )
        return self.boots(node)[-1]

    def wait_machines_settled(self, timeout: float = 30) -> None:
        wait_for(lambda: not any(self.in_transition(n) for n in NODES), timeout, "simulated machines to settle")

    # -- configuration -----------------------------------------------------------

    def _write_program(self, name: str, role: str, action: str) -> Path:
        path = self.root / name
        # Inside a root, the root's Python runs this file (bind-mounted there by start()).
        python = sys.executable if self.chroot is None else "/usr/bin/python3"
        path.write_text(
            MACHINE_WRAPPER.format(
                role=role, python=python, script=Path(__file__).resolve(), action=action, root=self.root
            )
        )
        path.chmod(0o755)
        return path

    def write_conf(self) -> None:
        ctld_port, slurmd_base, *_ = free_ports(2)
        node_ports = free_ports(len(NODES))
        wrapper = self.root / "healthcheck.sh"
        wrapper.write_text(
            HOOK_WRAPPER.format(
                nodes=self.hook_nodes, healthd=self.healthd_bin, config=self.hook_config, log=self.hook_log
            )
        )
        wrapper.chmod(0o755)
        for action in ("prolog", "epilog"):
            job_wrapper = self.root / f"{action}.sh"
            job_wrapper.write_text(
                JOB_WRAPPER.format(nodes=self.prolog_nodes, healthd=self.healthd_bin, action=action, root=self.root)
            )
            job_wrapper.chmod(0o755)
        # slurmd runs RebootProgram through system() with no arguments; slurmctld runs
        # SuspendProgram and ResumeProgram with the nodes as a hostlist argument.
        reboot = self._write_program("reboot.sh", "RebootProgram", "reboot")
        suspend = self._write_program("suspend.sh", "SuspendProgram", "suspend")
        resume = self._write_program("resume.sh", "ResumeProgram", "resume")
        for sub in ("state", "spool", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        for node in NODES:
            (self.root / "spool" / node).mkdir(exist_ok=True)
            write_boot(self.procfs(node), str(uuid.uuid4()), time.time())
        self._write_gres()
        self._write_cgroup_conf()
        nodes = "\n".join(
            f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs=1 RealMemory=100 State=UNKNOWN"
            + (f" Gres=gpu:{len(GRES_GPUS)}" if name == GRES_NODE else "")
            for name, port in zip(NODES, node_ports)
        )
        if self.extra_nodes:
            # Port 29999 on loopback: slurmctld's pings to them fail at once.
            last = f"{self.extra_nodes:05d}"
            nodes += f"\nNodeName=n[00001-{last}] NodeAddr=127.0.0.1 Port=29999 CPUs=1 RealMemory=100 State=UNKNOWN"
        nodes += self._cloud_conf()
        self.conf.write_text(
            f"""ClusterName={self.name}
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_base}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
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
SchedulerType={self.scheduler}
{self._scheduler_parameters()}
{"SlurmctldParameters=enable_configless" if self.configless else ""}
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=2
MinJobAge=300
SlurmdTimeout={30 if not self.cloud_sample else 0}
MessageTimeout=5
RebootProgram={reboot}
SuspendProgram={suspend}
ResumeProgram={resume}
SuspendTime={SUSPEND_TIME}
SuspendTimeout={SUSPEND_TIMEOUT}
ResumeTimeout={RESUME_TIMEOUT}
GresTypes=gpu
{"PrivateData=cloud" if self.cloud_nodes else ""}
HealthCheckProgram={wrapper}
HealthCheckInterval=3
HealthCheckNodeState=ANY
Prolog={self.root}/prolog.sh
{f"PrologFlags={self.prolog_flags}" if self.prolog_flags else ""}
Epilog={self.root}/epilog.sh
{nodes}
PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
{self._accounting_conf()}"""
        )

    def _scheduler_parameters(self) -> str:
        """Backfill every second: heterogeneous jobs start only from its pass (every 30 s by default)."""
        return "SchedulerParameters=bf_interval=1" if self.scheduler == "sched/backfill" else ""

    def cloud_names(self) -> list[str]:
        """The names of ``cloud_nodes``: ``ca00001``-``ca50000``, ``cb00001``... (50,000 a prefix)."""
        return [f"c{chr(97 + i // 50_000)}{i % 50_000 + 1:05d}" for i in range(self.cloud_nodes)]

    def _cloud_conf(self) -> str:
        """slurm.conf lines of ``cloud_nodes``, ``cloud_sample`` among them as never-registered nodes.

        At most 50,000 names a prefix (slurmctld refuses a range of more than 65,536 hosts),
        and 50 ranges a line.
        """
        spans: dict[bool, list[str]] = {True: [], False: []}
        for prefix in sorted({name[:2] for name in self.cloud_names()}):
            numbers = [(int(n[2:]), n in self.cloud_sample) for n in self.cloud_names() if n[:2] == prefix]
            for sample, run in itertools.groupby(numbers, key=lambda pair: pair[1]):
                values = [number for number, _ in run]
                one = values[0] == values[-1]
                spans[sample].append(
                    f"{prefix}{values[0]:05d}" if one else f"{prefix}[{values[0]:05d}-{values[-1]:05d}]"
                )
        kinds = {True: "State=UNKNOWN", False: "State=CLOUD"}
        return "".join(
            f"\nNodeName={','.join(chunk[k : k + 50])} NodeAddr=127.0.0.1 Port=29999 CPUs=96 RealMemory=100 "
            f"Gres=gpu:8 Features=h100,ib {kinds[sample]}"
            for sample, chunk in spans.items()
            for k in range(0, len(chunk), 50)
        )

    def _write_gres(self) -> None:
        """gres.conf: GRES_NODE has GPUs as Slurm sees them, device files that are copies of /dev/null.

        slurmd stats each ``File=`` (gres.conf(5)); with ``TaskPlugin=task/none`` nothing
        confines a job to them, but Slurm gives them out and sets ``SLURM_JOB_GPUS``.
        """
        devices = self.root / "dev"
        devices.mkdir(exist_ok=True)
        for index in GRES_GPUS:
            path = devices / f"nvidia{index}"
            if not path.exists():
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        files = "\n".join(f"NodeName={GRES_NODE} Name=gpu File={devices / f'nvidia{i}'}" for i in GRES_GPUS)
        (self.root / "gres.conf").write_text(files + "\n")

    def _write_cgroup_conf(self) -> None:
        """cgroup.conf for slurmd 23.11+, which exits without a cgroup filesystem unless told there is none.

        cgroup.conf(5) ``CgroupPlugin=disabled`` appeared with 23.11; 22.05 refuses the value,
        so this machine's own Slurm gets no cgroup.conf.
        """
        if self.version and tuple(int(p) for p in self.version.split(".")) >= (23, 11):
            (self.root / "cgroup.conf").write_text("CgroupPlugin=disabled\n")

    def _write_wrappers(self) -> None:
        """``bin_dir``: one script per client command, running the root's command.

        From this machine through chroot; inside the root (healthd under slurmd, with the
        same config), where the root's own path does not exist, directly.
        """
        self.bin_dir.mkdir(exist_ok=True)
        for name in CLIENT_COMMANDS:
            path = self.bin_dir / name
            path.write_text(
                f'#!/bin/sh\n[ -d {self.chroot} ] && exec {" ".join(self.prefix)} /usr/bin/{name} "$@"\n'
                f'exec /usr/bin/{name} "$@"\n'
            )
            path.chmod(0o755)

    def _accounting_conf(self) -> str:
        """slurm.conf's accounting lines, after writing slurmdbd.conf and the database's first statements."""
        if not self.accounting:
            return ""
        self.db_port, self.dbd_port = free_ports(2)
        password = secrets.token_hex(12)
        self.db_dir.mkdir(mode=0o700, exist_ok=True)
        init = self.db_dir / "init.sql"
        # Run by mariadbd at every start (--init-file), before it accepts connections.
        init.write_text(
            f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';\n"
            f"GRANT ALL ON {ACCOUNTING_DB}.* TO 'slurm'@'127.0.0.1';\n"
        )
        init.chmod(0o600)
        # slurmdbd.conf(5): it holds the database password, so slurmdbd wants it owned
        # by SlurmUser and readable by nobody else.
        self.dbd_conf.write_text(
            f"""AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
DbdHost=localhost
DbdPort={self.dbd_port}
SlurmUser=root
PidFile={self.root}/slurmdbd.pid
LogFile={self.root}/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={self.db_port}
StorageUser=slurm
StoragePass={password}
StorageLoc={ACCOUNTING_DB}
"""
        )
        self.dbd_conf.chmod(0o600)
        # With slurmdbd, AccountingStoragePass names the munge socket for the connections to
        # it (slurm.conf(5)): AuthInfo's socket= does not reach them, and the default
        # socket is the machine's munged.
        # AccountingStoreFlags=job_script keeps each batch script in accounting (slurm.conf(5)),
        # where `sacct --batch-script` reads its #SBATCH lines: docs/fleet.md, "Evidence a user
        # cannot make".
        return f"""AccountingStorageType=accounting_storage/slurmdbd
AccountingStoreFlags=job_script
AccountingStorageHost=localhost
AccountingStoragePort={self.dbd_port}
AccountingStoragePass={self.munge_socket}
"""

    # -- daemons -----------------------------------------------------------------

    def start_munge(self) -> None:
        directory = self.munge_socket.parent
        directory.mkdir(mode=0o700, exist_ok=True)
        key = directory / "munge.key"
        if not key.exists():
            subprocess.run(
                [*self.prefix, "mungekey", "--create", f"--keyfile={key}"], check=True, capture_output=True, timeout=30
            )
        # --force: munged refuses to run as root, or with its socket under a world-writable /tmp, without it.
        self.munged = _spawn(
            [
                *self.prefix,
                "munged",
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={directory / 'munged.pid'}",
                f"--log-file={directory / 'munged.log'}",
                f"--seed-file={directory / 'munged.seed'}",
            ]
        )
        wait_for(lambda: _munge_running(self.munge_socket, self.prefix), 15, "munged to answer")

    def start_accounting(self) -> None:
        """MariaDB in its own datadir, then slurmdbd, then the cluster registered: all before slurmctld starts."""
        data = self.db_dir / "data"
        fresh = not data.exists()
        if fresh:
            subprocess.run(
                [
                    *self.prefix,
                    "mariadb-install-db",
                    "--no-defaults",
                    "--user=root",
                    f"--datadir={data}",
                    "--skip-test-db",
                    *MARIADB_SIZES,
                ],
                check=True,
                capture_output=True,
                timeout=120,
            )
        # --user=root: mariadbd refuses root otherwise, and the session's temporary
        # directory is closed to the mysql user.
        self.procs["mariadbd"] = _spawn(
            [
                *self.prefix,
                "mariadbd",
                "--no-defaults",
                "--user=root",
                f"--datadir={data}",
                f"--port={self.db_port}",
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                f"--socket={self.db_dir / 'mariadb.sock'}",
                f"--pid-file={self.db_dir / 'mariadb.pid'}",
                f"--log-error={self.root / 'log' / 'mariadb.log'}",
                f"--init-file={self.db_dir / 'init.sql'}",
                *MARIADB_SIZES,
            ]
        )
        wait_for(lambda: _accepts(self.db_port), 60, "MariaDB to accept connections")
        self.start_dbd()
        if fresh:
            self.run("sacctmgr", "-i", "add", "cluster", self.name)

    def start_dbd(self) -> None:
        """slurmdbd, started a second time if it dies at once.

        slurmdbd 24.11 and 26.05 exit on their first start against a fresh database
        (``_check_mysql_concat_is_sane: null result``, logged) and run at the second.
        """
        for _ in range(2):
            self.procs["slurmdbd"] = _spawn([*self.prefix, "slurmdbd", "-D"], self._env(self.env))
            with contextlib.suppress(TimeoutError):
                wait_for(
                    lambda: _accepts(self.dbd_port) or self.procs["slurmdbd"].poll() is not None,
                    60,
                    "slurmdbd to start",
                )
            if _accepts(self.dbd_port):
                return
        raise RuntimeError(f"slurmdbd did not start; see {self.root / 'log' / 'slurmdbd.log'}")

    def start_ctld(self) -> None:
        self.procs["slurmctld"] = _spawn([*self.prefix, "slurmctld", "-D", "-f", str(self.conf)], self._env())

        def answers() -> bool:
            return self.run("scontrol", "ping", check=False).returncode == 0

        wait_for(answers, self.ctld_timeout, "slurmctld to answer")

    def start_slurmd(self, node: str) -> None:
        if not self.configless:
            self.procs[node] = _spawn([*self.prefix, "slurmd", "-D", "-f", str(self.conf), "-N", node], self._env())
            return
        pidfile = self.node_namespace_pid(node)
        pidfile.unlink(missing_ok=True)
        # slurm.conf(5) SlurmctldPort: the controller that serves this node its configuration.
        server = f"localhost:{conf_value(self.conf, 'SlurmctldPort')}"
        root = str(self.chroot or "")
        script = ["/bin/sh", "-c", NODE_NAMESPACE, "node", str(self.munge_socket), str(pidfile), root]
        # This machine's unshare, outside the root: inside, / is no mount point whose propagation it could set.
        unshare = ["/usr/bin/unshare", "--mount", "--propagation", "private"]
        self.procs[node] = _spawn(
            [*unshare, *script, *self.prefix, "slurmd", "-D", "--conf-server", server, "-N", node],
            {"PATH": MACHINE_PATH},
        )

    def node_namespace_pid(self, node: str) -> Path:
        """Where a configless node's namespace writes its first process's pid (slurmd's, once it execs)."""
        return self.root / f"namespace-{node}.pid"

    def on_node(self, node: str, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``argv`` on a configless ``node``: in its slurmd's mount namespace and root, with no SLURM_CONF."""
        pid = int(self.node_namespace_pid(node).read_text())
        return subprocess.run(
            ["nsenter", f"--target={pid}", "--mount", "--root", "--wd", *argv],
            env={"PATH": MACHINE_PATH, "LC_ALL": "C"},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def slurmd_running(self, node: str) -> bool:
        """Whether a slurmd of this cluster serves ``node`` (one started here, or one a simulated boot started)."""
        proc = self.procs.get(node)
        return (proc is not None and proc.poll() is None) or slurmd_pid(self.root, node) is not None

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if name in NODES:
            # After a simulated boot the node's slurmd is no child of ours: its pid file names it.
            pid = slurmd_pid(self.root, name)
            if pid is not None:
                stop_pid(pid)

    def enter_root(self) -> None:
        """Inside a root: proc, the cluster's directory, ``shared`` and this file's tests/ mounted at the same paths."""
        if self.chroot is None:
            return
        from healthd_testkit.releases import mount_in, slurm_version

        self.mounts.enter_context(mount_in(self.chroot, "-t", "proc", "proc", target=Path("/proc")))
        # The machine's devices: the kernel log (/dev/kmsg) that the epilog and the xid check read.
        self.mounts.enter_context(mount_in(self.chroot, "--bind", "/dev", target=Path("/dev")))
        tests = Path(__file__).resolve().parents[1]
        for directory in (*self.shared, self.root, tests):
            if not any(directory.is_relative_to(other) and directory != other for other in self.shared):
                self.mounts.enter_context(mount_in(self.chroot, "--bind", str(directory), target=directory))
        self.version = slurm_version(self.chroot)
        self._write_wrappers()

    def start(self) -> None:
        self.enter_root()
        self.write_conf()
        self.start_munge()
        if self.accounting:
            self.start_accounting()
        self.start_ctld()
        for node in NODES:
            self.start_slurmd(node)
        wait_for(lambda: all(self.state(n) == "idle" for n in NODES), max(30, self.ctld_timeout), "all nodes idle")

    def shutdown(self) -> None:
        """Stop everything started here; jobs first, so no slurmstepd or job process outlives a failed run.

        Pending reboots are cancelled and simulated boots let finish first: a boot under
        way would otherwise start a slurmd after the cluster is gone.
        """
        if self.procs.get("slurmctld") is not None and self.procs["slurmctld"].poll() is None:
            self.cancel_reboots()
            self.cancel_jobs()
            # Shut down anyway after a while: stopping slurmd below ends what is left of the steps.
            with contextlib.suppress(TimeoutError):
                wait_for(lambda: not self.run("squeue", "-h", check=False).stdout.strip(), 15, "jobs cancelled")
        with contextlib.suppress(TimeoutError):
            self.wait_machines_settled()
        # slurmctld before slurmdbd (it hands its last records over), slurmdbd before its database.
        last = ("slurmctld", "slurmdbd", "mariadbd")
        for name in [*NODES, *self.procs]:
            if name not in last:
                self.stop(name)
        for name in last:
            self.stop(name)
        if self.munged is not None and self.munged.poll() is None:
            self.munged.terminate()
            self.munged.wait(timeout=10)
        self.mounts.close()

    # -- client commands ---------------------------------------------------------

    def wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        wait_for(predicate, timeout, what)

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.prefix, *argv], env=self._env(self.env), capture_output=True, text=True, timeout=30, check=check
        )

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

    def node_field(self, node: str, key: str) -> str:
        """One space-free field of ``scontrol -o show node`` (``State``, ``BootTime``, ``NextState``...); "" if absent.

        Also "" when slurmctld does not answer, so that shutdown() gets on with stopping.
        """
        line = self.run("scontrol", "-o", "show", "node", node, check=False).stdout
        for token in line.split():
            if token.startswith(f"{key}="):
                return token.split("=", 1)[1]
        return ""

    def node_state(self, node: str) -> str:
        """``State=`` with its flags, as scontrol prints it (``MIXED+DRAIN+REBOOT_REQUESTED``)."""
        return self.node_field(node, "State")

    def wait_state(self, node: str, predicate: Callable[[str], bool], timeout: float, what: str) -> str:
        """Wait until ``predicate(node_state(node))`` holds; returns that state."""
        seen = [""]

        def check() -> bool:
            seen[0] = self.node_state(node)
            return predicate(seen[0])

        try:
            wait_for(check, timeout, f"{node} {what}", interval=0.5)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; last state {seen[0]!r}, reason {self.reason(node)!r}") from None
        return seen[0]

    def submit(self, node: str, seconds: int = 300) -> str:
        # A node that was just rebooted or resumed runs jobs only once it answers slurmctld's
        # next ping (SlurmdTimeout / 3), and a job refused before that waits for the next
        # periodic scheduling pass (sched_interval, 60 s): submit once the node answers.
        wait_for(lambda: self.responding(node), 60, f"{node} responding")
        out = self.run("sbatch", "--parsable", "--requeue", "-w", node, "-o", "/dev/null", "--wrap", f"sleep {seconds}")
        job = out.stdout.strip().split(";")[0]
        wait_for(lambda: self.job_state(job) == "RUNNING", 60, f"job {job} running")
        return job

    def responding(self, node: str) -> bool:
        """Whether slurmctld's last ping of the node was answered (sinfo's ``*`` suffix absent)."""
        out = self.run("sinfo", "-h", "-N", "-n", node, "-o", "%T", check=False).stdout.split()
        return bool(out) and not out[0].endswith("*")

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

    def cancel_jobs(self) -> None:
        """Cancel every job, whoever's (tests also run jobs as unprivileged users, ``sbatch --uid``)."""
        jobs = self.run("squeue", "-h", "-o", "%A", check=False).stdout.split()
        if jobs:
            self.run("scancel", "--full", *jobs, check=False)

    def cancel_reboots(self) -> None:
        """Cancel reboots requested but not issued yet (slurmctld cannot cancel an issued one)."""
        for node in NODES:
            if "REBOOT_REQUESTED" in self.node_state(node):
                self.run("scontrol", "cancel_reboot", node, check=False)

    def reservations(self) -> list[str]:
        out = self.run("scontrol", "-o", "show", "reservation", check=False).stdout
        return [token.split("=", 1)[1] for token in out.split() if token.startswith("ReservationName=")]

    def reset(self) -> None:
        """Cancel every job, pending reboot and reservation and bring every node back to idle with no reason.

        An issued reboot cannot be cancelled: it is let finish (the simulated machine
        boots within seconds). Powered-down nodes are powered up and wait for their boot.
        """
        if not self._clean():
            self._settle()
        for listed in (self.hook_nodes, self.prolog_nodes):
            if listed.exists():
                listed.unlink()

    def _clean(self) -> bool:
        """Whether there is nothing to reset: no job, no reservation, every machine up and every node plain IDLE.

        Three client calls, where settling takes some twenty: most tests leave the cluster
        as they found it, and every test of the cluster starts with a reset.
        """
        if self.run("squeue", "-h", check=False).stdout.strip() or self.reservations():
            return False
        if any(self.in_transition(node) or not self.slurmd_running(node) for node in NODES):
            return False
        shown = self.run("scontrol", "-o", "show", "node", ",".join(NODES), check=False).stdout
        # A flag (DRAIN, REBOOT_REQUESTED, POWERED_DOWN, NOT_RESPONDING) or a reason: the full reset.
        plain = {
            line.split()[0].removeprefix("NodeName=")
            for line in shown.split("\n")
            if line.startswith("NodeName=") and " State=IDLE " in line and " Reason=" not in line
        }
        return plain == set(NODES)

    def _settle(self) -> None:
        self.cancel_reboots()
        self.cancel_jobs()
        for name in self.reservations():
            self.run("scontrol", "delete", f"ReservationName={name}", check=False)
        wait_for(lambda: not self.run("squeue", "-h", check=False).stdout.strip(), 20, "no jobs left")
        self.wait_machines_settled()
        for node in NODES:
            flags = set(self.node_state(node).split("+"))
            if flags & {"POWER_DOWN", "POWERING_DOWN", "POWERED_DOWN"}:
                self.wait_state(node, lambda s: "POWERED_DOWN" in s.split("+"), 2 * SUSPEND_TIMEOUT + 10, "off")
                self.run("scontrol", "update", f"NodeName={node}", "State=POWER_UP")
        self.wait_machines_settled()
        for node in NODES:
            if not self.slurmd_running(node) and "POWER" not in self.node_state(node):
                self.start_slurmd(node)
        for node in NODES:
            self.wait_state(node, lambda s: "REBOOT" not in s and "POWER" not in s, 30, "booted")
            if self.state(node) != "idle":
                self.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
        wait_for(lambda: all(self.state(n) == "idle" for n in NODES), 30, "all nodes idle after reset")


# -- the simulated machines ------------------------------------------------------------
# Plain functions: Cluster uses them, and so does this file run as the cluster's
# RebootProgram, SuspendProgram or ResumeProgram (by root, from slurmd or slurmctld).


def write_boot(procfs: Path, boot_id: str, at: float) -> None:
    """What a boot leaves in procfs for healthd: ``sys/kernel/random/boot_id`` and ``stat``'s ``btime`` (proc(5))."""
    random = procfs / "sys" / "kernel" / "random"
    random.mkdir(parents=True, exist_ok=True)
    for path, text in ((random / "boot_id", f"{boot_id}\n"), (procfs / "stat", f"btime {int(at)}\n")):
        temporary = path.with_name(f".{path.name}.new")
        temporary.write_text(text)
        temporary.replace(path)


def read_boots(root: Path) -> list[Boot]:
    log = root / "boots.log"
    if not log.exists():
        return []
    rows = (line.split("\t") for line in log.read_text().splitlines() if line.strip())
    return [Boot(node, float(at), boot_id, how) for node, at, boot_id, how in rows]


def transition_marker(root: Path, node: str) -> Path:
    return root / f"machine-{node}.busy"


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _alive(pid: int) -> bool:
    """The process exists and is no zombie (a slurmd that exited waits there for its parent to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def conf_value(conf: Path, key: str) -> str:
    """The value of ``KEY=`` in the cluster's slurm.conf (written by Cluster.write_conf: one key a line)."""
    for line in conf.read_text().split("\n"):
        if line.startswith(f"{key}="):
            return line.split("=", 1)[1]
    raise KeyError(f"{key} is not in {conf}")


def _slurmd_node(argv: list[str], conf: Path) -> Optional[str]:
    """The node a ``slurmd ... -f CONF ... -N NODE`` command line serves; None unless a slurmd of this cluster.

    A configless slurmd (``--conf-server localhost:PORT``) is this cluster's when PORT is its SlurmctldPort.
    """
    if not argv or Path(argv[0]).name != "slurmd" or "-N" not in argv[:-1]:
        return None
    if "-f" in argv[:-1]:
        if argv[argv.index("-f") + 1] != str(conf):
            return None
    elif "--conf-server" in argv[:-1]:
        if argv[argv.index("--conf-server") + 1] != f"localhost:{conf_value(conf, 'SlurmctldPort')}":
            return None
    else:
        return None
    return argv[argv.index("-N") + 1]


def slurmd_pid(root: Path, node: str) -> Optional[int]:
    """The live slurmd of this cluster that serves ``node``, from its pid file (``SlurmdPidFile``)."""
    try:
        pid = int((root / f"slurmd-{node}.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    if _slurmd_node(_argv(pid), root / "slurm.conf") != node or not _alive(pid):
        return None
    return pid


def stop_pid(pid: int, timeout: float = 15) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; returns when the process is gone (or a zombie)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    try:
        wait_for(lambda: not _alive(pid), timeout, f"process {pid} to stop")
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not _alive(pid), 5, f"process {pid} to die")


def _slurmd_ancestor(conf: Path) -> str:
    """The node whose slurmd runs this RebootProgram: slurmd passes neither its name nor arguments."""
    pid = os.getppid()
    while pid > 1:
        node = _slurmd_node(_argv(pid), conf)
        if node is not None:
            return node
        status = Path(f"/proc/{pid}/status").read_text()
        pid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
    raise SystemExit(f"no slurmd of {conf} among the ancestors of process {os.getpid()}")


def _host_uptime() -> float:
    """Seconds since the real boot, also from inside the time namespace of a node booted here before."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    for line in Path("/proc/self/timens_offsets").read_text().splitlines():
        clock, seconds, nanoseconds = line.split()
        if clock in ("boottime", "7"):  # 7 is CLOCK_BOOTTIME (time_namespaces(7))
            uptime -= int(seconds) + int(nanoseconds) / 1e9
    return uptime


def _boot(root: Path, node: str, how: str) -> None:
    """Power the simulated machine on: a new boot id, a line in boots.log, slurmd with an uptime near zero."""
    conf = root / "slurm.conf"
    boot_id, now = str(uuid.uuid4()), time.time()
    write_boot(root / "procfs" / node, boot_id, now)
    with open(root / "boots.log", "a") as log:
        log.write(f"{node}\t{now:.3f}\t{boot_id}\t{how}\n")
    # Time namespace offsets are absolute (relative to the real clock), not to the parent's namespace.
    subprocess.Popen(
        ["unshare", "--time", f"--boottime={-int(_host_uptime())}", "slurmd", "-D", "-f", str(conf), "-N", node],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"PATH": MACHINE_PATH, "SLURM_CONF": str(conf)},
    )
    # The transition marker stays until the new slurmd's pid file is there: Cluster.reset()
    # starts a slurmd for a node without one, and two would fight over the port.
    wait_for(lambda: slurmd_pid(root, node) is not None, 15, f"the new slurmd of {node}")
    print(f"{node} booted ({how}) at {now:.3f}: boot id {boot_id}", flush=True)


def _power_off(root: Path, node: str) -> None:
    pid = slurmd_pid(root, node)
    if pid is not None:
        stop_pid(pid)
    print(f"{node} off at {time.time():.3f}", flush=True)


def _in_background(root: Path, nodes: list[str], work: Callable[[str], None]) -> None:
    """Run ``work`` for each node in a child outside the caller's session, and return at once.

    slurmd waits for RebootProgram (system()) and would be stopped while waiting;
    slurmctld's script runner may end the program's process group when it returns.
    """
    for node in nodes:
        transition_marker(root, node).write_text(f"{os.getpid()}\n")
    if os.fork() != 0:
        return
    os.setsid()
    # The caller's thread had signals blocked or ignored, and a slurmd started with them
    # so would not stop on SIGTERM (seen: it kept running until the next slurmd killed it).
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    for number in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(number, signal.SIG_DFL)
    # slurmctld may start the program with fds 0-2 closed: new fds would land there, so move them up first.
    null = fcntl.fcntl(os.open(os.devnull, os.O_RDONLY), fcntl.F_DUPFD, 3)
    log = fcntl.fcntl(
        os.open(root / "log" / "machines.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644), fcntl.F_DUPFD, 3
    )
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    # Python had no sys.stdout when it started without fd 1.
    sys.stdout = sys.stderr = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    try:
        for node in nodes:
            try:
                work(node)
            except BaseException as exc:
                print(f"simulated machine {node}: {exc!r}", flush=True)
            finally:
                transition_marker(root, node).unlink()
    finally:
        os._exit(0)


def _hostnames(root: Path, hostlist: str) -> list[str]:
    """``node[2-3]`` -> node2, node3 (``scontrol show hostnames`` is local: no RPC)."""
    out = subprocess.run(
        ["scontrol", "show", "hostnames", hostlist],
        env={"PATH": MACHINE_PATH, "SLURM_CONF": str(root / "slurm.conf")},
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout
    return [name for name in out.split() if name in NODES]


def machine_main(argv: list[str]) -> None:
    """``reboot ROOT`` (RebootProgram), ``suspend ROOT HOSTLIST`` (SuspendProgram), ``resume ROOT HOSTLIST``."""
    if len(argv) < 2 or argv[0] not in ("reboot", "suspend", "resume"):
        raise SystemExit("usage: cluster.py reboot ROOT | suspend ROOT HOSTLIST | resume ROOT HOSTLIST")
    action, root = argv[0], Path(argv[1])
    if action == "reboot":

        def reboot(node: str) -> None:
            _power_off(root, node)
            time.sleep(OFF_SECONDS)
            _boot(root, node, "reboot")

        _in_background(root, [_slurmd_ancestor(root / "slurm.conf")], reboot)
    elif action == "suspend":
        _in_background(root, _hostnames(root, " ".join(argv[2:])), lambda node: _power_off(root, node))
    else:

        def resume(node: str) -> None:
            time.sleep(OFF_SECONDS)
            _boot(root, node, "resume")

        _in_background(root, _hostnames(root, " ".join(argv[2:])), resume)


if __name__ == "__main__":
    machine_main(sys.argv[1:])
