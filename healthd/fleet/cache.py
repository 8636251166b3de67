"""``--cache DIR``: what ``--live`` read before, as immutable per-day segments: a daily report reads one day.

The directory holds one segment per day (UTC) of the runs' and events' ends: the job runs as
the ``-P`` table the analysis reads (``DAY-TOKEN.jobs``), the node events (``.events``), the
submit-line records (``.submit``), each file with its header so that it is a table of its own,
the job names (``.names``) and the batch scripts of the jobs whose records it holds
(``.scripts``: the ``sacct -B`` outputs, one per read that wrote the day); and
``manifest.json``, which names the segments, the window they cover and what identifies the
query (the Slurm config, the tables' headers). A later read whose window starts inside the
cached one asks Slurm only from an hour before the cached end (``OVERLAP``: slurmdbd records
a run or an event when it ends, and may record it a little late), and then:

- a run that ended before the new end less ``OVERLAP`` is final: the next read will not ask
  for it again. It is written into the segment of its end's day; a day that has a segment
  already gets a new one, its old rows copied with the new (a day's work), and the old one
  goes. Every other run (still running, or ended within the last hour) is not kept: the next
  query lists every run running or ended in its window (sacct(1), ``-S``) and brings it again.
  A new final run replaces a cached one of the same (JobID, Start) (each run of a requeued
  job, ``-D``, has its own start); events alike, by (node, start, reason) and their end;
- a job's submit-line records are kept with its final runs, one per run when its records
  number its runs; otherwise (a forged record, counted against the job by
  ``healthd.fleet.submit``) all of them with its last final run, so that the count still fails.
  The records are matched with the runs a share of the jobs at a time (``PARTS``, by a hash
  of the job id, through files in the read's private directory), so that a first read of a
  year holds a share of its jobs, not one entry each;
- the batch jobs among a day's new records are looked up (``sacct -B``) and their scripts
  kept with the day, so that a day's run asks for the new day's scripts only, and those of
  the first day's jobs that stay in the window (a day's: its other jobs' scripts, forged
  headers included, must not count) and of the runs that are not final;
- the report then streams the segments' rows, the first day's filtered to the window,
  and the new read's runs that are not final, without loading or merging them.

Segments of days wholly before the window's start are deleted when the manifest is written,
so the directory holds one window. The directory is state: it is used only when it and
every directory above it pass ``healthd.store.trust``'s rule (root's or ours, not writable
by others), and each file in it too, since a forged cache is forged accounting; files are
written mode 0600 under temporary names and renamed, and the manifest, replaced
atomically last, is what makes them part of the cache. One report at a time holds the
directory (``flock``). A manifest of another version or query is not used (the whole window
is read again) and the directory is rebuilt; a cache file of the first version (one JSON
file) is replaced by a directory, with a message.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import re
from pathlib import Path
from typing import IO, Callable, Iterable, Iterator, NamedTuple, Optional, Union

from healthd.fleet.sacct import FleetInputError, LocalTimes, file_lines, is_job_id, text_of
from healthd.fleet.scripts import Blocks, batch_job, batch_jobs
from healthd.store.atomicfile import write_atomically
from healthd.store.trust import UntrustedPath, closed_on_error, open_trusted_dir, stat_reason, trusted_stat

VERSION = 3
OVERLAP = 3600.0
DAY = 86400
MANIFEST = "manifest.json"
KINDS = ("jobs", "events", "submit")
FILES = (*KINDS, "names", "scripts")  # a segment's files
JOB_KEY = (("JobID", "Start"), "End")
EVENT_KEY = (("NodeName", "TimeStart", "Reason"), "TimeEnd")
# Rows held in memory while a read is sorted into days, before they are appended to their files.
BUFFERED = 50_000
# Shares of the jobs that a read's runs and records are matched in, one at a time: a year of
# 10M runs is about 160k jobs a share, where one dictionary of every job held 2.5 GB.
PARTS = 64
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
_SPILL = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC


class CacheError(Exception):
    """The cache directory cannot be created, locked or written."""


class Reread(Exception):
    """The new days are of another table than the cached ones (``sacct -P`` after ``--json``): read the whole window."""


class Segment(NamedTuple):
    """The rows of the runs and events that ended on one day (UTC), in files ``NAME.jobs`` etc."""

    day: int
    name: str


class Manifest(NamedTuple):
    key: str
    since: float
    until: float
    headers: tuple[str, str, str]  # KINDS' headers
    segments: tuple[Segment, ...]  # by day


class Fresh(NamedTuple):
    """What the new read brought, in the analysis's tables, header first (``submit``: one entry per record)."""

    jobs: Iterable[str]
    events: list[str]
    submit: Callable[[], Iterable[str]]  # the records, read afresh at each call
    names: dict[str, str]
    scripts: Callable[[list[str]], str]  # ``sacct -B`` output of these jobs (``live.batch_scripts``)


