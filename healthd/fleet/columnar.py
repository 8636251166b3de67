"""A ``sacct -P`` file's plain job runs counted by DuckDB (the ``fleet`` extra), the rest left to the Python reader.

The Python reader (``analyze._read_jobs``) costs tens of µs of CPU a run, most of it for
runs that only add to counters: a completed run adds its hours to its (GPUs, nodes) size,
its node and user to the single-node table, or its node list to the lists seen. DuckDB
reads the file in C and counts those *plain* runs; every other line (a failed run, which
needs attribution; a run of a job whose submit line excludes or pins nodes; a run not
started or still running; anything that does not read as plainly valid) is named by its
line number and read by the Python reader, the same code as without DuckDB. So the report
is the same one: the plain runs' conditions below accept only what the Python reader
accepts, and read it as it does (times through the same one ``mktime`` per distinct hour,
GPUs through the same ``tres_gpus`` per distinct AllocTRES).

A file is given to DuckDB only where its lines are the Python reader's lines
(``usable``): DuckDB's CSV reader also ends a line at a lone ``\\r`` (measured with 2.0),
where the Python reader ends one at ``\\n`` alone, so a file holding a ``\\r`` is read by
Python whole; so is one with a blank line (line numbers would drift) or one DuckDB cannot
read (any ``duckdb.Error``, invalid UTF-8 for one). The runs' time is summed in whole seconds
(exact in any order) and the per-node sums in sorted order, so the two agree to the bit.
"""

from __future__ import annotations

import contextlib
import datetime
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Optional, TypeVar

from healthd.fleet.hosts import MAYBE_OPTION
from healthd.fleet.sacct import JOB_ID, FileLines, FleetInputError, LocalTimes, SacctTable, tres_gpus

# A plain run's fields, as the Python reader would accept them without a second look.
_JOB_ID = "[0-9]+(_[0-9]+)?"
_NNODES = "[1-9][0-9]{0,8}"
_EPOCH = "@[0-9]{1,12}"
_MMSS = ":[0-5][0-9]:[0-5][0-9]"
# Fields as they are: no quoting, no escapes, "\x02" as the null text (an empty field is ''), short lines
# padded with NULL, long ones kept apart (the extra column), lines ending at "\n".
_CSV = (
    "delim='|', header=true, quote='', escape='', null_padding=true, strict_mode=false, nullstr=chr(2), "
    "new_line='\\n', auto_detect=false"
)
T = TypeVar("T")
# DuckDB may use this much memory before it spills to a temporary directory.
MEMORY_LIMIT = "2GB"
# The other lines are fetched this many at a time (``counting``).
_BATCH = 10_000
# The hours of a run's times looked up in DuckDB (``_days``): the days of the file's first and
# last lines, read from this many bytes at each end, this many days on each side, at most this many.
_SAMPLE = 1 << 20
_MARGIN = datetime.timedelta(days=45)
_MOST_DAYS = 4 * 366
_FIRST_DAY, _LAST_DAY = datetime.date(1970, 3, 1), datetime.date(2200, 1, 1)
_LINES: dict[tuple[object, ...], Optional[int]] = {}  # ``_lines``' last answers


class Counted(NamedTuple):
    """What DuckDB counted of the plain runs, and the line numbers of the others."""

    by_size: dict[tuple[int, int], tuple[int, float]]  # (GPUs, nodes) -> runs, seconds
    single: Iterable[tuple[str, str, str, int]]  # node, user, partition, runs (single-node runs), read once
    lists: list[tuple[str, str]]  # (partition, node list) of the multi-node runs, distinct
    first: Optional[float]
    last: Optional[float]
    records: int
    skipped: int  # plain runs that ended outside the window
    others: Iterable[tuple[int, str]]  # (number, line) of the lines for the Python reader, in order


class JobsFile(FileLines):
    """A ``sacct -P`` file that DuckDB may count: its lines for the Python reader, its path for DuckDB."""


