"""Running a shell script in a private mount namespace, where a test may remount what it likes.

Tests that stand in for systemd's ProtectSystem= or a read-only state directory bind and
remount paths there; nothing they do reaches the machine's own mounts.
"""

from __future__ import annotations

import subprocess

import pytest


def in_mount_namespace(script: str, expected: int) -> subprocess.CompletedProcess[str]:
    """``sh -c script`` in a private mount namespace (unshare(1), as root), its output captured.

    ``expected`` is the exit status of a run that got its namespace: any other, with
    unshare's own complaint and no output, means none can be made here (a container
    without CAP_SYS_ADMIN), and the test is skipped, naming why.
    """
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if done.returncode != expected and "unshare" in done.stderr and not done.stdout:
        pytest.skip(f"no private mount namespace here: {done.stderr.strip()}")
    return done
