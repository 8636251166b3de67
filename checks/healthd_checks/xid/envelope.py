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


# The fields ``journal_line`` reads, and the kernel time: the others are never decoded.
_FIELDS = frozenset(
    {"_TRANSPORT", "MESSAGE", "SYSLOG_IDENTIFIER", "SYSLOG_FACILITY", "PRIORITY", "_SOURCE_MONOTONIC_TIMESTAMP"}
)
_FIELD_NAMES = frozenset(name.encode() for name in _FIELDS)
# A JSON line can give an event only if it names the driver, or holds a MESSAGE that is not text (bytes).
_MAY_HOLD = re.compile(rb'NVRM|nvidia-nvswitch|"MESSAGE"\s*:\s*\[')


def _text(value: Any) -> Any:
    """A journal JSON value as text: an array of byte values decoded, a repeated field's first value."""
    if isinstance(value, list):
        try:
            return bytes(value).decode("utf-8", errors="replace")
        except (TypeError, ValueError):  # not byte values: a field the record has more than once
            return _text(value[0]) if value else None
    return value


def _number(value: Any) -> Optional[int]:
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    return int(text) if text.isdigit() and len(text) < 20 else None


def journal_record(entry: Mapping[str, Any]) -> Optional[JournalRecord]:
    """The kernel record of one journal entry (field name -> value); None unless journald read it from /dev/kmsg."""
    fields = {key: _text(value) for key, value in entry.items() if key in _FIELDS}
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
        yield _line(record_of(raw.decode("utf-8", errors="replace"))) if _MAY_HOLD.search(raw) else "\n"


def color_lines(read: Callable[[int], bytes], encoding: str = "utf-8") -> Iterator[str]:
    """``dmesg --color=always`` output without its colour escapes, line by line."""
    for raw in _raw_lines(read):
        yield _SGR.sub("", raw.decode(encoding, errors="replace"))


class _Export:
    """The reader of one export stream: whole records and the file lines each began at.

    ``buffer[pos:]`` is what is read and not yet taken; the taken part is dropped only
    when more is read, so taking a line costs its own length, not the buffer's.
    """

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self.read = read
        self.buffer = b""
        self.pos = 0
        self.done = False

    def _fill(self, size: int) -> bool:
        """Whether ``size`` bytes are there to take, reading on until they are or the stream ends."""
        if len(self.buffer) - self.pos < size and not self.done:
            parts = [self.buffer[self.pos :]]
            have = len(parts[0])
            while have < size and not self.done:
                block = self.read(max(_CHUNK, size - have))
                self.done = not block
                parts.append(block)
                have += len(block)
            self.buffer, self.pos = b"".join(parts), 0
        return len(self.buffer) - self.pos >= size

    def _take(self, size: int) -> bytes:
        taken = self.buffer[self.pos : self.pos + size]
        self.pos += len(taken)
        return taken

    def _line(self) -> Optional[bytes]:
        """The next line without its ``\\n`` (at most ``_FIELD_LIMIT`` bytes: a longer one is cut); None at the end."""
        searched = self.pos
        while True:
            end = self.buffer.find(b"\n", searched)
            if end >= 0:
                line = self.buffer[self.pos : end]
                self.pos = end + 1
                return line
            held = len(self.buffer) - self.pos
            if self.done or held >= _FIELD_LIMIT:
                return self._take(held) if held else None
            self._fill(held + 1)  # the rest moves to the start of the buffer, searched already
            searched = held

    def _binary(self) -> tuple[bytes, int]:
        """A binary field's value and the newlines it held; the length is 64-bit little endian."""
        if not self._fill(8):
            self._take(len(self.buffer))
            return b"", 0
        size = int.from_bytes(self._take(8), "little")
        kept = min(size, _FIELD_LIMIT)
        self._fill(kept + 1)
        value = self._take(kept)
        skipped = size - kept
        while skipped > 0 and self._fill(1):  # past the limit: read on without keeping it
            skipped -= len(self._take(min(skipped, len(self.buffer) - self.pos)))
        if self.buffer[self.pos : self.pos + 1] == b"\n":
            self.pos += 1
        return value, value.count(b"\n")

    def _skipped(self) -> int:
        """The file lines of the next record, taken whole, when it cannot give an event; else 0 (nothing taken).

        Such a record names no driver and has only ``KEY=VALUE`` lines: most of a journal,
        passed over without a step per line. A binary field could hold the empty line that
        ends a record; its 64-bit length always holds a zero byte (no field is 2**56 bytes
        long), which a text field never does, so a record with one is read line by line.
        """
        end = self.buffer.find(b"\n\n", self.pos)
        if end < 0:
            self._fill(len(self.buffer) - self.pos + _CHUNK)
            end = self.buffer.find(b"\n\n", self.pos)
        if end < 0 or self.buffer[self.pos : self.pos + 1] == b"\n":
            return 0
        record = self.buffer[self.pos : end + 1]
        if b"NVRM" in record or b"nvidia-nvswitch" in record or b"\0" in record:
            return 0
        self.pos = end + 2
        return record.count(b"\n") + 1

    def records(self) -> Iterator[tuple[int, dict[str, str]]]:
        """Each record's fields, with the number of file lines it and its closing empty line took."""
        fields: dict[str, str] = {}
        lines = 0
        while True:
            skipped = 0 if fields or lines else self._skipped()
            if skipped:
                yield skipped, {}
                continue
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
            if key in _FIELD_NAMES and key.decode() not in fields:
                fields[key.decode()] = value.decode("utf-8", errors="replace")


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