class SubmitScan(NamedTuple):
    """What DuckDB found in a ``JobID|SubmitLine`` file (``submit_scan``)."""

    records: int  # every record of the file
    # (number, line) of the lines before the first record, and of every line of the records that
    # may ask for nodes: the Python reader reads these alone.
    lines: list[tuple[int, str]]
    per_job: dict[str, int]  # the records of each job that has one of those records


def _duckdb() -> Any:
    try:
        import duckdb  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return duckdb


def available() -> bool:
    """Whether DuckDB is installed (``pip install healthd[fleet]``)."""
    return _duckdb() is not None


def usable(path: Path) -> bool:
    """Whether DuckDB reads ``path``'s lines as the Python reader does: a regular file without "\r" or a blank line.

    Nor a byte 0x02: DuckDB reads a field of it alone as NULL (``nullstr``), so a line with one
    field too many, that field 0x02, would pass as a line of the right width.
    """
    return _lines(path) is not None


def _lines(path: Path) -> Optional[int]:
    """The number of lines of a usable file (``usable``), else None: one pass in 16 MiB reads, in C.

    Remembered for the file as it is (its inode, size and change time): the command line asks
    whether DuckDB may read the jobs, then DuckDB reads them, and a pass over a year of a
    large fleet's runs costs seconds.
    """
    try:
        if not path.is_file():
            return None
        seen = path.stat()
        key = (str(path), seen.st_dev, seen.st_ino, seen.st_size, seen.st_mtime_ns, seen.st_ctime_ns)
        if key not in _LINES:
            if len(_LINES) > 3:  # the few files of one command: the jobs, asked twice, and the submit lines
                _LINES.clear()
            _LINES[key] = _count_lines(path)
        return _LINES[key]
    except OSError:
        return None


def _count_lines(path: Path) -> Optional[int]:
    lines, last = 0, b"\n"  # a file starting with "\n" starts with a blank line
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(16 << 20), b""):
            if b"\r" in chunk or b"\x02" in chunk or b"\n\n" in chunk or (last == b"\n" and chunk[:1] == b"\n"):
                return None
            lines += len(chunk) - len(chunk.translate(None, b"\n"))  # twice as fast as count(), measured
            last = chunk[-1:]
    return None if not lines and last == b"\n" else lines + (last != b"\n")


def count(
    path: Path, table: SacctTable, window: tuple[Optional[float], Optional[float]], others: frozenset[str]
) -> Optional[Counted]:
    """``counting``'s counts with the other lines in a list, or None where DuckDB cannot read the file."""
    with counting(path, table, window, others) as found:
        return None if found is None else found._replace(others=list(found.others))


@contextlib.contextmanager
def counting(
    path: Path, table: SacctTable, window: tuple[Optional[float], Optional[float]], others: frozenset[str]
) -> Iterator[Optional[Counted]]:
    """The plain runs of ``path`` counted, or None where DuckDB cannot read it (the Python reader reads it all).

    ``table`` is the file's header as the Python reader opened it; ``others``: the jobs whose
    runs go to the Python reader whatever they are (their submit line excludes or pins nodes).
    The other lines stream from DuckDB while the block runs (``_BATCH`` at a time), never held
    whole; an error of DuckDB's then (a full disk for its spill) is raised.
    """
    duckdb = _duckdb()
    lines = _lines(path)
    if duckdb is None or lines is None:
        yield None
        return
    with _connected(duckdb) as db:
        try:
            found = _count(db, path, table, window, others, lines)
        except duckdb.Error:
            found = None
        yield found


