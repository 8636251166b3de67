"""Slurm host lists (``node[1-3,7],gpu[01-02]-ib[0-1]``) expanded into node names.

One home for the notation, used by the breaker (the groups sinfo prints) and by
``healthd fleet`` (accounting's node lists). The expansion is python-hostlist's, a
library kept for exactly this notation, imported on first use; results are
memoised, since a fleet's job runs repeat the same lists many times. healthd
expands only what it needs (the nodes out with its own reason), never a whole
table, and a list of more than 100,000 names (python-hostlist's limit, far above
any partition) is refused as malformed. Whether one node is in a list
(``contains``) is answered from the list's ranges, without expanding it: a group
of 100,000 idle nodes costs a few comparisons, not 40 ms (docs/scale.md).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Optional, Union

_MEMO = 1 << 16
# One bracket's ranges as (low, high) texts; a single number has high None.
_Ranges = tuple[tuple[str, Optional[str]], ...]
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


class HostlistError(ValueError):
    """A host list that is not Slurm's notation."""


@lru_cache(maxsize=_MEMO)
def expand(text: str) -> tuple[str, ...]:
    """Every node name in ``text``, in order: ``n[1-2],m3`` -> ("n1", "n2", "m3"); "" -> ()."""
    text = text.strip()
    if "[" not in text and "]" not in text:
        return tuple(name for name in text.split(",") if name)
    import hostlist

    try:
        return tuple(hostlist.expand_hostlist(text))
    except hostlist.BadHostlist as exc:
        raise HostlistError(f"host list {text[:80]!r}: {exc}") from None


def _items(text: str) -> list[str]:
    """``text`` split at the commas outside brackets (empty items dropped, as python-hostlist does)."""
    items, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if depth not in (0, 1):
            raise HostlistError(f"host list {text[:80]!r}: unbalanced brackets")
        if char == "," and depth == 0:
            items.append(text[start:index])
            start = index + 1
    if depth:
        raise HostlistError(f"host list {text[:80]!r}: unbalanced brackets")
    return [item for item in (*items, text[start:]) if item]


@lru_cache(maxsize=_MEMO)
def _pieces(item: str) -> tuple[Union[str, _Ranges], ...]:
    """One item (``r[1-2]-n[01-08]``) as its literal texts and its brackets' ranges."""
    pieces: list[Union[str, _Ranges]] = []
    for literal, inside in re.findall(r"([^\[\]]*)(?:\[([^\[\]]*)\])?", item):
        if literal:
            pieces.append(literal)
        if not inside:
            continue
        ranges = []
        for part in inside.split(","):
            match = _RANGE.fullmatch(part)
            if match is None or (match[2] is not None and int(match[2]) < int(match[1])):
                raise HostlistError(f"host list {item[:80]!r}: bad range {part!r}")
            ranges.append((match[1], match[2]))
        pieces.append(tuple(ranges))
    return tuple(pieces)


def _in_ranges(digits: str, ranges: _Ranges) -> bool:
    """Whether ``digits`` is one of the names the ranges expand to (``low-high`` pads to ``low``'s width)."""
    value = int(digits)
    for low, high in ranges:
        if high is None:
            if digits == low:
                return True
        elif int(low) <= value <= int(high) and digits == f"{value:0{len(low)}d}":
            return True
    return False


def _match(name: str, pieces: tuple[Union[str, _Ranges], ...]) -> bool:
    if not pieces:
        return not name
    head, rest = pieces[0], pieces[1:]
    if isinstance(head, str):
        return name.startswith(head) and _match(name[len(head) :], rest)
    digits = len(name) - len(name.lstrip("0123456789"))
    # Adjacent brackets (``n[1-2][3-4]``) leave the split of the digits open: try each.
    return any(_in_ranges(name[:k], head) and _match(name[k:], rest) for k in range(1, digits + 1))


def contains(text: str, name: str) -> bool:
    """Whether ``name`` is in host list ``text``, as ``name in expand(text)`` but without expanding it."""
    return any(_match(name, _pieces(item)) for item in _items(text.strip()))
