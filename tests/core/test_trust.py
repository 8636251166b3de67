from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

from healthd.plugin import _untrusted_plugin
from healthd.trust import untrusted_reason


@pytest.fixture
def private_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "etc"
    directory.mkdir(mode=0o755)
    return directory


def test_root_owned_private_file_is_trusted(private_dir: Path) -> None:
    config = private_dir / "healthd.toml"
    config.write_text("")
    config.chmod(0o644)
    assert untrusted_reason(config) is None


def test_world_writable_file_is_refused(private_dir: Path) -> None:
    config = private_dir / "healthd.toml"
    config.write_text("")
    config.chmod(0o666)
    assert "is writable by group or others" in (untrusted_reason(config) or "")


def test_writable_parent_without_sticky_bit_is_refused(private_dir: Path) -> None:
    config = private_dir / "healthd.toml"
    config.write_text("")
    private_dir.chmod(0o777)
    assert f"{private_dir} is writable by group or others" in (untrusted_reason(config) or "")


def test_sticky_world_writable_parent_is_accepted(private_dir: Path) -> None:
    config = private_dir / "healthd.toml"
    config.write_text("")
    private_dir.chmod(0o1777)
    assert untrusted_reason(config) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_file_owned_by_another_user_is_refused(private_dir: Path) -> None:
    config = private_dir / "healthd.toml"
    config.write_text("")
    os.chown(config, 65534, 65534)
    assert "belongs to uid 65534, not root" in (untrusted_reason(config) or "")


def test_cli_refuses_an_unsafe_config_with_exit_78(
    write_config: Callable[[str], Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    path = write_config("")
    path.chmod(0o666)
    code, out, err = cli("check", "--once", "--dry-run", "--config", str(path))
    assert code == 78 and out == ""
    assert f"{path}: refusing to load a config that others could have written" in err


@pytest.fixture
def writable_plugin_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "plugins"
    directory.mkdir()
    (directory / "healthd_evil_plugin.py").write_text("CHECK = None\n")
    directory.chmod(0o777)
    sys.path.insert(0, str(directory))
    yield directory
    sys.path.remove(str(directory))


def test_plugin_from_a_writable_directory_is_refused(writable_plugin_dir: Path) -> None:
    reason = _untrusted_plugin("healthd_evil_plugin")
    assert reason is not None and "writable by group or others" in reason
    assert "healthd_evil_plugin" not in sys.modules


def test_builtin_plugins_are_trusted() -> None:
    assert _untrusted_plugin("healthd_checks.mounts") is None
