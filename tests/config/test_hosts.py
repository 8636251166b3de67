"""Per-host config sections: NHC's match strings, the merge, and the problems named."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from healthd.config.hosts import HostMatchError, for_host, host_sections, matcher, merge


@pytest.mark.parametrize(
    ("match", "yes", "no"),
    [
        ("*", ["n0001", "login1"], []),
        ("gpu*", ["gpu001"], ["login1", "xgpu1"]),
        ("!ln*", ["n01"], ["ln01"]),
        ("/^n00[0-5][0-9]\\.cc2$/", ["n0017.cc2"], ["n0017.cc1", "n0083.cc2"]),
        ("!/\\.(gpu|htc)/", ["n1.cpu"], ["n1.gpu", "n2.htc"]),
        ("{n00[20-39]}", ["n0020", "n0039"], ["n0040", "n020", "n00020"]),
        ("{n00[00-99].phys,n000[0-4].bio}", ["n0030.phys", "n0099.phys", "n0001.bio"], ["n0100.phys", "n0005.bio"]),
        ("!{n03,n05,n0[7-9]}", ["n04", "n06"], ["n03", "n05", "n08"]),
        ("{n[8-12]}", ["n8", "n12"], ["n7", "n13", "n08"]),
    ],
)
def test_match_strings_follow_nhc(match: str, yes: list[str], no: list[str]) -> None:
    test = matcher(match)
    assert [name for name in yes if test(name)] == yes
    assert [name for name in no if test(name)] == []


@pytest.mark.parametrize("match", ["", "{n00[10-21,23]}", "/(unclosed/", "{n[9-1]}", "!"])
def test_bad_match_strings_are_refused(match: str) -> None:
    with pytest.raises(HostMatchError):
        matcher(match)


def test_matching_sections_merge_in_file_order_over_the_base() -> None:
    raw: dict[str, Any] = {
        "checks": {"gpu": {"expect_gpus": 8, "timeout": 5}, "mounts": {"expect": [{"path": "/home"}]}},
        "hosts": [
            {"match": "gpu*", "checks": {"gpu": {"expect_gpus": 4}}},
            {"match": "login*", "checks": {"gpu": {"enabled": False}}},
            {"match": "gpu9*", "checks": {"gpu": {"expect_gpus": 2}, "mounts": {"expect": [{"path": "/raid"}]}}},
        ],
    }
    sections, problems = host_sections(raw)
    assert problems == [] and "hosts" not in raw
    merged, applied = for_host(raw, sections, "gpu901")
    assert [s.index for s in applied] == [0, 2]
    assert merged["checks"] == {
        "gpu": {"expect_gpus": 2, "timeout": 5},
        "mounts": {"expect": [{"path": "/home"}, {"path": "/raid"}]},
    }
    login, applied = for_host(raw, sections, "login1")
    assert login["checks"]["gpu"] == {"expect_gpus": 8, "timeout": 5, "enabled": False}
    assert [s.label for s in applied] == ["hosts[1] (match 'login*')"]
    assert for_host(raw, sections, "cpu1") == (raw, [])


def test_problems_name_the_entry_and_the_key() -> None:
    raw: dict[str, Any] = {
        "hosts": [
            {"checks": {}},
            "gpu*",
            {"match": "{n[1-2],m[3-4]x[5-6]}"},
            {"match": "ok*", "hosts": []},
            {"match": "fine*"},
        ]
    }
    sections, problems = host_sections(raw)
    assert [s.match for s in sections] == ["fine*"]
    assert problems[0].startswith("hosts[0].match: required")
    assert problems[1] == "hosts[1]: must be a table"
    assert problems[2].startswith("hosts[2].match: 'm[3-4]x[5-6]'")
    assert problems[3] == "hosts[3].hosts: host sections do not nest"
    assert host_sections({"hosts": {"match": "x"}})[1] == ["hosts: must be an array of tables ([[hosts]]), got dict"]


@given(
    st.recursive(
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
        lambda inner: st.dictionaries(st.text(max_size=3), inner, max_size=3),
        max_leaves=10,
    )
)
def test_merging_a_table_over_itself_or_nothing_changes_nothing(table: dict[str, Any]) -> None:
    assert merge(table, table) == table
    assert merge(table, {}) == table
    assert merge({}, table) == table


def test_a_host_item_replaces_the_file_item_about_the_same_subject() -> None:
    # checks.mounts.expect names each item by its path (healthd.config.models.identified_by); services has no identity.
    identities = {("checks", "mounts", "expect"): "path"}
    base: dict[str, Any] = {
        "checks": {
            "mounts": {"expect": [{"path": "/", "fstype": "xfs"}, {"path": "/home", "fstype": "nfs"}]},
            "services": {"expect": ["sshd"]},
        }
    }
    over: dict[str, Any] = {
        "checks": {
            "mounts": {"expect": [{"path": "/", "fstype": "ext4"}, {"path": "/raid"}]},
            "services": {"expect": ["sshd", "munge"]},
        }
    }
    merged = merge(base, over, identities)["checks"]
    assert merged["mounts"]["expect"] == [
        {"path": "/", "fstype": "ext4"},
        {"path": "/home", "fstype": "nfs"},
        {"path": "/raid"},
    ]
    assert merged["services"]["expect"] == ["sshd", "munge"]
    # Where no identity is named, a second item about the same path is just another item.
    assert merge(base, over)["checks"]["mounts"]["expect"][:2] == base["checks"]["mounts"]["expect"]
    sections, _ = host_sections({"hosts": [{"match": "gpu*", **over}, {"match": "gpu1", **over}]})
    assert for_host(base, sections, "gpu1", identities)[0]["checks"] == merged
