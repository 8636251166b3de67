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

import tempfile
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional, TypeVar

from healthd.fleet.hosts import MAYBE_OPTION
from healthd.fleet.sacct import JOB_ID, FileLines, LocalTimes, SacctTable, tres_gpus

# A plain run's fields, as the Python reader would accept them without a second look.
_JOB_ID = "[0-9]+(_[0-9]+)?"
_NNODES = "[1-9][0-9]{0,8}"
_EPOCH = "@[0-9]{1,12}"
# Fields as they are: no quoting, no escapes, "\x02" as the null text (an empty field is ''), short lines
# padded with NULL, long ones kept apart (the extra column), lines ending at "\n".
_CSV = (
    "delim='|', header=true, quote='', escape='', null_padding=true, strict_mode=false, nullstr=chr(2), "
    "new_line='\\n', auto_detect=false"
)
_USED = ("JobID", "User", "State", "Start", "End", "NNodes", "NodeList", "AllocTRES")
T = TypeVar("T")
# DuckDB may use this much memory before it spills to a temporary directory.
MEMORY_LIMIT = "2GB"


class Counted(NamedTuple):
    """What DuckDB counted of the plain runs, and the line numbers of the others."""

    by_size: dict[tuple[int, int], tuple[int, float]]  # (GPUs, nodes) -> runs, seconds
    single: list[tuple[str, str, str, int]]  # node, user, partition, runs (single-node runs)
    lists: list[tuple[str, str]]  # (partition, node list) of the multi-node runs, distinct
    first: Optional[float]
    last: Optional[float]
    records: int
    skipped: int  # plain runs that ended outside the window
    others: list[tuple[int, str]]  # (number, line) of the lines for the Python reader, in order


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
    """The number of lines of a usable file (``usable``), else None: one pass in 16 MiB reads, in C."""
    try:
        if not path.is_file():
            return None
        lines, last = 0, b"\n"  # a file starting with "\n" starts with a blank line
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(16 << 20), b""):
                if b"\r" in chunk or b"\x02" in chunk or b"\n\n" in chunk or (last == b"\n" and chunk[:1] == b"\n"):
                    return None
                lines += chunk.count(b"\n")
                last = chunk[-1:]
    except OSError:
        return None
    return None if not lines and last == b"\n" else lines + (last != b"\n")


def count(
    path: Path, table: SacctTable, window: tuple[Optional[float], Optional[float]], others: frozenset[str]
) -> Optional[Counted]:
    """The plain runs of ``path`` counted, or None where DuckDB cannot read it (the Python reader reads it all).

    ``table`` is the file's header as the Python reader opened it; ``others``: the jobs whose
    runs go to the Python reader whatever they are (their submit line excludes or pins nodes).
    """

    def counted(db: Any, lines: int) -> Optional[Counted]:
        _load(db, path, table)
        # Every line a row, or the line numbers would not be the Python reader's (a byte DuckDB reads otherwise).
        if db.execute("SELECT count(*) FROM lines").fetchone()[0] != lines - 1:
            return None
        _others(db, others)
        return _counted(db, table, window, path)

    return _with_duckdb(path, counted)


def submit_scan(path: Path, jobs: frozenset[str]) -> Optional[SubmitScan]:
    """The records of a ``JobID|SubmitLine`` file that may ask for nodes, or None where DuckDB cannot read it.

    A record is a line starting with a job id and the lines after it that do not
    (``submit._records_of``). It may ask for nodes where one of its lines holds a word that
    may start a node option (``hosts.MAYBE_OPTION``: a superset of what ``hosts.request``
    reads further), or where its job is one of ``jobs`` (a batch script asks for its nodes).
    Every other record asks for nothing, so only its count is needed.
    """

    def scanned(db: Any, lines: int) -> Optional[SubmitScan]:
        db.execute(f"CREATE TABLE sub AS {_whole_lines(path)}")
        if db.execute("SELECT count(*) FROM sub").fetchone()[0] != lines - 1:
            return None
        return _scanned(db, jobs)

    return _with_duckdb(path, scanned)


