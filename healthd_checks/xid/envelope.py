"""Whole-file envelopes for ``healthd scan-log``: saved journals (json, export) and ``dmesg --color=always``.

Each is turned into one line per line of the file for the line scanner.

A journal record is the kernel's only when journald read it from /dev/kmsg,
``_TRANSPORT=kernel`` (systemd.journal-fields(7)); a record from ``logger`` (``syslog``), a
service's output (``stdout``) or ``sd_journal_send`` (``journal``) is no line of the kernel log
at all, and becomes an empty line. A kernel record becomes one JSON line, ``journal_line``'s
message (a leading ``NVRM:`` that journald split off into SYSLOG_IDENTIFIER put back) and its
facility, which ``record_of`` reads again: only facility 0 is the kernel's own. Each record
stands at the line where it starts in the file, every other line of the file is empty, so line
numbers are the file's.

The export format (systemd's "Journal Export Format" specification): a record is fields, then an
empty line; a field is ``KEY=VALUE\\n``, or, for a value holding a newline or other binary,
``KEY\\n``, its length as 64-bit little endian, the bytes and ``\\n``. ``journalctl -o json``
writes a value that is not valid UTF-8 as an array of its bytes, and a field a record has
more than once as an array of its values.

``dmesg --color=always`` (util-linux) wraps the time, the subsystem prefix (``NVRM: ``) and the
message in SGR escapes (``ESC[32m`` ... ``ESC[0m``); dmesg itself prints the kernel's own
control characters as ``\\x1b`` text, so an escape in its output is dmesg's, and is removed.
Text is split on ``\\n`` only.
"""

from __future__ import annotations

import enum
import json
import re
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Optional

from ..kernlog.source import journal_line

_CHUNK = 1 << 16
_SNIFF = 1 << 16
# A binary field longer than this is not a kernel record's (the kernel's limit is 8 KiB): the rest is not read.
_FIELD_LIMIT = 1 << 20
_EXPORT_FIRST = re.compile(rb"[A-Z_][A-Z0-9_]{0,63}(?:=|\n)")
_SGR = re.compile(r"\x1b\[[0-9;]{0,32}m")
_KEY = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")


class Envelope(enum.Enum):
    """What a whole file is: lines for the line scanner as they are, or one of the envelopes read here."""

    LINES = "lines"
    JOURNAL_JSON = "journal-json"
    JOURNAL_EXPORT = "journal-export"
    COLOR = "color"


class JournalRecord(NamedTuple):
    """A kernel journal record as the line scanner needs it: the message, facility, level and kernel time."""

    message: str
    facility: Optional[int]
    level: Optional[int]
    usec: Optional[int]


def sniff(head: bytes) -> Envelope:
    """The envelope of a file that begins with ``head`` (its first bytes)."""
    start = head.lstrip(b" \t\r\n")
    if start[:1] == b"{":
        return Envelope.JOURNAL_JSON
    if _EXPORT_FIRST.match(start):
        return Envelope.JOURNAL_EXPORT
    if b"\x1b[" in head:
        return Envelope.COLOR
    return Envelope.LINES


def _text(value: Any) -> Any:
    """A journal JSON value as text: an array of byte values decoded, a repeated field's first value."""
    if isinstance(value, list):
        if value and all(isinstance(item, int) and not isinstance(item, bool) for item in value):
            return bytes(item & 0xFF for item in value).decode("utf-8", errors="replace")
        return _text(value[0]) if value else None
    return value


def _number(value: Any) -> Optional[int]:
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    return int(text) if text.isdigit() and len(text) < 20 else None


def journal_record(entry: Mapping[str, Any]) -> Optional[JournalRecord]:
    """The kernel record of one journal entry (field name -> value); None unless journald read it from /dev/kmsg."""
    fields = {key: _text(value) for key, value in entry.items() if isinstance(key, str)}
    line = journal_line(fields)
    if line is None:
        return None
    return JournalRecord(
        line.message, line.facility, _number(fields.get("PRIORITY")), _number(fields.get("_SOURCE_MONOTONIC_TIMESTAMP"))
    )


def record_of(line: str) -> Optional[JournalRecord]:
    """The kernel record of one journal JSON line; None when it is not one (not JSON, not the kernel's)."""
    try:
        entry = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return journal_record(entry) if isinstance(entry, dict) else None


