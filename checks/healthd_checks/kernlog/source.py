"""Kernel-log readers that resume from a cursor: /dev/kmsg and, where available, the journal.

/dev/kmsg (kernel Documentation/ABI/testing/dev-kmsg): opened O_RDONLY|O_NONBLOCK,
each read() returns one record ``PRI,SEQ,USEC,FLAGS;MESSAGE`` (plus continuation
lines starting with a space), EAGAIN means no more records, and EPIPE means
records were overwritten in the ring buffer before we read them. SEQ is a
per-boot sequence number, so it is the cursor; there is no way to seek to a SEQ,
so the reader starts at the oldest record and skips what it has already seen.
A regular file holding the same record format (a saved dump, a test fixture)
is read the same way. PRI is ``facility * 8 + level``; the kernel gives userspace
writes to /dev/kmsg a non-zero facility (LOG_USER when none is asked for,
kernel/printk/printk.c devkmsg_write), so facility 0 means the kernel wrote the
record. The message escapes bytes below 0x20, from 0x7f up, and backslash as
``\\xHH`` (msg_add_ext_text); ``kmsg_text`` undoes that, so a message holds the
newlines the kernel was given.

The journal (systemd-python's ``systemd.journal.Reader``) keeps more history than
the ring buffer; its cursor string is the cursor. systemd-python is optional and
imported only here, lazily. journald stores every /dev/kmsg record with
``_TRANSPORT=kernel`` and its facility in SYSLOG_FACILITY; for a record of another
facility (one that userspace wrote) it splits a leading ``NVRM:`` off into
SYSLOG_IDENTIFIER, so the identifier is put back in front of MESSAGE and the line
reads as it does in /dev/kmsg. Both sources give the same ``LogLine`` for a record;
which records count is the caller's decision, made on ``facility``.

Failures to read raise ``LogUnavailable`` naming the path: the caller must report
that as UNKNOWN, never as healthy.
"""

from __future__ import annotations

import enum
import os
import re
import stat
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, NamedTuple, Optional

from healthd.text import read_kernel_text, records

if TYPE_CHECKING:
    from healthd.checks.plugin import PassShared

_READ_SIZE = 16384  # larger than the kernel's maximum record (CONSOLE_EXT_LOG_MAX, 8 KiB)
_KMSG_HEAD = re.compile(rb"(\d{1,4}),(\d{1,20}),(\d{1,20}),[^;]*;")
_KMSG_ESCAPE = re.compile(rb"\\x([0-9a-fA-F]{2})")


class LogUnavailable(Exception):
    """The kernel log could not be read; the message names the path and the reason."""


class LogLine(NamedTuple):
    """One kernel message, the id of its record (unique within a boot for one source), its times and facility.

    ``usec`` is the kernel's own timestamp of the record (microseconds since boot, the
    USEC field of /dev/kmsg); journald keeps the same number in _SOURCE_MONOTONIC_TIMESTAMP,
    so it names a record whichever source read it. ``time`` is the record's wall-clock
    time in epoch seconds when it can be known. ``facility`` is the syslog facility of
    the record: 0 only for what the kernel itself logged; None when the source did not say.
    """

    message: str
    record_id: str
    usec: Optional[int] = None
    time: Optional[float] = None
    facility: Optional[int] = None


class KmsgRecord(NamedTuple):
    """One /dev/kmsg record: ``PRI,SEQ,USEC,FLAGS;MESSAGE`` with the message unescaped."""

    priority: int
    seq: int
    usec: int
    message: str

    @property
    def facility(self) -> int:
        return self.priority >> 3


class Origin(enum.Enum):
    """Who wrote a record, as far as its format tells."""

    KERNEL = "kernel"  # facility 0: the kernel alone logs with it
    USERSPACE = "userspace"  # another facility: a process wrote the record to /dev/kmsg
    UNKNOWN = "unknown"  # the format does not carry the facility


def origin_of(facility: Optional[int]) -> Origin:
    if facility is None:
        return Origin.UNKNOWN
    return Origin.KERNEL if facility == 0 else Origin.USERSPACE


