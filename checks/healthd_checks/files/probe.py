"""The child process that looks at the files, so that a file on a hung mount hangs it and not healthd.

healthd runs it as ``python -I -S probe.py REQUEST`` (``check.gather``): the request is a
JSON object; looks at each file in a thread of its own, and at its deadline prints
what it has, one JSON object, closes its output and exits. A thread stuck in the kernel
(a ``stat`` or ``read`` on a hung NFS or FUSE mount sleeps uninterruptibly) cannot delay the
answer: the parent sees end-of-file once stdout is closed, even while the
stuck thread keeps the process alive. A file with no answer is left out, and the check
reports it UNKNOWN. Only the standard library is used (``-I -S``: no site packages).
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import stat
import sys
import threading
import time
from typing import Any, Optional


def _name(lookup: Any, number: int) -> Optional[str]:
    try:
        return str(lookup(number)[0])
    except (KeyError, OverflowError):
        return None


def _stat_of(st: os.stat_result) -> dict[str, Any]:
    return {
        "mode": st.st_mode,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "size": st.st_size,
        "mtime": st.st_mtime,
        "user": _name(pwd.getpwuid, st.st_uid),
        "group": _name(grp.getgrgid, st.st_gid),
    }


def _read(path: str, limit: int) -> dict[str, Any]:
    # O_NONBLOCK: a FIFO opened to be read must not wait for a writer; O_NOFOLLOW is not
    # wanted, since NHC reads through a symlink and the owners of both are judged.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    return {"text": data[:limit].decode("utf-8", "replace"), "truncated": len(data) > limit}


def look(path: str, read: bool, limit: int) -> dict[str, Any]:
    """One file: its lstat, its stat, what healthd may do with it, and its first ``limit`` bytes if ``read``."""
    try:
        link = os.lstat(path)
    except OSError as exc:
        return {"lstat": None, "errno": exc.errno, "error": str(exc)}
    seen: dict[str, Any] = {"lstat": _stat_of(link)}
    try:
        seen["stat"] = _stat_of(os.stat(path))
    except OSError as exc:
        seen["stat"] = None
        seen["error"] = str(exc)
        return seen
    seen["access"] = [os.access(path, flag) for flag in (os.R_OK, os.W_OK, os.X_OK)]
    if read and stat.S_ISREG(seen["stat"]["mode"]):
        try:
            seen.update(_read(path, limit))
        except OSError as exc:
            seen["read_error"] = str(exc)
    return seen


def main() -> None:
    request = json.loads(sys.argv[1])
    deadline = time.monotonic() + float(request["deadline"])
    answers: dict[str, Any] = {}
    lock = threading.Lock()

    def one(item: dict[str, Any]) -> None:
        seen = look(item["path"], bool(item["read"]), int(request["max_bytes"]))
        with lock:
            answers[item["path"]] = seen

    threads = [threading.Thread(target=one, args=(item,), daemon=True) for item in request["files"]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0.0))
    with lock:
        sys.stdout.write(json.dumps(answers))
    sys.stdout.flush()
    # Closing the pipe ends the parent's wait even while a stuck thread keeps this process.
    os.close(1)
    os._exit(0)


if __name__ == "__main__":
    main()
