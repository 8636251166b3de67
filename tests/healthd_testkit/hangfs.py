"""A FUSE filesystem that never answers: a stand-in for a hung NFS server, or for a user's own FUSE server.

Two servers, one per way a node gets a FUSE mount:

- ``python hangfs.py MOUNTPOINT`` (fusepy over libfuse2, as root): getattr and statfs never
  return; mounted with ``allow_other`` so every process can get stuck on it;
- ``python hangfs.py --user UID[:GID] [--allow-other] MOUNTPOINT`` (started as root): a user's
  FUSE server. It mounts the way fusermount3 mounts for a user on Debian (fusermount3 is
  setuid root: it opens /dev/fuse, mounts with ``nosuid,nodev,user_id=UID,group_id=GID``
  and hands the descriptor to the user's server), then drops to UID and serves as that
  user: the kernel's state is what a user's sshfs makes (fusectl's connection owned by
  UID). ``--allow-other`` is what fusermount3 adds where /etc/fuse.conf has
  ``user_allow_other``. It answers the kernel's INIT and nothing after it, speaking the
  kernel's protocol itself (include/uapi/linux/fuse.h), and prints each request it leaves
  unanswered as ``OPCODE NODEID PID``, for a test to wait on.

Each serves in the foreground until killed. Killing the server makes every blocked request
fail with ENOTCONN, which releases the processes stuck on the mount.
"""

from __future__ import annotations

import errno
import os
import struct
import sys
import threading
from typing import Any

# include/uapi/linux/fuse.h: fuse_in_header (len, opcode, unique, nodeid, uid, gid, pid, ...: 40 bytes),
# fuse_out_header (len, error, unique), and FUSE_INIT's opcode.
_IN_HEADER = struct.Struct("<IIQQIII")
_IN_HEADER_SIZE = 40
_OUT_HEADER = struct.Struct("<IiQ")
_FUSE_INIT = 26


def _mount_for(mountpoint: str, uid: int, gid: int, allow_other: bool) -> int:
    """Mount a FUSE filesystem at ``mountpoint`` for ``uid`` as fusermount3 does; its /dev/fuse descriptor."""
    import ctypes

    fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    options = f"fd={fd},rootmode=40000,user_id={uid},group_id={gid}" + ",allow_other" * allow_other
    libc = ctypes.CDLL(None, use_errno=True)
    flags = 2 | 4  # MS_NOSUID | MS_NODEV (include/uapi/linux/mount.h), as fusermount3 forces for users
    if libc.mount(b"hangfs", mountpoint.encode(), b"fuse.hangfs", flags, options.encode()) != 0:
        raise OSError(ctypes.get_errno(), f"mount {mountpoint}: {os.strerror(ctypes.get_errno())}")
    return fd


def _become(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def _init_reply(unique: int, kernel_minor: int) -> bytes:
    # fuse_init_out (64 bytes): major 7, our minor, no readahead, no flags, max_background 16,
    # congestion_threshold 12, max_write 4096, time_gran 1, then zeros.
    body = struct.pack("<IIIIHHIIHHI", 7, min(kernel_minor, 31), 0, 0, 16, 12, 4096, 1, 0, 0, 0) + bytes(28)
    return _OUT_HEADER.pack(_OUT_HEADER.size + len(body), 0, unique) + body


def serve_never(fd: int) -> None:
    """Answer the kernel's INIT on ``fd``, then read every request and answer none, until unmounted."""
    while True:
        try:
            request = os.read(fd, 1 << 20)
        except OSError as exc:
            if exc.errno == errno.ENODEV:  # unmounted
                return
            if exc.errno in (errno.EINTR, errno.ENOENT):  # a request interrupted before it was read
                continue
            raise
        _, opcode, unique, nodeid, _, _, pid = _IN_HEADER.unpack_from(request)
        if opcode == _FUSE_INIT:
            os.write(fd, _init_reply(unique, struct.unpack_from("<I", request, _IN_HEADER_SIZE + 4)[0]))
        else:
            print(opcode, nodeid, pid, flush=True)


_NEVER = threading.Event()


def _fusepy_server(mountpoint: str) -> None:
    from fuse import FUSE, Operations  # fusepy

    class Hang(Operations):  # type: ignore[misc]
        def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
            _NEVER.wait()
            return {}

        def statfs(self, path: str) -> dict[str, Any]:
            _NEVER.wait()
            return {}

    FUSE(Hang(), mountpoint, foreground=True, nothreads=False, allow_other=True)


if __name__ == "__main__":
    if sys.argv[1] == "--user":
        owner, _, group = sys.argv[2].partition(":")
        uid, gid = int(owner), int(group or owner)
        device = _mount_for(sys.argv[-1], uid, gid, "--allow-other" in sys.argv[3:-1])
        _become(uid, gid)
        serve_never(device)
    else:
        _fusepy_server(sys.argv[1])
