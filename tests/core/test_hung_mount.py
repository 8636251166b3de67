"""A real hung filesystem: a FUSE mount whose getattr and statfs never return."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

HANGFS = Path(__file__).with_name("hangfs.py")
PROBE_TIMEOUT = 1.0


def _reason_to_skip() -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is absent on this machine"
    if os.geteuid() != 0:
        return "mounting FUSE with allow_other needs root"
    try:
        import fuse  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"fusepy or libfuse2 is not installed: {exc}"
    return None


def _mounted(path: str) -> bool:
    with open("/proc/self/mountinfo") as handle:
        return any(line.split(" ")[4] == path for line in handle)


def _probes_of(path: str) -> list[int]:
    import psutil

    return [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if (p.info["cmdline"] or [])[-1:] == [path] and "--file-system" in (p.info["cmdline"] or [])
    ]


@pytest.fixture
def hung_mount() -> Iterator[str]:
    reason = _reason_to_skip()
    if reason:
        print(f"skipping the FUSE hung-mount test: {reason}")
        pytest.skip(reason)
    mnt = tempfile.mkdtemp(prefix="healthd-hung-")
    server = subprocess.Popen([sys.executable, str(HANGFS), mnt], start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        while not _mounted(mnt):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"FUSE server did not mount {mnt} (exit {server.poll()})")
            time.sleep(0.05)
        yield mnt
    finally:
        # Killing the server fails every blocked request, which frees the stuck probes.
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        subprocess.run(["umount", "-l", mnt], check=False, capture_output=True)
        deadline = time.monotonic() + 10
        while _probes_of(mnt) and time.monotonic() < deadline:
            time.sleep(0.05)
        shutil.rmtree(mnt, ignore_errors=True)


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
    hung_mount: str, write_config: Callable[[str], Path]
) -> None:
    config = write_config(
        f'[node]\nmounts = [{{ path = "{hung_mount}" }}]\n'
        f"[checks.mounts]\ninclude_root = false\ntimeout = 10\nprobe_timeout = {PROBE_TIMEOUT}\n"
    )
    code, doc = _pass(config)
    (mounts,) = doc["checks"]
    (finding,) = mounts["findings"]
    assert code == 2 and finding["code"] == "MOUNT_HUNG" and finding["status"] == "CRITICAL"
    assert finding["subject"] == hung_mount
    assert doc["duration_seconds"] <= PROBE_TIMEOUT + 1.0
    first_probe = finding["details"]["probe_pid"]
    assert len(_probes_of(hung_mount)) <= 1

    # A later process (as under HealthCheckProgram) must not start a second probe of the same mount.
    code, doc = _pass(config)
    (finding,) = doc["checks"][0]["findings"]
    assert code == 2 and finding["code"] == "MOUNT_HUNG"
    assert len(_probes_of(hung_mount)) <= 1
    if _probes_of(hung_mount):
        assert finding["details"]["probe_pid"] == first_probe
        assert "earlier probe is still stuck" in finding["message"]