def read_from(manifest: Optional[Manifest], window: tuple[float, float], key: str) -> float:
    """Where the query must start: the cached end less ``OVERLAP``, or ``since`` when the cache does not cover it.

    A window that ends before the cached end (an earlier ``--until``) is read whole too: the
    cached days after its end are not this report's.
    """
    since, until = window
    if manifest is None or manifest.key != key or not manifest.since <= since < manifest.until <= until:
        return since
    return max(since, manifest.until - OVERLAP)


def submit_records(lines: Iterable[str]) -> Iterator[str]:
    """The header, then one entry per record: a line not starting with a job id continues the one before."""
    record: Optional[str] = None
    for line in lines:
        if record is not None and is_job_id(line.split("|", 1)[0]):
            yield record
            record = line
        else:
            record = line if record is None else record + "\n" + line
    if record is not None:
        yield record


class _Ends:
    """Each row's key and end (epoch seconds; None while running, or for a row that cannot be read)."""

    def __init__(self, header: str, columns: tuple[tuple[str, ...], str]) -> None:
        names = [c.strip().lower() for c in header.split("|")]
        self.keys = [names.index(c.lower()) for c in columns[0]]
        self.end = names.index(columns[1].lower())
        self.last = max(*self.keys, self.end)
        self.times = LocalTimes()

    def __call__(self, row: str) -> tuple[tuple[str, ...], Optional[float]]:
        fields = row.split("|")
        if len(fields) <= self.last:
            return (row,), None
        try:
            return tuple(fields[k] for k in self.keys), self.times(fields[self.end])
        except ValueError:
            return tuple(fields[k] for k in self.keys), None


