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
from healthd.store.daemonpass import DaemonClaim
from healthd.store.lock import StateLock


def test_a_held_state_lock_does_not_hold_the_prolog_from_the_daemons_pass(
    write_config: Callable[..., Path], tmp_path: Path
) -> None:
    fake = XidNode(tmp_path / "machine")
    fake.gpu("0000:3b:00.0")
    fake.log("Linux version 6.1")
    config = write_config(
        f'[paths]\nkmsg = "{fake.kmsg}"\nsysfs = "{fake.root / "sys"}"\nprocfs = "{fake.root / "proc"}"\n'
        # A pass that holds the lock would make the prolog wait all of this: far past its 1 s deadline.
        '[slurm]\nnode_name = "node1"\nlock_timeout = 30\n[checks.xid]\nsource = "kmsg"\n'
        '[checks.jobs]\nprolog_checks = ["xid"]\n' + only_checks("xid", "jobs")
    )
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
