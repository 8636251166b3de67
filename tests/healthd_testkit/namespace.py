"""Running a shell script in a private mount namespace, where a test may remount what it likes.

Tests that stand in for systemd's ProtectSystem= or a read-only state directory bind and
remount paths there; nothing they do reaches the machine's own mounts.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

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


# Builds a throwaway root in a private mount namespace: an overlay whose lower layer is
# this machine's / and whose upper layer is a tmpfs, with /proc, /sys and /dev of the
# machine, an empty /tmp and /run, and the given directories bound in. Whatever the script
# does as root in it (dpkg -i, pip install into /opt, a first `healthd check` creating
# /var/lib/healthd) lands in the tmpfs and is gone when the namespace ends.
_THROWAWAY = """set -e
top="$1"; shift
mount -t tmpfs throwaway "$top"
mkdir "$top/up" "$top/work" "$top/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$top/up,workdir=$top/work" "$top/root"
mount -t proc proc "$top/root/proc"
mount --rbind /sys "$top/root/sys"
mount --rbind /dev "$top/root/dev"
mount -t tmpfs tmp "$top/root/tmp"
mount -t tmpfs run "$top/root/run"
while [ "$#" -gt 1 ]; do
    mkdir -p "$top/root$2"
    mount --bind "$1" "$top/root$2"
    shift 2
done
exec chroot "$top/root" /bin/sh -c "$1"
"""


def in_throwaway_root(
    script: str, workdir: Path, binds: Mapping[Path, str] = MappingProxyType({}), timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``sh -c script`` as root in a copy-on-write root of this machine that vanishes afterwards.

    ``workdir`` is an empty directory of the test's own (the tmpfs goes there); ``binds`` maps
    a directory here to the absolute path where the script sees it. Skips, naming why, where
    no mount namespace or overlay can be made.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    argv = [str(workdir)]
    for source, dest in binds.items():
        argv += [str(source), dest]
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", _THROWAWAY, "throwaway", *argv, script],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0 and not done.stdout and ("unshare" in done.stderr or "mount:" in done.stderr):
        pytest.skip(f"no throwaway root here: {done.stderr.strip()}")
    return done