@contextlib.contextmanager
def opened(path: Path, key: str) -> Iterator[Store]:
    """The cache directory ``path``, created if missing, locked while the block runs.

    Raises ``UntrustedPath`` when it (or a directory above it) could be written by others,
    ``CacheError`` when it cannot be made or another report holds it.
    """
    note = _replace_old_file(path)
    try:
        fd = open_trusted_dir(path)
    except OSError as exc:
        raise CacheError(f"cannot open the cache {path}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CacheError(f"the cache {path} is in use by another fleet report") from None
        store = Store(path, fd, note)
        store.manifest = store.load(key)
        yield store
    finally:
        os.close(fd)


def _replace_old_file(path: Path) -> Optional[str]:
    """Make ``path`` a directory: a cache file of the first version is removed (said), a missing one created."""
    try:
        parent = open_trusted_dir(path.parent)
    except OSError as exc:
        raise CacheError(f"cannot use the cache {path}: {exc.strerror or exc}") from None
    note = None
    try:
        if os.path.isfile(path):
            trusted_stat(path)  # a file others could write is refused, not silently removed
            if not _old_cache(path):
                raise CacheError(f"cannot use the cache {path}: a file that is not a healthd cache is there")
            os.unlink(path.name, dir_fd=parent)
            note = f"{path} is a file (an earlier healthd's cache): the window is read whole into a cache directory"
        if not os.path.lexists(path):
            os.mkdir(path.name, 0o700, dir_fd=parent)
    except OSError as exc:
        raise CacheError(f"cannot make the cache directory {path}: {exc.strerror or exc}") from None
    finally:
        os.close(parent)
    return note


# How the first version's one JSON file began (json.dumps of its body, "version" its first key).
_OLD_CACHE_START = b'{"version": 1, "key": '


def _old_cache(path: Path) -> bool:
    """Whether ``path`` is the first version's cache file: only that is removed, never another file put there."""
    with open(path, "rb") as handle:
        return handle.read(len(_OLD_CACHE_START)) == _OLD_CACHE_START


class Store:
    """An open, locked cache directory: read its segments, write the new ones."""

    def __init__(self, path: Path, fd: int, note: Optional[str]) -> None:
        self.path, self.fd, self.note = path, fd, note
        self.manifest: Optional[Manifest] = None

    def open(self, name: str) -> IO[str]:
        """A file of the directory, read as text; ``UntrustedPath`` when others could have written it."""
        fd = os.open(name, _READ, dir_fd=self.fd)
        with closed_on_error(fd):
            reason = stat_reason(self.path / name, os.fstat(fd))
            if reason:
                raise UntrustedPath(self.path / name, reason)
        return text_of(os.fdopen(fd, "rb"))

    def load(self, key: str) -> Optional[Manifest]:
        """The manifest when it is one of this version and query (None: read the whole window)."""
        try:
            with self.open(MANIFEST) as handle:
                document = json.loads(handle.read())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None  # not a manifest healthd wrote: rebuilt
        try:
            if document.get("version") != VERSION:
                self.note = f"{self.path} is a cache of another healthd version: the window is read whole"
                return None
            if document.get("key") != key:
                return None
            headers = tuple(str(h) for h in document["headers"])
            segments = tuple(Segment(int(day), str(name)) for day, name in document["segments"])
            if len(headers) != len(KINDS) or not all(self._whole(s) for s in segments):
                return None
            return Manifest(key, float(document["since"]), float(document["until"]), headers, segments)  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def _whole(self, segment: Segment) -> bool:
        """Whether each file of ``segment`` is in the directory (a name with no path in it)."""
        if "/" in segment.name or segment.name.startswith("."):
            return False
        try:
            for kind in FILES:
                os.stat(f"{segment.name}.{kind}", dir_fd=self.fd, follow_symlinks=False)
        except OSError:
            return False
        return True

    def lines(self, name: str) -> list[str]:
        """The lines of a segment file without their ``\\n``, its header left out.

        Read whole and split on "\\n" alone (a reason or a submit line may hold "\\r"): one
        day's rows, which costs less than a line at a time in Python.
        """
        with self.open(name) as handle:
            rows = handle.read().split("\n")
        if rows[-1] == "":
            rows.pop()
        return rows[1:]

    def names(self, segment: Segment) -> dict[str, str]:
        found = self._json(f"{segment.name}.names")
        return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}

    def scripts(self, segment: Segment) -> list[str]:
        """The ``sacct -B`` outputs kept with ``segment``, one per read that wrote its day."""
        found = self._json(f"{segment.name}.scripts")
        return [str(text) for text in found] if isinstance(found, list) else []

    def _json(self, name: str) -> object:
        """A JSON file of the cache; FleetInputError naming it where it is not JSON (read while the report runs)."""
        with self.open(name) as handle:
            text = handle.read()
        try:
            return json.loads(text)
        except ValueError as exc:
            raise FleetInputError(
                f"{self.path / name}: not JSON ({exc}); the cache is damaged: remove {self.path} or go without --cache"
            ) from None


class Sealed(NamedTuple):
    """The window as the analysis reads it: the segments (the first day's filtered), then the new read's open rows."""

    jobs: Iterator[str]
    events: Iterator[str]
    submit: Callable[[], Iterator[str]]
    names: dict[str, str]
    scripts: Blocks  # the batch scripts of the window's batch jobs, a lookup at a time


