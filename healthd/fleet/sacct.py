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

import datetime
import io
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable, Iterable, Iterator, NamedTuple, Optional

# The job fields asked for; all exist in Slurm 22.05 (`sacct -e`). None of them is text a user
# chooses: `-P` prints fields raw, without escaping "|" or a newline (sacct(1)), so a JobName
# or SubmitLine could hold the rest of a forged record. SubmitLine is asked for on its own,
# keyed by JobID (SUBMIT_FIELDS, healthd/fleet/submit.py); JobName is not used at all.
SACCT_FIELDS = (
    "JobID",
    "User",
    "Partition",
    "State",
    "ExitCode",
    "Submit",
    "Start",
    "End",
    "Elapsed",
    "NNodes",
    "NodeList",
    "AllocTRES",
)
SUBMIT_FIELDS = ("JobID", "SubmitLine")
# Reason last: an administrator's reason may hold "|", which then stays in it.
EVENT_FIELDS = ("Cluster", "NodeName", "TimeStart", "TimeEnd", "State", "User", "Reason")
# What the analysis needs of the jobs; the others are not read.
JOB_COLUMNS = ("JobID", "User", "State", "Start", "End", "NNodes", "NodeList", "AllocTRES")
EVENT_COLUMNS = ("NodeName", "TimeStart", "TimeEnd", "Reason")
# sacct fields holding text a job's owner chooses (sbatch -J, --comment, -D, -C, --wckey, the
# command line): a jobs table with one of them is refused, since its records can be forged.
USER_TEXT = ("JobName", "SubmitLine", "Comment", "WorkDir", "Constraints", "WCKey")
# Free text that may itself contain "|": the extra fields of a line that has too many belong
# to it when it is the last column; otherwise the line is bad.
FREE_TEXT = ("SubmitLine", "Reason")
# A Slurm job id as sacct prints it: 123, an array task 123_4 (or 123_[1-9%2] while pending),
# a heterogeneous component 123+1, a step 123.0, 123.batch, 123.extern (sacct(1), "JobID").
JOB_ID = re.compile(r"[0-9]+(?:_(?:[0-9]+|\[[0-9,%-]+\]))?(?:\+[0-9]+)?(?:\.(?:[0-9]+|batch|extern|interactive))?")
FIRST_BAD = 5
# What sacct prints for a time that is not set.
_NO_TIME = ("", "Unknown", "None", "N/A")


def sacct_command(since: str = "START", until: str = "END", fields: tuple[str, ...] = SACCT_FIELDS) -> str:
    return f"sacct -a -X -D -P -o {','.join(fields)} -S {since} -E {until}"


def submit_command(since: str = "START", until: str = "END") -> str:
    return sacct_command(since, until, SUBMIT_FIELDS)


def sacctmgr_command(since: str = "START", until: str = "END") -> str:
    return f"sacctmgr -P show event Start={since} End={until} Format={','.join(EVENT_FIELDS)}"


def is_job_id(text: str) -> bool:
    """True for a Slurm job id (``123``, ``123_4``, ``123+1``, ``123.batch``); a forged or shifted field is not one."""
    return (text.isdigit() and text.isascii()) or JOB_ID.fullmatch(text) is not None


class FleetInputError(Exception):
    """An input file that cannot be analysed at all: empty, or without a column the analysis needs."""


class InputSummary(NamedTuple):
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


# "MM:SS" -> seconds: the one strict reading of a time's minutes and seconds, by lookup.
_MINUTES_SECONDS = {f"{m:02d}:{s:02d}": m * 60 + s for m in range(60) for s in range(60)}


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
            if text[:1] == "@":
                return _epoch(text)
            base = self._hour(text)
        rest = _MINUTES_SECONDS.get(text[14:19])
        if rest is None or len(text) != 19 or text[13] != ":":
            raise ValueError(f"time {text[:40]!r} is not YYYY-MM-DDTHH:MM:SS")
        return base + rest

    def _hour(self, text: str) -> float:
        parts = _fields(text)
        # Not mktime's isdst=-1: glibc reads the repeated autumn hour as whichever offset its
        # previous call used, so the same hour read at another point of a file (or by the
        # DuckDB engine's hour table) would differ. The earlier instant, whatever came before;
        # an hour the spring change skips is read in standard time.
        found = _instants(parts)
        base = min(found) if found else time.mktime((*parts, 0, 0, 0, 0, 0))
        self._hours[text[:13]] = base
        return base

    def fall_back(self, start: str, end: str) -> tuple[float, float]:
        """(start, end) of a run whose End reads before its Start: one that crossed the autumn fall-back.

        In the repeated hour the same wall time names two instants, and mktime picks one
        for both (``isdst=-1``). Then the start is read as the earlier instant (summer
        time, ``isdst=1``) and the end as the later one (``isdst=0``), each only where its
        wall time is ambiguous. ValueError when the end is still before the start.
        """
        first = _readings(start)
        last = _readings(end)
        early = min(first) if first else self(start)
        late = max(last) if last else self(end)
        if early is None or late is None or late < early:
            raise ValueError(f"End {end[:40]} is before Start {start[:40]}")
        return early, late


