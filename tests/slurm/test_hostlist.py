"""Slurm host lists, as sinfo prints a group's nodes."""

from __future__ import annotations

from typing import Callable, Union

import pytest
from hypothesis import given
from hypothesis import strategies as st

from healthd.slurm.hostlist import HostlistError, contains, expand


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("node1", ["node1"]),
        ("node[1,3]", ["node1", "node3"]),
        ("n[00001-00003,00007]", ["n00001", "n00002", "n00003", "n00007"]),
        ("n[08-10],gpu1", ["n08", "n09", "n10", "gpu1"]),
        ("r[1-2]-n[1-2]", ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]),
        ("", []),
    ],
)
def test_expand(text: str, names: list[str]) -> None:
    assert expand(text) == tuple(names)


def test_a_whole_partition_expands() -> None:
    names = expand("n[00001-00006,00008,00010-10000]")
    assert len(names) == 9998 and names[6] == "n00008" and names[-1] == "n10000"


@pytest.mark.parametrize("text", ["n[1-", "n1]", "n[a-b]", "n[3-1]", "n[1-99999999]", "n[[1]]"])
def test_bad_host_lists_are_refused(text: str) -> None:
    with pytest.raises(HostlistError):
        expand(text)


_NUMBER = st.integers(min_value=0, max_value=120)
_RANGE = st.tuples(_NUMBER, st.integers(min_value=0, max_value=12), st.integers(min_value=1, max_value=3)).map(
    lambda r: f"{r[0]:0{r[2]}d}" + (f"-{r[0] + r[1]}" if r[1] else "")
)
_BRACKET = st.lists(_RANGE, min_size=1, max_size=2).map(lambda rs: "[" + ",".join(rs) + "]")
_ITEM = st.lists(st.one_of(st.sampled_from(["n", "gpu", "-ib", "r"]), _BRACKET), min_size=1, max_size=3).map("".join)
_LIST = st.lists(_ITEM, min_size=1, max_size=3).map(",".join)


def _answer(text: str, name: str, ask: Callable[[str, str], bool]) -> Union[bool, str]:
    try:
        return ask(text, name)
    except HostlistError:
        return "refused"


def _in_expansion(text: str, name: str) -> bool:
    return name in expand(text)


# Malformed lists are near misses of real ones: a bracket dropped, doubled or emptied, a
# range turned round, a comma out of place, a digit from another script, a newline.
_MANGLED = st.text(alphabet="n0129[]-,\n \u0661", max_size=16)


@given(text=st.one_of(_LIST, _MANGLED), data=st.data())
def test_contains_agrees_with_expand(text: str, data: st.DataObject) -> None:
    """``contains`` answers from the ranges what ``expand`` answers from the names, or both refuse the list."""
    try:
        names = expand(text)
    except HostlistError:
        names = ()
    listed = data.draw(st.sampled_from(names)) if names else ""
    # Near misses: a listed name with a digit dropped, added or padded differently.
    near = data.draw(st.sampled_from([listed[:-1], listed + "0", "0" + listed, listed.replace("0", "", 1), "x"]))
    for name in (listed, near, data.draw(_MANGLED)):
        assert _answer(text, name, contains) == _answer(text, name, _in_expansion), (text, name)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("n[]", "n"),
        ("n[1,]", "n1"),
        ("n[1]\nm[2]", "m2"),  # python-hostlist would drop what follows the newline
        ("n[\u0661-\u0663]", "n2"),  # Arabic-Indic digits are not Slurm's
        ("n[1-100001]", "n1"),  # more names than expand makes (python-hostlist's MAX_SIZE)
        ("n[1-400]-m[1-400]", "n1-m1"),  # 160,000 names in one item
        ("n[1-" + "9" * 5000 + "]", "n2"),  # past Python's int conversion limit
        ("n" + "[1]" * 65, "n" + "1" * 65),  # more brackets than expand could recurse through
    ],
)
def test_contains_refuses_what_expand_refuses(text: str, name: str) -> None:
    with pytest.raises(HostlistError):
        expand(text)
    with pytest.raises(HostlistError):
        contains(text, name)


def test_contains_finds_one_node_in_a_100000_node_group_without_expanding_it() -> None:
    text = "n[000001-100000],gpu[1-8]"
    calls = expand.cache_info()
    assert contains(text, "n054321") and contains(text, "gpu8") and not contains(text, "n54321")
    after = expand.cache_info()
    assert (after.hits, after.misses) == (calls.hits, calls.misses), "expand was not asked"


@pytest.mark.parametrize("text", ["n[1-", "n1]", "n[a-b]", "n[3-1]", "n[[1]]"])
def test_contains_refuses_bad_host_lists(text: str) -> None:
    with pytest.raises(HostlistError):
        contains(text, "n1")