def seal(store: Store, fresh: Fresh, window: tuple[float, float, float], key: str, spill: Path) -> Sealed:
    """Write ``fresh``'s final rows into the cache and return the window's rows, streamed.

    ``window``: the report's start, the start of what was read, its end. ``spill``: a
    private directory for the read's rows that are not final. Raises ``Reread`` when the
    new days cannot join the cached ones, ``CacheError`` when the cache cannot be written
    (it is then not changed), OSError when a segment cannot be read, and what
    ``fresh.scripts`` raises.
    """
    since, start, until = window
    jobs = iter(fresh.jobs)
    headers = (next(jobs, ""), fresh.events[0] if fresh.events else "", next(iter(fresh.submit()), ""))
    manifest = store.manifest if start > since else None
    if start > since and (manifest is None or manifest.headers != headers):
        store.manifest = None
        raise Reread()
    batch = _Batch(store, headers, until - OVERLAP, spill)
    batch.old = {} if manifest is None else {s.day: s for s in manifest.segments if (s.day + 1) * DAY > since}
    try:
        batch.jobs(jobs, spill / "open-jobs.txt")
        open_events = batch.events(fresh.events[1:])
        batch.records(fresh.submit, spill / "open-submit.txt", fresh.names)
        segments = batch.commit(since, fresh.scripts)
        store.manifest = Manifest(key, since, until, headers, segments)
        _write_manifest(store, store.manifest)
    except OSError as exc:
        batch.discard()
        raise CacheError(f"cannot write the cache {store.path}: {exc.strerror or exc}") from None
    except BaseException:
        batch.discard()
        raise
    _collect_garbage(store, segments)
    first = _First(store, segments[0], headers, since) if segments and segments[0].day * DAY < since else None
    return Sealed(
        _stream(store, segments, "jobs", headers[0], first, file_lines(spill / "open-jobs.txt")),
        _stream(store, segments, "events", headers[1], first, iter(open_events)),
        lambda: _stream(store, segments, "submit", headers[2], first, file_lines(spill / "open-submit.txt")),
        {k: v for s in segments for k, v in store.names(s).items()} | fresh.names,
        _scripts(store, segments, first, fresh.scripts, file_lines(spill / "open-submit.txt")),
    )


def _scripts(
    store: Store,
    segments: tuple[Segment, ...],
    first: Optional[_First],
    lookup: Callable[[list[str]], str],
    rest: Iterable[str],
) -> Blocks:
    """The ``sacct -B`` outputs of the window's batch jobs: the segments' kept ones, and new lookups of a day's.

    The first day's jobs that stay in the window and the runs that are not final (``rest``'s
    records) are looked up anew: the kept output of the first day holds its jobs that left
    the window too, whose scripts (and any header forged in them) a read of the window has not.
    Each kept output is read when the analysis comes to it.
    """
    ours = [] if first is None else first.kept("submit", store.lines(f"{first.segment.name}.submit"))
    looked = [lookup(jobs) for jobs in (batch_jobs(submit_records(ours)), batch_jobs(submit_records(rest))) if jobs]
    others = (segment for segment in segments if first is None or segment != first.segment)
    kept = (text for segment in others for text in store.scripts(segment))
    return Blocks(itertools.chain(looked, kept))


def _stream(
    store: Store, segments: tuple[Segment, ...], kind: str, header: str, first: Optional[_First], rest: Iterable[str]
) -> Iterator[str]:
    """``header``, each segment's rows of ``kind`` (the first day's as ``first`` keeps them), then ``rest``."""
    yield header
    for segment in segments:
        rows = store.lines(f"{segment.name}.{kind}")
        yield from first.kept(kind, rows) if first is not None and segment == first.segment else rows
    yield from rest


class _First:
    """The segment of the day the window starts in: its rows that ended before the start are left out.

    A job's submit-line records there lose one per run left out when they number its runs
    (as a read of the window would list them), else none (its count keeps failing).
    """

    def __init__(self, store: Store, segment: Segment, headers: tuple[str, str, str], since: float) -> None:
        self.segment, self.since, self.headers = segment, since, headers
        ends = _Ends(headers[0], JOB_KEY)
        runs: dict[str, int] = {}
        self.dropped: dict[str, int] = {}
        for row in store.lines(f"{segment.name}.jobs"):
            key, end = ends(row)
            job = key[0]
            runs[job] = runs.get(job, 0) + 1
            if end is not None and end < since:
                self.dropped[job] = self.dropped.get(job, 0) + 1
        self.runs = runs

    def kept(self, kind: str, rows: Iterable[str]) -> Iterator[str]:
        if kind == "submit":
            return self._records(rows)
        ends = _Ends(self.headers[0] if kind == "jobs" else self.headers[1], JOB_KEY if kind == "jobs" else EVENT_KEY)
        return (row for row in rows if (ends(row)[1] or self.since) >= self.since)

    def _records(self, lines: Iterable[str]) -> Iterator[str]:
        records = list(submit_records(lines))
        counts: dict[str, int] = {}
        for record in records:
            job = record.split("|", 1)[0]
            counts[job] = counts.get(job, 0) + 1
        left = {job: n for job, n in self.dropped.items() if counts.get(job) == self.runs[job]}
        for record in records:
            job = record.split("|", 1)[0]
            if left.get(job, 0) > 0:
                left[job] -= 1
                continue
            yield from record.split("\n")