def _epoch(text: str) -> float:
    """``@1700000000``: epoch seconds, as ``sacct_json`` writes the times of ``sacct --json``.

    ``@!why`` is a record that JSON reader could not convert: ValueError with its reason.
    """
    digits = text[1:]
    if digits[:1] == "!":
        raise ValueError(digits[1:])
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 12:
        raise ValueError(f"time {text[:40]!r} is not @ and epoch seconds")
    return float(digits)


def _fields(text: str) -> tuple[int, int, int, int]:
    """(year, month, day, hour) of ``YYYY-MM-DDTHH...``, each checked (mktime would roll 25:00 over)."""
    digits = (text[:4], text[5:7], text[8:10], text[11:13])
    if (
        len(text) != 19
        or (text[4], text[7], text[10]) != ("-", "-", "T")
        or not all(d.isascii() and d.isdigit() for d in digits)
    ):
        raise ValueError(f"time {text[:40]!r} is not YYYY-MM-DDTHH:MM:SS")
    year, month, day, hour = (int(d) for d in digits)
    try:
        datetime.datetime(year, month, day, hour)
    except ValueError as exc:
        raise ValueError(f"time {text!r}: {exc}") from None
    return year, month, day, hour


def _readings(text: str) -> tuple[float, ...]:
    """The two instants a wall time in the repeated autumn hour names; () for any other time."""
    if text in _NO_TIME:
        return ()
    parts = _fields(text)
    rest = _MINUTES_SECONDS.get(text[14:19])
    if rest is None:
        raise ValueError(f"time {text[:40]!r} is not YYYY-MM-DDTHH:MM:SS")
    found = {base + rest for base in _instants(parts)}
    return tuple(sorted(found)) if len(found) == 2 else ()


def _instants(parts: tuple[int, int, int, int]) -> list[float]:
    """The epoch seconds of the wall hour ``parts`` names: two in the repeated autumn hour, none in a skipped one."""
    found = []
    for isdst in (1, 0):
        # mktime with the wrong isdst moves the time by the shift; a reading that comes back
        # to the same wall time is a true one.
        epoch = time.mktime((*parts, 0, 0, 0, 0, isdst))
        if time.localtime(epoch)[:4] == parts:
            found.append(epoch)
    return found


@dataclass(frozen=True)
class SacctTable:
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


def open_table(
    lines: Iterable[str], source: str, required: tuple[str, ...], command: str, refused: tuple[str, ...] = ()
) -> SacctTable:
    """The header of ``lines`` (the first non-blank one), checked for ``required`` columns and no ``refused`` one."""
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
    unsafe = [name for name in refused if name.lower() in columns]
    if unsafe:
        which = f"column {unsafe[0]} holds" if len(unsafe) == 1 else f"columns {', '.join(unsafe)} hold"
        raise FleetInputError(
            f"{source}: {which} text a job's owner chooses, where a '|' or a newline can forge "
            f"records (sacct -P does not escape them); produce the file with\n  {command}"
        )
    free = [columns[name.lower()] for name in FREE_TEXT if name.lower() in columns]
    return SacctTable(columns, len(names), max(free) if free else None, _data(source_lines, first))


def _data(lines: Iterator[str], header: int) -> Iterator[tuple[int, str]]:
    """(line number, line without its end) of the non-empty lines after the header."""
    for number, line in enumerate(lines, header + 1):
        text = line.rstrip("\r\n")
        if text:
            yield number, text


def text_of(raw: IO[bytes]) -> IO[str]:
    """Lines that end at "\n" alone: newline="" would still end one at a lone "\r" (io.TextIOWrapper's
    universal newlines), and a job name or submit line is a user's text that may hold one."""
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="\n")


class FileLines:
    """The lines of a file without their "\n", read as they are used; its path for a reader in C (``columnar``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __iter__(self) -> Iterator[str]:
        with text_of(self.path.open("rb")) as handle:
            for line in handle:
                yield line[:-1] if line.endswith("\n") else line


def file_lines(path: Path) -> FileLines:
    """The lines of ``path`` without their "\n", read as they are used (``FileLines``)."""
    return FileLines(path)


def first_word(text: str) -> str:
    """``CANCELLED by 1000`` -> ``CANCELLED``: sacct's State may carry who did it."""
    return text.split(" ", 1)[0].upper()


def tres_gpus(text: str) -> int:
    """The GPU count in an AllocTRES string such as ``billing=8,cpu=96,gres/gpu=8,mem=1T,node=1``.

    The untyped ``gres/gpu=`` is the total; when only typed counts (``gres/gpu:a100=8``) are
    present they are summed. No GPU entry is 0; a count that is not digits is ValueError.
    """
    total = 0
    typed = 0
    seen = False
    for item in text.split(","):
        key, _, value = item.partition("=")
        if key == "gres/gpu" or key.startswith("gres/gpu:"):
            # int() would take "-8", "+8" and " 8"; a count is digits.
            if not (value.isascii() and value.isdigit()):
                raise ValueError(f"AllocTRES {key}={value[:20]!r} is not a count")
            if key == "gres/gpu":
                total = int(value)
                seen = True
            else:
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