class ReadResult(NamedTuple):
    """New lines since the cursor, the cursor after them, lost records if any, and the oldest SEQ seen."""

    lines: tuple[LogLine, ...]
    cursor: Optional[str]
    lost: Optional[str] = None
    oldest: Optional[int] = None


def read_boot_time(procfs: Path, now: float) -> Optional[float]:
    """Wall-clock time of this boot in epoch seconds, to date kernel records; None when unknown.

    From ``btime`` in ``<procfs>/stat`` (proc(5)); failing that, ``now`` minus the
    uptime in ``<procfs>/uptime``.
    """
    try:
        for line in records(read_kernel_text(procfs / "stat")):
            name, _, value = line.partition(" ")
            if name == "btime" and value.strip().isdigit():
                return float(value.strip())
    except OSError:
        pass
    try:
        uptime = float(read_kernel_text(procfs / "uptime").split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return now - uptime if uptime >= 0 else None


def kmsg_text(raw: bytes) -> str:
    """A /dev/kmsg message with the kernel's ``\\xHH`` escapes undone, as text."""
    if b"\\" in raw:
        raw = _KMSG_ESCAPE.sub(lambda m: bytes((int(m.group(1), 16),)), raw)
    return raw.decode("utf-8", errors="replace")


def parse_kmsg_record(raw: bytes) -> Optional[KmsgRecord]:
    """One line of /dev/kmsg output as a record; None for a continuation line (`` KEY=value``) or garbage."""
    match = _KMSG_HEAD.match(raw)
    return None if match is None else _record(match, raw)


def _record(head: re.Match[bytes], raw: bytes) -> KmsgRecord:
    pri, seq, usec = (int(group) for group in head.groups())
    return KmsgRecord(pri, seq, usec, kmsg_text(raw[head.end() :]))


def _numbered(chunk: bytes) -> Iterator[tuple[int, re.Match[bytes], bytes]]:
    """The records in ``chunk`` with their sequence numbers, unparsed; continuation lines and garbage are skipped.

    A reader that keeps a cursor reads the whole buffer again each pass: the records it has
    seen already are only numbered, not parsed, which is most of the work saved.
    """
    for line in chunk.split(b"\n"):
        match = _KMSG_HEAD.match(line)
        if match is not None:
            yield int(match.group(2)), match, line


class _Kept(NamedTuple):
    """A descriptor on the kernel's log device left open by a reader, and the SEQ of the last record it read."""

    fd: int
    last: int


# A reader's /dev/kmsg descriptor, kept open between passes of a long-lived process (the
# daemon): each open descriptor has its own position in the ring buffer (Documentation/
# ABI/testing/dev-kmsg), so reading it again returns only the records logged since,
# where a new descriptor starts at the oldest record and the whole buffer is read again.
# One per reader and path, never shared: each check reads with its own.
_KEPT: dict[tuple[str, str], _Kept] = {}


def _kept(path: Path, after: Optional[int], keep: Optional[str]) -> Optional[int]:
    """The reader's kept descriptor when it stopped at ``after`` (it continues from there), else None."""
    kept = _KEPT.pop((keep, str(path)), None) if keep is not None else None
    if kept is None:
        return None
    if kept.last == after:
        return kept.fd
    # The caller's cursor is not where this descriptor stopped (its state was not saved,
    # or was replaced): start over from the oldest record, as a new process would.
    os.close(kept.fd)
    return None


def _keep(path: Path, keep: str, fd: int, last: int) -> None:
    displaced = _KEPT.pop((keep, str(path)), None)
    _KEPT[(keep, str(path))] = _Kept(fd, last)
    if displaced is not None:
        os.close(displaced.fd)


class _Drained(NamedTuple):
    """What one descriptor read, unparsed: each record's SEQ, head and bytes, what was lost, and the file's kind."""

    records: tuple[tuple[int, re.Match[bytes], bytes], ...]
    lost: tuple[str, ...]
    is_device: bool


def _drain(fd: int, path: Path) -> _Drained:
    """Every record left to read on ``fd``: one per read() from the device, whole lines from a file."""
    records: list[tuple[int, re.Match[bytes], bytes]] = []
    lost: list[str] = []
    pending = b""
    is_device = stat.S_ISCHR(os.fstat(fd).st_mode)
    while True:
        try:
            chunk = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            break
        except BrokenPipeError:
            lost.append("the kernel overwrote records before they were read")
            continue
        except OSError as exc:
            raise LogUnavailable(f"cannot read {path}: {exc.strerror or exc}") from None
        if not chunk:
            if is_device:
                break
            chunk, pending = pending, b""
            if not chunk:
                break
        elif not is_device:
            chunk, _, pending = (pending + chunk).rpartition(b"\n")
        records.extend(_numbered(chunk))
    return _Drained(tuple(records), tuple(lost), is_device)


def _drain_new(path: Path) -> tuple[int, _Drained]:
    """A new descriptor on ``path`` and the whole buffer read from it (closed again when reading fails)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise LogUnavailable(f"cannot open {path}: {exc.strerror or exc}") from None
    try:
        return fd, _drain(fd, path)
    except BaseException:
        os.close(fd)
        raise


def _new_lines(drained: _Drained, after: Optional[int], boot_time: Optional[float]) -> tuple[list[LogLine], list[str]]:
    """The records after SEQ ``after``, parsed and dated, and what was lost before or among them."""
    lines: list[LogLine] = []
    lost = list(drained.lost)
    last = after
    for seq, head, raw in drained.records:
        if last is not None and seq <= last:
            continue
        record = _record(head, raw)
        if last is not None and seq > last + 1 and not lost:
            lost.append(f"records {last + 1}..{seq - 1} were overwritten before they were read")
        time = None if boot_time is None else boot_time + record.usec / 1e6
        lines.append(LogLine(record.message, str(seq), record.usec, time, record.facility))
        last = seq
    return lines, lost


def read_kmsg(
    path: Path,
    after: Optional[int],
    boot_time: Optional[float] = None,
    keep: Optional[str] = None,
    shared: Optional[PassShared] = None,
) -> ReadResult:
    """Records with SEQ greater than ``after`` (all of them when None), dated from ``boot_time``.

    ``keep`` names the reader (a check) when the descriptor of a character device may be
    kept open for its next read: that read continues from here when its ``after`` is
    the last SEQ this one returned, and opens the device afresh otherwise.

    A reader that starts afresh with the pass's ``shared`` reads the buffer once for every
    reader of the pass: the first one reads the device (and keeps that descriptor), the
    others take its records. Each record takes one read() of the device, and each read
    lets the other checks' threads run, so four readers each reading the whole buffer cost
    a cold pass about 12 ms of CPU more than one (docs/host.md). The readers that took the records keep
    no descriptor: in a long-lived process one of them reads the device the next pass,
    until every reader continues on a descriptor of its own.
    """
    continued = _kept(path, after, keep)
    fd: Optional[int] = continued
    if continued is not None:
        try:
            drained = _drain(continued, path)
        except BaseException:
            os.close(continued)
            raise
    elif shared is None:
        fd, drained = _drain_new(path)
    else:
        opened: list[int] = []

        def first() -> _Drained:
            new, read = _drain_new(path)
            opened.append(new)
            return read

        drained = shared.once(("kmsg", str(path)), first)
        fd = opened[0] if opened else None
    try:
        lines, lost = _new_lines(drained, after, boot_time)
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
    cursor = int(lines[-1].record_id) if lines else after
    if fd is not None:
        if keep is not None and drained.is_device and cursor is not None:
            _keep(path, keep, fd, cursor)
        else:
            os.close(fd)
    # A continued read starts past the records read before: its first SEQ is not the buffer's oldest.
    oldest = drained.records[0][0] if drained.records and continued is None else None
    return ReadResult(tuple(lines), None if cursor is None else str(cursor), "; ".join(lost) or None, oldest)


# sd_booted(3): the machine was booted with systemd exactly when this is a directory.
_SYSTEMD_RUNTIME = "/run/systemd/system"


def journal_available() -> bool:
    """The machine was booted with systemd (so journald runs) and systemd-python imports.

    The directory is looked at first, as sd_booted(3) defines the test: a machine without
    systemd (a container) imports no systemd-python, whose ``daemon`` module brings ``socket``.
    """
    if not os.path.isdir(_SYSTEMD_RUNTIME):
        return False
    try:
        from systemd import journal  # noqa: F401 (read_journal reads with it)
    except ImportError:
        return False
    return True


def _journal_text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value) if value is not None else ""


def _journal_id(entry: Mapping[str, Any]) -> str:
    cursor = _journal_text(entry.get("__CURSOR"))
    for part in cursor.split(";"):
        if part.startswith("i="):
            return f"j{part[2:]}"
    return f"m{_journal_text(entry.get('__MONOTONIC_TIMESTAMP'))}"


def _journal_times(entry: Mapping[str, Any]) -> tuple[Optional[int], Optional[float]]:
    """(kernel usec, wall-clock seconds) of a journal entry; systemd-python converts both fields."""
    source = entry.get("_SOURCE_MONOTONIC_TIMESTAMP")
    realtime = entry.get("__REALTIME_TIMESTAMP")
    usec = source // timedelta(microseconds=1) if isinstance(source, timedelta) else None
    return usec, realtime.timestamp() if isinstance(realtime, datetime) else None


def _journal_facility(entry: Mapping[str, Any], ident: str) -> Optional[int]:
    """SYSLOG_FACILITY, which journald sets on every record it reads from /dev/kmsg (int, or text unconverted).

    Without it, only journald's own identifier for facility-0 records ("kernel") says
    the kernel wrote it; the identifier alone is never trusted when the facility is there.
    """
    value = entry.get("SYSLOG_FACILITY")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = _journal_text(value)
    if text.isdigit():
        return int(text)
    return 0 if value is None and ident == "kernel" else None


def journal_line(entry: Mapping[str, Any]) -> Optional[LogLine]:
    """The ``LogLine`` of one journal entry as systemd-python returns it; None unless it came from /dev/kmsg.

    Only ``_TRANSPORT=kernel`` entries are kernel-log records (the reader also matches on
    it); the facility then tells the kernel's own records from userspace writes.
    """
    if _journal_text(entry.get("_TRANSPORT")) != "kernel":
        return None
    message = _journal_text(entry.get("MESSAGE"))
    ident = _journal_text(entry.get("SYSLOG_IDENTIFIER"))
    facility = _journal_facility(entry, ident)
    if facility != 0 and ident and ident != "kernel" and not message.startswith(ident):
        message = f"{ident}: {message}"
    return LogLine(message, _journal_id(entry), *_journal_times(entry), facility)


def read_journal(directory: Optional[Path], boot_id: str, after: Optional[str]) -> ReadResult:
    """Kernel-transport entries of boot ``boot_id`` after journal cursor ``after``."""
    where = str(directory) if directory is not None else "the system journal"
    try:
        from systemd import journal
    except ImportError:
        raise LogUnavailable(f"cannot read {where}: systemd-python is not installed") from None
    try:
        reader = journal.Reader(path=str(directory)) if directory is not None else journal.Reader()
    except OSError as exc:
        raise LogUnavailable(f"cannot open {where}: {exc.strerror or exc}") from None
    lines: list[LogLine] = []
    cursor = after
    try:
        reader.add_match("_TRANSPORT=kernel")
        reader.add_match(f"_BOOT_ID={boot_id.replace('-', '')}")
        if after:
            reader.seek_cursor(after)
            first = reader.get_next()
            if first and not reader.test_cursor(after):
                reader.get_previous()
        for entry in reader:
            line = journal_line(entry)
            if line is not None:
                lines.append(line)
            cursor = _journal_text(entry.get("__CURSOR")) or cursor
    except OSError as exc:
        raise LogUnavailable(f"cannot read {where}: {exc.strerror or exc}") from None
    finally:
        reader.close()
    return ReadResult(tuple(lines), cursor)


def kmsg_seq(cursor: Optional[str]) -> Optional[int]:
    """A stored kmsg cursor as an int; a malformed one means "start over"."""
    if cursor is None or not cursor.isdigit():
        return None
    return int(cursor)
