"""``healthd.boot.read_boot_id``: the one reader of this boot's id, for the pass, the job hooks and the checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from healthd.boot import BootIdUnreadable, read_boot_id
from healthd_checks.common.sysfs import boot_id_or_none

BOOT = "5b1c2a9e-0d6f-4a57-9c0e-3f1e2d4c5b6a"


def _write(procfs: Path, text: str) -> Path:
    path = procfs / "sys" / "kernel" / "random" / "boot_id"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_id_is_read_lower_case(tmp_path: Path) -> None:
    _write(tmp_path, BOOT.upper() + "\n")
    assert read_boot_id(tmp_path) == BOOT
    assert read_boot_id(tmp_path, default="") == BOOT
    assert boot_id_or_none(tmp_path) == BOOT


@pytest.mark.parametrize("text", ["not a boot id\n", "\x1b[2J" + BOOT, "", "abc\n", "a" * 65])
def test_garbage_names_the_file_or_gives_the_default(tmp_path: Path, text: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(BootIdUnreadable) as error:
        read_boot_id(tmp_path)
    assert error.value.path == path and str(path) in str(error.value) and "expected a boot id" in str(error.value)
    assert "\x1b" not in str(error.value)
    assert read_boot_id(tmp_path, default="") == ""
    assert boot_id_or_none(tmp_path) is None


def test_a_missing_file_names_the_file_or_gives_the_default(tmp_path: Path) -> None:
    with pytest.raises(BootIdUnreadable) as error:
        read_boot_id(tmp_path)
    assert error.value.path == tmp_path / "sys" / "kernel" / "random" / "boot_id"
    assert "cannot read" in str(error.value)
    assert read_boot_id(tmp_path, default="") == ""


@given(st.binary(max_size=80))
@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_bytes_give_an_id_or_the_error_never_a_crash(tmp_path: Path, data: bytes) -> None:
    path = _write(tmp_path, "")
    path.write_bytes(data)
    try:
        value = read_boot_id(tmp_path)
    except BootIdUnreadable as exc:
        assert exc.path == path and str(exc).isprintable()
    else:
        assert value.isprintable() and " " not in value and 16 <= len(value) <= 64
