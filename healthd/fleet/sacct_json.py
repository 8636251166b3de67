"""``sacct --json`` to the rows of the ``-P`` table the analysis reads, and the job names.

Slurm 22.05 (openapi/dbv0.0.38, captured from the test cluster in
``fixtures/slurm/accounting/sacct-json-22.05-take-out.json``) prints each run of
``sacct -a -X -D --json`` as one object of ``jobs``: ``job_id``, ``array.job_id`` and
``array.task_id``, ``het.job_id`` and ``het.job_offset``, ``user``, ``partition``,
``state.current`` (a word), ``time.start`` and ``time.end`` (epoch seconds, 0 when not
set), ``allocation_nodes``, ``nodes`` (hostlist notation) and ``tres.allocated`` (a list
of ``{type, name, count}``). Newer Slurm (data_parser v0.0.40, 23.11) prints
``state.current`` as a list of words; the first is the state. 24.11 and 26.05 (data_parser
v0.0.42 and v0.0.45, ``src/plugins/data_parser/*/parsers.c``: ``UINT32_NO_VAL``,
``TIMESTAMP_NO_VAL``) wrap numbers that may be unset as ``{"set", "infinite", "number"}``:
``array.task_id`` and ``het.job_offset`` always, times in some releases. ``number`` unwraps
every number read here, so an array task is ``8_1`` as ``sacct -P`` prints it, not its raw
job id. The other keys are not read.

The rows carry the same columns as ``sacct -P`` (``JOB_TABLE``) so that one reader
(``analyze._read_jobs``) serves both; times go as ``@EPOCH`` (``sacct.LocalTimes``),
exact in any zone, and a record that cannot be read goes as ``@!why``, which that
reader counts as a bad line with the reason. A job's name (``name``, text its owner
chooses) is never put in a row: it is kept apart, by JobID, for display only.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterator, NamedTuple, Optional, Protocol, Sequence

from healthd.text import records

JOB_TABLE = ("JobID", "User", "Partition", "State", "Start", "End", "NNodes", "NodeList", "AllocTRES")


class JsonJobs(NamedTuple):
    """The rows (header first) and the job names by JobID."""

    lines: tuple[str, ...]
    names: dict[str, str]


def is_json(text: str) -> bool:
    return text.lstrip()[:1] == "{"


def number(value: Any) -> Optional[float]:
    """A number as any Slurm's JSON prints it: an int, or ``{set, infinite, number}`` (24.11 and later).

    None when it is absent (``null``, or ``set`` false: Slurm's NO_VAL), ``math.inf`` when
    ``infinite`` is true (Slurm's INFINITE, "no limit"); ValueError for anything else.
    """
    if isinstance(value, dict):
        if value.get("infinite") is True:
            return math.inf
        if value.get("set") is not True:
            return None
        value = value.get("number")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{str(value)[:40]!r} is not a number")
    return value


def count(value: Any, what: str) -> Optional[int]:
    """A finite whole number or None (``number``); ValueError naming ``what`` for a negative or infinite one."""
    found = number(value)
    if found is None:
        return None
    if found == math.inf or found < 0:
        raise ValueError(f"{what} {found} is not a count")
    return int(found)


def _job_id(job: dict[str, Any]) -> str:
    array, het = job.get("array") or {}, job.get("het") or {}
    array_id, task = count(array.get("job_id"), "array.job_id"), count(array.get("task_id"), "array.task_id")
    if array_id and task is not None:
        return f"{array_id}_{task}"
    het_id, offset = count(het.get("job_id"), "het.job_id"), count(het.get("job_offset"), "het.job_offset")
    if het_id and offset is not None:
        return f"{het_id}+{offset}"
    found = count(job["job_id"], "job_id")
    if found is None:
        raise ValueError("no job_id")
    return str(found)


def _state(job: dict[str, Any]) -> str:
    current = job["state"]["current"]
    if isinstance(current, list):  # data_parser v0.0.40 and later: a list of flags, the state first
        current = current[0] if current else ""
    return str(current)


def _time(value: Any) -> str:
    try:
        seconds = count(value, "time")
    except ValueError:
        raise ValueError(f"time {str(value)[:40]!r} is not epoch seconds") from None
    return f"@{seconds}" if seconds else "Unknown"


# A TRES count printed as a plain int64 from slurmdb's unsigned sentinels: -1 is INFINITE64 and -2
# NO_CONSUME_VAL64 (slurm/slurm.h), which 24.11 and 26.05 print for energy a job did not use.
_TRES_SENTINELS = (-1, -2)


def _tres(job: dict[str, Any]) -> str:
    items = []
    for entry in (job.get("tres") or {}).get("allocated") or []:
        raw = entry.get("count")
        if raw in _TRES_SENTINELS:
            continue
        kind, name, amount = entry.get("type"), entry.get("name"), count(raw, "tres count")
        if amount is None:
            continue
        key = f"{kind}/{name}" if name else str(kind)
        items.append(f"{key}={amount}")
    return ",".join(items)


def _row(job: dict[str, Any]) -> tuple[str, str]:
    """(row, JobID) of one job object; KeyError, TypeError or ValueError when it cannot be read."""
    job_id = _job_id(job)
    times = job["time"]
    if not isinstance(job.get("user"), str) or not job["user"]:
        # 22.05 takes it from the job's association: null for a user with none.
        raise ValueError("no user (a user without an association in 22.05's JSON): read with sacct -P")
    fields = (
        job_id,
        str(job["user"]),
        str(job.get("partition") or ""),
        _state(job),
        _time(times["start"]),
        _time(times["end"]),
        str(count(job["allocation_nodes"], "allocation_nodes") or 0),
        str(job["nodes"]),
        _tres(job),
    )
    for name, value in zip(JOB_TABLE, fields):
        # A "\r" would end the line for a reader with universal newlines, and stays in a node's name otherwise.
        if "|" in value or not value.isprintable():
            raise ValueError(f"{name} holds a vertical bar or a control character, which no Slurm-written field has")
    return "|".join(fields), job_id


def _bad_row(why: str) -> str:
    """A row the ``-P`` reader counts as bad, with ``why`` (``sacct.LocalTimes`` reads ``@!why``)."""
    return "|".join(("0", "", "", "", "@!" + why.replace("|", "/").replace("\n", " ").replace("\r", " "), *("",) * 4))


def _converted(job: Any, number: int) -> tuple[str, str, Optional[str]]:
    """(row, JobID, name) of the ``number``-th job object; a bad one is a ``_bad_row`` naming it."""
    try:
        line, job_id = _row(job)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        why = f"job record {number}: " + (f"no key {exc}" if isinstance(exc, KeyError) else str(exc))
        return _bad_row(why), "", None
    name = job.get("name")
    return line, job_id, name if isinstance(name, str) and name else None


def read(text: str, source: str) -> JsonJobs:
    """The rows and names of a ``sacct --json`` document; ValueError naming ``source`` when it is not one."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{source}: not a sacct --json document: {exc}") from None
    jobs = document.get("jobs") if isinstance(document, dict) else None
    if not isinstance(jobs, list):
        raise ValueError(f"{source}: no list 'jobs' in the sacct --json document")
    lines = ["|".join(JOB_TABLE)]
    names: dict[str, str] = {}
    for number, job in enumerate(jobs, 1):
        line, job_id, name = _converted(job, number)
        lines.append(line)
        if name is not None:
            names[job_id] = name
    return JsonJobs(tuple(lines), names)


def lines_of(text: str, source: str) -> tuple[Sequence[str], dict[str, str]]:
    """The job rows of ``text``, ``sacct -P`` or ``sacct --json``, and the job names (JSON only)."""
    if not is_json(text):
        return records(text), {}  # on "\n" alone: no field a user shapes starts a row
    found = read(text, source)
    return found.lines, found.names


# How much of a ``sacct --json`` document is read at a time, and the most one value (a job
# object, or ``meta``) may take: a record is a few kB; one larger than this is no job.
CHUNK = 1 << 20
MAX_VALUE = 64 << 20


class Readable(Protocol):
    """What ``stream`` reads from: an open text file, or anything with its ``read``."""

    def read(self, size: int, /) -> str: ...


class _Buffer:
    """A text read a chunk at a time, with a position: what ``stream`` decodes one value at a time from."""

    def __init__(self, handle: Readable) -> None:
        self.handle = handle
        self.text = ""
        self.at = 0
        self.ended = False

    def more(self) -> bool:
        """Read the next chunk (dropping what was decoded); False at the end of the input."""
        if self.ended:
            return False
        chunk = self.handle.read(CHUNK)
        self.text = self.text[self.at :] + chunk
        self.at = 0
        self.ended = not chunk
        return bool(chunk)

    def skip(self) -> str:
        """The next character that is not JSON white space (not consumed), "" at the end."""
        while True:
            while self.at < len(self.text) and self.text[self.at] in " \t\n\r":
                self.at += 1
            if self.at < len(self.text) or not self.more():
                return self.text[self.at : self.at + 1]

    def value(self, decoder: json.JSONDecoder) -> Any:
        """The next JSON value, reading more while it is incomplete; ValueError where it is not JSON."""
        self.skip()
        while True:
            try:
                found, end = decoder.raw_decode(self.text, self.at)
                # A number cut at the chunk's end decodes too: decode it again with the rest.
                if end < len(self.text) or not self.more():
                    self.at = end
                    return found
            except json.JSONDecodeError:
                if len(self.text) - self.at > MAX_VALUE or not self.more():
                    raise

    def expect(self, char: str) -> None:
        if self.skip() != char:
            raise ValueError(f"expected {char!r} at {self.skip()[:1]!r}")
        self.at += 1


class Seen:
    """What ``stream`` saw besides the rows: the failed runs' names (the report shows them), and runs without a user."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.no_user = 0


# The states of the runs the report names (``analyze.FAILED_PREFIXES``): only their names are kept.
_NAMED = ("FAILED", "NODE_FAIL")


def stream(handle: Readable, source: str, seen: Seen) -> Iterator[str]:
    """The ``-P`` rows (header first) of a ``sacct --json`` document read a job at a time from ``handle``.

    Memory holds one job object, never the document: a year of a large fleet's runs is tens
    of GB of JSON. Keys other than ``jobs`` are decoded and dropped. A job object that is not a run becomes a bad row
    naming it (as ``read``); where the document stops being JSON (cut short, or garbled),
    the runs before stay and one bad row says where it broke: one broken record does not
    blind the whole source. ``seen`` gathers the failed runs' names and counts the runs
    without a user (22.05 prints null for one without an association: ``collect`` then reads
    ``-P``). ValueError naming ``source`` when it does not start as a ``sacct --json`` document.
    """
    buffer = _Buffer(handle)
    decoder = json.JSONDecoder()
    try:
        buffer.expect("{")
        _to_jobs(buffer, decoder)
    except ValueError as exc:
        raise ValueError(f"{source}: not a sacct --json document: {exc}") from None
    yield "|".join(JOB_TABLE)
    number = 0
    while True:
        try:
            ahead = buffer.skip()
            if ahead == "]":
                return
            if number:
                buffer.expect(",")
            job = buffer.value(decoder)
        except ValueError as exc:
            yield _bad_row(f"the document breaks after job record {number}: {str(exc)[:200]}")
            return
        number += 1
        line, job_id, name = _converted(job, number)
        if not (isinstance(job, dict) and isinstance(job.get("user"), str) and job["user"]):
            seen.no_user += 1
        if name is not None and line.split("|", 4)[3].startswith(_NAMED):
            seen.names[job_id] = name
        yield line


def _to_jobs(buffer: _Buffer, decoder: json.JSONDecoder) -> None:
    """Move ``buffer`` past ``"jobs": [`` of the top-level object, decoding (and dropping) the values before it."""
    while True:
        key = buffer.value(decoder)
        buffer.expect(":")
        if key == "jobs":
            buffer.expect("[")
            return
        buffer.value(decoder)
        if buffer.skip() != ",":
            raise ValueError("no list 'jobs' in the sacct --json document")
        buffer.at += 1
