"""Runs one outside program with a deadline: the one way healthd starts a program that may hang.

The program runs as an argument list (no shell), by the path given, with a bare
environment (or the one the caller gives), in a session of its own. At the deadline the whole process group gets
SIGKILL and is not waited for: a program stuck in the kernel (a GPU reset in the
driver, a stat on a hung mount) sleeps uninterruptibly, and waiting could take
forever. The caller keeps the process to see whether it has gone yet.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

BARE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


@dataclass(frozen=True)
class Finished:
    """The program ended in time: its exit status and what it printed."""

    returncode: int
    out: str
    err: str


class TimedOut(Exception):
    """The program outlived its deadline; its process group was sent SIGKILL."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        super().__init__(process.pid)
        self.process = process


def run_bounded(
    argv: Sequence[str], timeout: float, stdin: Optional[str] = None, env: Optional[Mapping[str, str]] = None
) -> Finished:
    """Run ``argv`` for at most ``timeout`` seconds, feeding it ``stdin``; raises ``TimedOut`` or ``OSError``.

    ``env`` replaces ``BARE_ENV`` whole: nothing of healthd's own environment is added.
    """
    process = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        env=BARE_ENV if env is None else dict(env),
        cwd="/",
        start_new_session=True,
    )
    try:
        out, err = process.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise TimedOut(process) from None
    return Finished(process.returncode, out, err)