def _line(record: Optional[JournalRecord]) -> str:
    """The JSON line ``record_of`` reads back as ``record``; an empty line when there is none."""
    if record is None:
        return "\n"
    entry: dict[str, str] = {"_TRANSPORT": "kernel", "MESSAGE": record.message}
    for key, value in (
        ("SYSLOG_FACILITY", record.facility),
        ("PRIORITY", record.level),
        ("_SOURCE_MONOTONIC_TIMESTAMP", record.usec),
    ):
        if value is not None:
            entry[key] = str(value)
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n"


def _raw_lines(read: Callable[[int], bytes]) -> Iterator[bytes]:
    """The lines of a byte stream, each with its ``\\n`` (the last may lack one); split on ``\\n`` only."""
    carry = b""
    while True:
        block = read(_CHUNK)
        if not block:
            if carry:
                yield carry
            return
        pieces = (carry + block).split(b"\n")
        carry = pieces.pop()
        for piece in pieces:
            yield piece + b"\n"


def json_lines(read: Callable[[int], bytes]) -> Iterator[str]:
    """A ``journalctl -o json`` file (one object per line) as scanner lines: kernel records, others empty."""
    for raw in _raw_lines(read):
        yield _line(record_of(raw.decode("utf-8", errors="replace")))


def color_lines(read: Callable[[int], bytes], encoding: str = "utf-8") -> Iterator[str]:
    """``dmesg --color=always`` output without its colour escapes, line by line."""
    for raw in _raw_lines(read):
        yield _SGR.sub("", raw.decode(encoding, errors="replace"))


class _Export:
    """The reader of one export stream: whole records and the file lines each began at."""

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self.read = read
        self.buffer = b""
        self.done = False

    def _fill(self, size: int) -> bool:
        while len(self.buffer) < size and not self.done:
            block = self.read(_CHUNK)
            self.done = not block
            self.buffer += block
        return len(self.buffer) >= size

    def _line(self) -> Optional[bytes]:
        """The next line without its ``\\n``; None at the end."""
        while b"\n" not in self.buffer and not self.done:
            self._fill(len(self.buffer) + 1)
        if not self.buffer:
            return None
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def _binary(self) -> tuple[bytes, int]:
        """A binary field's value and the newlines it held; the length is 64-bit little endian."""
        if not self._fill(8):
            self.buffer = b""
            return b"", 0
        size = int.from_bytes(self.buffer[:8], "little")
        self.buffer = self.buffer[8:]
        kept = min(size, _FIELD_LIMIT)
        self._fill(kept + 1)
        value, self.buffer = self.buffer[:kept], self.buffer[kept:]
        skipped = size - kept
        while skipped > 0 and self._fill(1):  # past the limit: read on without keeping it
            dropped = min(skipped, len(self.buffer))
            self.buffer, skipped = self.buffer[dropped:], skipped - dropped
        if self.buffer[:1] == b"\n":
            self.buffer = self.buffer[1:]
        return value, value.count(b"\n")

    def records(self) -> Iterator[tuple[int, dict[str, str]]]:
        """Each record's fields, with the number of file lines it and its closing empty line took."""
        fields: dict[str, str] = {}
        lines = 0
        while True:
            line = self._line()
            if line is None or not line:
                if line is None and not fields:
                    return
                yield lines + (line is not None), fields
                fields, lines = {}, 0
                if line is None:
                    return
                continue
            lines += 1
            key, equals, value = line.partition(b"=")
            if not equals:
                value, held = self._binary()
                lines += held + 1  # the length and the bytes end a line of their own
            name = key.decode("ascii", errors="replace")
            if _KEY.fullmatch(name) and name not in fields:
                fields[name] = value.decode("utf-8", errors="replace")


def export_lines(read: Callable[[int], bytes]) -> Iterator[str]:
    """A ``journalctl -o export`` file as scanner lines: each kernel record at its first line, the rest empty."""
    for lines, fields in _Export(read).records():
        yield _line(journal_record(fields))
        for _ in range(lines - 1):
            yield "\n"


def envelope_lines(envelope: Envelope, read: Callable[[int], bytes], encoding: str = "utf-8") -> Iterator[str]:
    """The scanner lines of a file in ``envelope`` (not ``LINES``), read from its bytes."""
    if envelope is Envelope.JOURNAL_JSON:
        return json_lines(read)
    if envelope is Envelope.JOURNAL_EXPORT:
        return export_lines(read)
    return color_lines(read, encoding)
