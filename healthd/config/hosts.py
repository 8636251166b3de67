"""Per-host sections of the config: one file for a heterogeneous cluster, as NHC's targets allow.

A ``[[hosts]]`` entry names which nodes it is for with ``match`` and holds any
top-level tables (``[hosts.checks.gpu]``, ``[hosts.policy]`` ...). On a node whose
name matches, each matching entry is merged over the file's own tables in file
order: tables merge key by key, a list gains the items it lacks (a GPU node expects
the common mounts and its own, as NHC's independent target lines add up), and any
other value replaces the one before. A list of tables whose setting names an identity
key (``[checks.mounts] expect``: each item is one mount, named by ``path``) gains the
items of new subjects, and an item for a subject it has replaces that item: a host
section corrects an expectation instead of adding a contradicting one. The match
strings are NHC's (its README, "Match Strings"), so ``healthd import-nhc`` carries an
NHC target over unchanged:

- a glob, ``gpu*`` (``fnmatch``, case-sensitive);
- a regular expression between slashes, ``/^n00[0-5][0-9]$/`` (searched, as bash's ``=~``);
- node ranges in braces, ``{n00[20-39],login1}``: comma-separated names, each with at
  most one bracketed range of zero-padded numbers, as NHC supports them;
- any of these after ``!``, which negates it.

Pure: works on the parsed TOML, before validation, so every key of a merged section
is validated like the file's own.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

from healthd.text import did_you_mean

HOSTS_KEY = "hosts"
_RANGE_NAME = re.compile(r"([^\[\]]*)(?:\[(\d+)-(\d+)\])?([^\[\]]*)")


class HostMatchError(ValueError):
    """A match string that is not one of the accepted forms; the message says why."""


@dataclass(frozen=True)
class HostSection:
    """One ``[[hosts]]`` entry: its position (0-based), its match string and its tables."""

    index: int
    match: str
    tables: dict[str, Any]

    @property
    def label(self) -> str:
        return f"hosts[{self.index}] (match {self.match!r})"


def _range_matcher(item: str) -> Callable[[str], bool]:
    """One name of a braced node range: ``n00[20-39].phys`` (one range, its digits zero-padded)."""
    parsed = _RANGE_NAME.fullmatch(item)
    if not item or parsed is None:
        raise HostMatchError(f"{item!r}: a node range name has at most one [low-high] range of numbers")
    prefix, low, high, suffix = parsed.groups()
    if low is None:
        return lambda name: name == item
    width, lo, hi = len(low), int(low), int(high)
    if lo > hi:
        raise HostMatchError(f"{item!r}: the range [{low}-{high}] runs backwards")
    number = re.compile(re.escape(prefix) + r"(\d+)" + re.escape(suffix))

    def matches(name: str) -> bool:
        found = number.fullmatch(name)
        if found is None:
            return False
        digits = found.group(1)
        # NHC's ranges are pdsh's: zero-padded to the width of the low bound.
        return (len(digits) == width or (len(digits) > width and not digits.startswith("0"))) and (
            lo <= int(digits) <= hi
        )

    return matches


def matcher(match: str) -> Callable[[str], bool]:
    """The test of a host name against an NHC match string; ``HostMatchError`` if it is not one."""
    if match.startswith("!"):
        inner = matcher(match[1:])
        return lambda name: not inner(name)
    if not match:
        raise HostMatchError("an empty match string")
    if len(match) >= 2 and match.startswith("/") and match.endswith("/"):
        try:
            pattern = re.compile(match[1:-1])
        except re.error as exc:
            raise HostMatchError(f"{match!r}: not a regular expression: {exc}") from None
        return lambda name: pattern.search(name) is not None
    if match.startswith("{") and match.endswith("}"):
        names = [_range_matcher(item.strip()) for item in match[1:-1].split(",")]
        return lambda name: any(test(name) for test in names)
    return lambda name: fnmatch.fnmatchcase(name, match)


def host_sections(raw: dict[str, Any]) -> tuple[list[HostSection], list[str]]:
    """The ``[[hosts]]`` entries of ``raw`` (removed from it), and the problems with them."""
    entries = raw.pop(HOSTS_KEY, [])
    if not isinstance(entries, list):
        return [], [f"{HOSTS_KEY}: must be an array of tables ([[hosts]]), got {type(entries).__name__}"]
    sections: list[HostSection] = []
    problems: list[str] = []
    for index, entry in enumerate(entries):
        where = f"{HOSTS_KEY}[{index}]"
        if not isinstance(entry, dict):
            problems.append(f"{where}: must be a table")
            continue
        tables = dict(entry)
        match = tables.pop("match", None)
        if not isinstance(match, str):
            problems.append(f"{where}.match: required: a match string such as 'gpu*', '/regex/' or '{{n[01-16]}}'")
            # A misspelt match is the likeliest cause; the section's other keys wait for it to be found.
            guesses = [(key, did_you_mean(key, ("match",))) for key in tables]
            problems.extend(f"{where}.{key}: unknown key{guess}" for key, guess in guesses if guess)
            continue
        try:
            matcher(match)
        except HostMatchError as exc:
            problems.append(f"{where}.match: {exc}")
            continue
        if HOSTS_KEY in tables:
            problems.append(f"{where}.{HOSTS_KEY}: host sections do not nest")
            continue
        sections.append(HostSection(index, match, tables))
    return sections, problems


# Where a list of tables sits (("checks", "mounts", "expect")) -> the key naming each item's subject ("path").
Identities = Mapping[tuple[str, ...], str]


def merge(
    base: dict[str, Any], over: dict[str, Any], identities: Optional[Identities] = None, place: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``base`` with ``over`` laid on it: tables merge key by key, lists gain the items they lack, values replace.

    In a list that ``identities`` names (by its keys from the top, ``place`` being where
    ``base`` sits), an item of ``over`` replaces the item of ``base`` about the same subject.
    """
    merged = dict(base)
    for key, value in over.items():
        before = merged.get(key)
        if isinstance(before, dict) and isinstance(value, dict):
            merged[key] = merge(before, value, identities, (*place, key))
        elif isinstance(before, list) and isinstance(value, list):
            merged[key] = _merge_list(before, value, (identities or {}).get((*place, key)))
        else:
            merged[key] = value
    return merged


