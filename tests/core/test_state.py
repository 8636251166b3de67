from __future__ import annotations

import os
from pathlib import Path

import pytest

from healthd.state import KEEP_CORRUPT, StateDir, StateError, StateFile


def test_round_trip_and_atomic_replace(tmp_path: Path) -> None:
    state = StateFile(tmp_path / "s", "x")
    assert state.load() == {}
    state.save({"a": 1})
    state.save({"a": 2})
    assert state.load() == {"a": 2}
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["x.json"]


def test_corrupt_file_is_set_aside_and_reported(tmp_path: Path) -> None:
    directory = StateDir(tmp_path)
    (tmp_path / "x.json").write_text("{not json")
    assert directory.file("x").load() == {}
    (problem,) = directory.drain_problems()
    assert "corrupt state file" in problem and str(tmp_path / "x.json") in problem
    assert len(list(tmp_path.glob("x.json.corrupt-*"))) == 1
    assert directory.drain_problems() == []


def test_non_object_document_is_corrupt(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("[1, 2]")
    state = StateFile(tmp_path, "x")
    assert state.load() == {} and "top level is not an object" in state.problems[0]


def test_unwritable_directory_names_the_file(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    state = StateFile(blocker / "sub", "x")
    with pytest.raises(StateError, match=rf"cannot write {blocker / 'sub' / 'x.json'}"):
        state.save({"a": 1})


def test_only_the_newest_corrupt_copies_are_kept(tmp_path: Path) -> None:
    for stamp in range(5):
        old = tmp_path / f"x.json.corrupt-{stamp}"
        old.write_text("old")
        os.utime(old, (stamp, stamp))
    (tmp_path / "x.json").write_text("{not json")
    StateFile(tmp_path, "x").load()
    left = sorted(p.name for p in tmp_path.glob("x.json.corrupt-*"))
    assert len(left) == KEEP_CORRUPT
    assert "x.json.corrupt-0" not in left and "x.json.corrupt-1" not in left
