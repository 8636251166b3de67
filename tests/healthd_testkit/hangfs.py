"""A FUSE filesystem whose getattr and statfs never return: a stand-in for a hung NFS server.

Run as ``python hangfs.py MOUNTPOINT``; it serves in the foreground until killed.
Killing it makes every blocked request fail with ENOTCONN, which releases the
processes stuck on the mount.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from fuse import FUSE, Operations  # fusepy

_NEVER = threading.Event()


class Hang(Operations):  # type: ignore[misc]
    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        _NEVER.wait()
        return {}

    def statfs(self, path: str) -> dict[str, Any]:
        _NEVER.wait()
        return {}


if __name__ == "__main__":
    FUSE(Hang(), sys.argv[1], foreground=True, nothreads=False, allow_other=True)
