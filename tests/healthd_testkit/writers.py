"""Who writes the host guard's trees: fanotify(7) events, each judged by its writer's place in the process tree.

A snapshot of /var/lib/healthd shows that something changed, not who changed it; on a node
where healthd runs, its daemon and slurmd's ``healthd-hook`` write there while the suite runs.
fanotify reports, with each creation, deletion, rename, change of attributes or of contents
under a marked directory, the directory, the entry's name and the writer's pid
(``FAN_REPORT_DFID_NAME``, Linux 5.9). A thread reads the events as they come, while the
writer still lives, and sorts each writer: a descendant of this process (the suite's), or a
process outside its tree (another program). A writer already gone when its event is read
cannot be placed, and counts as possibly the suite's. A directory on a filesystem without
file handles (overlayfs, as in a throwaway root) cannot be watched: its changes are judged
as if no event came. So does a writer that carries the
session's mark in its environment: a daemon a test started, then left to init.
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
import threading
from enum import Enum
from pathlib import Path
from typing import Iterable, Optional

# <linux/fanotify.h>
_FAN_CLASS_NOTIF = 0x0
_FAN_CLOEXEC, _FAN_NONBLOCK, _FAN_REPORT_DFID_NAME = 0x1, 0x2, 0x400 | 0x800
_FAN_MARK_ADD = 0x1
_FAN_MODIFY, _FAN_ATTRIB, _FAN_CLOSE_WRITE = 0x2, 0x4, 0x8
_FAN_MOVED_FROM, _FAN_MOVED_TO, _FAN_CREATE, _FAN_DELETE = 0x40, 0x80, 0x100, 0x200
_FAN_EVENT_ON_CHILD, _FAN_ONDIR = 0x08000000, 0x40000000
_DIRENT = _FAN_MOVED_FROM | _FAN_MOVED_TO | _FAN_CREATE | _FAN_DELETE | _FAN_ONDIR
_INSIDE = _DIRENT | _FAN_MODIFY | _FAN_ATTRIB | _FAN_CLOSE_WRITE | _FAN_EVENT_ON_CHILD
_METADATA = struct.Struct("IBBHQii")  # event_len, vers, reserved, metadata_len, mask, fd, pid
_INFO_HEADER = struct.Struct("BBH")  # info_type, pad, len
_FSID_AND_HANDLE = struct.Struct("8sIi")  # fsid, handle_bytes, handle_type
_AT_FDCWD = -100


class Writer(Enum):
    """Whose process made a change."""

    SUITE = "a process of this test run"
    OTHER = "another program"
    GONE = "a process gone before it could be placed"


class _FileHandle(ctypes.Structure):
    _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int), ("f_handle", ctypes.c_ubyte * 128)]


class Writers:
    """The writers of ``roots`` seen since the last ``take``: path -> the kinds of process that wrote it.

    ``mark`` is the ``NAME=VALUE`` the session put in its environment, which every process it
    starts inherits.
    """

    def __init__(self, roots: Iterable[Path], mark: str) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        # fanotify_mark(2): int fd, unsigned int flags, uint64_t mask, int dirfd, const char *pathname.
        args = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
        self._libc.fanotify_mark.argtypes = args
        self._environ_mark = os.fsencode(mark) + b"\0"
        self._fd = self._libc.fanotify_init(_FAN_CLASS_NOTIF | _FAN_CLOEXEC | _FAN_NONBLOCK | _FAN_REPORT_DFID_NAME, 0)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "fanotify_init failed")
        self._roots = [Path(os.path.abspath(r)) for r in roots]
        self._dirs: dict[bytes, str] = {}  # a marked directory's handle -> its path
        self._seen: dict[str, set[Writer]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.mark()
        self._thread = threading.Thread(target=self._read_forever, name="host-guard-writers", daemon=True)
        self._thread.start()

    def mark(self) -> None:
        """Watch every directory of the trees as they are now; a root that does not exist, through its parent."""
        for root in self._roots:
            if root.is_dir() and not root.is_symlink():
                for directory, _subdirs, _files in os.walk(root):
                    self._mark(directory, _INSIDE)
            elif root.parent.is_dir():
                self._mark(str(root.parent), _DIRENT | _FAN_EVENT_ON_CHILD)

    def _mark(self, directory: str, mask: int) -> None:
        handle, mount_id = _FileHandle(handle_bytes=128), ctypes.c_int()
        path = os.fsencode(directory)
        if self._libc.name_to_handle_at(_AT_FDCWD, path, ctypes.byref(handle), ctypes.byref(mount_id), 0) != 0:
            return  # gone since the walk, or on a filesystem without file handles: not watched
        key = struct.pack("Ii", handle.handle_bytes, handle.handle_type) + bytes(handle.f_handle[: handle.handle_bytes])
        if key in self._dirs:
            return
        # A filesystem without a filesystem id (tmpfs before Linux 6.7) refuses the mark: not watched.
        if self._libc.fanotify_mark(self._fd, _FAN_MARK_ADD, mask, _AT_FDCWD, path) == 0:
            self._dirs[key] = directory

    def take(self) -> dict[str, set[Writer]]:
        """What was written since the last call, after reading every event already queued."""
        self._read()
        with self._lock:
            seen, self._seen = self._seen, {}
        return seen

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        os.close(self._fd)

    def _read_forever(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._fd], [], [], 0.2)
            if ready:
                self._read()

    def _read(self) -> None:
        with self._lock:
            while True:
                try:
                    data = os.read(self._fd, 65536)
                except OSError:  # nothing queued (EAGAIN), or closed
                    return
                for path, pid in self._events(data):
                    kind = _place(pid, self._environ_mark)
                    for written in (path, os.path.dirname(path)):
                        self._seen.setdefault(written, set()).add(kind)

    def _events(self, data: bytes) -> Iterable[tuple[str, int]]:
        """(the entry's path, the writer's pid) of each event in ``data``."""
        offset = 0
        while offset + _METADATA.size <= len(data):
            length, _vers, _reserved, header, _mask, fd, pid = _METADATA.unpack_from(data, offset)
            if fd >= 0:
                os.close(fd)
            info = offset + header
            while info + _INFO_HEADER.size <= offset + length:
                _type, _pad, size = _INFO_HEADER.unpack_from(data, info)
                _fsid, handle_bytes, _handle_type = _FSID_AND_HANDLE.unpack_from(data, info + _INFO_HEADER.size)
                start = info + _INFO_HEADER.size + 8
                key = data[start : start + 8 + handle_bytes]
                name = data[start + 8 + handle_bytes : info + size].split(b"\0", 1)[0]
                directory = self._dirs.get(key)
                if directory is not None:
                    yield (os.path.join(directory, os.fsdecode(name)) if name not in (b"", b".") else directory), pid
                info += max(size, _INFO_HEADER.size)
            offset += max(length, _METADATA.size)


def _place(pid: int, environ_mark: bytes) -> Writer:
    """Whether ``pid`` is this process, one of its descendants or marked as the session's, judged from /proc."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            if b"\0" + environ_mark in b"\0" + environ.read():
                return Writer.SUITE
    except OSError:
        return Writer.GONE
    me = os.getpid()
    current: Optional[int] = pid
    for _ in range(4096):
        if current == me:
            return Writer.SUITE
        if current in (None, 0, 1):
            return Writer.OTHER
        try:
            with open(f"/proc/{current}/stat", "rb") as stat:
                # proc_pid_stat(5): "pid (comm) state ppid ..."; comm may hold anything but the last ")".
                current = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return Writer.GONE if current == pid else Writer.OTHER
    return Writer.OTHER