class _Appends:
    """Lines added to files, held and written out in batches of ``BUFFERED``: a read of millions holds a batch."""

    def __init__(self, opener: Callable[[str], int]) -> None:
        self.opener = opener
        self.buffered: dict[str, list[str]] = {}
        self.held = 0

    def add(self, name: str, line: str) -> None:
        self.buffered.setdefault(name, []).append(line)
        self.held += 1
        if self.held >= BUFFERED:
            self.flush()

    def flush(self) -> None:
        for name, lines in self.buffered.items():
            fd = self.opener(name)
            try:
                with os.fdopen(fd, "wb", closefd=False) as out:
                    out.write("".join(line + "\n" for line in lines).encode("utf-8"))
            finally:
                os.close(fd)
        self.buffered.clear()
        self.held = 0


def _part(job: str) -> int:
    return hash(job) % PARTS  # the same within the process, which is all a read needs


# A submit-line record may hold "\n" (a line continued): spilled as one line.
def _escaped(record: str) -> str:
    return record.replace("\\", "\\\\").replace("\n", "\\n") if "\\" in record or "\n" in record else record


_ESCAPE = re.compile(r"\\(.)")


def _unescaped(line: str) -> str:
    return _ESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), line) if "\\" in line else line


class _Batch:
    """The final rows of one read, sorted into their days' new segment files."""

    def __init__(self, store: Store, headers: tuple[str, str, str], cut: float, spill: Path) -> None:
        self.store, self.headers, self.cut, self.spill = store, headers, cut, spill
        self.old: dict[int, Segment] = {}
        self.new: dict[int, Segment] = {}
        self.rows = _Appends(lambda name: os.open(name, _APPEND, dir_fd=store.fd))
        # job|day of each run (-1: not final), escaped records, batch jobs by day: by share of the jobs.
        self.parts = _Appends(lambda name: os.open(spill / name, _SPILL, 0o600))
        self.replaced: dict[int, set[tuple[str, ...]]] = {}  # day -> keys of new rows (jobs)
        self.replaced_events: dict[int, set[tuple[str, ...]]] = {}
        self.job_names: dict[int, dict[str, str]] = {}

    def _segment(self, day: int) -> Segment:
        segment = self.new.get(day)
        if segment is None:
            segment = self.new[day] = Segment(day, f"{day}-{os.urandom(6).hex()}")
            for kind, header in zip(KINDS, self.headers):
                fd = os.open(f".{segment.name}.{kind}", _CREATE, 0o600, dir_fd=self.store.fd)
                os.fchmod(fd, 0o600)
                os.write(fd, (header + "\n").encode("utf-8"))
                os.close(fd)
        return segment

    def _add(self, day: int, kind: str, row: str) -> None:
        self.rows.add(f".{self._segment(day).name}.{kind}", row)

    def jobs(self, rows: Iterator[str], spill: Path) -> None:
        """Each run into its day's segment when final, else into ``spill``; each run's day into its job's share."""
        ends = _Ends(self.headers[0], JOB_KEY)
        with spill.open("w", encoding="utf-8", newline="\n") as out:
            for row in rows:
                key, end = ends(row)
                day = -1 if end is None or end >= self.cut else int(end // DAY)
                self.parts.add(f"runs-{_part(key[0])}", f"{key[0]}|{day}")
                if day < 0:
                    out.write(row + "\n")
                    continue
                if day in self.old:  # only a day cached before is copied, less the rows read again
                    self.replaced.setdefault(day, set()).add(key)
                self._add(day, "jobs", row)

    def events(self, rows: list[str]) -> list[str]:
        """Each final event into its day's segment; the others, returned."""
        if not rows:
            return []
        ends = _Ends(self.headers[1], EVENT_KEY)
        kept = []
        for row in rows:
            key, end = ends(row)
            if end is None or end >= self.cut:
                kept.append(row)
                continue
            day = int(end // DAY)
            if day in self.old:
                self.replaced_events.setdefault(day, set()).add(key)
            self._add(day, "events", row)
        return kept

    def records(self, submit: Callable[[], Iterable[str]], spill: Path, names: dict[str, str]) -> None:
        """Each job's records with its final runs (``seal``), a share of the jobs at a time; the rest into ``spill``."""
        records = iter(submit())
        next(records, None)
        for record in records:
            self.parts.add(f"records-{_part(record.split('|', 1)[0])}", _escaped(record))
        self.parts.flush()
        newest = max(self.new, default=None)
        shared: list[dict[str, str]] = [{} for _ in range(PARTS)]
        for job, name in names.items():
            shared[_part(job)][job] = name
        with spill.open("w", encoding="utf-8", newline="\n") as out:
            for part in range(PARTS):
                runs = self._runs(part)
                for record in self._place(runs, part, newest):
                    out.write(record + "\n")
                for job, name in shared[part].items():
                    for day in _days(runs.get(job, -1)):
                        self.job_names.setdefault(day, {})[job] = name

    def _runs(self, part: int) -> dict[str, Union[int, list[int]]]:
        """Job -> its runs in the read, of one share: one run, the day it ended on when final (-1: not final);
        several (few jobs): [their number, the days of the final ones]."""
        runs: dict[str, Union[int, list[int]]] = {}
        for line in self._spilled(f"runs-{part}"):
            job, _, number = line.rpartition("|")
            day = int(number)
            had = runs.get(job)
            runs[job] = day if had is None else _one_more(had, day)
        return runs

    def _spilled(self, name: str) -> Iterator[str]:
        path = self.spill / name
        return iter(file_lines(path)) if path.exists() else iter(())

    def _place(self, runs: dict[str, Union[int, list[int]]], part: int, newest: Optional[int]) -> Iterator[str]:
        """The records of one share into their days' segments (their batch jobs noted by day); yields the others."""
        records = [_unescaped(line) for line in self._spilled(f"records-{part}")]
        counts: dict[str, int] = {}
        for record in records:
            job = record.split("|", 1)[0]
            counts[job] = counts.get(job, 0) + 1
        placed: dict[str, int] = {}
        for record in records:
            job = record.split("|", 1)[0]
            day = _day_of(runs.get(job), counts[job], placed, job, newest)
            if day is None:
                yield record
                continue
            self._add(day, "submit", record)
            batch = batch_job(record)
            if batch is not None:
                self.parts.add(f"batch-{day}", batch)

    def commit(self, since: float, lookup: Callable[[list[str]], str]) -> tuple[Segment, ...]:
        """Copy the old rows of every day written into its new files, with its scripts; then make them the segments."""
        self.rows.flush()
        self.parts.flush()
        for day, segment in self.new.items():
            old = self.old.get(day)
            names = dict(self.job_names.get(day, {}))
            scripts = []
            if old is not None:
                self._copy(old, segment, day)
                names = {**self.store.names(old), **names}
                scripts = self.store.scripts(old)
            jobs = list(dict.fromkeys(self._spilled(f"batch-{day}")))
            if jobs:
                scripts.append(lookup(jobs))
            self._write(f".{segment.name}.names", json.dumps(names))
            self._write(f".{segment.name}.scripts", json.dumps(scripts))
        for segment in self.new.values():
            for kind in FILES:
                name = f"{segment.name}.{kind}"
                fd = os.open(f".{name}", _READ, dir_fd=self.store.fd)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.rename(f".{name}", name, src_dir_fd=self.store.fd, dst_dir_fd=self.store.fd)
        merged = {**self.old, **self.new}
        return tuple(merged[day] for day in sorted(merged) if (day + 1) * DAY > since)

    def _write(self, name: str, text: str) -> None:
        fd = os.open(name, _CREATE, 0o600, dir_fd=self.store.fd)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, text.encode("utf-8"))
        finally:
            os.close(fd)

    def _copy(self, old: Segment, new: Segment, day: int) -> None:
        """The old segment's rows into the new one's files, less those the new read replaces."""
        for kind, header, replaced, columns in (
            ("jobs", self.headers[0], self.replaced.get(day, set()), JOB_KEY),
            ("events", self.headers[1], self.replaced_events.get(day, set()), EVENT_KEY),
            ("submit", self.headers[2], set(), JOB_KEY),
        ):
            rows: Iterable[str] = self.store.lines(f"{old.name}.{kind}")
            if replaced:
                ends = _Ends(header, columns)
                rows = (row for row in rows if ends(row)[0] not in replaced)
            fd = os.open(f".{new.name}.{kind}", _APPEND, dir_fd=self.store.fd)
            try:
                with os.fdopen(fd, "wb", closefd=False) as out:
                    out.writelines((row + "\n").encode("utf-8") for row in rows)
            finally:
                os.close(fd)

    def discard(self) -> None:
        for segment in self.new.values():
            for kind in FILES:
                with contextlib.suppress(OSError):
                    os.unlink(f".{segment.name}.{kind}", dir_fd=self.store.fd)


def _day_of(
    runs: Optional[Union[int, list[int]]], records: int, placed: dict[str, int], job: str, newest: Optional[int]
) -> Optional[int]:
    """The day a record of ``job`` is kept with, None to leave it to the next read."""
    if runs is None:
        return newest  # a record of no run read: it still counts against its job's runs
    if isinstance(runs, int) and records == 1:
        return runs if runs >= 0 else None  # most jobs: one run, one record
    days = _days(runs)
    if not days:
        return None
    if records != (runs[0] if isinstance(runs, list) else 1):
        return days[-1]
    index = placed.get(job, 0)
    placed[job] = index + 1
    return days[index] if index < len(days) else None


def _one_more(runs: Union[int, list[int]], day: int) -> list[int]:
    """A job's runs (``_Batch.runs``) with one more, final on ``day`` (-1: not final)."""
    found = runs if isinstance(runs, list) else [1, *([runs] if runs >= 0 else [])]
    found[0] += 1
    if day >= 0:
        found.append(day)
    return found


def _days(runs: Union[int, list[int]]) -> list[int]:
    """The days of a job's final runs (``_Batch.runs``), in order."""
    if isinstance(runs, int):
        return [runs] if runs >= 0 else []
    return sorted(runs[1:])


def _write_manifest(store: Store, manifest: Manifest) -> None:
    body = {
        "version": VERSION,
        "key": manifest.key,
        "since": manifest.since,
        "until": manifest.until,
        "headers": list(manifest.headers),
        "segments": [[s.day, s.name] for s in manifest.segments],
    }
    write_atomically(store.fd, MANIFEST, json.dumps(body).encode("utf-8"), 0o600)


# The names the cache writes: a segment's files (``DAY-RANDOM.KIND``), their dotted temporary
# names, and write_atomically's ``.manifest.json.RANDOM.tmp``. Only these are ever removed, so a
# --cache pointed at a directory holding anything else (a state directory) loses nothing of it.
_OWN_NAME = re.compile(
    r"\.?[0-9]+-[0-9a-f]{12}\.(?:jobs|events|submit|names|scripts)|\.manifest\.json\.[0-9a-f]{16}\.tmp"
)


def _collect_garbage(store: Store, segments: tuple[Segment, ...]) -> None:
    """Remove the cache's own files the manifest does not name (replaced days, days before the window, leftovers)."""
    wanted = {MANIFEST, *(f"{s.name}.{kind}" for s in segments for kind in FILES)}
    for name in os.listdir(store.fd):
        if name not in wanted and _OWN_NAME.fullmatch(name):
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=store.fd)
