"""``healthd.store.atomicfile``: the one writer of every file healthd leaves behind (state, textfile, snapshots)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from healthd.store.atomicfile import replace_file, write_atomically


def test_replace_file_writes_the_mode_asked_for_whatever_the_umask(tmp_path: Path) -> None:
    target = tmp_path / "snapshot.json"
    target.write_text("old")
    old = os.umask(0o077)
    try:
        replace_file(target, b"new", 0o644)
    finally:
        os.umask(old)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["snapshot.json"]


def test_a_link_planted_at_the_name_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    target = tmp_path / "healthd.prom"
    target.symlink_to(victim)
    replace_file(target, b"metrics", 0o644)
    assert not target.is_symlink() and target.read_bytes() == b"metrics"
    assert victim.read_text() == "keep me"


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path: Path) -> None:
    target = tmp_path / "last-pass.json"
    target.write_text("old")
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(TypeError):
            write_atomically(dir_fd, target.name, "not bytes", 0o600)  # type: ignore[arg-type]
    finally:
        os.close(dir_fd)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["last-pass.json"]


def test_a_missing_directory_is_an_oserror_naming_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as caught:
        replace_file(tmp_path / "absent" / "x.json", b"{}", 0o600)
    assert caught.value.filename == str(tmp_path / "absent")
