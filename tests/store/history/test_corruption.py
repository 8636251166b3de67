"""A corrupt, foreign or planted database never stops a pass: it is set aside (or refused) and reported."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Callable

import pytest

from healthd.model import Finding, PassResult
from healthd.store.history import KEEP_CORRUPT, History
from healthd.store.historyreader import HistoryReader
from healthd.store.historyschema import DB_NAME, SCHEMA_VERSION, HistoryError, Kind

Make = Callable[..., PassResult]
Find = Callable[..., Finding]


def _filled(state_dir: Path, make_pass: Make, finding: Find, passes: int = 300) -> None:
    with History.open(state_dir) as history:
        for n in range(passes):
            mount = finding("mounts", "MOUNT_MISSING", f"/m{n % 7}", message="x" * 300)
            history.record_pass(make_pass(mount), at=float(n), boot_id="b1")
        assert history.maintain(float(passes)) is not None  # checkpoint: everything in the main file
    assert not (state_dir / f"{DB_NAME}-wal").exists() or (state_dir / f"{DB_NAME}-wal").stat().st_size == 0


def _corrupt_copies(state_dir: Path) -> list[Path]:
    return sorted(p for p in state_dir.iterdir() if ".corrupt-" in p.name and not p.name.endswith("-wal"))


def _assert_restarted(history: History, state_dir: Path, why: str) -> None:
    """A new, working database whose first event says why, and one UNKNOWN finding naming the copy."""
    assert history.usable
    found = history.problem_finding("healthd")
    assert found is not None and found.code == "HISTORY_PROBLEM"
    copy = _corrupt_copies(state_dir)[-1]
    assert f"corrupt history database {state_dir / DB_NAME}" in found.message
    assert f"moved to {copy}; started a new one" in found.message
    assert why in found.message
    reset = next(history.events())
    assert reset.kind is Kind.RESET and reset.details == {"corrupt_copy": str(copy)}


@pytest.mark.parametrize(
    "damage",
    [b"this is not a database at all\n" * 100, b"SQLite format 3\x00" + b"\xff" * 4000],
    ids=["garbage", "garbage-after-magic"],
)
def test_a_garbage_file_is_set_aside(state_dir: Path, damage: bytes, make_pass: Make, finding: Find) -> None:
    (state_dir / DB_NAME).write_bytes(damage)
    (state_dir / DB_NAME).chmod(0o600)
    with History.open(state_dir) as history:
        _assert_restarted(history, state_dir, "")
        assert history.record_pass(make_pass(finding("gpu", "GPU_MISSING", "gpus")), at=1, boot_id="b")
    assert _corrupt_copies(state_dir)[0].read_bytes() == damage  # kept as it was, for a post-mortem


def test_a_truncated_database_is_set_aside_when_its_pages_are_read(
    state_dir: Path, make_pass: Make, finding: Find
) -> None:
    _filled(state_dir, make_pass, finding)
    path = state_dir / DB_NAME
    os.truncate(path, path.stat().st_size // 3)
    with History.open(state_dir) as history:
        # The header and schema still read; the first write that touches a missing page finds it.
        history.record_pass(make_pass(finding("gpu", "GPU_MISSING", "gpus")), at=1000, boot_id="b")
        history.maintain(2000, force=True)
        _assert_restarted(history, state_dir, "malformed")
        # The pass that found it was recorded in the new database.
        assert [e.kind for e in history.events()] == [Kind.RESET, Kind.RAISED]


def test_garbage_pages_behind_a_valid_header_fail_quick_check(state_dir: Path, make_pass: Make, finding: Find) -> None:
    _filled(state_dir, make_pass, finding)
    path = state_dir / DB_NAME
    with sqlite3.connect(path) as conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'events'").fetchone()[0]
    conn.close()
    with open(path, "r+b") as handle:  # the events table's root page and the one after it: random bytes
        handle.seek((root - 1) * page_size)
        handle.write(os.urandom(2 * page_size))
    with History.open(state_dir) as history:
        assert history.usable and history.problems == []  # the header, the schema and the meta table read fine
        history.maintain(1e9)
        _assert_restarted(history, state_dir, "quick_check")


def test_the_wal_goes_with_its_database(state_dir: Path, make_pass: Make, finding: Find) -> None:
    _filled(state_dir, make_pass, finding)
    path = state_dir / DB_NAME
    with sqlite3.connect(path) as conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    with open(path, "r+b") as handle:
        handle.seek(10 * page_size)
        handle.write(os.urandom(20 * page_size))
    # `healthd history` has the database open, so the writer's close leaves the WAL in place:
    # left there, its frames would be read as part of the new database of the same name.
    reader = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    reader.execute("SELECT * FROM meta").fetchall()  # SQLite opens the file at the first read
    try:
        with History.open(state_dir) as history:
            history.record_pass(make_pass(finding("gpu", "GPU_MISSING", "gpus")), at=1e6, boot_id="b")
            history.maintain(2e6)
            _assert_restarted(history, state_dir, "")
            assert [e.kind for e in history.events()] == [Kind.RESET]
    finally:
        reader.close()
    copy = _corrupt_copies(state_dir)[-1]
    assert Path(f"{copy}-wal").exists()
    with HistoryReader.open_readonly(state_dir) as history:  # type: ignore[union-attr]
        assert [e.kind for e in history.events()] == [Kind.RESET]


def test_only_the_newest_corrupt_copies_are_kept(state_dir: Path) -> None:
    for n in range(KEEP_CORRUPT + 2):
        (state_dir / DB_NAME).write_bytes(b"garbage %d" % n * 500)
        History.open(state_dir).close()
    copies = _corrupt_copies(state_dir)
    assert len(copies) == KEEP_CORRUPT
    assert {c.read_bytes()[:9] for c in copies} == {b"garbage %d" % n for n in range(2, KEEP_CORRUPT + 2)}


def test_a_foreign_sqlite_database_is_set_aside(state_dir: Path) -> None:
    with sqlite3.connect(state_dir / DB_NAME) as conn:
        conn.execute("CREATE TABLE other (x)")
    conn.close()
    with History.open(state_dir) as history:
        _assert_restarted(history, state_dir, "not a healthd history: it has tables but no schema version")


def test_a_newer_schema_is_left_alone(state_dir: Path) -> None:
    History.open(state_dir).close()
    with sqlite3.connect(state_dir / DB_NAME) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with History.open(state_dir) as history:
        assert not history.usable
        assert history.record_boot(at=1, boot_id="b") is False
        assert history.problems == [
            f"cannot open the history {state_dir / DB_NAME}: schema version {SCHEMA_VERSION + 1} is newer than this "
            f"healthd's {SCHEMA_VERSION}; nothing is recorded this time"
        ]
    assert _corrupt_copies(state_dir) == []


def test_a_symlink_is_refused_and_its_target_untouched(tmp_path: Path, state_dir: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"precious")
    (state_dir / DB_NAME).symlink_to(target)
    with History.open(state_dir) as history:
        assert not history.usable
        assert history.problems == [
            f"cannot open the history {state_dir / DB_NAME}: refusing it: {state_dir / DB_NAME} is a symbolic link;"
            " nothing is recorded this time"
        ]
    assert target.read_bytes() == b"precious"
    assert sorted(p.name for p in state_dir.iterdir()) == [DB_NAME]
    with pytest.raises(HistoryError, match="is a symbolic link"):
        HistoryReader.open_readonly(state_dir)


def test_a_planted_wal_symlink_is_refused(tmp_path: Path, state_dir: Path) -> None:
    History.open(state_dir).close()
    target = tmp_path / "victim"
    target.write_bytes(b"precious")
    (state_dir / f"{DB_NAME}-wal").symlink_to(target)
    with History.open(state_dir) as history:
        assert not history.usable
        assert f"{state_dir / DB_NAME}-wal is a symbolic link" in history.problems[0]
    assert target.read_bytes() == b"precious"


def test_a_group_writable_database_is_refused(state_dir: Path) -> None:
    History.open(state_dir).close()
    (state_dir / DB_NAME).chmod(0o660)
    with History.open(state_dir) as history:
        assert not history.usable
        assert "is writable by group or others (mode -rw-rw----)" in history.problems[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_database_of_another_user_is_refused(state_dir: Path) -> None:
    History.open(state_dir).close()
    os.chown(state_dir / DB_NAME, 65534, 65534)
    with History.open(state_dir) as history:
        assert not history.usable
        assert "belongs to uid 65534, not root" in history.problems[0]
    with pytest.raises(HistoryError, match="belongs to uid 65534, not root"):
        HistoryReader.open_readonly(state_dir)


def test_a_reader_reports_corruption_and_leaves_the_file_alone(state_dir: Path) -> None:
    (state_dir / DB_NAME).write_bytes(b"garbage" * 1000)
    (state_dir / DB_NAME).chmod(0o600)
    with pytest.raises(HistoryError, match="the next pass sets it aside and starts a new one"):
        HistoryReader.open_readonly(state_dir)
    assert (state_dir / DB_NAME).read_bytes() == b"garbage" * 1000
    assert _corrupt_copies(state_dir) == []


def test_an_empty_or_missing_database_is_no_history(state_dir: Path) -> None:
    assert HistoryReader.open_readonly(state_dir) is None
    (state_dir / DB_NAME).touch(mode=0o600)
    assert HistoryReader.open_readonly(state_dir) is None
