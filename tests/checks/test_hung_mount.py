"""A real hung filesystem: a FUSE mount whose getattr and statfs never return."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Callable

PROBE_TIMEOUT = 1.0


def _pass(config: Path) -> tuple[int, dict]:
    done = subprocess.run(
        [sys.executable, "-m", "healthd.cli", "check", "--once", "--json", "--only", "mounts", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, json.loads(done.stdout)


def test_hung_mount_is_critical_within_deadline_and_probed_once(
    hung_mount: str, write_config: Callable[[str], Path], stat_probes: Callable[[str], list[int]]
) -> None:
    config = write_config(
        f'[checks.mounts]\nexpect = [{{ path = "{hung_mount}" }}]\n'
        f"include_root = false\ntimeout = 10\nprobe_timeout = {PROBE_TIMEOUT}\n"
    )
    code, doc = _pass(config)
    (mounts,) = doc["checks"]
    (finding,) = mounts["findings"]
    assert code == 2 and finding["code"] == "MOUNT_HUNG" and finding["status"] == "CRITICAL"
    assert finding["subject"] == hung_mount
    assert doc["duration_seconds"] <= PROBE_TIMEOUT + 1.0
    first_probe = finding["details"]["probe_pid"]
    assert len(stat_probes(hung_mount)) <= 1

    # A later process (as under HealthCheckProgram) must not start a second probe of the same mount.
    code, doc = _pass(config)
    (finding,) = doc["checks"][0]["findings"]
    assert code == 2 and finding["code"] == "MOUNT_HUNG"
    assert len(stat_probes(hung_mount)) <= 1
    if stat_probes(hung_mount):
        assert finding["details"]["probe_pid"] == first_probe
        assert "earlier probe is still stuck" in finding["message"]
