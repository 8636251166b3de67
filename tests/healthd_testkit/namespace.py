"""Running a shell script in a private mount namespace, where a test may remount what it likes.

Tests that stand in for systemd's ProtectSystem= or a read-only state directory bind and
remount paths there; nothing they do reaches the machine's own mounts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

import pytest

from healthd_testkit.hostguard import HOST_PATHS, TRIPWIRE_TEXT

# What an installed healthd leaves on a machine: the README's venv, its config and its state.
HOST_INSTALL = (Path("/opt/healthd"), *HOST_PATHS)


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
# machine, an empty /run, and the given directories bound in. /tmp is the machine's, copy-on-write
# like the rest: a checkout under /tmp (a CI clone) stays visible. Whatever the script
# does as root in it (dpkg -i, pip install into /opt, a first `healthd check` creating
# /var/lib/healthd) lands in the tmpfs and is gone when the namespace ends.
# The machine's own healthd (HOST_INSTALL) is deleted from the root before anything runs: in
# an overlay a deletion is a whiteout in the upper layer, so the root looks like a machine
# where healthd was never installed, while the machine keeps every file. Without that, a
# package's test on a node where healthd runs would find the node's venv still in
# /opt/healthd after `rpm -e`.
_THROWAWAY = """set -e
top="$1"; shift
mount -t tmpfs throwaway "$top"
mkdir "$top/up" "$top/work" "$top/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$top/up,workdir=$top/work" "$top/root"
for hidden in $THROWAWAY_HIDDEN; do rm -rf --one-file-system "$top/root$hidden"; done
mount -t proc proc "$top/root/proc"
mount --rbind /sys "$top/root/sys"
mount --rbind /dev "$top/root/dev"
mount -t tmpfs run "$top/root/run"
# Slurm commands in the root meet a slurm.conf of its own that names no cluster, as the host
# guard's tripwire does, without reading the tripwire (which counts as a stray Slurm command).
if [ -n "${THROWAWAY_SLURM_CONF:-}" ]; then printf '%s' "$THROWAWAY_SLURM_CONF" > "$top/root/run/slurm.conf"; fi
while [ "$#" -gt 1 ]; do
    mkdir -p "$top/root$2"
    mount --bind "$1" "$top/root$2"
    shift 2
done
exec chroot "$top/root" /bin/sh -c "$1"
"""


def _outside_the_overlay() -> dict[Path, str]:
    """The checkout and the interpreter's environment, bound in at their own paths when the
    overlay of ``/`` would not show them: on another filesystem (the overlay does not cross
    mount points), or under /run, which the throwaway root replaces."""
    root = os.stat("/").st_dev
    needed = {Path(__file__).resolve().parents[2], Path(sys.prefix).resolve()}
    return {p: str(p) for p in sorted(needed) if os.stat(p).st_dev != root or p.parts[1:2] == ("run",)}


def in_throwaway_root(
    script: str, workdir: Path, binds: Mapping[Path, str] = MappingProxyType({}), timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``sh -c script`` as root in a copy-on-write root of this machine that vanishes afterwards.

    The root has no /opt/healthd, /etc/healthd or /var/lib/healthd, whatever the machine has.

    ``workdir`` is an empty directory of the test's own (the tmpfs goes there); ``binds`` maps
    a directory here to the absolute path where the script sees it. Skips, naming why, where
    no mount namespace or overlay can be made.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    argv = [str(workdir)]
    for source, dest in {**_outside_the_overlay(), **binds}.items():
        argv += [str(source), dest]
    env = dict(os.environ, THROWAWAY_HIDDEN=" ".join(map(str, HOST_INSTALL)))
    if "SLURM_CONF" in env:
        env.update(SLURM_CONF="/run/slurm.conf", THROWAWAY_SLURM_CONF=TRIPWIRE_TEXT)
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", _THROWAWAY, "throwaway", *argv, script],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    if done.returncode != 0 and not done.stdout and ("unshare" in done.stderr or "mount:" in done.stderr):
        pytest.skip(f"no throwaway root here: {done.stderr.strip()}")
    return done
