"""Where each setting of the effective config came from: the comments of ``healthd config show``.

A setting is the default (nothing wrote it), set in the file (at a line found by
``key_lines``), set by a ``[[hosts]]`` section that matched the node, or written under
an old name (``[node] KEY``, a key that moved from one check to another) and moved.
Beside a value that is not the default, its default. Works on the parsed TOML and
the file's text, as ``healthd.config.models.parse_config`` does; pure.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping, Optional, Sequence

from healthd.config.hosts import HostSection
from healthd.config.tomlwrite import string, value

Path = tuple[str, ...]

# A key of TOML 1.0 ("Keys"): bare, or a basic string without escapes, or a literal string.
# A quoted key with an escape is not matched: that key then gets no line, never a wrong one.
_PART = r"""(?:[A-Za-z0-9_-]+|"[^"\\]*"|'[^']*')"""
_DOTTED = rf"{_PART}(?:[ \t]*\.[ \t]*{_PART})*"
_ASSIGN = re.compile(rf"[ \t]*({_DOTTED})[ \t]*=")
_HEADER = re.compile(rf"[ \t]*(\[\[?)[ \t]*({_DOTTED})[ \t]*\]")
_PARTS = re.compile(_PART)
_MULTILINE_QUOTES = ('"""', "'''")


def _parts(dotted: str) -> Path:
    return tuple(p[1:-1] if p[0] in "\"'" else p for p in _PARTS.findall(dotted))


def key_lines(text: str) -> dict[Path, int]:
    """Each key the file's own tables set (by its path from the top) -> its line (1-based).

    A scanner of ``[table]`` headers and ``key =`` lines, not a TOML reader: lines inside a
    multi-line string are skipped, the body of a ``[[hosts]]`` entry or another array of
    tables is not the file's own, and a path found twice (one inside a string TOML let
    through) gets line 0, unknown, so a line given is never a guess.
    """
    found: dict[Path, int] = {}
    table: Optional[Path] = ()
    in_string: Optional[str] = None
    # TOML ends a line with LF or CRLF only (toml.io, "Spec"): splitting on "\n" numbers lines as tomllib does.
    for number, line in enumerate(text.split("\n"), 1):
        if in_string is not None:
            if line.count(in_string) % 2:
                in_string = None
            continue
        header = _HEADER.match(line)
        assign = None if header else _ASSIGN.match(line)
        if header is not None:
            path = _parts(header.group(2))
            array = header.group(1) == "[["
            table = None if array or path[0] == "hosts" else path
            if array and path != ("hosts",):
                found.setdefault(path, number)  # an array of tables repeats its header: the first one starts it
            elif table is not None:
                found[path] = 0 if path in found else number
        elif assign is not None and table is not None:
            path = (*table, *_parts(assign.group(1)))
            found[path] = 0 if path in found else number
        rest = line[assign.end() :] if assign is not None else ""
        opened = next((q for q in _MULTILINE_QUOTES if rest.count(q) % 2), None)
        if opened is not None:
            in_string = opened
    return found


def written(tables: Mapping[str, Any], path: Path) -> bool:
    """Whether ``tables`` (the file's, or a ``[[hosts]]`` section's) sets the key at ``path``."""
    for part in path[:-1]:
        inner = tables.get(part)
        if not isinstance(inner, dict):
            return False
        tables = inner
    return bool(path) and path[-1] in tables


def _line(lines: Mapping[Path, int], path: Path) -> int:
    """The line of ``path``, or of the nearest table or inline table above it that the file writes; 0 if unknown."""
    for end in range(len(path), 0, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return 0


class Provenance:
    """The file's own tables and text, the host sections that applied, and the settings that moved."""

    def __init__(
        self,
        source: str,
        text: str,
        raw: Mapping[str, Any],
        applied: Sequence[HostSection],
        moved: Mapping[Path, tuple[str, str]],
    ):
        self.source = source
        self.lines = key_lines(text)
        self.raw = raw
        self.applied = applied
        # (check, setting) -> the old place it was written at: ("node", key) or ("checks", check, key).
        self.old = {new: old for old, new in moved.items()}

    def _old_place(self, path: Path) -> Optional[Path]:
        if len(path) >= 3 and path[0] == "checks":
            old = self.old.get((path[1], path[2]))
            return (*old, *path[3:]) if old is not None else None
        return None

    def _in_file(self, path: Path) -> Optional[str]:
        if written(self.raw, path):
            line = _line(self.lines, path)
            return f"set in {self.source}" + (f":{line}" if line else "")
        old = self._old_place(path)
        if old is not None and written(self.raw, old):
            return _moved(old)
        return None

    def _in_section(self, section: HostSection, path: Path) -> Optional[str]:
        label = f"from [[hosts]] match {string(section.match)}"
        if written(section.tables, path):
            return label
        old = self._old_place(path)
        return f"{label}, {_moved(old)}" if old is not None and written(section.tables, old) else None

    def origin(self, path: Path, merges: bool) -> str:
        """Where the value at ``path`` came from; with ``merges`` (a list) every place that added to it."""
        places = [self._in_file(path), *(self._in_section(s, path) for s in self.applied)]
        named = [p for p in places if p is not None]
        if not named:
            return "default"
        return " + ".join(named) if merges else named[-1]


def _moved(old: Path) -> str:
    if old[0] == "node":
        return f"moved from [node] {'.'.join(old[1:])}"
    return f"moved from [checks.{old[1]}] {'.'.join(old[2:])}"


def leaves(document: Mapping[str, Any], path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Each value of ``document`` that is not a table, by its path: what gets a ``key = value`` line."""
    for name, item in document.items():
        if isinstance(item, Mapping):
            yield from leaves(item, (*path, name))
        else:
            yield (*path, name), item


_ABSENT = object()


def _at(document: Mapping[str, Any], path: Path) -> Any:
    item: Any = document
    for part in path:
        if not isinstance(item, Mapping) or part not in item:
            return _ABSENT
        item = item[part]
    return item


# The most of a default a comment shows: a long list's would push the value off a person's screen.
_DEFAULT_WIDTH = 40


def _default_text(default: Any) -> str:
    if default is _ABSENT:
        return "unset"
    text = value(default)
    return text if len(text) <= _DEFAULT_WIDTH else text[: _DEFAULT_WIDTH - 3] + "..."


def origins(document: Mapping[str, Any], defaults: Mapping[str, Any], sources: Provenance) -> dict[Path, str]:
    """Each value of the effective ``document`` -> where it came from, and its default (from ``defaults``,
    the effective document of an empty config) when it is another."""
    notes = {}
    for path, item in leaves(document):
        note = sources.origin(path, isinstance(item, list))
        default = _at(defaults, path)
        notes[path] = note if default == item else f"{note}; default {_default_text(default)}"
    return notes
