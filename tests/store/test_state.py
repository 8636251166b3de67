from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from healthd.store.lock import StateLock
from healthd.store.state import KEEP_CORRUPT, StateDir, StateError, StateFile
from healthd.store.trust import UntrustedPath


def test_round_trip_and_atomic_replace(tmp_path: Path) -> None:
    state = StateFile(tmp_path / "s", "x")
    assert state.load() == {}
    state.save({"a": 1})
    state.save({"a": 2})
    assert state.load() == {"a": 2}
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["x.json"]


def test_read_returns_the_problems_it_met_and_collects_none(tmp_path: Path) -> None:
    directory = StateDir(tmp_path)
    (tmp_path / "x.json").write_text("[1]")
    document, (problem,) = directory.file("x").read()
    assert document == {} and problem.startswith(f"corrupt state file {tmp_path / 'x.json'} (top level is not")
    assert directory.drain_problems() == [], "only a check's load leaves problems for the framework"
    assert directory.file("x").read() == ({}, ()), "set aside once: the next read finds no file"


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


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    return directory


def test_a_state_file_planted_as_a_link_is_refused_and_never_followed(state_dir: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.json"
    victim.write_text('{"secret": 1}')
    (state_dir / "x.json").symlink_to(victim)
    state = StateFile(state_dir, "x")
    with pytest.raises(UntrustedPath, match=f"{state_dir / 'x.json'} is a symbolic link"):
        state.load()
    state.save({"a": 1})  # a write replaces the link itself, never what it names
    assert victim.read_text() == '{"secret": 1}'
    assert not (state_dir / "x.json").is_symlink() and state.load() == {"a": 1}


def test_a_state_file_of_another_user_is_refused_unread(state_dir: Path, intruder: tuple[int, int]) -> None:
    (state_dir / "acks.json").write_text('{"acks": []}')
    os.chown(state_dir / "acks.json", *intruder)
    with pytest.raises(UntrustedPath, match=f"{state_dir / 'acks.json'} belongs to uid {intruder[0]}, not root"):
        StateFile(state_dir, "acks").load()


def test_a_group_writable_state_file_is_refused(state_dir: Path, intruder: tuple[int, int]) -> None:
    (state_dir / "policy.json").write_text("{}")
    os.chown(state_dir / "policy.json", 0, intruder[1])
    (state_dir / "policy.json").chmod(0o660)
    with pytest.raises(UntrustedPath, match=r"policy\.json is writable by group or others"):
        StateFile(state_dir, "policy").load()


def test_a_fifo_planted_as_a_state_file_is_refused_without_blocking(state_dir: Path) -> None:
    os.mkfifo(state_dir / "x.json", 0o600)
    with pytest.raises(UntrustedPath, match=r"x\.json is not a regular file"):
        StateFile(state_dir, "x").load()


def test_the_lock_refuses_a_planted_link_and_never_creates_its_target(state_dir: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    (state_dir / "cycle.lock").symlink_to(victim)
    with pytest.raises(UntrustedPath, match=f"{state_dir / 'cycle.lock'} is a symbolic link"):
        StateLock(state_dir, 1.0).acquire()
    assert not victim.exists()


def test_the_lock_refuses_a_directory_with_an_entry_of_another_user(state_dir: Path, intruder: tuple[int, int]) -> None:
    (state_dir / "check-xid.json").write_text("{}")
    os.chown(state_dir / "check-xid.json", *intruder)
    with pytest.raises(UntrustedPath, match=f"refusing {state_dir}, which others could have written: .*check-xid"):
        StateLock(state_dir, 1.0).acquire()
    assert not (state_dir / "cycle.lock").exists()


def test_a_missing_state_dir_is_created_private_whatever_the_umask(tmp_path: Path) -> None:
    directory = tmp_path / "var" / "lib" / "healthd"
    old = os.umask(0)
    try:
        StateFile(directory, "x").save({"a": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert [stat.S_IMODE(p.stat().st_mode) for p in (directory.parent, directory.parent.parent)] == [0o755, 0o755]
    assert {p.stat().st_uid for p in (directory, directory.parent, directory.parent.parent)} == {os.geteuid()}
    assert stat.S_IMODE((directory / "x.json").stat().st_mode) == 0o600


def test_no_state_dir_is_created_inside_another_users_directory(tmp_path: Path, intruder: tuple[int, int]) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, *intruder)
    with pytest.raises(UntrustedPath, match=f"{theirs} belongs to uid {intruder[0]}"):
        StateFile(theirs / "state", "x").save({"a": 1})
    with pytest.raises(UntrustedPath):
        StateDir(theirs / "state").refuse_untrusted()
    assert not (theirs / "state").exists()


def test_an_unusable_state_dir_is_not_called_untrusted(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    StateDir(blocker).refuse_untrusted()  # a file in its place: reported by each pass, not refused
    StateDir(blocker / "sub").refuse_untrusted()
