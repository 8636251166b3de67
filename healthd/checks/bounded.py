"""Runs one outside program with a deadline: the one way healthd starts a program that may hang.

The program runs as an argument list (no shell), by the path given, with a bare
environment (or the one the caller gives), in a session of its own. At the deadline the whole process group gets
SIGKILL and is not waited for: a program stuck in the kernel (a GPU reset in the
driver, a stat on a hung mount) sleeps uninterruptibly, and waiting could take
forever. The caller keeps the process to see whether it has gone yet
(``StuckChildren``), and starts no second one behind it.

A program in a session of its own does not get the signals sent to healthd's
process group: slurmd ends its HealthCheckProgram with SIGTERM, then SIGKILL, to
that group (slurm.conf(5), HealthCheckProgram). So every program is registered
while it is waited for, and a one-shot command calls ``end_with_children`` at
start: a SIGTERM or SIGINT then kills the registered groups before healthd dies
of the signal, and an on_repair script (or its curl) never outlives the pass.

``subprocess.Popen`` itself waits until the child has exec'd its program, so a
program whose *path* may lie on a hung filesystem must not be ``argv[0]``: the exec
would hang the caller, not the child. Such callers exec a local program that then
execs theirs (``healthd.slurm.command``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from types import FrameType
from typing import Callable, Generic, Iterator, Mapping, NamedTuple, Optional, Sequence, TypeVar

BARE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
# How long a killed child may take to die before it counts as stuck in the kernel:
# SIGKILL ends a child in any other state within milliseconds, even on a busy node.
KILL_GRACE = 0.1

K = TypeVar("K")


class Finished(NamedTuple):
    """The program ended in time: its exit status and what it printed."""

    returncode: int
    out: str
    err: str


class TimedOut(Exception):
    """The program outlived its deadline; its process group was sent SIGKILL."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        super().__init__(process.pid)
        self.process = process


# The process groups of the programs being waited for now, by any thread.
_WAITED: set[int] = set()
_WAITED_LOCK = threading.Lock()


def kill_waited() -> None:
    """SIGKILL the process group of every program being waited for now (``end_with_children``)."""
    with _WAITED_LOCK:
        groups = list(_WAITED)
    for group in groups:
        with contextlib.suppress(OSError):  # gone meanwhile
            os.killpg(group, signal.SIGKILL)


@contextlib.contextmanager
def end_with_children() -> Iterator[None]:
    """While in it, SIGTERM and SIGINT kill the programs being waited for, then end healthd as the signal would.

    For one-shot commands; the handlers before it come back after it. Python sets
    handlers from the main thread only: elsewhere it does nothing. slurmd sends
    SIGKILL 10 ms after its SIGTERM, so the handler does nothing but the kills.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def end(signum: int, frame: Optional[FrameType]) -> None:
        kill_waited()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    before = {signum: signal.signal(signum, end) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in before.items():
            if handler is not None:  # None: set outside Python, which cannot be put back
                signal.signal(signum, handler)


def process_start(pid: int) -> Optional[float]:
    """When process ``pid`` started (epoch seconds), or None when it is gone or a zombie.

    With the pid, it names one process: a pid reused by a later process has another start.
    """
    # Here: psutil brings socket, subprocess and its platform module, which a pass that finds
    # no earlier probe or reset to look after never needs (docs/architecture.md).
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return float(process.create_time())
    except psutil.Error:
        return None


def run_bounded(
    argv: Sequence[str],
    timeout: float,
    stdin: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    started: Optional[Callable[[int], None]] = None,
) -> Finished:
    """Run ``argv`` for at most ``timeout`` seconds, feeding it ``stdin``; raises ``TimedOut`` or ``OSError``.

    ``env`` replaces ``BARE_ENV`` whole: nothing of healthd's own environment is added.
    ``started`` is told the program's pid as soon as it runs.
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
    with _WAITED_LOCK:
        _WAITED.add(process.pid)
    try:
        if started is not None:
            started(process.pid)
        out, err = process.communicate(stdin, timeout=max(timeout, 0.0))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise TimedOut(process) from None
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)  # healthd gives up on it (an exception, a signal): so does the program
        raise
    finally:
        with _WAITED_LOCK:
            _WAITED.discard(process.pid)
    return Finished(process.returncode, out, err)


class StuckChildren(Generic[K]):
    """Children that outlived their deadline and SIGKILL: one per key at most, reaped when they exit.

    A child still alive a moment after SIGKILL sleeps in the kernel (a GPU reset in the
    driver, a stat on a hung mount) and wakes only when the kernel lets it. While it
    lives, the caller starts no other child for the same key: it would only get stuck
    behind the first, one more process per pass.
    """

    def __init__(self) -> None:
        self._processes: dict[K, subprocess.Popen[str]] = {}

    def alive(self, key: K) -> Optional[int]:
        """The pid of the stuck child kept for ``key``, or None when there is none (any more)."""
        process = self._processes.get(key)
        if process is None:
            return None
        if process.poll() is not None:
            del self._processes[key]
            return None
        return process.pid

    def keep(self, key: K, process: subprocess.Popen[str], grace: float = KILL_GRACE) -> bool:
        """Keep ``process`` (sent SIGKILL) under ``key`` unless it dies within ``grace`` seconds; True if kept."""
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            self._processes[key] = process
            return True
        return False
