"""Offline scan of a saved kernel log (``healthd scan-log``): every Xid event, graded by the catalog.

Unlike the ``xid`` check this keeps no state and does no de-duplication: it lists
each line so an operator can read a post-mortem dump. Grades are the catalog's
(with the config's overrides); application Xids are not escalated here because
a saved log need not carry timestamps to judge repeats by. An Xid 144-150 line whose
decode says XID_154_EVAL is graded by the Xid 154 that follows it on the same GPU
(``follow_154``), as in the check. The same rules as the
check decide which lines count: only messages that begin with a driver prefix,
and, where the format carries the facility (/dev/kmsg dumps, ``dmesg -r``), never a
record that userspace wrote unless ``accept_userspace``.
"""

from __future__ import annotations

import codecs
import io
import re
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Mapping, NamedTuple, Optional, TextIO, Union

from healthd.model import Status

from ..kernlog.source import Origin, origin_of
from .catalog import NVLINK5_XIDS, Entry, awaits_154, classify, followed_by_154
from .envelope import Envelope, envelope_lines, sniff
from .nvlink5 import causes
from .parse import (
    CHUNK,
    EVENTS_ONLY,
    Focus,
    GpuIdentity,
    LineKind,
    Record,
    XidEvent,
    lines_holding,
    parse_line,
    read_candidates,
    remember,
    scan_candidates,
    scan_lines,
)


class ScanEntry(NamedTuple):
    """One event line of a scanned log with its grade."""

    line: int
    record: Record
    event: XidEvent
    entry: Entry
    uuid: Optional[str]

    @property
    def code(self) -> str:
        return f"{'SXID' if self.event.kind is LineKind.SXID else 'XID'}_{self.event.code}"

    @property
    def origin(self) -> Origin:
        return origin_of(self.record.facility)

    @property
    def gpu(self) -> str:
        if self.event.kind is LineKind.SXID:
            return self.event.switch or (self.event.pci.full if self.event.pci else "unknown-nvswitch")
        return str(self.event.pci) if self.event.pci else "unknown-gpu"

    def to_dict(self) -> dict[str, Any]:
        return {**self.located(), **self.described()}

    def located(self) -> dict[str, Any]:
        """The fields of ``to_dict`` that name the line and its record, which differ from line to line."""
        return {
            "line": self.line,
            "format": self.record.format.value,
            "seq": self.record.seq,
            "origin": self.origin.value,
        }

    def described(self) -> dict[str, Any]:
        """The rest of ``to_dict``: the event, its grade and its GPU's UUID, which a flood repeats."""
        event, line = self.event, self.entry.nvlink5
        return {
            "kind": event.kind.value,
            "code": self.code,
            "xid": event.code,
            "gpu": self.gpu,
            "pci": event.pci.full if event.pci else None,
            "uuid": self.uuid,
            "pid": event.pid,
            "process": event.process,
            "bucket": self.entry.bucket.value,
            "grade": self.entry.grade.name,
            "sticky": self.entry.sticky.value,
            "summary": self.entry.summary,
            "text": event.text,
            "recovery_action": event.recovery.after if event.recovery else None,
            "nvlink": event.nvlink.link if event.nvlink else line.link if line else None,
            "nvlink_registers": [f"0x{r:x}" for r in event.nvlink.registers] if event.nvlink else None,
            "nvlink_causes": [c.value for c in causes(event.nvlink.registers)] if event.nvlink else None,
            "action": self.entry.action.value,
            **self._nvlink5(),
        }

    def _nvlink5(self) -> dict[str, Any]:
        """Xids 144-150: the decoded unit, error status and the catalog's resolution (UNLISTED: not in it)."""
        line = self.entry.nvlink5
        if line is None:
            return {}
        resolution = line.row.resolution.value if line.row else "UNLISTED"
        return {"nvlink5_unit": line.unit, "nvlink5_status": f"0x{line.status:08x}", "nvlink5_resolution": resolution}


def scan(
    lines: Iterable[str], overrides: Optional[Mapping[str, Status]] = None, accept_userspace: bool = False
) -> list[ScanEntry]:
    """Every Xid/SXid/fallen-off-bus line, with UUIDs from the driver's ``GPU at PCI`` lines anywhere in the log.

    An SXid's Severity and Data lines are not listed: they describe the error of the
    Fatal/Non-fatal line before them, which carries its grade.
    """
    found: list[tuple[int, Record, XidEvent]] = []
    uuids: dict[tuple[int, int, int], str] = {}
    for number, record, event in scan_lines(lines, accept_userspace):
        if isinstance(event, GpuIdentity):
            uuids[event.pci.key] = event.uuid
        elif not event.detail:
            found.append((number, record, event))
    return list(follow_154(_entry(number, record, event, overrides, uuids) for number, record, event in found))


