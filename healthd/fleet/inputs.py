"""What ``healthd fleet`` analyses: the files named on its command line, or Slurm's accounting read live.

Either way the result is one ``FleetInputs`` of line streams that ``analyze.analyze`` (and the
backtest) read once, the submit lines twice. Nothing holds the runs whole: a file is read
line by line, ``sacct --json`` a job at a time (``sacct_json.stream``), and ``--live``
streams sacct's output into files in a private temporary directory, which the analysis
then reads (``live.spool``). ``--cache`` keeps the final rows in per-day segment files and
streams them back with the new days' (``cache``).
"""

from __future__ import annotations

import contextlib
import datetime
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Callable, Iterable, Iterator, NamedTuple, Optional, Union

from healthd.fleet import cache, columnar, live, sacct_json
from healthd.fleet.analyze import FleetSettings, Sources
from healthd.fleet.sacct import FleetInputError, file_lines, text_of
from healthd.fleet.scripts import Blocks, batch_jobs
from healthd.text import records

LIVE_SOURCES = Sources("sacct", "sacctmgr show event", "sacct JobID,SubmitLine")


class FleetInputs(NamedTuple):
    """The arguments of ``analyze.analyze`` besides the settings, and what a progress bar needs of the jobs."""

    jobs: Iterable[str]
    events: Iterable[str]
    sources: Sources
    submit: Optional[Callable[[], Iterable[str]]]
    names: dict[str, str]  # JobID -> name, filled while ``jobs`` is read (sacct --json)
    scripts: Union[str, Blocks, None]  # sacct -B output (Blocks: --cache's, a lookup at a time)
    size: float = 0.0  # what the weights of ``jobs``' lines add up to (0: unknown)
    weight: Callable[[str], float] = lambda _: 1


class InputFiles(NamedTuple):
    """The files named on the command line (``-`` for standard input, jobs or events only)."""

    jobs: Path
    events: Path
    submit: Optional[Path] = None
    scripts: Optional[Path] = None
    engine: str = "auto"  # ENGINES


# "duckdb": the plain runs counted by DuckDB (``columnar``), an error without it; "auto": where
# it is installed and can read the file; "python": the Python reader alone.
ENGINES = ("auto", "duckdb", "python")


def _engine(path: Path, engine: str) -> bool:
    """Whether the jobs file at ``path`` is counted by DuckDB; FleetInputError when "duckdb" is asked and cannot be."""
    if engine == "python" or str(path) == "-":
        return False
    if engine == "duckdb" and not columnar.available():
        raise FleetInputError("--engine duckdb: DuckDB is not installed (pip install 'healthd[fleet]')")
    return columnar.available() and columnar.usable(path)


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[IO[str]]:
    if str(path) == "-":
        yield text_of(sys.stdin.buffer)
        return
    with text_of(path.open("rb")) as handle:
        yield handle


@contextlib.contextmanager
def files(given: InputFiles) -> Iterator[FleetInputs]:
    """The inputs of files: ``sacct -P`` or ``sacct --json`` jobs, both streamed; OSError when one cannot be read."""
    with _opened(given.jobs) as jobs, _opened(given.events) as events:
        first = jobs.read(1)
        rest = _chain(first, jobs)
        names: dict[str, str] = {}
        rows: Iterable[str] = rest
        size = _size(given.jobs)
        weight: Callable[[str], float] = len
        if first == "{":
            seen = sacct_json.Seen()
            names, rows, weight = seen.names, _json(rest, str(given.jobs), seen), _json_weight
        elif _engine(given.jobs, given.engine):
            rows, size = columnar.JobsFile(given.jobs), 0.0  # no bar: DuckDB reads it
        submit = given.submit
        yield FleetInputs(
            rows,
            events,
            Sources(str(given.jobs), str(given.events), str(submit)),
            None if submit is None else (lambda: file_lines(submit)),
            names,
            None if given.scripts is None else given.scripts.read_text(encoding="utf-8", errors="replace"),
            size,
            weight,
        )


def _json(chars: Iterator[str], source: str, seen: sacct_json.Seen) -> Iterator[str]:
    """The rows of a ``sacct --json`` document given as its lines (``sacct_json.stream``)."""
    try:
        yield from sacct_json.stream(_Lines(chars), source, seen)
    except ValueError as exc:
        raise FleetInputError(str(exc)) from None


def _json_weight(_: str) -> float:
    return 0.0  # rows are not the document's bytes: no bar


class _Lines:
    """Lines as a text stream's ``read``, for the JSON reader."""

    def __init__(self, source: Iterator[str]) -> None:
        self.source = source

    def read(self, size: int) -> str:
        wanted = size
        parts, got = [], 0
        for line in self.source:
            parts.append(line)
            got += len(line)
            if got >= wanted:
                break
        return "".join(parts)


