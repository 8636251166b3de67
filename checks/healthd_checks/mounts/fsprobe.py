"""Space and inode probes of a mount, run in a child process so a hung filesystem cannot hang us.

A ``statvfs`` on a hung NFS or FUSE mount blocks in the kernel (state D) and cannot
be interrupted, so it never runs in one of healthd's own threads, except on a
filesystem with no backing store reached through no filesystem that revalidates its
paths (``MEMORY_FILESYSTEMS``, ``WALKABLE_FILESYSTEMS``): the kernel answers those
from memory, and ``read_here`` asks in this process. All the other mounts of a pass
are probed by one child process in its own session: ``stat --file-system`` for the root
alone (no user can mount over it), else an isolated interpreter running ``probechild`` with
one thread per mount (a hung mount blocks only its thread, so every
mount answers or is found hung within the one deadline). Both read a mount only where
the device at its path is still the one its mountinfo record named (``Changed``
otherwise: a user may mount FUSE there in between). The child is abandoned at its deadline and remembered,
as the stuck probe of each mount that did not answer, until it finally exits.
While a probe of a mount is still alive no new one is started for that mount, in
this process (``ProbeTable``) or in a later one (the pid and start time are kept in
the check's state file), so a hung mount costs at most one stuck process however
many passes run, and several hung mounts of one pass share one.
"""

from __future__ import annotations

import errno
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Optional, Union

from healthd.checks.binaries import locate
from healthd.checks.bounded import process_start
from healthd.text import records

from . import probechild

# Filesystems with no backing store: the kernel answers their statfs from memory, with no
# disk or server to wait for (fs/libfs.c ``simple_statfs`` for proc, sysfs and the kernfs
# ones (cgroup, cgroup2), devpts, mqueue, ramfs, debugfs, tracefs, securityfs, configfs, bpf and
# pstore; mm/shmem.c ``shmem_statfs`` for tmpfs and devtmpfs; fs/hugetlbfs ``hugetlbfs_statfs``).
# autofs is not one: a statfs on its mount point mounts what it stands for.
MEMORY_FILESYSTEMS = frozenset(
    {
        "proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue", "ramfs", "debugfs", "tracefs",
        "securityfs", "configfs", "bpf", "pstore", "tmpfs", "devtmpfs", "hugetlbfs",
    }
)  # fmt: skip
# Filesystems a path may cross on its way to such a mount without waiting: they have no
# dentry revalidation (``d_revalidate``; NFS, FUSE, Lustre, CIFS, Ceph and overlay have one,
# which may ask a server), and a mount pins the dentries above its mount point in the cache.
WALKABLE_FILESYSTEMS = MEMORY_FILESYSTEMS | {"ext2", "ext3", "ext4", "xfs", "btrfs"}


class Usage(NamedTuple):
    """Free space and inodes of one filesystem, as fractions of the total, and as df's ``Use%`` and ``IUse%``.

    ``free_fraction`` is what anyone but root may still write (``f_bavail / f_blocks``): the
    blocks reserved for root count as used. df leaves the reserve out of its percentage
    (``df_used_percent``, None where df prints ``-``).
    """

    free_fraction: float
    free_inode_fraction: Optional[float]
    total_bytes: int
    df_used_percent: Optional[int] = None
    df_inodes_used_percent: Optional[int] = None
    # df's Avail (f_bavail, root's reserve left out, in KiB rounded up) and IFree (f_ffree): what
    # NHC's check_fs_free and check_fs_ifree compare a size or a count with (scripts/lbnl_fs.nhc).
    free_kib: int = 0
    free_inodes: int = 0

    def free_percents(self, convention: str) -> tuple[Optional[float], Optional[float]]:
        """Free space and free inodes in percent, as ``statvfs`` or ``df`` counts them (None: nothing to judge)."""
        if convention == "df":
            space, inodes = self.df_used_percent, self.df_inodes_used_percent
            return (None if space is None else 100.0 - space, None if inodes is None else 100.0 - inodes)
        inode = self.free_inode_fraction
        return self.free_fraction * 100, None if inode is None else inode * 100


class Hung(NamedTuple):
    """The probe did not return in time (or an earlier one is still stuck)."""

    pid: int
    stuck_seconds: float
    inherited: bool


class Failed(NamedTuple):
    """The probe returned but could not read the filesystem: why, and statvfs's errno when it gave one.

    ``errno`` is None when the probe itself failed (no ``stat`` program, a child that died
    or printed something else), not the filesystem.
    """

    message: str
    errno: Optional[int] = None


class Changed(NamedTuple):
    """The mount at the path is no longer the one mountinfo named: ``device`` is there instead ("?": none listed).

    A user's FUSE mounted there since mountinfo was read, an autofs trigger that mounted
    what it stands for, a mount undone: the filesystem expected was not read, and nothing
    was asked of the one found.
    """

    device: str
    expected: str


ProbeOutcome = Union[Usage, Hung, Failed, Changed]