def _with_duckdb(path: Path, work: Callable[[Any, int], Optional[T]]) -> Optional[T]:
    """``work(connection, the file's lines)`` for a usable file, or None: no DuckDB, a file it cannot read."""
    duckdb = _duckdb()
    lines = _lines(path)
    if duckdb is None or lines is None:
        return None
    try:
        with duckdb.connect() as db, tempfile.TemporaryDirectory(prefix="healthd-fleet-duckdb-") as spill:
            db.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
            db.execute("SET temp_directory = ?", [spill])
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


def _scanned(db: Any, jobs: frozenset[str]) -> SubmitScan:
    _table(db, "wanted", ("job VARCHAR",), [(job,) for job in jobs])
    # Each line's record: the last line at or before it that starts one (NULL before the first).
    db.execute(
        f"""CREATE TABLE marks AS SELECT n, job, hit,
            max(CASE WHEN job IS NOT NULL THEN n END) OVER (ORDER BY n ROWS UNBOUNDED PRECEDING) AS record
        FROM (SELECT n, regexp_matches(line, '{MAYBE_OPTION}') AS hit,
            CASE WHEN contains(line, '|') AND regexp_full_match(split_part(line, '|', 1), '{JOB_ID.pattern}')
                THEN split_part(line, '|', 1) END AS job
            FROM sub)"""  # noqa: S608
    )
    db.execute(
        "CREATE TABLE chosen AS SELECT DISTINCT record FROM marks WHERE hit AND record IS NOT NULL "
        "UNION SELECT n FROM marks SEMI JOIN wanted USING (job)"
    )
    records = db.execute("SELECT count(job) FROM marks").fetchone()[0]
    lines = db.execute(
        "SELECT n, line FROM sub JOIN marks USING (n) "
        "WHERE record IS NULL OR record IN (SELECT record FROM chosen) ORDER BY n"
    ).fetchall()
    per_job = db.execute(
        "SELECT job, count(*) FROM marks WHERE job IN "
        "(SELECT m.job FROM marks m JOIN chosen c ON m.n = c.record) GROUP BY job"
    ).fetchall()
    return SubmitScan(int(records), lines, {job: int(runs) for job, runs in per_job})


def _column(table: SacctTable, name: str) -> str:
    return f"c{table.index(name)}"


def _load(db: Any, path: Path, table: SacctTable) -> None:
    """The file as view ``lines``: every field text, one more column to catch a line with too many, and its number."""
    columns = {f"c{i}": "VARCHAR" for i in range(table.width + 1)}
    # quote and escape off, "\x02" as the null text: a field is its bytes, an empty one ''.
    db.execute(f"CREATE VIEW raw AS SELECT * FROM read_csv({_literal(path)}, columns={columns}, {_CSV})")  # noqa: S608
    # Data line n is line n + 1 of the file: the header is line 1, and a usable file has no blank line.
    wanted = sorted({table.index(name) for name in _USED} | {table.width - 1, table.width} | _partition(table))
    kept = ", ".join(f"c{i}" for i in wanted)
    db.execute(f"CREATE TABLE lines AS SELECT row_number() OVER () + 1 AS line, {kept} FROM raw")  # noqa: S608


def _partition(table: SacctTable) -> set[int]:
    found = table.optional("Partition")
    return set() if found is None else {found}


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


def _hours(db: Any, table: SacctTable) -> None:
    """Tables ``hours`` (the epoch of each distinct hour, by ``LocalTimes``) and ``tres`` (GPUs, by ``tres_gpus``)."""
    start, end, tres = _column(table, "Start"), _column(table, "End"), _column(table, "AllocTRES")
    times = LocalTimes()
    hours = []
    query = f"SELECT DISTINCT left({start}, 13) FROM lines UNION SELECT DISTINCT left({end}, 13) FROM lines"  # noqa: S608
    for (hour,) in db.execute(query).fetchall():
        try:
            base = times(f"{hour}:00:00") if hour is not None and len(hour) == 13 else None
        except ValueError:
            continue
        if base is not None:
            hours.append((hour, base))
    _table(db, "hours", ("hour VARCHAR", "base DOUBLE"), hours)
    gpus = []
    for (text,) in db.execute(f"SELECT DISTINCT {tres} FROM lines WHERE {tres} IS NOT NULL").fetchall():  # noqa: S608
        try:
            gpus.append((text, tres_gpus(text)))
        except ValueError:
            continue
    _table(db, "tres", ("text VARCHAR", "gpus BIGINT"), gpus)
    # Minutes and seconds as the Python reader reads them (``sacct._MINUTES_SECONDS``).
    db.execute(
        "CREATE TABLE mmss AS SELECT printf('%02d:%02d', m, s) AS text, 60 * m + s AS seconds "
        "FROM range(60) a(m), range(60) b(s)"
    )


