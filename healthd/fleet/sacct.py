"""Reading ``sacct -P`` and ``sacctmgr -P show event`` output: columns by header name, bad lines counted.

Both commands print a header line and then one ``|``-separated line per record
(sacct(1), sacctmgr(1): ``--parsable2``/``-P``). Columns are found by their header
name, in any order, and columns this code does not use are ignored, so a newer
Slurm that adds fields is read as well as 22.05. A line that cannot be read
(wrong number of fields, a time or a number that does not parse) is counted and
its number kept, and the rest is read: ``InputSummary`` says how many were bad
and which were the first ones. A missing column is an error that names it and
gives the command that produces a readable file.

Times are local time without a zone, as sacct prints them (``SLURM_TIME_FORMAT``
unset): they are read in the zone of ``TZ``, like sacct itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Optional

# The fields the issue asks for; all exist in Slurm 22.05 (`sacct -e`).
SACCT_FIELDS = (
    "JobID,JobName,User,Partition,State,ExitCode,Submit,Start,End,Elapsed,NNodes,NodeList,AllocTRES,SubmitLine"
)
EVENT_FIELDS = "Cluster,NodeName,TimeStart,TimeEnd,State,Reason,User"
# What the analysis needs; SubmitLine (the -x/--exclude signal) is optional, the others are not.
JOB_COLUMNS = ("JobID", "User", "State", "Start", "End", "NNodes", "NodeList", "AllocTRES")
EVENT_COLUMNS = ("NodeName", "TimeStart", "TimeEnd", "Reason")
# Columns holding text a user chose, which may itself contain "|": the extra fields of a
# line that has too many belong to the last of these when it is the last column.
FREE_TEXT = ("SubmitLine", "JobName", "Reason")
FIRST_BAD = 5
# What sacct prints for a time that is not set.
_NO_TIME = ("", "Unknown", "None", "N/A")


def sacct_command(since: str = "START", until: str = "END") -> str:
    return f"sacct -a -X -D -P -o {SACCT_FIELDS} -S {since} -E {until}"


def sacctmgr_command(since: str = "START", until: str = "END") -> str:
    return f"sacctmgr -P show event Start={since} End={until} Format={EVENT_FIELDS}"


class FleetInputError(Exception):
    """An input file that cannot be analysed at all: empty, or without a column the analysis needs."""


@dataclass(frozen=True)
class InputSummary:
    """How one input was read: records used, lines skipped as bad (with the first few), records left out."""

    source: str
    records: int
    bad: int
    first_bad: tuple[tuple[int, str], ...]
    skipped: int = 0  # well-formed records the analysis does not use (not started, still running)

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "records": self.records,
            "bad_lines": self.bad,
            "first_bad_lines": [{"line": n, "why": why} for n, why in self.first_bad],
            "skipped": self.skipped,
        }


@dataclass
class LineTally:
    """Counts bad lines while a table is read; keeps the first few numbers and why."""

    source: str
    records: int = 0
    bad: int = 0
    skipped: int = 0
    first_bad: list[tuple[int, str]] = field(default_factory=list)

    def reject(self, number: int, why: str) -> None:
        self.bad += 1
        if len(self.first_bad) < FIRST_BAD:
            self.first_bad.append((number, why))

    def summary(self) -> InputSummary:
        return InputSummary(self.source, self.records, self.bad, tuple(self.first_bad), self.skipped)


class LocalTimes:
    """``2024-05-01T08:00:00`` in the local zone (``TZ``) to epoch seconds, fast.

    mktime is asked once per distinct hour and the minutes and seconds are added:
    zone offsets change on whole hours in the zones Slurm clusters run in, and
    four million runs would otherwise cost twelve million mktime calls.
    """

    def __init__(self) -> None:
        self._hours: dict[str, float] = {}

    def __call__(self, text: str) -> Optional[float]:
        """Epoch seconds, None for sacct's "not set" words; ValueError for anything else."""
        base = self._hours.get(text[:13])
        if base is None:
            if text in _NO_TIME:
                return None
            base = self._hour(text)
        if len(text) != 19 or text[13] != ":" or text[16] != ":":
            raise ValueError(f"time {text[:40]!r} is not YYYY-MM-DDTHH:MM:SS")
        return base + int(text[14:16]) * 60 + int(text[17:19])

    def _hour(self, text: str) -> float:
        if len(text) != 19 or text[4] != "-" or text[7] != "-" or text[10] != "T":
            raise ValueError(f"time {text[:40]!r} is not YYYY-MM-DDTHH:MM:SS")
        try:
            parts = (int(text[:4]), int(text[5:7]), int(text[8:10]), int(text[11:13]))
            base = time.mktime((*parts, 0, 0, 0, 0, -1))
        except (ValueError, OverflowError) as exc:
            raise ValueError(f"time {text!r}: {exc}") from None
        self._hours[text[:13]] = base
        return base


