from __future__ import annotations

from pathlib import Path

import pytest
from healthd_testkit.checks import raises_only
from hypothesis import given
from hypothesis import strategies as st

from healthd_checks.common.mountinfo import (
    MountinfoError,
    SkippedLine,
    find_mount,
    find_node_mount,
    fuse_user,
    parse_mountinfo,
    user_mount_in_the_way,
)


def test_real_format_capture(fixtures: Path) -> None:
    source = fixtures / "procfs/gpu-node/1/mountinfo"
    entries = parse_mountinfo(source.read_text(), str(source)).entries
    home = find_mount(entries, "/home")
    assert home is not None and home.fstype == "nfs4" and home.source == "storage01:/export/home"
    assert not home.read_only
    datasets = find_mount(entries, "/datasets")
    assert datasets is not None and datasets.read_only
    spaced = find_mount(entries, "/shared models")
    assert spaced is not None and spaced.fstype == "nfs4"
    scratch = find_mount(entries, "/scratch")
    assert scratch is not None and scratch.source == "10.1.0.1@o2ib:/scratch"
    assert find_mount(entries, "/nope") is None


def test_overmount_last_entry_wins() -> None:
    text = "1 0 0:1 / /x rw - ext4 /dev/a rw\n2 1 0:2 / /x ro - tmpfs tmpfs rw\n"
    entry = find_mount(parse_mountinfo(text, "m").entries, "/x")
    assert entry is not None and entry.fstype == "tmpfs" and entry.read_only


def test_a_malformed_line_is_skipped_and_named_and_the_rest_kept(fixtures: Path) -> None:
    source = fixtures / "procfs/broken/1/mountinfo"
    parsed = parse_mountinfo(source.read_text(), str(source))
    assert [e.mount_point for e in parsed.entries] == ["/sys"]
    assert [(s.line_number, s.mount_point) for s in parsed.skipped] == [(2, "")]
    # Where field 5 still reads as a mount point, the skipped line names it.
    text = "1 0 0:1 / / rw - ext4 /dev/a rw\n2 1 0:x / /scratch rw - nfs4 s:/x rw\n"
    assert parse_mountinfo(text, "m").skipped == (SkippedLine(2, "device '0:x' is not major:minor", "/scratch"),)


@pytest.mark.parametrize("text", ["", "\n\n", "23 29 0:22 /proc rw,nosuid shared:13 sysfs\n", "garbage\nmore\n"])
def test_no_line_that_parses_is_the_documented_error(text: str) -> None:
    with pytest.raises(MountinfoError) as info:
        parse_mountinfo(text, "m")
    assert str(info.value).startswith("m:1: ")


def test_records_split_on_newline_alone_and_fields_by_place() -> None:
    # fs/proc_namespace.c escapes only " \t\n\\" in the mount point, type and source:
    # a "\r" in a user's directory is raw, and so are a "-" and bytes that are not UTF-8.
    raw = (
        b"1 0 8:1 / / rw shared:1 - ext4 /dev/sda1 rw\n"
        b"2 1 0:50 / /home/u/a\rb\x0b\x0c\x1c\xff\\040- rw,nosuid - fuse.x\r- -\x85\\134 rw,user_id=1000\n"
    )
    parsed = parse_mountinfo(raw.decode("utf-8", "surrogateescape"), "m")
    assert parsed.skipped == () and len(parsed.entries) == 2
    user = parsed.entries[1]
    assert user.mount_point == "/home/u/a\rb\x0b\x0c\x1c\udcff -"
    assert (user.fstype, user.source) == ("fuse.x\r-", "-\udc85\\")
    assert fuse_user(user) == 1000 and fuse_user(parsed.entries[0]) is None


def test_a_users_fuse_mount_is_the_users_and_the_node_mount_beneath_is_judged() -> None:
    text = (
        "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "2 1 0:30 / /scratch rw - tmpfs tmpfs rw\n"
        "3 2 0:50 / /scratch rw,nosuid,nodev - fuse.sshfs u@h: rw,user_id=1000,group_id=1000\n"
        "4 1 0:51 / /srv rw - fuse.sshfs root@h: rw,user_id=0,group_id=0\n"
        "5 1 0:52 / /data rw - fuse.x x rw,user_id=65534,group_id=65534\n"
        "6 1 0:53 / /svc rw - fuse.x x rw,user_id=999,group_id=999\n"
    )
    entries = parse_mountinfo(text, "m").entries
    scratch = find_node_mount(entries, "/scratch")
    assert scratch is not None and scratch.fstype == "tmpfs"
    assert find_mount(entries, "/scratch") == entries[2]
    assert user_mount_in_the_way(entries, "/scratch") == entries[2]
    # Root's and a system account's FUSE mounts are the node's; nobody (65534) is no system account.
    assert [user_mount_in_the_way(entries, p) is None for p in ("/srv", "/svc", "/data/x/y")] == [True, True, False]
    assert find_node_mount(entries, "/data") is None
    assert user_mount_in_the_way(entries, "/") is None


@given(st.text())
def test_arbitrary_text_gives_entries_or_the_documented_error(text: str) -> None:
    raises_only(parse_mountinfo, MountinfoError, text)
