"""Reading this boot's kernel log from where the last pass stopped: the source, the cursor, the fallback.

Shared by every check that reads the kernel log (``xid``, ``kernel``, ``edac``, ``disks``):
each keeps its own ``Position`` in its state. The source is the journal where systemd
booted the node and systemd-python imports (``auto``), else /dev/kmsg; a journal that
cannot be read falls back to /dev/kmsg, and that is reported as a note. Which records
count is still the caller's decision, made on each line's facility (``origin_of``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Optional

if TYPE_CHECKING:
    from healthd.checks.plugin import CheckContext

from .source import LogUnavailable, ReadResult, journal_available, kmsg_seq, read_boot_time, read_journal, read_kmsg


def _int_or_none(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class Position(NamedTuple):
    """Where the reading of this boot's kernel log stands, and the GPU order captured at its start.

    ``last_usec`` is the kernel timestamp (usec since boot) of the newest record folded
    this boot; ``skip_usec``, after a change of source, that of the newest record the
    old source had folded.
    """

    source: str = ""
    cursor: Optional[str] = None
    last_usec: Optional[int] = None
    skip_usec: Optional[int] = None
    order: tuple[str, ...] = ()

    @classmethod
    def load(cls, document: Mapping[str, Any]) -> Position:
        cursor, order = document.get("cursor"), document.get("gpu_order")
        return cls(
            source=str(document.get("source", "")),
            cursor=cursor if isinstance(cursor, str) else None,
            last_usec=_int_or_none(document.get("last_usec")),
            skip_usec=_int_or_none(document.get("skip_usec")),
            order=tuple(str(o) for o in order) if isinstance(order, list) else (),
        )

    def switched(self, source: str) -> Position:
        """This position once ``source`` is read.

        Cursors of different sources cannot be translated, so a new source is read from
        the start of the boot; the events (sticky ones, event ids, counts) are kept, and
        records the old source already folded are skipped by their kernel timestamp,
        which both sources carry.
        """
        if self.source == source:
            return self
        skip = self.last_usec if self.source else self.skip_usec
        return self._replace(source=source, cursor=None, skip_usec=skip)


class LogRead(NamedTuple):
    """One pass's reading: the position after it, the new lines, and what went wrong.

    ``journal_problem`` is why the journal could not be read when kmsg was read
    instead; ``unreadable`` why no source could be (then ``result`` is None).
    """

    position: Position
    result: Optional[ReadResult] = None
    journal_problem: Optional[str] = None
    unreadable: Optional[str] = None


def read_new(ctx: CheckContext[Any], boot_id: str, position: Position) -> LogRead:
    """New lines of boot ``boot_id`` after ``position`` from the check's ``source`` (auto, kmsg, journal).

    ``source`` and ``journal_directory`` are the check's settings (``KernelLogSettings``
    or the xid check's own); kmsg is the fallback. The check's /dev/kmsg descriptor stays
    open for its next pass, and the pass's readers read /dev/kmsg once (``read_kmsg``).
    """
    source, journal_directory = ctx.settings.source, ctx.settings.journal_directory
    kmsg = ctx.paths.kmsg
    wanted = source
    if wanted == "auto":
        wanted = "journal" if journal_available() else "kmsg"
    problems: list[str] = []
    if wanted == "journal":
        try:
            cursor = position.cursor if position.source == "journal" else None
            return LogRead(position.switched("journal"), read_journal(journal_directory, boot_id, cursor))
        except LogUnavailable as exc:
            problems.append(str(exc))
    boot_time = read_boot_time(ctx.paths.procfs, ctx.clock())
    try:
        after = kmsg_seq(position.cursor) if position.source == "kmsg" else None
        result = read_kmsg(kmsg, after, boot_time, ctx.name, ctx.shared)
    except LogUnavailable as exc:
        problems.append(str(exc))
        return LogRead(position, unreadable="; ".join(problems))
    return LogRead(position.switched("kmsg"), result, problems[0] if problems else None)
