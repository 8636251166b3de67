"""Slurm host lists (``node[1-3,7],gpu[01-02]-ib[0-1]``) expanded into node names, as sinfo prints them.

Pure. slurmctld compresses the node names of a group of nodes into one host list
(hostlist.c in Slurm's source); healthd expands only the groups it needs (the
nodes out with its own reason), never a whole partition.
"""

from __future__ import annotations

import re

# One bracket: comma-separated numbers or ranges; a range keeps its lower bound's width (n[08-10]).
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
# A host list longer than this is refused rather than expanded (a malformed range such as n[1-999999999]).
MAX_NAMES = 1_000_000


class HostlistError(ValueError):
    """A host list that is not Slurm's syntax."""


def _split_top(text: str) -> list[str]:
    """Split on the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in host list {text!r}")
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    if depth:
        raise HostlistError(f"unbalanced '[' in host list {text!r}")
    parts.append(text[start:])
    return [p for p in parts if p]


def _numbers(inside: str, text: str) -> list[str]:
    numbers: list[str] = []
    for item in inside.split(","):
        match = _RANGE.match(item.strip())
        if match is None:
            raise HostlistError(f"bad range {item!r} in host list {text!r}")
        low, high = match[1], match[2] or match[1]
        if int(high) < int(low) or len(numbers) + int(high) - int(low) >= MAX_NAMES:
            raise HostlistError(f"bad range {item!r} in host list {text!r}")
        numbers.extend(str(n).zfill(len(low)) for n in range(int(low), int(high) + 1))
    return numbers


def _expand_one(name: str, text: str) -> list[str]:
    match = _BRACKET.search(name)
    if match is None:
        return [name]
    head, tail = name[: match.start()], name[match.end() :]
    if "[" in head or "]" in head:
        raise HostlistError(f"nested brackets in host list {text!r}")
    head, tail = name[: match.start()], name[match.end() :]
    rests = _expand_one(tail, text)
    return [head + number + rest for number in _numbers(match[1], text) for rest in rests]


def expand(text: str) -> list[str]:
    """Every node name in ``text``, in order: ``n[1-2],m3`` -> ["n1", "n2", "m3"]."""
    names: list[str] = []
    for part in _split_top(text.strip()):
        names.extend(_expand_one(part, text))
        if len(names) > MAX_NAMES:
            raise HostlistError(f"host list {text[:80]!r} names more than {MAX_NAMES} nodes")
    return names
