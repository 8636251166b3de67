"""Writes the TOML that healthd's config generators produce (``import-nhc``, ``baseline``, ``config show``).

Python's standard library reads TOML but does not write it; a config needs only
strings, numbers, booleans, lists, tables and arrays of tables, so this small
writer covers exactly that. Keys are quoted when they are not bare keys, strings
always are (TOML 1.0, "Keys" and "String"), and each table may carry a comment.

A basic string holds any Unicode scalar value except ``"``, ``\\`` and the control
characters, which must be escaped; a comment holds no control character but tab, and
ends at a newline. So every character that does not print (controls, separators,
format characters) is written as its ``\\uXXXX`` or ``\\UXXXXXXXX`` escape, in a string
and, as text a person can read, in a comment; everything else is written as it is
(UTF-8). A lone surrogate is no character at all and cannot be written.
"""

from __future__ import annotations

import math
import re
import textwrap
from typing import Any, Mapping, NamedTuple

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
COMMENT_KEY = "#"  # a table's own comment, written above its header


# TOML's short escapes (TOML 1.0, "String"); any other character is written as it is or as \\u/\\U.
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _code(char: str) -> str:
    """``char`` as TOML's escape of its code point (in a comment: text that reads as it)."""
    code = ord(char)
    return f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"


def _escaped(char: str) -> str:
    """A character of a string that does not print, as a TOML escape; ``ValueError`` for a lone surrogate."""
    if 0xD800 <= ord(char) <= 0xDFFF:
        raise ValueError(f"cannot write U+{ord(char):04X}, a lone surrogate (a byte that was not UTF-8?), as TOML")
    return _code(char)


def string(text: str) -> str:
    """``text`` as a TOML basic string, that ``tomllib.loads`` reads back as ``text``."""
    return '"' + "".join(_SHORT_ESCAPES.get(c) or (c if c.isprintable() else _escaped(c)) for c in text) + '"'


def comment(text: str) -> list[str]:
    """``text`` as comment lines, one per line of it, with what does not print written as escapes."""
    return [f"# {''.join(c if c.isprintable() else _code(c) for c in line)}".rstrip() for line in text.split("\n")]


def key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else string(name)


def value(item: Any) -> str:
    """One inline TOML value."""
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, int):
        return str(item)
    if isinstance(item, float):
        if math.isnan(item):  # no setting accepts it, and it is not even equal to itself
            raise ValueError(f"TOML has no place for {item!r} in a config")
        if math.isinf(item):  # a limit no count reaches (``healthd config show``): TOML 1.0's special floats
            return "inf" if item > 0 else "-inf"
        return repr(item)
    if isinstance(item, str):
        return string(item)
    if isinstance(item, (list, tuple)):
        return "[" + ", ".join(value(v) for v in item) + "]"
    if isinstance(item, Mapping):
        return "{" + ", ".join(f"{key(k)} = {value(v)}" for k, v in item.items() if k != COMMENT_KEY) + "}"
    raise TypeError(f"cannot write {type(item).__name__} as TOML")


# Longer than this, an array is written one item per line (TOML 1.0, "Array": arrays may span lines).
WIDTH = 100


# A line with its comment is at most this long; a longer one has its comment on the line above.
NOTE_WIDTH = 120


class Notes(NamedTuple):
    """Comments on values, by their key's path from the top: one after the value, and lines above it."""

    trailing: Mapping[tuple[str, ...], str] = {}
    above: Mapping[tuple[str, ...], str] = {}


NO_NOTES = Notes()


def _assignment(name: str, item: Any, path: tuple[str, ...] = (), notes: Notes = NO_NOTES) -> list[str]:
    """``name = value``, or an array too long for one line as one item per line, for a person to review.

    A note on it follows the value (a comment may end any line, one inside an array too:
    TOML 1.0, "Array"), or stands above it when the line would grow past ``NOTE_WIDTH``.
    """
    line = f"{key(name)} = {value(item)}"
    if len(line) <= WIDTH or not isinstance(item, (list, tuple)) or len(item) < 2:
        lines = [line]
    else:
        lines = [f"{key(name)} = [", *(f"    {value(v)}," for v in item), "]"]
    above = notes.above.get(path)
    before = wrapped(above, NOTE_WIDTH) if above else []
    trailing = notes.trailing.get(path)
    if trailing:
        note = comment(trailing.replace("\n", " "))[0]
        if len(lines[0]) + 2 + len(note) <= NOTE_WIDTH:
            lines[0] += "  " + note
        else:
            before.extend(wrapped(trailing, NOTE_WIDTH))
    return [*before, *lines]


def wrapped(text: str, width: int) -> list[str]:
    """``text`` as comment lines of at most ``width`` characters, broken between words."""
    return comment("\n".join(textwrap.wrap(" ".join(text.split()), width - 2)))


def _is_table_array(item: Any) -> bool:
    return isinstance(item, list) and bool(item) and all(isinstance(v, Mapping) for v in item)


def _header(out: list[str], table: Mapping[str, Any], header: str) -> None:
    if out:
        out.append("")
    note = table.get(COMMENT_KEY)
    if note:
        out.extend(comment(str(note)))
    out.append(header)


def _body(path: list[str], table: Mapping[str, Any], out: list[str], notes: Notes = NO_NOTES) -> None:
    """The table's own values, then each subtable under its dotted header."""
    for name, item in table.items():
        if name == COMMENT_KEY or isinstance(item, Mapping) or (path == [] and name == "hosts"):
            continue
        out.extend(_assignment(name, item, (*path, name), notes))
    for name, item in table.items():
        if name == COMMENT_KEY or not isinstance(item, Mapping):
            continue
        sub = [*path, name]
        own = [k for k, v in item.items() if k != COMMENT_KEY and not isinstance(v, Mapping)]
        # A table holding only tables needs no header of its own (TOML's implicit super-tables).
        if own or item.get(COMMENT_KEY) or not any(isinstance(v, Mapping) for v in item.values()):
            _header(out, item, "[" + ".".join(key(p) for p in sub) + "]")
        _body(sub, item, out, notes)


def dumps(document: Mapping[str, Any], notes: Notes = NO_NOTES) -> str:
    """``document`` as TOML: its values, its tables, then a top-level ``hosts`` list as ``[[hosts]]`` entries.

    ``notes`` are comments on its values (``healthd config show``: where each came from).
    """
    out: list[str] = []
    _body([], document, out, notes)
    hosts = document.get("hosts")
    if hosts is not None and not _is_table_array(hosts):
        raise TypeError("hosts must be a list of tables")
    for entry in hosts or []:
        _header(out, entry, "[[hosts]]")
        _body(["hosts"], entry, out)
    return "\n".join(out) + "\n"