def _chain(first: str, rest: IO[str]) -> Iterator[str]:
    """The lines of ``rest`` with the character read ahead of it put back."""
    found = iter(rest)
    head = next(found, "")
    yield first + head
    yield from found


def _size(path: Path) -> float:
    try:
        return float(path.stat().st_size) if str(path) != "-" else 0.0
    except OSError:
        return 0.0


class Live(NamedTuple):
    """How ``--live`` reads: Slurm's client settings, the command's deadline, and the cache file if any."""

    bin_dir: Optional[Path]
    conf: Optional[Path]
    timeout: float
    cache: Optional[Path] = None
    engine: str = "auto"  # ENGINES
    # Monotonic seconds by which every command of one read is done (``read_live`` sets it):
    # ``--timeout`` bounds the whole read, the day's scripts' lookups included.
    deadline: Optional[float] = None


@contextlib.contextmanager
def read_live(how: Live, settings: FleetSettings, now: float) -> Iterator[FleetInputs]:
    """The inputs of the window of ``settings`` read from Slurm, only the new days with a cache.

    Raises ``live.AccountingError``, and ``trust.UntrustedPath`` for a cache others could write.
    """
    assert settings.since is not None, "--live always has a window's start"
    window = (settings.since, settings.until if settings.until is not None else now)
    how = how._replace(deadline=time.monotonic() + how.timeout)
    with tempfile.TemporaryDirectory(prefix="healthd-fleet-") as directory, contextlib.ExitStack() as held:
        store = None if how.cache is None else _store(held, how.cache, f"{how.conf}|{how.bin_dir}")
        sealed = None if store is None else _sealed(how, store, window, Path(directory))
        if sealed is not None:
            yield FleetInputs(sealed.jobs, sealed.events, LIVE_SOURCES, sealed.submit, sealed.names, sealed.scripts)
            return
        found = _spool(how, window, Path(directory))
        scripts = _scripts(how, cache.submit_records(file_lines(found.submit_lines)))
        counted = _engine(found.jobs, how.engine)
        yield FleetInputs(
            columnar.JobsFile(found.jobs) if counted else file_lines(found.jobs), records(found.events),
            LIVE_SOURCES, lambda: file_lines(found.submit_lines), found.names, scripts,
            0.0 if counted else _size(found.jobs), len,
        )  # fmt: skip


def _spool(how: Live, window: tuple[float, float], directory: Path) -> live.Spooled:
    # sacct's window is in local time, as its output is (docs/fleet.md).
    since, until = (datetime.datetime.fromtimestamp(t) for t in window)
    return live.spool(how.bin_dir, (since, until), how.timeout, directory, conf=how.conf, deadline=how.deadline)


def _store(held: contextlib.ExitStack, path: Path, key: str) -> Optional[cache.Store]:
    """The cache directory, locked until the report is done; None (said) where it cannot be used."""
    try:
        store = held.enter_context(cache.opened(path, key))
    except cache.CacheError as exc:
        print(f"healthd fleet: {exc}; the report goes on without it", file=sys.stderr)
        return None
    if store.note:
        print(f"healthd fleet: {store.note}", file=sys.stderr)
    return store


def _sealed(how: Live, store: cache.Store, window: tuple[float, float], directory: Path) -> Optional[cache.Sealed]:
    """The window from the cache and the new days read (``cache.seal``); None when the cache cannot be written."""
    since, until = window
    key = f"{how.conf}|{how.bin_dir}"  # what identifies the query: a cache of another cluster is not used
    start = cache.read_from(store.manifest, window, key)
    while True:
        fresh = _fresh(how, _spool(how, (start, until), directory))
        try:
            return cache.seal(store, fresh, (since, start, until), key, directory)
        except cache.Reread:
            start = since
        except cache.CacheError as exc:
            print(f"healthd fleet: {exc}; the report goes on without it", file=sys.stderr)
            return None


def _fresh(how: Live, found: live.Spooled) -> cache.Fresh:
    """The spooled accounting as ``cache.seal`` takes it."""
    return cache.Fresh(
        file_lines(found.jobs),
        # On "\n" alone: a reason is text, and \r, \v or \f in it must not start a record.
        records(found.events),
        lambda: cache.submit_records(file_lines(found.submit_lines)),
        found.names,
        lambda jobs: live.batch_scripts(how.bin_dir, jobs, how.timeout, conf=how.conf, deadline=how.deadline),
    )


def _scripts(how: Live, submit_records: Iterable[str]) -> str:
    """The batch scripts of the window's batch jobs (``live.batch_scripts``), read without a cache."""
    jobs = batch_jobs(submit_records)
    return live.batch_scripts(how.bin_dir, jobs, how.timeout, conf=how.conf, deadline=how.deadline) if jobs else ""