@dataclass(frozen=True)
class Table:
    """A parsable table's column positions and its data lines, read lazily."""

    columns: dict[str, int]
    width: int
    free_text: Optional[int]
    rows: Iterator[tuple[int, str]]

    def index(self, name: str) -> int:
        return self.columns[name.lower()]

    def optional(self, name: str) -> Optional[int]:
        return self.columns.get(name.lower())

    def split(self, line: str) -> Optional[list[str]]:
        """The fields of one data line, or None when their number does not match the header."""
        fields = line.split("|")
        if len(fields) == self.width:
            return fields
        if len(fields) == self.width + 1 and fields[-1] == "":  # `-p` (not `-P`) ends lines with "|"
            return fields[:-1]
        if len(fields) > self.width and self.free_text == self.width - 1:
            return [*fields[: self.width - 1], "|".join(fields[self.width - 1 :])]
        return None


def open_table(lines: Iterable[str], source: str, required: tuple[str, ...], command: str) -> Table:
    """The header of ``lines`` (the first non-blank one), checked for ``required`` columns."""
    source_lines = iter(lines)
    header = ""
    first = 0
    for line in source_lines:
        first += 1
        if line.strip():
            header = line.rstrip("\r\n")
            break
    if not header:
        raise FleetInputError(f"{source} is empty: expected the parsable output (with its header line) of\n  {command}")
    names = [name.strip() for name in header.split("|")]
    if len(names) > 1 and names[-1] == "":
        names.pop()
    columns: dict[str, int] = {}
    for position, name in enumerate(names):
        columns.setdefault(name.lower().replace(" ", ""), position)
    missing = [name for name in required if name.lower() not in columns]
    if missing:
        which = ", ".join(missing)
        raise FleetInputError(
            f"{source}: no column {which} in the header {header[:200]!r}; produce the file with\n  {command}"
        )
    free = [columns[name.lower()] for name in FREE_TEXT if name.lower() in columns]
    return Table(columns, len(names), max(free) if free else None, _data(source_lines, first))


def _data(lines: Iterator[str], header: int) -> Iterator[tuple[int, str]]:
    """(line number, line without its end) of the non-empty lines after the header."""
    for number, line in enumerate(lines, header + 1):
        text = line.rstrip("\r\n")
        if text:
            yield number, text


def first_word(text: str) -> str:
    """``CANCELLED by 1000`` -> ``CANCELLED``: sacct's State may carry who did it."""
    return text.split(" ", 1)[0].upper()


def tres_gpus(text: str) -> int:
    """The GPU count in an AllocTRES string such as ``billing=8,cpu=96,gres/gpu=8,mem=1T,node=1``.

    The untyped ``gres/gpu=`` is the total; when only typed counts (``gres/gpu:a100=8``) are
    present they are summed. No GPU entry is 0; a count that is not a number is ValueError.
    """
    total = 0
    typed = 0
    seen = False
    for item in text.split(","):
        key, _, value = item.partition("=")
        if key == "gres/gpu":
            total = int(value)
            seen = True
        elif key.startswith("gres/gpu:"):
            typed += int(value)
    return total if seen else typed


def cached(parse: Callable[[str], int]) -> Callable[[str], int]:
    """A per-run memo of a parser of strings that repeat across millions of lines (AllocTRES)."""
    memo: dict[str, int] = {}

    def lookup(text: str) -> int:
        value = memo.get(text)
        if value is None:
            value = memo[text] = parse(text)
        return value

    return lookup
