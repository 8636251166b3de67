"""The statvfs of a mount, read only where the mount at its path is still the one mountinfo named.

Run as a script by ``fsprobe`` in a child process (``python -I -S probechild.py PATH DEVICE
...``, one thread per mount, one line each on stdout), and imported by ``fsprobe.read_here``
for the mounts the kernel answers from memory. It imports nothing but the standard library.

Between reading mountinfo and probing a path, a user may mount FUSE on it (fusermount3 is
setuid; docs/security.md), and ``statvfs(path)`` would then ask the user's server, which may
never answer. So the path is opened once with ``O_PATH``, which walks to the mount's root
without asking its filesystem anything (no ``->open``; only the mount point's dentry in the
filesystem beneath is looked up), the mount that descriptor is on is read from
``/proc/self/fdinfo`` (``mnt_id``, proc(5)) and its ``major:minor`` from this process's
mountinfo, and only when that is the device the caller expects is ``fstatvfs`` called on that
same descriptor: the mount it reads cannot change after the check. ``O_DIRECTORY`` makes the
walk mount an autofs trigger, as ``statvfs(path)`` does (fs/namei.c, ``follow_automount``).
``st_dev`` from ``stat`` is not used: a ``stat`` of a FUSE root may ask its server, and a btrfs
subvolume's ``st_dev`` is not the ``major:minor`` mountinfo shows.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from typing import Union

# What probe() answers: the statvfs numbers (f_blocks, f_bavail, f_frsize, f_files, f_ffree,
# f_bfree); the device actually at the path ("?" when its mount is gone from mountinfo); or
# (errno, message) when the path could not be read.
Answer = Union[tuple[int, int, int, int, int, int], str, tuple[int, str]]


def _open(path: str) -> int:
    try:
        return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except NotADirectoryError:  # a file bind-mounted on a file
        return os.open(path, os.O_PATH | os.O_CLOEXEC)


def device_of(fd: int) -> str:
    """``major:minor`` of the mount ``fd`` is on, from this process's mountinfo; "?" when it is not listed."""
    with open(f"/proc/self/fdinfo/{fd}", "rb") as handle:
        fields = dict(line.partition(b":")[::2] for line in handle.read().split(b"\n"))
    mount_id = fields[b"mnt_id"].strip()
    with open("/proc/self/mountinfo", "rb") as handle:
        # Records end at "\n" alone (a mount point's newline is escaped), fields 1 and 3 come
        # before any name a user chose.
        for record in handle.read().split(b"\n"):
            parts = record.split(b" ", 3)
            if len(parts) == 4 and parts[0] == mount_id:
                return parts[2].decode("ascii", "replace")
    return "?"


def probe(path: str, device: str) -> Answer:
    """statvfs of ``path`` where the mount there is on ``device`` (``major:minor``; "": any); else what is there."""
    try:
        fd = _open(path)
        try:
            seen = device_of(fd)
            if device and seen != device:
                return seen
            s = os.fstatvfs(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        return (exc.errno or 0, exc.strerror or str(exc))
    except (KeyError, ValueError) as exc:  # fdinfo without mnt_id: a kernel before 3.15
        return (0, f"no mount id in fdinfo: {exc}")
    return (s.f_blocks, s.f_bavail, s.f_frsize, s.f_files, s.f_ffree, s.f_bfree)


def line(index: int, answer: Answer) -> str:
    """``INDEX N N N N N N``, ``INDEX ~ DEVICE`` or ``INDEX ! ERRNO MESSAGE``: the format ``fsprobe`` reads."""
    if isinstance(answer, str):
        return f"{index} ~ {answer}"
    if len(answer) == 2:
        number, message = answer
        return f"{index} ! {number} {str(message)[:200]}".replace("\n", " ")
    return " ".join(str(n) for n in (index, *answer))


def _report(index: int, path: str, device: str) -> None:
    # One os.write per line, under PIPE_BUF, so the threads' lines never interleave.
    os.write(1, (line(index, probe(path, device)) + "\n").encode("utf-8", "surrogateescape"))


def main(argv: list[str]) -> int:
    """Probe each (PATH, DEVICE) pair of ``argv``, one thread each, so a hung mount blocks only its own."""
    if len(argv) % 2:
        return errno.EINVAL
    pairs = [(argv[i], argv[i + 1]) for i in range(0, len(argv), 2)]
    threads = [threading.Thread(target=_report, args=(i, p, d)) for i, (p, d) in enumerate(pairs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