# Lines held back while an XID_154_EVAL line waits for its Xid 154: a bound on memory.
_HELD_LIMIT = 10_000


def follow_154(entries: Iterable[ScanEntry]) -> Iterator[ScanEntry]:
    """``entries`` in order, each XID_154_EVAL line graded by the Xid 154 that follows it on its GPU.

    As in the check (``healthd_checks.xid.events``): the next Xid 154 of the GPU, with only Xid 144-150
    lines of that GPU between, grades the waiting lines; another Xid of the GPU first, or
    the end of the log, leaves them at the catalog's RESTART_APP. Lines from the first
    waiting one on are held until nothing waits (at most ``_HELD_LIMIT``).
    """
    held: list[ScanEntry] = []
    waiting: dict[str, list[int]] = {}
    for item in entries:
        if item.event.recovery is not None:
            for index in waiting.pop(item.gpu, []):
                waited = held[index].entry
                followed = followed_by_154(waited.summary, item.entry, waited.nvlink5)
                held[index] = held[index]._replace(entry=followed)
        elif item.event.kind is not LineKind.SXID and item.event.code not in NVLINK5_XIDS:
            waiting.pop(item.gpu, None)
        if awaits_154(item.entry):
            waiting.setdefault(item.gpu, []).append(len(held))
        held.append(item)
        if not waiting or len(held) > _HELD_LIMIT:
            waiting.clear()
            yield from held
            held.clear()
    yield from held


def _entry(
    number: int,
    record: Record,
    event: XidEvent,
    overrides: Optional[Mapping[str, Status]],
    uuids: Mapping[tuple[int, int, int], str],
) -> ScanEntry:
    return ScanEntry(number, record, event, classify(event, overrides), uuids.get(event.pci.key) if event.pci else None)


_SNIFF = 4096  # bytes that tell a saved journal or coloured dmesg from plain lines

# The only lines that name a GPU's UUID (see xid_parse.parse_message).
_IDENTITY = "NVRM: GPU at PCI:"
_UNIVERSAL = re.compile(r"(?<=\r)(?!\n)|(?<=\n)")


class _FileText:
    """A text file's characters read straight from its bytes, as ``open()`` decodes them (universal newlines).

    The text layer's ``read`` and ``readline`` cost more than the scan of what they
    return; this decodes whole reads with the same incremental decoders it uses.
    """

    def __init__(self, raw: BinaryIO, encoding: str, errors: str) -> None:
        self.raw = raw
        self.decoder = io.IncrementalNewlineDecoder(codecs.getincrementaldecoder(encoding)(errors), translate=True)

    def _decoded(self, read: Callable[[], bytes]) -> str:
        while True:  # a read may end in a held-back "\r" or a part of a character: read on
            data = read()
            text = self.decoder.decode(data, final=not data)
            if text or not data:
                return text

    def read(self, size: int) -> str:
        return self._decoded(lambda: self.raw.read(size))

    def readline(self) -> str:
        return self._decoded(self.raw.readline)


def _raw(handle: TextIO) -> Optional[BinaryIO]:
    """The bytes under ``handle`` when they can be read from the start, else None (text read through ``handle``)."""
    raw = getattr(handle, "buffer", None)
    return raw if raw is not None and raw.seekable() and handle.tell() == 0 else None


def _identity_lines(handle: TextIO, chunk: int) -> Iterator[str]:
    """The lines of ``handle`` that may name a GPU's UUID; from its bytes when it has them, decoding only those."""
    raw = _raw(handle)
    if raw is None:
        yield from lines_holding(handle.read, _IDENTITY, "\n", handle.readline, chunk)
        return
    raw.seek(0)
    encoding = handle.encoding or "utf-8"
    for line in lines_holding(raw.read, _IDENTITY.encode(encoding), b"\n", raw.readline, chunk):
        # A lone "\r" ends a line too, as in the text the event pass reads (universal newlines).
        text = line.decode(encoding, "replace")
        if "\r" in text:
            yield from (piece for piece in _UNIVERSAL.split(text) if _IDENTITY in piece)
        else:
            yield text