def _plain(db: Any, table: SacctTable) -> None:
    """View ``plain``: the runs the Python reader would read without a second look, with their times and GPUs."""
    _hours(db, table)
    c = {name: _column(table, name) for name in ("JobID", "User", "State", "Start", "End", "NNodes", "NodeList")}
    partition = table.optional("Partition")
    tres = _column(table, "AllocTRES")

    def epoch(column: str, alias: str) -> str:
        # "@EPOCH" is how sacct --json's times come (``sacct_json``), else local time: the hour's epoch and MM:SS.
        return (
            f"CASE WHEN starts_with({column}, '@') THEN CASE WHEN regexp_full_match({column}, '{_EPOCH}') "
            f"THEN CAST(substr({column}, 2) AS DOUBLE) END "
            f"WHEN length({column}) = 19 AND substr({column}, 14, 1) = ':' THEN {alias}.base + {alias}m.seconds END"
        )

    db.execute(
        f"""CREATE TABLE plain AS SELECT * FROM (
            SELECT l.line, {c["User"]} AS user, {f"c{partition}" if partition is not None else "''"} AS partition,
                {c["NodeList"]} AS node_list, CAST({c["NNodes"]} AS BIGINT) AS nnodes, t.gpus,
                {epoch(c["Start"], "s")} AS start_at, {epoch(c["End"], "e")} AS end_at
            FROM lines l
            LEFT JOIN hours s ON s.hour = left({c["Start"]}, 13)
            LEFT JOIN mmss sm ON sm.text = substr({c["Start"]}, 15, 5)
            LEFT JOIN hours e ON e.hour = left({c["End"]}, 13)
            LEFT JOIN mmss em ON em.text = substr({c["End"]}, 15, 5)
            JOIN tres t ON t.text = {tres}
            ANTI JOIN others o ON o.job = {c["JobID"]}
            WHERE c{table.width} IS NULL AND c{table.width - 1} IS NOT NULL
                AND regexp_full_match({c["JobID"]}, '{_JOB_ID}')
                AND NOT starts_with({c["State"]}, 'FAILED') AND NOT starts_with({c["State"]}, 'NODE_FAIL')
                AND regexp_full_match({c["NNodes"]}, '{_NNODES}')
        ) WHERE start_at IS NOT NULL AND end_at IS NOT NULL AND start_at <= end_at"""  # noqa: S608
    )


def _counted(db: Any, table: SacctTable, window: tuple[Optional[float], Optional[float]], path: Path) -> Counted:
    _plain(db, table)
    since, until = window
    db.execute(
        "CREATE TABLE counted AS SELECT * FROM plain "
        "WHERE NOT (coalesce(end_at < ?, false) OR coalesce(end_at > ?, false))",
        [since, until],
    )
    skipped = (
        db.execute("SELECT count(*) FROM plain").fetchone()[0]
        - db.execute("SELECT count(*) FROM counted").fetchone()[0]
    )
    by_size = {
        (int(gpus), int(nnodes)): (int(runs), float(hours))
        for gpus, nnodes, runs, hours in db.execute(
            "SELECT gpus, nnodes, count(*), sum(end_at - start_at) FROM counted GROUP BY gpus, nnodes"
        ).fetchall()
    }
    single = db.execute(
        "SELECT node_list, user, partition, count(*) FROM counted WHERE nnodes = 1 GROUP BY ALL"
    ).fetchall()
    lists = db.execute("SELECT DISTINCT partition, node_list FROM counted WHERE nnodes > 1").fetchall()
    records, first, last = db.execute("SELECT count(*), min(start_at), max(end_at) FROM counted").fetchone()
    # The lines themselves: the Python reader then never walks the file.
    others = db.execute(
        f"SELECT n, line FROM ({_whole_lines(path)}) "  # noqa: S608
        "WHERE n IN (SELECT line FROM lines ANTI JOIN plain USING (line)) ORDER BY n"
    ).fetchall()
    return Counted(by_size, single, lists, first, last, int(records), int(skipped), others)