def _count(
    db: Any,
    path: Path,
    table: SacctTable,
    window: tuple[Optional[float], Optional[float]],
    others: frozenset[str],
    lines: int,
    ends: bool = False,
) -> Optional[Counted]:
    _others(db, others)
    _table(db, "bad_tres", ("text VARCHAR",), [])
    _hours(db, path, table, window)
    _plain(db, path, table, window, ends)
    gpus = _gpus(db)
    if gpus is None:  # an AllocTRES the Python reader rejects: a second scan leaves its runs to it
        db.execute("DROP TABLE runs")
        _plain(db, path, table, window, ends)
        gpus = _gpus(db) or {}
    # Every line a row, or the line numbers would not be the Python reader's (a byte DuckDB reads otherwise).
    if db.execute("SELECT sum(runs) FROM runs").fetchone()[0] != lines - 1:
        return None
    by_size: dict[tuple[int, int], tuple[int, float]] = {}
    sizes = "SELECT tres, nnodes, sum(runs), sum(seconds) FROM runs WHERE kind = 1 GROUP BY ALL"
    for tres, nnodes, runs, seconds in db.execute(sizes).fetchall():
        key = (gpus[tres], int(nnodes))
        before = by_size.get(key, (0, 0.0))
        by_size[key] = (before[0] + int(runs), before[1] + float(seconds))  # whole seconds: exact in any order
    records, first, last = db.execute(
        "SELECT coalesce(sum(runs), 0), min(first), max(last) FROM runs WHERE kind = 1"
    ).fetchone()
    skipped = db.execute("SELECT coalesce(sum(runs), 0) FROM runs WHERE kind = 2").fetchone()[0]
    # In order: the Python reader's per-node rows are then sorted already but for its own few (``analyze._signals``).
    # Streamed too: at 100M runs this table is 22.7M rows, 6 GB as one fetched list (bench_fleet.py).
    single = _streamed(
        db.cursor(),
        "SELECT node_list, user, partition, sum(runs)::BIGINT FROM runs WHERE kind = 1 AND nnodes = 1 "
        "GROUP BY ALL ORDER BY ALL",
    )
    multi = db.execute("SELECT DISTINCT partition, node_list FROM runs WHERE kind = 1 AND nnodes > 1").fetchall()
    # The lines themselves, in order: the Python reader then never walks the file.
    other = (
        f"SELECT n, line FROM ({_whole_lines(path)}) "  # noqa: S608
        "WHERE n IN (SELECT other FROM runs WHERE kind = 0) ORDER BY n"
    )
    return Counted(by_size, single, multi, first, last, int(records), int(skipped), _streamed(db.cursor(), other))


def _streamed(db: Any, query: str) -> Iterator[Any]:
    """The rows of ``query``, ``_BATCH`` at a time.

    They are read while the analysis runs, past the point where the Python reader could still
    take the file over: a DuckDB error then (a full disk for its spill) is the report's error,
    naming the way around it, not a traceback.
    """
    error = _duckdb().Error
    try:
        result = db.execute(query)
        while True:
            rows = result.fetchmany(_BATCH)
            if not rows:
                return
            yield from rows
    except error as exc:
        raise FleetInputError(
            f"DuckDB failed while reading the jobs: {exc} (--engine python reads them alone)"
        ) from None


@contextlib.contextmanager
def _connected(duckdb: Any) -> Iterator[Any]:
    """A DuckDB connection of ``MEMORY_LIMIT`` that spills into a private temporary directory."""
    with duckdb.connect() as db, tempfile.TemporaryDirectory(prefix="healthd-fleet-duckdb-") as spill:
        db.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
        db.execute("SET temp_directory = ?", [spill])
        # DuckDB guesses a CSV file's rows at a few dozen, and would build its joins' hash tables of the
        # millions of lines instead of the small tables they look up (twice the CPU, measured).
        db.execute("SET disabled_optimizers = 'build_side_probe_side'")
        yield db


def submit_scan(path: Path, jobs: frozenset[str]) -> Optional[SubmitScan]:
    """The records of a ``JobID|SubmitLine`` file that may ask for nodes, or None where DuckDB cannot read it.

    A record is a line starting with a job id and the lines after it that do not
    (``submit._records_of``). It may ask for nodes where one of its lines holds a word that
    may start a node option (``hosts.MAYBE_OPTION``: a superset of what ``hosts.request``
    reads further), or where its job is one of ``jobs`` (a batch script asks for its nodes).
    Every other record asks for nothing, so only its count is needed.
    """

    def scanned(db: Any, lines: int) -> Optional[SubmitScan]:
        _marks(db, path)
        if db.execute("SELECT count(*) FROM marks").fetchone()[0] != lines - 1:
            return None
        return _scanned(db, path, jobs)

    return _with_duckdb(path, scanned)


