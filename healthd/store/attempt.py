"""The last attempt to record a pass, in a record that a full state disk can still take.

``last-pass.json`` is replaced atomically (a new file renamed over the old), which needs
free space: on a full state disk the save fails and the document still shows the pass
before, as if it were the last. ``healthd status`` must say that the last attempt failed
(docs/service.md, "healthd status"). So each pass that saves ``last-pass.json`` also
writes ``last-attempt``: one line of JSON (``at``, ``ok``, ``error``), padded to
``RECORD_SIZE`` bytes and written in place at offset 0 of a file that already has that
size. Overwriting bytes a file already holds takes no new space on tmpfs or ext4/xfs (a
copy-on-write filesystem may still need some); the file is given its size by the first
pass with space. Where even that write fails, the file's modification time is still set
(an inode change, no data): the reader then knows when the last attempt was, not why it
failed. Not synced: a record lost with a power cut is a hint lost, not a state.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from healthd.store.state import open_entry
from healthd.store.trust import UntrustedPath, open_trusted_dir

ATTEMPT_NAME = "last-attempt"
# One record, well under a page: the error is cut to fit.
RECORD_SIZE = 1024
_ERROR_LIMIT = 700


def _record(at: float, error: str) -> bytes:
    body = json.dumps({"at": at, "ok": not error, "error": error[:_ERROR_LIMIT]}, ensure_ascii=True).encode("ascii")
    return body.ljust(RECORD_SIZE - 1, b" ") + b"\n"


def record_attempt(directory: Path, error: str = "") -> None:
    """Record an attempt to save the pass made now, and ``error`` when it failed; never raises.

    The time is the wall clock's, as the file's modification time is. The file keeps its
    size: the record is written over its first ``RECORD_SIZE`` bytes.
    """
    at = time.time()
    try:
        dir_fd = open_trusted_dir(directory)
    except (OSError, UntrustedPath):
        return
    try:
        fd = open_entry(dir_fd, directory, ATTEMPT_NAME, os.O_RDWR | os.O_CREAT)
    except (OSError, UntrustedPath):  # an untrusted entry is the next pass's to refuse, not this one's to fail on
        return
    finally:
        os.close(dir_fd)
    try:
        os.pwrite(fd, _record(at, error), 0)
    except OSError:
        _touch(fd, at)
    finally:
        os.close(fd)


def _touch(fd: int, at: float) -> None:
    """Set the file's modification time to ``at``: when, at least; the reader says it does not know why."""
    try:
        os.utime(fd, (at, at))
    except OSError:
        return  # a hint, never a failure of the pass


class Attempt:
    """The last recorded attempt: when (``at``), and ``error`` ("" when it saved), or ``known`` False when
    only its time could be learnt (the file's modification time, its record older or unreadable).

    A plain class: ``healthd status`` reads it without importing typing or dataclasses.
    """

    def __init__(self, at: float, error: str, known: bool) -> None:
        self.at, self.error, self.known = at, error, known

    def failed_after(self, written: float) -> bool:
        """Whether this attempt came after the pass ``written`` (its end, epoch seconds) and did not save."""
        return self.at > written and (self.error != "" or not self.known)

    def text(self) -> str:
        """``last attempt at T failed: WHY``, or what is known of it."""
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at))
        if not self.known:
            return f"last attempt at {when}: its outcome was not recorded (a full state disk?)"
        return f"last attempt at {when} failed: {self.error}"

    def to_dict(self) -> dict[str, object]:
        return {"at": self.at, "ok": self.known and not self.error, "error": self.error, "known": self.known}


def read_attempt(directory: Path) -> Attempt | None:
    """The last attempt recorded in ``directory``, or None when there is no record (or it cannot be read).

    A record whose time is more than a second before the file's modification time was not
    rewritten by the last attempt: that attempt's time is known, its outcome is not.
    """
    try:
        dir_fd = open_trusted_dir(directory)
        try:
            fd = open_entry(dir_fd, directory, ATTEMPT_NAME, os.O_RDONLY)
        finally:
            os.close(dir_fd)
        with os.fdopen(fd, "rb") as handle:
            modified = os.fstat(handle.fileno()).st_mtime
            raw = handle.read(RECORD_SIZE)
    except (OSError, UntrustedPath):
        return None
    try:
        record = json.loads(raw.decode("ascii"))
        at, ok, error = float(record["at"]), record["ok"], str(record["error"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return Attempt(modified, "", known=False) if modified else None
    if modified > at + 1.0:
        return Attempt(modified, "", known=False)
    return Attempt(at, "" if ok is True else error or "unknown error", known=True)
