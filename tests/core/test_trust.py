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


def test_a_sticky_world_writable_directory_is_refused_as_the_path_itself(private_dir: Path) -> None:
    # Others cannot replace what we own there, but they can create the names we are about to use.
    private_dir.chmod(0o1777)
    assert f"{private_dir} is writable by group or others (mode drwxrwxrwt)" in (untrusted_reason(private_dir) or "")


def test_a_link_through_another_users_directory_is_refused(
    private_dir: Path, tmp_path: Path, intruder: tuple[int, int]
) -> None:
    # The target is trusted, but whoever owns the directory holding the link chooses what it names.
    config = private_dir / "healthd.toml"
    config.write_text("")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    (theirs / "link").symlink_to(config)
    os.chown(theirs, *intruder)
    assert f"{theirs} belongs to uid {intruder[0]}, not root" in (untrusted_reason(theirs / "link") or "")


def test_a_link_owned_by_another_user_is_refused(private_dir: Path, intruder: tuple[int, int]) -> None:
    config = private_dir / "healthd.toml"
    config.write_text("")
    link = private_dir / "link.toml"
    link.symlink_to(config)
    os.lchown(link, *intruder)
    assert f"{link} belongs to uid {intruder[0]}, not root" in (untrusted_reason(link) or "")


def test_a_root_link_to_a_trusted_file_is_followed_and_checked(private_dir: Path, tmp_path: Path) -> None:
    target_dir = tmp_path / "real"
    target_dir.mkdir(mode=0o755)
    config = target_dir / "healthd.toml"
    config.write_text("")
    link = private_dir / "healthd.toml"
    link.symlink_to(Path("..") / "real" / "healthd.toml")  # relative, with "..": resolved as the kernel does
    assert untrusted_reason(link) is None
    target_dir.chmod(0o777)
    assert f"{target_dir} is writable by group or others" in (untrusted_reason(link) or "")


def test_a_link_loop_is_refused_not_followed_forever(private_dir: Path) -> None:
    (private_dir / "a").symlink_to(private_dir / "b")
    (private_dir / "b").symlink_to(private_dir / "a")
    assert "Too many levels of symbolic links" in (untrusted_reason(private_dir / "a") or "")