def parse_stat_output(text: str) -> Usage:
    """Parse a probe's six numbers (``probechild.probe``: f_blocks, f_bavail, f_frsize, f_files, f_ffree, f_bfree).

    In the order of ``stat --file-system --format="%b %a %S %c %d %f"``; ``ValueError`` when malformed.
    """
    parts = text.split()
    if len(parts) != 6:
        raise ValueError(f"expected 6 numbers from stat, got {text.strip()!r}")
    blocks, avail, block_size, inodes, free_inodes, free_blocks = (int(p) for p in parts)
    if blocks < 0 or avail < 0 or inodes < 0 or free_inodes < 0 or free_blocks < 0:
        raise ValueError(f"negative value from stat: {text.strip()!r}")
    return _usage(blocks, avail, block_size, inodes, free_inodes, free_blocks)


def df_percent(used: int, available: int) -> Optional[int]:
    """df's ``Use%``: used / (used + available), rounded up; None where df prints ``-`` (coreutils df.c, get_dev)."""
    total = max(used, 0) + available
    return None if total <= 0 else -(-max(used, 0) * 100 // total)


def _usage(blocks: int, avail: int, block_size: int, inodes: int, free_inodes: int, free_blocks: int) -> Usage:
    """statvfs's ``f_blocks``, ``f_bavail``, ``f_frsize``, ``f_files``, ``f_ffree`` and ``f_bfree`` as a ``Usage``."""
    free = avail / blocks if blocks else 1.0
    # Filesystems without a fixed inode table (btrfs, many FUSE ones) report 0 inodes.
    inode_free = free_inodes / inodes if inodes else None
    return Usage(
        free_fraction=free,
        free_inode_fraction=inode_free,
        total_bytes=blocks * block_size,
        # df counts root's reserve neither as used nor as available; inodes have no reserve.
        df_used_percent=df_percent(blocks - free_blocks, avail) if blocks else None,
        df_inodes_used_percent=df_percent(inodes - free_inodes, free_inodes) if inodes else None,
        free_kib=-(-avail * block_size // 1024),
        free_inodes=free_inodes,
    )


def read_here(path: str, device: str) -> ProbeOutcome:
    """``statvfs`` of ``path`` in this process: only for a mount the kernel answers from memory (see the module).

    Read as the child reads it (``probechild.probe``): a user's FUSE mounted on ``path`` since
    mountinfo was read is found before anything is asked of it, not waited on in this process.
    """
    return _outcome(probechild.probe(path, device), device)


def _outcome(answer: probechild.Answer, device: str) -> ProbeOutcome:
    if isinstance(answer, str):
        return Changed(answer, device)
    if len(answer) == 2:
        number, message = answer
        return Failed(str(message), int(number) or None)
    blocks, avail, block_size, inodes, free_inodes, free_blocks = (int(n) for n in answer)
    return _usage(blocks, avail, block_size, inodes, free_inodes, free_blocks)


def forget_finished(remembered: dict[str, dict[str, float]], keep: set[str]) -> None:
    """Drop records of stuck probes (of mounts not in ``keep``) whose process has exited."""
    for path in [p for p in remembered if p not in keep]:
        start = process_start(int(remembered[path]["pid"]))
        if start is None or abs(start - remembered[path]["start"]) >= 1.0:
            del remembered[path]


@dataclass
class _Running:
    process: subprocess.Popen[bytes]
    started: float


# The child: one thread per mount, so a hung one blocks only its own thread and every other
# mount still answers within the deadline (probechild.py; its lines are read by _answers).
_CHILD = str(Path(__file__).with_name("probechild.py"))
# %b total blocks, %a blocks free to non-root, %S fundamental block size, %c total inodes, %d free inodes,
# %f free blocks (root's reserve included): probechild's numbers, in its order.
_FORMAT = "%b %a %S %c %d %f"


def _command(mounts: dict[str, str]) -> list[str]:
    """One child for ``mounts`` (path: the ``major:minor`` mountinfo gave it).

    The root alone is read by ``stat`` (a tenth of an interpreter's start): no user may mount
    on "/" (fusermount3 mounts only on a directory its caller may write, and "/" is root's),
    so nothing can take its place between mountinfo and the probe.
    """
    if list(mounts) == ["/"]:
        return [locate("stat"), "--file-system", f"--printf=0 {_FORMAT}\\n", "--", "/"]
    return [sys.executable, "-I", "-S", _CHILD, *(item for pair in mounts.items() for item in pair)]


def read_until(process: subprocess.Popen[bytes], deadline: float) -> tuple[bytes, bool]:
    """The child's stdout until it closes or the monotonic ``deadline`` passes; (output, closed)."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    chunks: list[bytes] = []
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                return b"".join(chunks), False
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks), True
            chunks.append(chunk)


def _failed(line: str) -> Failed:
    """A threaded child's ``ERRNO ERROR`` (after ``INDEX ! ``); errno 0 or none is the probe's own failure."""
    number, _, message = line.partition(" ")
    return Failed(message, int(number) or None) if number.isdigit() else Failed(line)


def stat_failed(stderr: str) -> Failed:
    """A failed ``stat --file-system``, its errno read back from the message coreutils ends with.

    coreutils' stat reports ``PROGRAM: cannot read file system information for 'PATH': MESSAGE``
    (stat.c, ``do_statfs``), MESSAGE being strerror(errno) in the C locale the child runs in
    (``LC_ALL=C``); this process's strerror gives the same C-locale text (Python sets no
    LC_MESSAGES). Any other message is the probe's own failure.
    """
    if ": cannot read file system information for " not in stderr:
        return Failed(stderr)
    message = stderr.rpartition(": ")[2].strip()
    codes = {os.strerror(number): number for number in errno.errorcode}
    return Failed(stderr, codes.get(message))


def _answers(output: bytes, devices: list[str]) -> dict[int, ProbeOutcome]:
    """The outcomes in the child's complete lines (``probechild.line``), by index; ``devices`` the ones expected."""
    answers: dict[int, ProbeOutcome] = {}
    for line in records(output.decode("utf-8", "replace")):
        index, _, rest = line.partition(" ")
        if not index.isdigit() or int(index) >= len(devices):
            continue
        answers[int(index)] = _answer(rest, devices[int(index)])
    return answers


def _answer(rest: str, device: str) -> ProbeOutcome:
    """One line of the child's after its index: the six numbers, ``~ DEVICE`` or ``! ERRNO MESSAGE``."""
    if rest.startswith("~ "):
        return Changed(rest[2:], device)
    if rest.startswith("! "):
        return _failed(rest[2:])
    try:
        return parse_stat_output(rest)
    except ValueError as exc:
        return Failed(str(exc))


def _close(process: subprocess.Popen[bytes], *, read_errors: bool = True) -> str:
    """Close our ends of the child's pipes; what it wrote on stderr, when it has exited (``read_errors``)."""
    assert process.stdout is not None and process.stderr is not None
    error = process.stderr.read().decode("utf-8", "replace").strip() if read_errors else ""
    process.stdout.close()
    process.stderr.close()
    return error


class ProbeTable:
    """The probes of one check: at most one live process per mount path, one new child per pass."""

    def __init__(self) -> None:
        self._running: dict[str, _Running] = {}

    def _still_stuck(self, path: str, now: float, remembered: dict[str, dict[str, float]]) -> Optional[Hung]:
        """The earlier probe of ``path`` that is still alive (here or in an earlier process), if any."""
        running = self._running.get(path)
        if running is not None:
            if running.process.poll() is None:
                return Hung(running.process.pid, now - running.started, inherited=True)
            del self._running[path]
            remembered.pop(path, None)
        record = remembered.get(path)
        if record is not None:
            start = process_start(int(record["pid"]))
            if start is not None and abs(start - record["start"]) < 1.0:
                return Hung(int(record["pid"]), time.time() - record["start"], inherited=True)
            remembered.pop(path, None)
        return None

    def probe_all(
        self, mounts: dict[str, str], deadline: float, remembered: dict[str, dict[str, float]]
    ) -> dict[str, ProbeOutcome]:
        """Probe every path of ``mounts`` in one child process, waiting at most ``deadline`` seconds.

        ``mounts`` maps each path to the ``major:minor`` its mountinfo record gave: a path
        where another mount stands by the time the child looks is ``Changed``, not read.

        ``remembered`` is the check's persisted ``{path: {"pid", "start"}}`` record of
        stuck probes left by earlier processes; it is updated in place. A path whose
        earlier probe is still alive is not probed again.
        """
        now = time.monotonic()
        outcomes: dict[str, ProbeOutcome] = {}
        for path in mounts:
            stuck = self._still_stuck(path, now, remembered)
            if stuck is not None:
                outcomes[path] = stuck
        todo = [p for p in mounts if p not in outcomes]
        if not todo:
            return outcomes
        try:
            command = _command({p: mounts[p] for p in todo})
        except FileNotFoundError as exc:
            return {**outcomes, **{p: Failed(str(exc)) for p in todo}}
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={"LC_ALL": "C"},
        )
        output, closed = read_until(process, now + deadline)
        answers = _answers(output, [mounts[p] for p in todo])
        if closed:
            process.wait()
            error = _close(process)
            for index, path in enumerate(todo):
                # stat prints no line when it fails: its message is on stderr.
                failed = stat_failed(error) if error else Failed(f"the probe exited {process.returncode}")
                outcomes[path] = answers.get(index) or failed
            return outcomes
        # SIGKILL ends it as soon as the kernel lets every thread go; until then it is on record
        # as the stuck probe of each mount that did not answer, so none of them is probed again.
        os.kill(process.pid, signal.SIGKILL)
        _close(process, read_errors=False)
        start = process_start(process.pid)
        waited = time.monotonic() - now
        for index, path in enumerate(todo):
            if index in answers:
                outcomes[path] = answers[index]
                continue
            self._running[path] = _Running(process, now)
            if start is not None:
                remembered[path] = {"pid": float(process.pid), "start": start}
            outcomes[path] = Hung(process.pid, waited, inherited=False)
        return outcomes
