"""Reads what nccl-tests' ``all_reduce_perf`` prints into frozen values (pure; raises only ``ValueError``).

The format is nccl-tests' own (its README, "Performance", and every run pasted in its issues):
a header of ``#`` lines, whose column line names the columns (``size count type redop root
time algbw busbw #wrong``, once out of place and once in place; releases before 2.13 say
``error`` for ``#wrong`` and have no ``root``), one row per message size, then
``# Out of bounds values : N OK|FAILED`` and ``# Avg bus bandwidth    : X``. NCCL's own INFO
and WARN lines and an MPI launcher's messages may come in between: a line is a row only
when it has the column line's number of words and a whole size and count, so no such line
is ever taken for one, and a row that fails in another column is garbled output, not noise.

``#wrong`` counts the elements a collective got wrong (nccl-tests checks every result
against the expected sum); ``N/A`` there means that run was not checked (an in-place
alltoall), which is data, not garble. The old ``error`` column holds the largest deviation
of a float sum, which rounding makes non-zero on healthy GPUs: only the out-of-bounds
count judges those releases.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from healthd.text import one_line, records

from ..common.benchmark import bandwidth

# The column line: "#       size         count      type   redop    root     time   algbw   busbw #wrong ...".
_COLUMNS = re.compile(r"#\s+size\s+count\s")
_AVERAGE = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(\S*)\s*")
_BOUNDS = re.compile(r"#\s*Out of bounds values\s*:\s*(\S+)\s+(OK|FAILED)\s*")
_WHOLE = re.compile(r"[0-9]{1,20}")
_NOT_CHECKED = "N/A"


class SizeResult(NamedTuple):
    """One message size: its bus bandwidth out of place and in place (GB/s) and the elements each got wrong."""

    size: int
    busbw: tuple[float, ...]
    wrong: tuple[Optional[int], ...]

    @property
    def wrong_total(self) -> int:
        return sum(count for count in self.wrong if count is not None)


class AllReduce(NamedTuple):
    """One run of ``all_reduce_perf``: its rows, the average bus bandwidth it printed, its out-of-bounds count."""

    rows: tuple[SizeResult, ...]
    avg_busbw: float
    out_of_bounds: int

    @property
    def wrong(self) -> int:
        """Elements reported wrong: the rows' ``#wrong``, or the out-of-bounds count where it says more."""
        return max(sum(row.wrong_total for row in self.rows), self.out_of_bounds)


def _wrong(text: str, where: str) -> Optional[int]:
    if text == _NOT_CHECKED:
        return None
    if not _WHOLE.fullmatch(text):
        raise ValueError(f"{where}: #wrong {one_line(text, 30)!r} is not a count")
    return int(text)


def _row(words: list[str], columns: list[str], number: int) -> SizeResult:
    where = f"line {number}"
    busbw = tuple(bandwidth(words[i], where) for i, name in enumerate(columns) if name == "busbw")
    wrong = tuple(_wrong(words[i], where) for i, name in enumerate(columns) if name == "#wrong")
    return SizeResult(int(words[0]), busbw, wrong)


def _is_row(words: list[str], columns: list[str]) -> bool:
    return len(words) == len(columns) and all(_WHOLE.fullmatch(word) for word in words[:2])


def parse_all_reduce(text: str) -> AllReduce:
    """The run ``text`` reports; ``ValueError`` naming the line when it is not all_reduce_perf's output."""
    columns: list[str] = []
    rows: list[SizeResult] = []
    averages: list[float] = []
    bounds: list[int] = []
    for number, line in enumerate(records(text), start=1):
        stripped = line.strip()
        if _COLUMNS.match(stripped):
            if columns:
                raise ValueError(f"line {number}: a second column line (more than one test in the output)")
            columns = stripped[1:].split()
            if "busbw" not in columns:
                raise ValueError(f"line {number}: the column line has no busbw column")
        elif found := _AVERAGE.fullmatch(stripped):
            averages.append(bandwidth(found.group(1), f"line {number}: Avg bus bandwidth"))
        elif found := _BOUNDS.fullmatch(stripped):
            if not _WHOLE.fullmatch(found.group(1)):
                raise ValueError(f"line {number}: out-of-bounds count {one_line(found.group(1), 30)!r} is not a count")
            bounds.append(int(found.group(1)))
        elif columns and not stripped.startswith("#") and _is_row(stripped.split(), columns):
            rows.append(_row(stripped.split(), columns, number))
    if not columns:
        raise ValueError("no column line ('#  size  count ...'): not all_reduce_perf's output")
    if not rows:
        raise ValueError("no result rows under the column line")
    for values, what in ((averages, "'# Avg bus bandwidth'"), (bounds, "'# Out of bounds values'")):
        if len(values) != 1:
            raise ValueError(f"{len(values)} {what} lines, not one: a run cut short, or more than one test")
    return AllReduce(tuple(rows), averages[0], bounds[0])