def _with_duckdb(path: Path, work: Callable[[Any, int], Optional[T]]) -> Optional[T]:
    """``work(connection, the file's lines)`` for a usable file, or None: no DuckDB, a file it cannot read."""
    duckdb = _duckdb()
    lines = _lines(path)
    if duckdb is None or lines is None:
        return None
    try:
        with _connected(duckdb) as db:
            return work(db, lines)
    except duckdb.Error:
        return None


def _literal(path: Path) -> str:
    """``path`` as an SQL string, its quotes doubled: a view cannot take a prepared parameter."""
    return "'" + str(path).replace("'", "''") + "'"


def _whole_lines(path: Path) -> str:
    """A query of each data line of a usable file whole, as (``n``: its number in the file, ``line``)."""
    # One column: a usable file holds no byte 0x02, so no line is split. The null text may not be
    # the delimiter: a line that is "\x03" alone reads as NULL, and is put back.
    csv = _CSV.replace("delim='|'", "delim=chr(2)").replace("nullstr=chr(2)", "nullstr=chr(3)")
    source = f"read_csv({_literal(path)}, columns={{'line': 'VARCHAR'}}, {csv})"
    return f"SELECT row_number() OVER () + 1 AS n, coalesce(line, chr(3)) AS line FROM {source}"  # noqa: S608


def _marks(db: Any, path: Path) -> None:
    """Table ``marks``: each line's number, the job it starts (NULL for a line that starts none), whether it may
    name a node option, and its record: the last line at or before it that starts one (NULL before the first).

    One streaming scan: the window follows the file's order (no sort), and the lines are not kept.
    """
    db.execute(
        f"""CREATE TABLE marks AS SELECT n, job, hit,
            max(CASE WHEN job IS NOT NULL THEN n END) OVER (ROWS UNBOUNDED PRECEDING) AS record
        FROM (SELECT n, regexp_matches(line, '{MAYBE_OPTION}') AS hit,
            CASE WHEN contains(line, '|') AND regexp_full_match(split_part(line, '|', 1), '{JOB_ID.pattern}')
                THEN split_part(line, '|', 1) END AS job
            FROM ({_whole_lines(path)}))"""  # noqa: S608
    )


def _scanned(db: Any, path: Path, jobs: frozenset[str]) -> SubmitScan:
    _table(db, "wanted", ("job VARCHAR",), [(job,) for job in jobs])
    db.execute(
        "CREATE TABLE chosen AS SELECT DISTINCT record FROM marks WHERE hit AND record IS NOT NULL "
        "UNION SELECT n FROM marks SEMI JOIN wanted USING (job)"
    )
    records = db.execute("SELECT count(job) FROM marks").fetchone()[0]
    # The lines themselves, read again: a second scan costs less than keeping every line.
    lines = db.execute(
        f"SELECT n, line FROM ({_whole_lines(path)}) WHERE n IN "  # noqa: S608
        "(SELECT n FROM marks WHERE record IS NULL OR record IN (SELECT record FROM chosen)) ORDER BY n"
    ).fetchall()
    per_job = db.execute(
        "SELECT job, count(*) FROM marks WHERE job IN "
        "(SELECT m.job FROM marks m JOIN chosen c ON m.n = c.record) GROUP BY job"
    ).fetchall()
    return SubmitScan(int(records), lines, {job: int(runs) for job, runs in per_job})


def _column(table: SacctTable, name: str) -> str:
    return f"c{table.index(name)}"


def _fields(path: Path, table: SacctTable) -> str:
    """A query of the file's fields (``c0``..., every one text, one more to catch a line with too many) and ``n``.

    ``n``: the line's number in the file (the header is line 1, and a usable file has no blank
    line). ``row_number() OVER ()`` streams (DuckDB's streaming window): nothing is copied.
    """
    columns = {f"c{i}": "VARCHAR" for i in range(table.width + 1)}
    # quote and escape off, "\x02" as the null text: a field is its bytes, an empty one ''.
    source = f"read_csv({_literal(path)}, columns={columns}, {_CSV})"
    return f"SELECT row_number() OVER () + 1 AS n, * FROM {source}"  # noqa: S608


