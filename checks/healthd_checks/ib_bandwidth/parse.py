"""Reads the result table that perftest's ``ib_write_bw --report_gbits`` prints (pure; raises only ``ValueError``).

The table is perftest's own (its README and every run pasted in its issues): a line of
column names, `` #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]``
(older releases without MsgRate), then one row per message size, between lines of dashes.
Around it perftest prints its settings, the queue pairs' addresses and warnings; none of
them has the columns' number of words with a whole byte count first, and a row that does
but holds no number where the average stands is garbled output, never a measurement.
Without ``--report_gbits`` the columns say ``[MB/sec]``: refused, not converted, since the
check asked for Gb/s and another unit means another program or options.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from healthd.text import one_line, records

from ..common.benchmark import bandwidth

_COLUMN = re.compile(r"#bytes|#iterations|BW peak\[[^\]]*\]|BW average\[[^\]]*\]|MsgRate\[[^\]]*\]|\S+")
AVERAGE = "BW average[Gb/sec]"
_WHOLE = re.compile(r"[0-9]{1,20}")


class WriteResult(NamedTuple):
    """One message size and the average bandwidth ib_write_bw measured for it, in Gb/s."""

    size: int
    gbps: float


def _columns(line: str, number: int) -> list[str]:
    columns = _COLUMN.findall(line.strip())
    if AVERAGE not in columns:
        averages = [name for name in columns if name.startswith("BW average")]
        said = one_line(averages[0], 30) if averages else "no BW average column"
        raise ValueError(f"line {number}: {said}, not {AVERAGE} (run with --report_gbits)")
    return columns


def parse_write_bw(text: str) -> tuple[WriteResult, ...]:
    """The rows of ``text``'s result table; ``ValueError`` naming the line when there is none to read."""
    columns: list[str] = []
    rows: list[WriteResult] = []
    for number, line in enumerate(records(text), start=1):
        words = line.split()
        if words[:1] == ["#bytes"]:
            if columns:
                raise ValueError(f"line {number}: a second result table")
            columns = _columns(line, number)
        elif columns and len(words) == len(columns) and _WHOLE.fullmatch(words[0]):
            average = bandwidth(words[columns.index(AVERAGE)], f"line {number}: {AVERAGE}")
            rows.append(WriteResult(int(words[0]), average))
    if not columns:
        raise ValueError("no result table ('#bytes  #iterations  BW peak ...'): the test did not run to its end")
    if not rows:
        raise ValueError("a result table without rows")
    return tuple(rows)
