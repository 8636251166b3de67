"""Real hung and dead filesystems: a FUSE mount whose getattr and statfs never return, and one whose server died."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

# Slow (real hung and dead FUSE mounts, waited on for seconds): left out of the fast tier, `pytest -m "not slow"`.
pytestmark = pytest.mark.slow

PROBE_TIMEOUT = 1.0


def _pass(config: Path) -> tuple[int, dict]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "healthd.cli.main",
            "check",
            "--once",
            "--json",
            "--only",
            "mounts",
            "--config",
            str(config),
        ],
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


def test_two_hung_mounts_and_healthy_ones_in_one_pass_cost_one_probe_process(
    hung_mounts: tuple[str, str], write_config: Callable[[str], Path], stat_probes: Callable[[str], list[int]]
) -> None:
    first, second = hung_mounts
    expect = ", ".join(f'{{ path = "{p}" }}' for p in ("/", first, "/proc", second))
    config = write_config(
        f"[checks.mounts]\nexpect = [{expect}]\ninclude_root = true\ntimeout = 10\nprobe_timeout = {PROBE_TIMEOUT}\n"
    )
    code, doc = _pass(config)
    (mounts,) = doc["checks"]
    hung = {f["subject"]: f for f in mounts["findings"] if f["code"] == "MOUNT_HUNG"}
    assert code == 2 and sorted(hung) == sorted([first, second])
    assert all(f["status"] == "CRITICAL" for f in hung.values())
    # Both found hung within the one deadline, and the healthy mounts still answered.
    assert doc["duration_seconds"] <= PROBE_TIMEOUT + 1.0
    assert [f for f in mounts["findings"] if f["code"] != "MOUNT_HUNG"] == []
    # One child probed them all: both hung mounts name the same stuck process, and no other is left.
    pids = {f["details"]["probe_pid"] for f in hung.values()}
    assert len(pids) == 1
    assert set(stat_probes(first)) <= pids and set(stat_probes(second)) <= pids

    # The next process probes neither hung mount again while that probe is stuck.
    code, doc = _pass(config)
    hung = {f["subject"]: f for f in doc["checks"][0]["findings"] if f["code"] == "MOUNT_HUNG"}
    assert code == 2 and sorted(hung) == sorted([first, second])
    assert set(stat_probes(first)) <= pids and set(stat_probes(second)) <= pids
    if stat_probes(first):
        assert {f["details"]["probe_pid"] for f in hung.values()} == pids


def test_a_mount_whose_server_died_is_critical_broken(dead_mount: str, write_config: Callable[[str], Path]) -> None:
    # A crashed FUSE client: still in mountinfo, and statvfs fails at once with ENOTCONN.
    for include_root in ("false", "true"):  # one mount and two (with the root), each on its thread of the child
        config = write_config(
            f'[checks.mounts]\nexpect = [{{ path = "{dead_mount}" }}]\n'
            f"include_root = {include_root}\ntimeout = 10\nprobe_timeout = {PROBE_TIMEOUT}\n"
        )
        code, doc = _pass(config)
        (finding,) = doc["checks"][0]["findings"]
        assert code == 2 and (finding["status"], finding["code"]) == ("CRITICAL", "MOUNT_BROKEN")
        assert finding["subject"] == dead_mount and finding["details"]["errno"] == "ENOTCONN"
