from __future__ import annotations

from pathlib import Path

import pytest
from healthd_testkit.checks import raises_only
from hypothesis import given
from hypothesis import strategies as st

from healthd_checks.common.mountinfo import MountinfoError, find_mount, parse_mountinfo


def test_real_format_capture(fixtures: Path) -> None:
    source = fixtures / "procfs/gpu-node/1/mountinfo"
    entries = parse_mountinfo(source.read_text(), str(source))
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
    entry = find_mount(parse_mountinfo(text, "m"), "/x")
    assert entry is not None and entry.fstype == "tmpfs" and entry.read_only


def test_malformed_line_names_file_and_line(fixtures: Path) -> None:
    source = fixtures / "procfs/broken/1/mountinfo"
    with pytest.raises(MountinfoError) as info:
        parse_mountinfo(source.read_text(), str(source))
    assert str(info.value).startswith(f"{source}:2: ")


@given(st.text())
def test_arbitrary_text_gives_entries_or_the_documented_error(text: str) -> None:
    raises_only(parse_mountinfo, MountinfoError, text)
