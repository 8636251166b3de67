"""An exclusive lock on the state directory, so two healthd processes never interleave their bookkeeping.

The HealthCheckProgram hook, the daemon and ``healthd ack`` may run at the same
time on one node. Each takes ``state_dir/cycle.lock`` with ``flock(2)`` around its
read-modify-write of the ``policy`` and ``acks`` state files, so an
acknowledgement given mid-pass is not overwritten and two passes do not both send
the same action. The lock is never waited for longer than a timeout: a process
that cannot get it reports that and leaves the state alone, it never hangs. The
kernel drops the lock when the holder exits, even if it is killed.

Taking the lock is also where every pass and ``healthd ack`` check the whole state
directory against ``healthd.store.trust``'s rule before reading or acting on anything in
it: ``UntrustedPath`` comes out of ``acquire`` and the command refuses (exit 78).
The lock file itself is opened with ``O_NOFOLLOW``, so a ``cycle.lock`` planted as a
link to another file is refused, and root never creates or opens the file it names.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from healthd.store.state import open_entry, open_state_dir

TYPE_CHECKING = False  # not typing's: importing typing at run time would slow `healthd status` (bench/README.md)
if TYPE_CHECKING:
    from typing import Callable, Optional

LOCK_NAME = "cycle.lock"
_POLL_SECONDS = 0.05


class LockTimeout(Exception):
    """Another process held the lock for longer than the timeout."""


class StateLock:
    """``with StateLock(dir, timeout):`` holds the lock for the block.

    Raises ``LockTimeout`` when the lock stays taken, ``UntrustedPath`` when the
    directory or an entry in it fails the trust rule, and ``OSError`` when the lock
    file cannot be opened at all (the directory cannot be created or is unwritable):
    callers report that and go on unlocked, since they cannot save state there either.
    """

    def __init__(
        self,
        directory: Path,
        timeout: float,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        name: str = LOCK_NAME,
    ) -> None:
        self.directory = directory
        self.name = name
        self.path = directory / name
        self.timeout = timeout
        self._monotonic = monotonic
        self._sleep = sleep
        self._fd: Optional[int] = None

    def acquire(self) -> None:
        dir_fd = open_state_dir(self.directory, create=True)
        try:
            fd = open_entry(dir_fd, self.directory, self.name, os.O_RDWR | os.O_CREAT)
        finally:
            os.close(dir_fd)
        deadline = self._monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if self._monotonic() >= deadline:
                    os.close(fd)
                    raise LockTimeout(
                        f"{self.path} is held by another healthd process (waited {self.timeout:g}s)"
                    ) from None
                self._sleep(_POLL_SECONDS)
                continue
            except OSError:
                os.close(fd)
                raise
            self._fd = fd
            return

    def fileno(self) -> int:
        """The held lock file's descriptor (``ValueError`` when not held)."""
        if self._fd is None:
            raise ValueError(f"{self.path} is not held")
        return self._fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> StateLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.release()


# The lock an active pass (healthd.cycle.activerun) holds for its whole run, beside cycle.lock.
ACTIVE_LOCK = "active.lock"


def active_running(state_dir: Path) -> bool:
    """Whether another process runs an active pass on this node now: it holds ``active.lock``.

    A probe without waiting, for an ordinary pass deciding whether it may resume the node
    (``rules.Coverage``): it takes the lock for an instant and lets it go. A lock file that
    cannot be opened cannot be held by an active pass either (``start`` refuses then).
    """
    lock = StateLock(state_dir, 0.0, name=ACTIVE_LOCK)
    try:
        lock.acquire()
    except LockTimeout:
        return True
    except OSError:
        return False
    lock.release()
    return False
