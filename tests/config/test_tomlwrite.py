"""``healthd.config.tomlwrite``: what it writes, ``tomllib`` reads back as it was, whatever the text."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from healthd.config.defaults import toml_module
from healthd.config.tomlwrite import COMMENT_KEY, dumps, string

tomllib = toml_module()

# Any Unicode text but lone surrogates, which are no characters (and which st.text leaves out by default).
TEXT = st.text(st.characters(codec="utf-8"), max_size=40)


@given(TEXT)
def test_a_string_reads_back_as_itself(text: str) -> None:
    assert tomllib.loads(f"v = {string(text)}\n") == {"v": text}


# Any key but the writer's own comment key, which holds a table's comment, not a value.
KEYS = TEXT.filter(lambda k: k != COMMENT_KEY)


@given(st.dictionaries(KEYS, st.lists(TEXT, max_size=3), max_size=3), TEXT)
def test_a_document_with_any_keys_values_and_comment_reads_back(table: dict[str, Any], note: str) -> None:
    document: dict[str, Any] = {"checks": {COMMENT_KEY: note, "t": dict(table)}}
    expected = {"checks": {"t": table}}
    assert tomllib.loads(dumps(document)) == expected


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("/data/\U0001f600", '"/data/\U0001f600"'),  # printable, outside the BMP: as it is, never a surrogate pair
        ("a\x01b\x7f\x85", '"a\\u0001b\\u007F\\u0085"'),  # control characters, C1's included
        ('q"\\\t\n', '"q\\"\\\\\\t\\n"'),
        ("\u2028\U000e0001", '"\\u2028\\U000E0001"'),  # a separator and a format character: nothing invisible
    ],
)
def test_strings_are_written_readably(text: str, written: str) -> None:
    assert string(text) == written


def test_a_comment_cannot_end_early_or_hold_a_control_character() -> None:
    text = dumps({"checks": {COMMENT_KEY: "one\x01\nnext]\r\n[policy]", "mounts": {"enabled": False}}})
    assert text.startswith("# one\\u0001\n# next]\\u000D\n# [policy]\n[checks]\n")
    assert tomllib.loads(text) == {"checks": {"mounts": {"enabled": False}}}


def test_an_infinite_limit_reads_back_and_nan_is_refused() -> None:
    assert tomllib.loads(dumps({"t": {"most": float("inf"), "least": float("-inf")}})) == {
        "t": {"most": float("inf"), "least": float("-inf")}
    }
    with pytest.raises(ValueError, match="TOML has no place for nan"):
        dumps({"t": {"x": float("nan")}})


def test_a_lone_surrogate_is_named_not_written() -> None:
    with pytest.raises(ValueError, match="U\\+DC80, a lone surrogate"):
        string("/mnt/\udc80")


def test_import_nhc_writes_toml_for_any_mount_path_and_file_name(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    conf = tmp_path / "nhc\n[policy]\ndry_run = false\n.conf"
    conf.write_text("* || check_fs_mount_rw -f /data/\U0001f600\n* || check_fs_mount_rw -f /x\x01y\n")
    code, out, _ = cli("import-nhc", str(conf))
    assert code == 0
    expect = [{"path": "/data/\U0001f600", "rw": True}, {"path": "/x\x01y", "rw": True}]
    mounts = tomllib.loads(out)["checks"]["mounts"]
    # NHC reads free space as df does (check_fs_free, check_fs_used): the conversion says so for the whole table.
    assert mounts == {"expect": expect, "min_free_percent": 0.0, "min_free_inodes_percent": 0.0, "free_space_as": "df"}
