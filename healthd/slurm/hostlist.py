"""Slurm host lists (``node[1-3,7],gpu[01-02]-ib[0-1]``) expanded into node names.

One home for the notation, used by the breaker (the groups sinfo prints) and by
``healthd fleet`` (accounting's node lists). The expansion is python-hostlist's, a
library kept for exactly this notation, imported on first use; results are
memoised, since a fleet's job runs repeat the same lists many times. The breaker
expands only the groups out with healthd's reason, never a whole partition; the
fleet expands every node list of the accounting it reads. Whether one node is in
a list (``contains``) is answered from the list's ranges, without expanding it: a
group of 100,000 idle nodes costs a few comparisons, not 40 ms (docs/scale.md).

Both read a list through one parser (``_parse``) first, so both refuse the same
lists, each with a ``HostlistError``: a space or control character in it,
python-hostlist's rules (ASCII digits, no empty or nested brackets, ``low <= high``,
at most 100,000 names per comma-separated item: its ``MAX_SIZE``, far above any
partition), a bound too long for Python's int conversion, and more than 64
brackets in one item (where python-hostlist's recursion would end in a
RecursionError). A property test holds the two to the same answers
(tests/slurm/test_hostlist.py).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple, Union

_MEMO = 1 << 16
# python-hostlist's MAX_SIZE: the most names one comma-separated item may expand to.
_MAX_NAMES = 100_000
# Far above any real list (rack, node, port are three), far below Python's recursion limit.
_MAX_BRACKETS = 64
# [0-9], not \d: \d takes any script's digits, python-hostlist (and Slurm) only ASCII ones.
_SINGLE = re.compile(r"[0-9]+")
_SPAN = re.compile(r"([0-9]+)-([0-9]+)")
_PIECE = re.compile(r"([^\[\]]*)(?:\[([^\[\]]*)\])?")
_DIGITS = "0123456789"


class HostlistError(ValueError):
    """A host list that is not Slurm's notation."""


class _Range(NamedTuple):
    """One range of a bracket: ``text`` for a single number (kept as written), else ``low``-``high``.

    A span's names are padded to ``width``, the width of its low bound as written;
    ``longest`` is the longest name digits it can give.
    """

    text: str
    low: int
    high: int
    width: int
    longest: int

    @property
    def size(self) -> int:
        return 1 if self.text else self.high - self.low + 1


_Piece = Union[str, tuple[_Range, ...]]


def _items(text: str) -> list[str]:
    """``text`` split at the commas outside brackets (empty items dropped, as python-hostlist does)."""
    items, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if depth not in (0, 1):
            raise HostlistError(f"host list {text[:80]!r}: unbalanced or nested brackets")
        if char == "," and depth == 0:
            items.append(text[start:index])
            start = index + 1
    if depth:
        raise HostlistError(f"host list {text[:80]!r}: unbalanced brackets")
    return [item for item in (*items, text[start:]) if item]


def _range(item: str, part: str) -> _Range:
    if _SINGLE.fullmatch(part):
        return _Range(part, 0, 0, 0, 0)
    span = _SPAN.fullmatch(part)
    if span is None:
        raise HostlistError(f"host list {item[:80]!r}: bad range {part[:40]!r}")
    try:
        low, high = int(span[1]), int(span[2])
    except ValueError as exc:  # a bound past Python's int conversion limit (sys.set_int_max_str_digits)
        raise HostlistError(f"host list {item[:80]!r}: bad range: {exc}") from None
    if high < low:
        raise HostlistError(f"host list {item[:80]!r}: bad range {part[:40]!r} (start > stop)")
    width = len(span[1])
    return _Range("", low, high, width, max(width, len(span[2])))


def _pieces(item: str) -> tuple[_Piece, ...]:
    """One item (``r[1-2]-n[01-08]``) as its literal texts and its brackets' ranges; at most 100,000 names."""
    pieces: list[_Piece] = []
    names, brackets = 1, 0
    for match in _PIECE.finditer(item):
        literal, inside = match[1], match[2]
        if literal:
            pieces.append(literal)
        if inside is None:
            continue
        bracket = tuple(_range(item, part) for part in inside.split(","))
        pieces.append(bracket)
        names, brackets = names * sum(r.size for r in bracket), brackets + 1
        if names > _MAX_NAMES or brackets > _MAX_BRACKETS:
            raise HostlistError(f"host list {item[:80]!r}: more than {_MAX_NAMES} names or {_MAX_BRACKETS} brackets")
    return tuple(pieces)


@lru_cache(maxsize=_MEMO)
def _parse(text: str) -> tuple[tuple[_Piece, ...], ...]:
    """Each item of a stripped list as its pieces; raises HostlistError for a list expand would refuse.

    A space or a control character is no part of a node name; python-hostlist would
    silently drop what follows a newline.
    """
    if not text.isprintable() or any(char.isspace() for char in text):
        raise HostlistError(f"host list {text[:80]!r}: a space or control character")
    return tuple(_pieces(item) for item in _items(text))


@lru_cache(maxsize=_MEMO)
def expand(text: str) -> tuple[str, ...]:
    """Every node name in ``text``, in order: ``n[1-2],m3`` -> ("n1", "n2", "m3"); "" -> ()."""
    text = text.strip()
    _parse(text)
    if "[" not in text:
        return tuple(name for name in text.split(",") if name)
    import hostlist

    try:
        return tuple(hostlist.expand_hostlist(text))
    except (hostlist.BadHostlist, ValueError, RecursionError) as exc:
        raise HostlistError(f"host list {text[:80]!r}: {exc}") from None


def _bracket_ends(name: str, at: int, bracket: tuple[_Range, ...]) -> set[int]:
    """Where in ``name`` one of the bracket's names, starting at ``at``, can end."""
    run = len(name) - at - len(name[at:].lstrip(_DIGITS))
    ends = set()
    for r in bracket:
        if r.text:
            if name.startswith(r.text, at):
                ends.add(at + len(r.text))
            continue
        # A span's name is its number padded to ``width``: longer only without a leading zero.
        for k in range(r.width, min(run, r.longest) + 1):
            digits = name[at : at + k]
            if (k == r.width or digits[0] != "0") and r.low <= int(digits) <= r.high:
                ends.add(at + k)
    return ends


def _match(name: str, pieces: tuple[_Piece, ...]) -> bool:
    """Whether ``name`` is one of the item's names: the positions each piece can end at, piece by piece."""
    ends = {0}
    for piece in pieces:
        if isinstance(piece, str):
            ends = {at + len(piece) for at in ends if name.startswith(piece, at)}
        else:
            ends = {end for at in ends for end in _bracket_ends(name, at, piece)}
        if not ends:
            return False
    return len(name) in ends


def contains(text: str, name: str) -> bool:
    """Whether ``name`` is in host list ``text``, as ``name in expand(text)`` but without expanding it."""
    return any(_match(name, pieces) for pieces in _parse(text.strip()))
