from __future__ import annotations

from pathlib import Path

import pytest

from healthd.checks.binaries import locate


def test_finds_the_first_executable(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain = tmp_path / "a" / "tool"
    plain.write_text("")
    plain.chmod(0o644)  # not executable: skipped
    real = tmp_path / "b" / "tool"
    real.write_text("")
    real.chmod(0o755)
    assert locate("tool", [str(tmp_path / "a"), str(tmp_path / "b")]) == str(real)


def test_missing_program_names_the_directories(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=rf"tool not found in {tmp_path}"):
        locate("tool", [str(tmp_path)])


def test_never_consults_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    shadow = tmp_path / "stat"
    shadow.write_text("#!/bin/sh\n")
    shadow.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert locate("stat") != str(shadow)
