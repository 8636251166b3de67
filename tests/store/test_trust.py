from __future__ import annotations

import grp
import os
import pwd
import stat
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest
from healthd_testkit.acl import DEFAULT, set_acl

from healthd.checks.plugin import _untrusted_plugin
from healthd.store.trust import untrusted_reason


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
    assert _untrusted_plugin("healthd_checks.mounts.check") is None


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


# A user and a group that own nothing here: Debian's nobody and nogroup.
OTHER_UID, OTHER_GID = 65534, 65534
OTHER_USER, OTHER_GROUP = pwd.getpwuid(OTHER_UID).pw_name, grp.getgrgid(OTHER_GID).gr_name


@pytest.mark.skipif(os.getegid() != 0, reason="the rule accepts group write only for root's group")
def test_an_acl_letting_another_user_write_is_refused(private_dir: Path) -> None:
    # With an ACL the mode's group bits are its mask: rw- here reads as root's group writing.
    config = private_dir / "healthd.toml"
    config.write_text("")
    config.chmod(0o644)
    assert untrusted_reason(config) is None
    set_acl(config, owner=6, group=4, other=4, mask=6, users={OTHER_UID: 6})
    assert stat.S_IMODE(config.stat().st_mode) == 0o664  # what the old rule saw: group write, gid 0
    assert untrusted_reason(config) == (
        f"{config} is writable by user {OTHER_USER} (uid {OTHER_UID}) through its ACL"
        f" (entry user:{OTHER_USER}:rw-, mask rw-)"
    )


@pytest.mark.skipif(os.getegid() != 0, reason="the rule accepts group write only for root's group")
def test_an_acl_letting_another_group_write_a_directory_above_is_refused(private_dir: Path) -> None:
    config = private_dir / "healthd.toml"
    config.write_text("")
    set_acl(private_dir, group=5, mask=7, groups={OTHER_GID: 7})
    assert untrusted_reason(config) == (
        f"{private_dir} is writable by group {OTHER_GROUP} (gid {OTHER_GID}) through its ACL"
        f" (entry group:{OTHER_GROUP}:rwx, mask rwx)"
    )


@pytest.mark.parametrize(
    ("users", "groups", "mask"),
    [
        ({OTHER_UID: 6}, {}, 4),  # the mask takes write away from every named entry
        ({OTHER_UID: 4}, {OTHER_GID: 5}, 6),  # named entries that only read
        ({0: 6}, {0: 6}, 6),  # root by name
    ],
    ids=["masked", "read-only", "root"],
)
def test_an_acl_that_lets_no_one_else_write_is_accepted(
    private_dir: Path, users: dict[int, int], groups: dict[int, int], mask: int
) -> None:
    config = private_dir / "healthd.toml"
    config.write_text("")
    set_acl(config, owner=6, group=4, other=4, mask=mask, users=users, groups=groups)
    assert untrusted_reason(config) is None


def test_a_default_acl_is_not_what_guards_a_directory(private_dir: Path) -> None:
    # It only seeds the ACL of entries created later, each checked when it is used (docs/ in trust.py).
    set_acl(private_dir, which=DEFAULT, users={OTHER_UID: 7}, groups={OTHER_GID: 7})
    assert untrusted_reason(private_dir) is None


def test_the_cli_refuses_a_config_that_an_acl_lets_another_user_write(
    write_config: Callable[[str], Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    path = write_config("")
    set_acl(path, owner=6, group=4, other=4, mask=6, users={OTHER_UID: 6})
    code, out, err = cli("config", "validate", "--config", str(path))
    assert code == 78 and out == ""
    assert f"{path}: refusing to load a config that others could have written" in err
    assert f"through its ACL (entry user:{OTHER_USER}:rw-, mask rw-)" in err
