"""Space and inode probes of a mount, run in a child process so a hung filesystem cannot hang us.

A ``statvfs`` on a hung NFS or FUSE mount blocks in the kernel (state D) and cannot
be interrupted, so it never runs in one of healthd's own threads: it runs as
``stat --file-system`` in its own session, is abandoned at its deadline, and is
remembered until it finally exits. While a probe of a mount is still alive no
second one is started for that mount, in this process (``ProbeTable``) or in a
later one (the pid and start time are kept in the check's state file), so a hung
mount costs at most one stuck process however many passes run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Optional, Union

from healthd.binaries import locate

# %b total blocks, %a blocks free to non-root, %S fundamental block size, %c total inodes, %d free inodes
_FORMAT = "%b %a %S %c %d"


@dataclass(frozen=True)
class Usage:
    """Free space and inodes of one filesystem, as fractions of the total."""

    free_fraction: float
    free_inode_fraction: Optional[float]
    total_bytes: int


@dataclass(frozen=True)
class Hung:
    """The probe did not return in time (or an earlier one is still stuck)."""

    pid: int
    stuck_seconds: float
    inherited: bool


@dataclass(frozen=True)
class Failed:
    """The probe returned but could not read the filesystem."""

    message: str


ProbeOutcome = Union[Usage, Hung, Failed]


def parse_stat_output(text: str) -> Usage:
    """Parse ``stat --file-system --format=_FORMAT`` output; ``ValueError`` when malformed."""
    parts = text.split()
    if len(parts) != 5:
        raise ValueError(f"expected 5 numbers from stat, got {text.strip()!r}")
    blocks, avail, _block_size, inodes, free_inodes = (int(p) for p in parts)
    if blocks < 0 or avail < 0 or inodes < 0 or free_inodes < 0:
        raise ValueError(f"negative value from stat: {text.strip()!r}")
    free = avail / blocks if blocks else 1.0
    # Filesystems without a fixed inode table (btrfs, many FUSE ones) report 0 inodes.
    inode_free = free_inodes / inodes if inodes else None
    return Usage(free_fraction=free, free_inode_fraction=inode_free, total_bytes=blocks * int(parts[2]))


def _process_start(pid: int) -> Optional[float]:
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return float(process.create_time())
    except psutil.Error:
        return None


def forget_finished(remembered: dict[str, dict[str, float]], keep: set[str]) -> None:
    """Drop records of stuck probes (of mounts not in ``keep``) whose process has exited."""
    for path in [p for p in remembered if p not in keep]:
        start = _process_start(int(remembered[path]["pid"]))
        if start is None or abs(start - remembered[path]["start"]) >= 1.0:
            del remembered[path]


@dataclass
class _Running:
    process: subprocess.Popen[str]
    started: float


class ProbeTable:
    """The probes of one check: at most one live process per mount path."""

    def __init__(self) -> None:
        self._running: dict[str, _Running] = {}

    def probe(self, path: str, deadline: float, remembered: dict[str, dict[str, float]]) -> ProbeOutcome:
        """Probe ``path``, waiting at most ``deadline`` seconds.

        ``remembered`` is the check's persisted ``{path: {"pid", "start"}}`` record of
        stuck probes left by earlier processes; it is updated in place.
        """
        now = time.monotonic()
        running = self._running.get(path)
        if running is not None:
            if running.process.poll() is None:
                return Hung(running.process.pid, now - running.started, inherited=True)
            del self._running[path]
            remembered.pop(path, None)
        record = remembered.get(path)
        if record is not None:
            start = _process_start(int(record["pid"]))
            if start is not None and abs(start - record["start"]) < 1.0:
                return Hung(int(record["pid"]), time.time() - record["start"], inherited=True)
            remembered.pop(path, None)
        try:
            stat = locate("stat")
        except FileNotFoundError as exc:
            return Failed(str(exc))
        process = subprocess.Popen(
            [stat, "--file-system", f"--format={_FORMAT}", "--", path],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            env={"LC_ALL": "C"},
        )
        try:
            out, err = process.communicate(timeout=deadline)
        except subprocess.TimeoutExpired:
            # SIGKILL ends it as soon as the kernel lets it go; until then we keep it on record.
            os.kill(process.pid, signal.SIGKILL)
            self._running[path] = _Running(process, now)
            start = _process_start(process.pid)
            if start is not None:
                remembered[path] = {"pid": float(process.pid), "start": start}
            return Hung(process.pid, time.monotonic() - now, inherited=False)
        if process.returncode != 0:
            return Failed(err.strip() or f"stat exited {process.returncode}")
        try:
            return parse_stat_output(out)
        except ValueError as exc:
            return Failed(str(exc))
