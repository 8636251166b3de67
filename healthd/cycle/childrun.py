"""Work in a child process under a deadline that the work may move: the prolog's and the epilog's way to run.

A child, not a thread: what can hang there (NVML, an open on a hung mount) blocks in the
kernel, and a process with a thread stuck there cannot finish exiting. The child is sent
SIGKILL at the deadline and not waited for (``healthd.checks.bounded``'s rule).
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import select
import signal
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from typing import NoReturn


@dataclass
class Deadline:
    """A deadline the work may move once it has read its configured budget."""

    at: float


def run_with_deadline(work: Callable[[Deadline], int], deadline: Deadline) -> Optional[int]:
    """``work``'s exit code, run in a child process; None when the child is still running at the deadline.
    A child, not a thread: what can hang here (NVML, an open on a hung mount) blocks in
    the kernel, and a process with a thread stuck there cannot finish exiting; the
    child is sent SIGKILL at the deadline and not waited for (``healthd.checks.bounded``'s
    rule). It sends back a moved deadline (``deadline <at>``) once it has read its
    budget, then its exit code and what it printed. Its standard streams are
    /dev/null, so a stuck child holds no pipe of slurmd's or of a caller's.
    """
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    # The child shares what this process has made (its imports above all): frozen, no collection in
    # either walks those objects again. The gc module's documentation advises gc.freeze() right
    # before a fork without exec; about 6 M fewer instructions of a prolog (bench/README.md).
    gc.freeze()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_end)
        _child(work, deadline, write_end)
    os.close(write_end)
    return _await_child(pid, read_end, deadline)


def _child(work: Callable[[Deadline], int], deadline: Deadline, write_end: int) -> NoReturn:
    """The child's side: ``work`` run with its streams on /dev/null, its exit code and output sent up the pipe.
    It exits with ``os._exit``, running nothing of the parent's (atexit, buffers) twice.
    """
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    out = io.StringIO()
    sys.stdout = sys.stderr = out
    code = 0
    moved = Deadline(deadline.at)
    try:
        code = work(_Moving(moved, write_end))
    except Exception as exc:  # healthd's own failure never fails a job
        out.write(f"healthd: internal error, job allowed: {type(exc).__name__}: {exc}\n")
    os.write(write_end, (json.dumps({"code": code, "out": out.getvalue()}) + "\n").encode())
    os._exit(0)


def _await_child(pid: int, read_end: int, deadline: Deadline) -> Optional[int]:
    """The parent's side: the child's lines until its result, following the deadline it moves; None at the deadline.
    At the deadline the child is sent SIGKILL and not waited for: it may be stuck in the kernel.
    """
    buffer = b""
    while True:
        left = deadline.at - time.monotonic()
        if left <= 0 or not select.select([read_end], [], [], left)[0]:
            if deadline.at - time.monotonic() > 0:
                continue
            os.kill(pid, signal.SIGKILL)
            os.close(read_end)
            return None
        chunk = os.read(read_end, 65536)
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"deadline "):
                deadline.at = float(line.split()[1])
            elif line:
                result = json.loads(line)
                os.close(read_end)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                sys.stdout.write(result["out"])
                return int(result["code"])
    os.close(read_end)
    return 0


class _Moving(Deadline):
    """The child's side of the deadline: moving it tells the parent."""

    def __init__(self, deadline: Deadline, fd: int) -> None:
        super().__init__(deadline.at)
        self._fd = fd

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name == "at" and "_fd" in self.__dict__:
            os.write(self._fd, f"deadline {value!r}\n".encode())
