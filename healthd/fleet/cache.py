"""``--cache FILE``: what ``--live`` read before, so that a daily report reads only the new days.

The file holds the rows of the last read (the job runs as the ``-P`` table the analysis
reads, the node events, the submit-line records, the job names) and the window they
cover, with what identifies the query (the Slurm config, the jobs table's header). A
later read whose window starts inside the cached one asks Slurm only from an hour
before the cached end (``OVERLAP``: slurmdbd records a run or an event when it ends,
and may record it a little late), and merges:

- a cached run that ended before that time is kept; every other one (still running,
  or ended after it) comes again from the new query, which lists every run that was
  running or ended in its window (sacct(1), ``-S``), and replaces it. Runs are matched
  by (JobID, Start): each run of a requeued job (``-D``) has its own start;
- the same for the events, matched by (node, start, reason), by their end;
- the submit-line records of a job in the new query replace the cached ones of that
  job (a job's records are counted against its runs, ``healthd.fleet.submit``).

Rows that ended before the new window's start are dropped when the file is written,
so it holds one window, not all history. The file is state: it is read only when it
and every directory above it pass ``healthd.store.trust``'s rule (root's or ours, not
writable by others), since a forged cache is forged accounting; it is written
atomically, mode 0600. A file that is not a cache of this version, or of another
query, is not used (the whole window is read again) and is replaced.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from healthd.fleet.sacct import LocalTimes, is_job_id

VERSION = 1
OVERLAP = 3600.0


@dataclass(frozen=True)
class Cached:
    """One window of accounting as rows: ``jobs`` and ``events`` with their header first."""

    key: str
    since: float
    until: float
    jobs: tuple[str, ...]
    events: tuple[str, ...]
    submit: tuple[str, ...]  # the submit lines' header, then one record per entry (it may hold newlines)
    names: dict[str, str] = field(default_factory=dict)


class CacheError(Exception):
    """The cache file cannot be written."""


def load(path: Path, key: str) -> Optional[Cached]:
    """The cache in ``path`` when it is one of this query (``UntrustedPath`` if others could have written it)."""
    from healthd.store.trust import trusted_stat

    if not path.exists():
        return None
    trusted_stat(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        if document.get("version") != VERSION or document.get("key") != key:
            return None
        return Cached(
            key,
            float(document["since"]),
            float(document["until"]),
            tuple(document["jobs"]),
            tuple(document["events"]),
            tuple(document["submit"]),
            {str(k): str(v) for k, v in document["names"].items()},
        )
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        return None  # not a cache healthd wrote: read the whole window again


def save(path: Path, cached: Cached) -> None:
    """Write ``cached`` atomically, mode 0600, into a directory that passes the trust rule."""
    from healthd.store.atomicfile import write_atomically
    from healthd.store.trust import UntrustedPath, open_trusted_dir

    body = {
        "version": VERSION,
        "key": cached.key,
        "since": cached.since,
        "until": cached.until,
        "jobs": list(cached.jobs),
        "events": list(cached.events),
        "submit": list(cached.submit),
        "names": cached.names,
    }
    try:
        fd = open_trusted_dir(path.parent)
    except (UntrustedPath, OSError) as exc:
        raise CacheError(f"cannot write the cache {path}: {exc}") from None
    try:
        write_atomically(fd, path.name, json.dumps(body).encode("utf-8"), 0o600)
    except OSError as exc:
        raise CacheError(f"cannot write the cache {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_from(cached: Optional[Cached], since: float, key: str) -> float:
    """Where the query must start: the cached end less ``OVERLAP``, or ``since`` when the cache does not cover it."""
    if cached is None or cached.key != key or since < cached.since or since >= cached.until:
        return since
    return max(since, cached.until - OVERLAP)


def _column(header: str, name: str) -> int:
    return [c.strip().lower() for c in header.split("|")].index(name.lower())


def _ended(rows: Iterable[str], header: str, key_columns: tuple[str, ...], end: str) -> dict[tuple[str, ...], Any]:
    """Rows by their key, with their end (epoch seconds, None while running or unreadable)."""
    keys = [_column(header, c) for c in key_columns]
    i_end = _column(header, end)
    times = LocalTimes()
    found: dict[tuple[str, ...], Any] = {}
    for row in rows:
        fields = row.split("|")
        if len(fields) <= max(*keys, i_end):
            continue
        try:
            ended = times(fields[i_end])
        except ValueError:
            ended = None
        found[tuple(fields[k] for k in keys)] = (row, ended)
    return found


def _merge_rows(
    old: tuple[str, ...], new: list[str], columns: tuple[tuple[str, ...], str], cut: float, keep_from: float
) -> tuple[str, ...]:
    """The header, then the old rows that ended before ``cut`` (and after ``keep_from``), then the new ones."""
    header = new[0]
    key_columns, end = columns
    fresh = _ended(new[1:], header, key_columns, end)
    kept = [
        row
        for key, (row, ended) in _ended(old[1:], header, key_columns, end).items()
        if ended is not None and keep_from <= ended < cut and key not in fresh
    ]
    return (header, *kept, *(row for row, _ in fresh.values()))


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


def _kept_records(cached: Cached, fresh: Cached, jobs: tuple[str, ...]) -> list[str]:
    """The cached submit-line records that stand for the cached runs kept, one per run.

    The reader believes a job's exclusion only when its records number its runs
    (``healthd.fleet.submit``). A job whose runs are all new has its records from the
    new read. One with runs on both sides keeps as many cached records as it kept runs,
    when they are all alike (which of them then does not matter); when they differ (one
    may be forged) all are kept, so that the count does not match and none is believed.
    """
    fresh_jobs = {record.split("|", 1)[0] for record in fresh.submit[1:]}
    kept_runs: dict[str, int] = {}
    for row in jobs[1:]:
        job = row.split("|", 1)[0]
        kept_runs[job] = kept_runs.get(job, 0) + 1
    for record in fresh.submit[1:]:  # the runs of the new read are not the cache's
        job = record.split("|", 1)[0]
        kept_runs[job] = kept_runs.get(job, 0) - 1
    by_job: dict[str, list[str]] = {}
    for record in cached.submit[1:]:
        by_job.setdefault(record.split("|", 1)[0], []).append(record)
    kept: list[str] = []
    for job, records in by_job.items():
        wanted = kept_runs.get(job, 0)
        if job not in fresh_jobs:
            kept.extend(records if wanted > 0 else ())
        elif wanted > 0:
            kept.extend(records[:wanted] if len(set(records)) == 1 else records)
    return kept


def merge(cached: Optional[Cached], fresh: Cached, since: float) -> Cached:
    """``fresh`` (read from ``read_from``) completed with what ``cached`` holds before it."""
    if cached is None or cached.key != fresh.key or fresh.since > cached.until or since < cached.since:
        return fresh
    if cached.jobs[:1] != fresh.jobs[:1] or cached.events[:1] != fresh.events[:1]:
        return fresh  # another table: nothing to merge with
    cut = fresh.since
    jobs = _merge_rows(cached.jobs, list(fresh.jobs), (("JobID", "Start"), "End"), cut, since)
    # An event that ended a day before the window can no longer be a cause of a run in it.
    events_from = since - 86400
    events = _merge_rows(
        cached.events, list(fresh.events), (("NodeName", "TimeStart", "Reason"), "TimeEnd"), cut, events_from
    )
    runs = {row.split("|", 1)[0] for row in jobs[1:]}
    submit = (fresh.submit[0], *_kept_records(cached, fresh, jobs), *fresh.submit[1:])
    names = {job: name for job, name in {**cached.names, **fresh.names}.items() if job in runs}
    return Cached(fresh.key, since, fresh.until, jobs, events, submit, names)
