"""The backtest's plain runs counted by DuckDB, and tallied by step, instead of replayed one by one in Python.

The replay (``healthd.fleet.backtest``) needs of a run that did not fail, whose job neither
excludes nor pins nodes, and that is not large, only one thing: for a single-node run, its
(node, user, partition) key and the step its end falls in. So, where DuckDB reads the jobs
file, the connection stays open for the whole backtest (``Session``): the report's own
count (``columnar``) counts the plain runs, with every job that has a large run (at least
``min_gpus`` GPUs) among those handed to the Python reader, which the replay sees run by run
as before (failed runs, large runs, runs of the jobs that excluded nodes). Once the window
is known, DuckDB tallies the plain single-node runs per (step, key), and the replay adds
one step's tallies at a time: Python holds the keys and the runs that need it, never every run.

The keys keep the Python reader's order within a node (the first line each key was seen
on): the replay sums each node's failure expectation over its keys in that order, so the
sums are the same to the bit as a replay of every run.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Iterator, Optional

from healthd.fleet.columnar import (
    Counted,
    _column,
    _connected,
    _count,
    _duckdb,
    _fields,
    _lines,
)
from healthd.fleet.sacct import FleetInputError, SacctTable, tres_gpus

Key = tuple[str, str, str]  # node, user, partition


PlainKey = tuple[str, str, str, int]  # node, user, partition, and the line of the key's first plain run


class Session:
    """One DuckDB connection for one backtest: ``count`` as the report's, ``keys`` and ``step`` after it.

    Use as a context manager; without DuckDB ``count`` returns None and the replay sees every run.
    """

    def __init__(self, min_gpus: int) -> None:
        self.min_gpus = min_gpus
        self.db: Any = None
        self.error: Any = None  # duckdb.Error, when DuckDB is there
        self.counted = False  # whether ``count`` counted: the plain runs' tallies are in DuckDB
        self._stack = ExitStack()

    def __enter__(self) -> Session:
        return self

    def _connect(self) -> bool:
        """Whether DuckDB is installed; connected as the report's count connects (``columnar._connected``)."""
        duckdb = _duckdb()
        if duckdb is None:
            return False
        self.error = duckdb.Error
        self.db = self._stack.enter_context(_connected(duckdb))
        return True

    def __exit__(
        self, kind: Optional[type[BaseException]], exc: Optional[BaseException], trace: Optional[TracebackType]
    ) -> None:
        self._stack.close()

    def count(
        self, path: Path, table: SacctTable, window: tuple[Optional[float], Optional[float]], others: frozenset[str]
    ) -> Optional[Counted]:
        """``columnar.count`` with the jobs of large runs among ``others``; None where DuckDB cannot read ``path``."""
        lines = _lines(path)
        if lines is None or not self._connect():
            return None
        try:
            counted = _count(self.db, path, table, window, others | self._large_jobs(path, table), lines, ends=True)
            if counted is None:
                return None
            # What the replay needs of the plain single-node runs: their keys, ends and first lines.
            self.db.execute(
                "CREATE TABLE bt_runs AS SELECT node_list, user, partition, end_at, line, runs FROM runs "
                "WHERE kind = 1 AND nnodes = 1"
            )
        except self.error:
            return None
        self.counted = True
        return counted

    def _large_jobs(self, path: Path, table: SacctTable) -> frozenset[str]:
        """The jobs with a run of at least ``min_gpus`` GPUs: the replay scores each of their runs."""
        tres, job_id, fields = _column(table, "AllocTRES"), _column(table, "JobID"), _fields(path, table)
        large = []
        query = f"SELECT DISTINCT {tres} FROM ({fields}) WHERE {tres} IS NOT NULL"  # noqa: S608
        for (text,) in self.db.execute(query).fetchall():
            try:
                if tres_gpus(text) >= self.min_gpus:
                    large.append(text)
            except ValueError:
                continue
        if not large:
            return frozenset()
        found = self.db.execute(
            f"SELECT DISTINCT {job_id} FROM ({fields}) WHERE {tres} IN (SELECT unnest(?::VARCHAR[]))",  # noqa: S608
            [large],
        ).fetchall()
        return frozenset(job for (job,) in found if job is not None)

    @contextmanager
    def _failing(self) -> Iterator[None]:
        """A DuckDB error after the count (a full spill disk): the report's error, naming the way around it."""
        try:
            yield
        except self.error as exc:
            raise FleetInputError(
                f"DuckDB failed in the backtest's replay: {exc} (--engine python reads every run)"
            ) from exc

    def plain_keys(self) -> list[PlainKey]:
        """The keys of the plain single-node runs and the first line of each, numbered in this order for ``step``."""
        with self._failing():
            return self._plain_keys()

    def _plain_keys(self) -> list[PlainKey]:
        self.db.execute(
            "CREATE TABLE bt_keys AS SELECT row_number() OVER (ORDER BY first) - 1 AS kid, * FROM "
            "(SELECT node_list, user, partition, min(line) AS first FROM bt_runs GROUP BY ALL)"
        )
        self.db.execute("DROP TABLE runs")  # the report has read its other lines by now
        query = self.db.execute("SELECT node_list, user, partition, first FROM bt_keys ORDER BY kid")
        # One copy of each name: DuckDB gives each row's names as new strings, and a year has millions of keys.
        names: dict[str, str] = {}
        found: list[PlainKey] = []
        while True:
            rows = query.fetchmany(65536)
            if not rows:
                return found
            keep = names.setdefault
            found.extend(
                (keep(node, node), keep(user, user), keep(part, part), first) for node, user, part, first in rows
            )

    def tally(self, start: float, every: float, steps: int) -> None:
        """Table ``bt_steps``: the plain single-node runs per (step, key) for the steps the replay takes."""
        # The step as Python's float floor division reads it (CPython's float_floor_div, for
        # x >= 0 and every > 0: the exact multiple, then floor, rounded up past one half), so a
        # run falls in the same step as it would in the replay of every run.
        x = "(end_at - $start)"
        div = f"(({x} - fmod({x}, $every)) / $every)"
        step = f"CAST(floor({div}) + CASE WHEN {div} - floor({div}) > 0.5 THEN 1 ELSE 0 END AS BIGINT)"
        with self._failing():
            self.db.execute(
                f"CREATE TABLE bt_steps AS SELECT step, kid, sum(runs)::BIGINT AS runs FROM "  # noqa: S608
                f"(SELECT {step} AS step, node_list, user, partition, runs FROM bt_runs) "
                "JOIN bt_keys USING (node_list, user, partition) WHERE step < $steps GROUP BY step, kid ORDER BY step",
                {"start": start, "every": every, "steps": steps},
            )
            self.db.execute("DROP TABLE bt_runs")

    def step(self, step: int) -> Iterator[tuple[int, int]]:
        """(key number, runs) of the plain single-node runs that ended in ``step`` (``tally``)."""
        with self._failing():
            query = self.db.execute("SELECT kid, runs FROM bt_steps WHERE step = ?", [step])
            while True:
                rows = query.fetchmany(65536)
                if not rows:
                    return
                yield from rows
