"""Slurm host lists, as sinfo prints a group's nodes."""

from __future__ import annotations

import pytest

from healthd.hostlist import HostlistError, expand


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