def _uuids(handle: TextIO, chunk: int, accept_userspace: bool) -> dict[tuple[int, int, int], str]:
    """Each GPU's UUID as the log's ``NVRM: GPU at PCI:`` lines name it, the last line that counts winning.

    Every driver load names every GPU again, so a log of many boots repeats these lines,
    each with its own time. A line whose text from ``_IDENTITY`` on already gave the UUID
    its GPU has now is not parsed again: when that text holds the prefix once and no
    backslash (a /dev/kmsg escape), it is the message of any envelope around it that
    counts (every envelope ends with its message), so parsing could give that UUID again
    or nothing, and neither changes ``uuids``.
    """
    uuids: dict[tuple[int, int, int], str] = {}
    applied: dict[str, tuple[tuple[int, int, int], str]] = {}
    for line in _identity_lines(handle, chunk):
        if line[:1] in (" ", "\t"):  # a continuation line only ever continues a banner
            continue
        tail = line[line.find(_IDENTITY) :].rstrip("\r\n")
        known = applied.get(tail)
        if known is not None and uuids.get(known[0]) == known[1]:
            continue
        _, identity = parse_line(line, accept_userspace)
        if isinstance(identity, GpuIdentity):
            uuids[identity.pci.key] = identity.uuid
            if tail.count(_IDENTITY) == 1 and "\\" not in tail:
                remember(applied, tail, (identity.pci.key, identity.uuid))
    return uuids


def _enveloped(handle: TextIO) -> Optional[Iterator[str]]:
    """The scanner lines of a saved journal or coloured dmesg (``envelope``); None for a file of plain lines.

    Sniffed from the first bytes: from the file's own bytes when it has them (the export
    format is binary), else from its text. Such a file is read once, by ``scan``.
    """
    raw = getattr(handle, "buffer", None)
    encoding = handle.encoding or "utf-8"
    if raw is not None and raw.seekable() and handle.tell() == 0:
        raw.seek(0)
        kind = sniff(raw.read(_SNIFF))
        raw.seek(0)
        return None if kind is Envelope.LINES else envelope_lines(kind, raw.read, encoding)
    if raw is not None and not handle.seekable() and hasattr(raw, "peek"):
        kind = sniff(raw.peek(_SNIFF)[:_SNIFF])
        return None if kind is Envelope.LINES else envelope_lines(kind, raw.read, encoding)
    if raw is None and handle.seekable():
        start = handle.tell()
        kind = sniff(handle.read(_SNIFF).encode(encoding, errors="replace"))
        handle.seek(start)
        text_read: Callable[[int], bytes] = lambda size: handle.read(size).encode(encoding, errors="replace")  # noqa: E731
        return None if kind is Envelope.LINES else envelope_lines(kind, text_read, encoding)
    return None


def scan_stream(
    handle: TextIO,
    overrides: Optional[Mapping[str, Status]] = None,
    accept_userspace: bool = False,
    chunk: int = CHUNK,
) -> Iterator[ScanEntry]:
    """``scan`` of an open file, entry by entry, in memory that does not grow with the file.

    A file that can seek is read twice, a chunk at a time: once for the UUID lines
    (which may come after the events that need them), once for the events. A stream
    that cannot seek (stdin) is scanned by ``scan``, which keeps its events in memory.
    A file opened from its start is read from its bytes (``_FileText``), as opened with
    the default ``newline``. A saved journal or coloured dmesg (``_enveloped``) is read once,
    by ``scan``: its memory grows with its events, not with its other lines.
    """
    enveloped = _enveloped(handle)
    if enveloped is not None:
        yield from scan(enveloped, overrides, accept_userspace)
        return
    if not handle.seekable():
        yield from scan(handle, overrides, accept_userspace)
        return
    start = handle.tell()
    raw = _raw(handle)
    uuids = _uuids(handle, chunk, accept_userspace)
    handle.seek(start)
    text: Union[TextIO, _FileText] = handle
    if raw is not None:
        raw.seek(0)
        text = _FileText(raw, handle.encoding or "utf-8", handle.errors or "strict")
    focus = Focus(narrow=EVENTS_ONLY)
    candidates = scan_candidates(
        read_candidates(text.read, chunk, focus=focus, readline=text.readline), accept_userspace, focus
    )
    yield from follow_154(
        _entry(number, record, event, overrides, uuids)
        for number, record, event in candidates
        if not isinstance(event, GpuIdentity) and not event.detail
    )
