"""``healthd-prolog`` from the daemon's fresh pass does not wait for a pass that holds the state lock.

The job's start is noted under the state lock; a daemon's pass acting through Slurm may
hold it for up to ``[slurm].timeout``, past the prolog's 1 s. The prolog from the
daemon's pass waits a moment for it, then gives its verdict without the note.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from healthd_testkit.checks import only_checks
from healthd_testkit.paths import run_healthd
from healthd_testkit.xid import Node as XidNode

from healthd.config.load import sha256_hex
from healthd.cycle.daemonpass import DaemonClaim
from healthd.store.lock import StateLock


def _xid_node(write_config: Callable[..., Path], tmp_path: Path, slurm: str = "") -> Path:
    """A node with one GPU and a clean kernel log, its prolog running the xid check; ``slurm``: more keys."""
    fake = XidNode(tmp_path / "machine")
    fake.gpu("0000:3b:00.0")
    fake.log("Linux version 6.1")
    return write_config(
        f'[paths]\nkmsg = "{fake.kmsg}"\nsysfs = "{fake.root / "sys"}"\nprocfs = "{fake.root / "proc"}"\n'
        f'[slurm]\nnode_name = "node1"\n{slurm}[checks.xid]\nsource = "kmsg"\n'
        '[checks.jobs]\nprolog_checks = ["xid"]\n' + only_checks("xid", "jobs")
    )


def test_a_held_state_lock_does_not_hold_the_prolog_from_the_daemons_pass(
    write_config: Callable[..., Path], tmp_path: Path
) -> None:
    # A pass that holds the lock would make the prolog wait all of this: far past its 1 s deadline.
    config = _xid_node(write_config, tmp_path, "lock_timeout = 30\n")
    state = config.parent / "state"
    done = run_healthd("check", "--once", "--json", "--config", str(config))
    claim = DaemonClaim(state)
    assert claim.acquire(5)
    lock = StateLock(state, 5)
    try:
        claim.record(
            json.loads(done.stdout),
            fresh_for=300,
            config_sha256=sha256_hex(config.read_bytes()),
            dry_run=False,
            now=time.time(),
        )
        lock.acquire()  # a pass settling, e.g. waiting on slurmctld
        env = {**os.environ, "SLURM_JOB_ID": "77", "SLURM_JOB_USER": "someone"}
        prolog = [str(Path(sys.executable).with_name("healthd-prolog")), "--config", str(config)]
        ran = subprocess.run(prolog, env=env, capture_output=True, text=True, timeout=60, check=False)
    finally:
        lock.release()
        claim.release()
    assert ran.returncode == 0, ran
    # The child's standard streams both come back on the prolog's stdout, in order.
    note, verdict = ran.stdout.splitlines()
    assert note.endswith(
        "is held by another healthd process (waited 0.1s): job start not recorded, the epilog attributes nothing to it"
    ), ran.stdout
    assert verdict == "healthd prolog: job 77: OK (daemon's pass), kernel log since: job allowed", ran.stdout


# The prolog's work runs in a child (healthd.cycle.childrun._child): what it imported is printed after its verdict.
_PROLOG_IMPORTS = """
import sys
from healthd.cli.main import prolog_main
from healthd.cycle import childrun as jobs

unused = ("argparse", "logging", "healthd.cli.parser", "healthd.cycle.pipeline", "healthd.cycle.engine", "pydantic")
forked = jobs._child


def child(work, deadline, write_end):
    def traced(moving):
        code = work(moving)
        print("unused:", sorted(m for m in unused if m in sys.modules))
        return code

    forked(traced, deadline, write_end)


jobs._child = child
sys.exit(prolog_main(["--config", sys.argv[1]]))
"""


def test_the_prolog_from_the_daemons_pass_imports_no_parser_logging_or_pass_machinery(
    write_config: Callable[..., Path], tmp_path: Path
) -> None:
    config = _xid_node(write_config, tmp_path)
    done = run_healthd("check", "--once", "--json", "--config", str(config))
    claim = DaemonClaim(config.parent / "state")
    assert claim.acquire(5)
    try:
        document, digest = json.loads(done.stdout), sha256_hex(config.read_bytes())
        claim.record(document, fresh_for=300, config_sha256=digest, dry_run=False, now=time.time())
        env = {**os.environ, "SLURM_JOB_ID": "78", "SLURM_JOB_USER": "someone"}
        probe = [sys.executable, "-c", _PROLOG_IMPORTS, str(config)]
        ran = subprocess.run(probe, env=env, capture_output=True, text=True, timeout=60, check=False)
    finally:
        claim.release()
    assert ran.returncode == 0, ran
    assert ran.stdout.splitlines() == [
        "healthd prolog: job 78: OK (daemon's pass), kernel log since: job allowed",
        "unused: []",
    ], ran.stdout + ran.stderr
