"""The progress bar (``healthd.fleet.progress``): drawn on a terminal only, and otherwise the input itself."""

from __future__ import annotations

import io
from pathlib import Path

from healthd.fleet.columnar import JobsFile
from healthd.fleet.progress import bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_without_a_terminal_the_jobs_file_itself_comes_back_for_duckdb_to_read(tmp_path: Path) -> None:
    """The analysis gives a ``JobsFile`` to DuckDB; a generator around it sent every run through Python."""
    jobs = JobsFile(tmp_path / "jobs.txt")
    assert bar(jobs, 100.0, "reading jobs", io.StringIO(), len) is jobs


def test_on_a_terminal_the_lines_pass_through_and_the_bar_is_cleared() -> None:
    stream = _Terminal()
    assert list(bar(["ab", "cd"], 4.0, "reading jobs", stream, len)) == ["ab", "cd"]
    assert "100%" in stream.getvalue() and stream.getvalue().endswith("\r")