def _others(db: Any, others: frozenset[str]) -> None:
    """Table ``others``: the jobs whose runs all go to the Python reader."""
    _table(db, "others", ("job VARCHAR",), [(job,) for job in others])


def _table(db: Any, name: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    """Table ``name`` of ``rows``, given as one list per column (one statement, not one per row)."""
    names = [column.split()[0] for column in columns]
    db.execute(f"CREATE TABLE {name} ({', '.join(columns)})")
    if rows:
        lists = ", ".join(f"unnest(${i + 1}::{column.split()[1]}[])" for i, column in enumerate(columns))
        db.execute(f"INSERT INTO {name} ({', '.join(names)}) SELECT {lists}", [list(c) for c in zip(*rows)])


def _hours(db: Any, path: Path, table: SacctTable, window: tuple[Optional[float], Optional[float]]) -> None:
    """Table ``hours``: each hour's epoch, by ``LocalTimes``, as the Python reader reads it.

    The hours are those of the days around the file's first and last lines and the window
    (``_days``): one scan reads the file, so the hours cannot come from its distinct ones. A
    run at an hour not in the table is left to the Python reader, which reads any hour.
    """
    times = LocalTimes()
    hours = []
    for day in _days(path, table, window):
        for hour in range(24):
            text = f"{day.isoformat()}T{hour:02d}"
            base = times(f"{text}:00:00")
            if base is not None:
                hours.append((text, base))
    _table(db, "hours", ("hour VARCHAR", "base DOUBLE"), hours)


def _days(path: Path, table: SacctTable, window: tuple[Optional[float], Optional[float]]) -> Iterator[datetime.date]:
    """The days from ``_MARGIN`` before the earliest time of the file's first and last lines (and the window)
    to as long after the latest.

    sacct prints a window's runs in job order, which is submit order: its first and last
    lines bound nearly every run's times. At most ``_MOST_DAYS`` days, up to the latest.
    """
    days = [day for line in _ends(path) for day in _line_days(line, table)]
    days += [datetime.date.fromtimestamp(edge) for edge in window if edge is not None and 0 <= edge < 2**33]
    if not days:
        return
    first, last = min(days) - _MARGIN, max(days) + _MARGIN
    first = max(first, last - datetime.timedelta(days=_MOST_DAYS))  # the latest: a window ends now
    while first <= last:
        yield first
        first += datetime.timedelta(days=1)


def _ends(path: Path) -> list[str]:
    """The whole lines in the file's first and last ``_SAMPLE`` bytes."""
    with path.open("rb") as handle:
        head = handle.read(_SAMPLE)
        size = handle.seek(0, 2)
        handle.seek(max(size - _SAMPLE, len(head)))
        tail = handle.read()
    lines = head.split(b"\n")[1:-1] + tail.split(b"\n")[1:]
    return [line.decode(errors="replace") for line in lines]


def _line_days(line: str, table: SacctTable) -> Iterator[datetime.date]:
    fields = line.split("|")
    if len(fields) != table.width:
        return
    for name in ("Start", "End"):
        try:
            day = datetime.date.fromisoformat(fields[table.index(name)][:10])
        except ValueError:
            continue
        # A date near year 1 or 9999 would overflow the margin's arithmetic; its run is the
        # Python reader's like any other outside the hours looked up.
        if _FIRST_DAY <= day <= _LAST_DAY:
            yield day


def _plain(
    db: Any, path: Path, table: SacctTable, window: tuple[Optional[float], Optional[float]], ends: bool = False
) -> None:
    """Table ``runs``: one scan of the file, its lines grouped by what the report counts of them.

    Each line is read as the Python reader would read it: ``kind`` 1 for a plain run in the
    window, 2 for one outside it, 0 for any other line, which the Python reader reads (its
    number, ``other``, is its group). The plain runs are grouped by AllocTRES (read after,
    once per distinct one: ``_gpus``) and nodes, and those in the window also by partition
    and node list, and a single-node run by its user: the finest grouping each count needs,
    in one hash table (grouping sets would copy every row once per set). With ``ends`` (the
    backtest's, ``columnar_backtest``), a single-node run in the window is grouped by its end
    too, and each group keeps its first line (``line``).
    """
    c = {name: _column(table, name) for name in ("JobID", "User", "State", "Start", "End", "NNodes", "NodeList")}
    partition = table.optional("Partition")
    tres = _column(table, "AllocTRES")

    def epoch(column: str, alias: str) -> str:
        # "@EPOCH" is how sacct --json's times come (``sacct_json``), else local time: the hour's epoch and
        # MM:SS, read as ``sacct._MINUTES_SECONDS`` reads them.
        return (
            f"CASE WHEN starts_with({column}, '@') THEN CASE WHEN regexp_full_match({column}, '{_EPOCH}') "
            f"THEN CAST(substr({column}, 2) AS DOUBLE) END "
            f"WHEN regexp_full_match(substr({column}, 14), '{_MMSS}') "
            f"THEN {alias}.base + 60 * CAST(substr({column}, 15, 2) AS INTEGER) "
            f"+ CAST(substr({column}, 18, 2) AS INTEGER) END"
        )

    read = f"""SELECT n, {c["User"]} AS user, {f"c{partition}" if partition is not None else "''"} AS partition,
            {c["NodeList"]} AS node_list, {tres} AS tres,
            CASE WHEN regexp_full_match({c["NNodes"]}, '{_NNODES}') THEN CAST({c["NNodes"]} AS BIGINT) END AS nnodes,
            {epoch(c["Start"], "s")} AS start_at, {epoch(c["End"], "e")} AS end_at,
            c{table.width} IS NULL AND c{table.width - 1} IS NOT NULL
                AND regexp_full_match({c["JobID"]}, '{_JOB_ID}')
                AND NOT starts_with({c["State"]}, 'FAILED') AND NOT starts_with({c["State"]}, 'NODE_FAIL')
                AND {c["JobID"]} NOT IN (SELECT job FROM others) AND {tres} NOT IN (SELECT text FROM bad_tres)
                AS fine
        FROM ({_fields(path, table)}) l
        LEFT JOIN hours s ON s.hour = left({c["Start"]}, 13)
        LEFT JOIN hours e ON e.hour = left({c["End"]}, 13)"""  # noqa: S608
    keep = ", CASE WHEN kind = 1 AND nnodes = 1 THEN end_at END AS end_at, min(n) AS line" if ends else ""
    kind = """CASE WHEN NOT coalesce(fine AND nnodes IS NOT NULL AND start_at <= end_at, false) THEN 0
            WHEN coalesce(end_at < $since, false) OR coalesce(end_at > $until, false) THEN 2 ELSE 1 END"""
    db.execute(
        f"""CREATE TABLE runs AS
        WITH r AS ({read}), k AS (SELECT *, {kind} AS kind FROM r)
        SELECT kind, CASE WHEN kind > 0 THEN tres END AS tres, CASE WHEN kind > 0 THEN nnodes END AS nnodes,
            CASE WHEN kind = 0 THEN n END AS other,
            CASE WHEN kind = 1 THEN partition END AS partition, CASE WHEN kind = 1 THEN node_list END AS node_list,
            CASE WHEN kind = 1 AND nnodes = 1 THEN user END AS user,
            count(*) AS runs, sum(end_at - start_at) AS seconds, min(start_at) AS first, max(end_at) AS last{keep}
        FROM k GROUP BY ALL""",  # noqa: S608
        {"since": window[0], "until": window[1]},
    )


def _gpus(db: Any) -> Optional[dict[str, int]]:
    """Each plain run's AllocTRES read by ``tres_gpus``; None where one is not readable (put in ``bad_tres``)."""
    found, bad = {}, []
    query = "SELECT DISTINCT tres FROM runs WHERE kind > 0"
    for (text,) in db.execute(query).fetchall():
        try:
            found[text] = tres_gpus(text)
        except ValueError:
            bad.append((text,))
    if not bad:
        return found
    db.execute("INSERT INTO bad_tres SELECT unnest($1::VARCHAR[])", [[text for (text,) in bad]])
    return None