def overlaid(
    raw: dict[str, Any], overlays: Sequence[Mapping[str, Any]], identities: Optional[Identities] = None
) -> dict[str, Any]:
    """``raw`` with ``overlays`` laid on it last (``healthd check --expect`` and ``--timeout``).

    The overlays combine with one another as host sections do (``merge``: two expectations
    of one check add up); the result is laid on ``raw`` table by table, and every value it
    sets, a list included, replaces the one there: an expectation's mounts are the ones judged.
    """
    combined: dict[str, Any] = {}
    for overlay in overlays:
        combined = merge(combined, dict(overlay), identities)
    return _laid(raw, combined)


def _laid(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    laid = dict(base)
    for key, value in over.items():
        before = laid.get(key)
        laid[key] = _laid(before, value) if isinstance(before, dict) and isinstance(value, dict) else value
    return laid


def _merge_list(base: list[Any], over: list[Any], identity: Optional[str]) -> list[Any]:
    merged = list(base)
    for item in over:
        subject = _subject(item, identity)
        same = next(
            (i for i, old in enumerate(merged) if subject is not None and _subject(old, identity) == subject), None
        )
        if same is not None:
            merged[same] = item
        elif item not in merged:
            merged.append(item)
    return merged


def _subject(item: Any, identity: Optional[str]) -> Any:
    """What a list item is about (its ``identity`` key's value), or None for an item without one."""
    return item.get(identity) if identity is not None and isinstance(item, dict) else None


def for_host(
    raw: dict[str, Any], sections: list[HostSection], host: str, identities: Optional[Identities] = None
) -> tuple[dict[str, Any], list[HostSection]]:
    """``raw`` with every section that matches ``host`` merged over it in order, and those sections."""
    applied = [section for section in sections if matcher(section.match)(host)]
    for section in applied:
        raw = merge(raw, section.tables, identities)
    return raw, applied
