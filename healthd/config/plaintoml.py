"""TOML for the commands that must start fast: the usual subset read here, everything else by tomllib.

``healthd status``, the hook and a cached ``check --once`` need one or two keys of the
config; importing tomllib (and ``typing`` and ``string`` with it) costs them about 5 ms
of CPU, more than the rest of their work. Configs, written by hand or by healthd's own
writers (``healthd.config.tomlwrite``, the Ansible role's filter), keep to a small part of TOML:
``[table]`` and ``[[array]]`` headers of bare keys; ``key = value`` with a bare key; basic
strings (with the escapes JSON and TOML share), literal strings, decimal integers, floats,
booleans, arrays (over several lines, with comments) and inline tables; comments.
``plain`` reads such a file; ``loads`` hands any other file to tomllib whole, so a file
with an error, or with anything outside this subset (dotted or quoted keys, multi-line
strings, dates, hexadecimal numbers, inf and nan, a table named after its subtables), is
parsed, and its errors reported, exactly as before. What ``plain`` accepts it returns as
tomllib would (tests/fuzz/test_fuzz_config.py holds it to that).

The rules are TOML 1.0.0's (toml.io/en/v1.0.0): whitespace is space and tab; a newline LF
or CRLF; no control character but tab in a string or a comment; integers without leading
zeros, ``_`` only between digits; an inline table on one line, without a trailing comma;
a table defined once; an inline table or a static array never extended by a header.
"""

from __future__ import annotations

import re

from healthd.config.defaults import toml_module

TYPE_CHECKING = False  # not typing's: importing typing at run time would slow `healthd status` (bench/README.md)
if TYPE_CHECKING:
    from typing import Any, Optional

_TEXT = r"[^\x00-\x08\x0a-\x1f\x7f"  # an open character class: no control character but tab
_WS = re.compile(r"[ \t]*")
_COMMENT = re.compile(rf"#{_TEXT}]*")
_KEY = re.compile(r"[A-Za-z0-9_-]+")
_HEADER = re.compile(r"(\[\[?)[ \t]*([A-Za-z0-9_-]+(?:[ \t]*\.[ \t]*[A-Za-z0-9_-]+)*)[ \t]*(\]\]?)")
_EQUALS = re.compile(r"[ \t]*=[ \t]*")
_BASIC = re.compile(rf'"((?:{_TEXT}"\\]|\\(?:[btnfr"\\]|u[0-9A-Fa-f]{{4}}|U[0-9A-Fa-f]{{8}}))*)"')
_ESCAPE = re.compile(r"\\(?:([btnfr\"\\])|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8}))")
_ESCAPED = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}
_LITERAL = re.compile(rf"'({_TEXT}']*)'")
_DIGITS = r"[0-9](?:_?[0-9])*"
_INTEGER = r"[+-]?(?:0|[1-9](?:_?[0-9])*)"
_FLOAT = re.compile(rf"{_INTEGER}(?:\.{_DIGITS}(?:[eE][+-]?{_DIGITS})?|[eE][+-]?{_DIGITS})")
_INT = re.compile(_INTEGER)
_BOOL = re.compile(r"true|false")
# Between an array's items: white space, newlines and comments.
_GAP = re.compile(rf"(?:[ \t]|\r?\n|#{_TEXT}]*)*")


class _Outside(Exception):
    """The text leaves the subset (or breaks a rule): tomllib reads it instead."""


def loads(text: str) -> dict[str, Any]:
    """``text`` as TOML, as ``tomllib.loads`` gives it; raises tomllib's ``TOMLDecodeError`` (a ValueError).

    A ``ValueError`` too for arrays or inline tables nested past the interpreter's
    recursion limit, where tomllib's recursive reader gives up with a ``RecursionError``.
    """
    document = plain(text)
    if document is not None:
        return document
    try:
        parsed: dict[str, Any] = toml_module().loads(text)
    except RecursionError:
        raise ValueError(NESTED_TOO_DEEPLY) from None
    return parsed


NESTED_TOO_DEEPLY = "arrays or inline tables nested too deeply to read"


def plain(text: str) -> Optional[dict[str, Any]]:
    """The document when ``text`` is valid TOML within the subset; None for anything else."""
    try:
        return _Reader(text).document()
    except (_Outside, RecursionError):
        return None


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.root: dict[str, Any] = {}
        # Tables a header may still reach (made by headers, or on their way); arrays of tables.
        self.open: set[int] = {id(self.root)}
        self.arrays: set[int] = set()

    def _take(self, pattern: re.Pattern[str]) -> Optional[re.Match[str]]:
        match = pattern.match(self.text, self.pos)
        if match is not None:
            self.pos = match.end()
        return match

    def document(self) -> dict[str, Any]:
        table = self.root
        while self.pos < len(self.text):
            self._take(_WS)
            if self.text.startswith("[", self.pos):
                header = self._take(_HEADER)
                if header is None or len(header.group(1)) != len(header.group(3)):
                    raise _Outside
                names = [name.strip(" \t") for name in header.group(2).split(".")]
                table = self._header(names, many=len(header.group(1)) == 2)
            elif _KEY.match(self.text, self.pos):
                self._pair(table)
            self._end_of_line()
        return self.root

    def _end_of_line(self) -> None:
        self._take(_WS)
        self._take(_COMMENT)
        if self.text.startswith("\n", self.pos):
            self.pos += 1
        elif self.text.startswith("\r\n", self.pos):
            self.pos += 2
        elif self.pos < len(self.text):
            raise _Outside

    def _header(self, names: list[str], many: bool) -> dict[str, Any]:
        table = self.root
        for name in names[:-1]:
            table = self._reach(table.setdefault(name, self._new()))
        last = names[-1]
        if not many:
            if last in table:
                raise _Outside  # defined before, or named by an earlier subtable: left to tomllib
            table[last] = self._new()
            return self._reach(table[last])
        if last not in table:
            array: list[dict[str, Any]] = []
            self.arrays.add(id(array))
            table[last] = array
        elif id(table[last]) not in self.arrays:
            raise _Outside
        table[last].append(self._new())
        return self._reach(table[last][-1])

    def _new(self) -> dict[str, Any]:
        table: dict[str, Any] = {}
        self.open.add(id(table))
        return table

    def _reach(self, value: Any) -> dict[str, Any]:
        """The table a header goes into: a header's table, or the last table of an array of tables."""
        if isinstance(value, list) and id(value) in self.arrays:
            value = value[-1]
        if not isinstance(value, dict) or id(value) not in self.open:
            raise _Outside  # a value, a static array or an inline table
        return value

    def _pair(self, table: dict[str, Any]) -> None:
        key = self._take(_KEY)
        if key is None or self._take(_EQUALS) is None or key.group() in table:
            raise _Outside
        table[key.group()] = self._value()

    def _value(self) -> Any:
        text, pos = self.text, self.pos
        head = text[pos : pos + 1]
        if head == '"':
            return self._basic()
        if head == "'":
            literal = self._take(_LITERAL)
            if literal is None:
                raise _Outside
            return literal.group(1)
        if head == "[":
            return self._array()
        if head == "{":
            return self._inline_table()
        if self._take(_BOOL) is not None:
            return text[pos : self.pos] == "true"
        number = self._take(_FLOAT)
        if number is not None:
            return float(number.group().replace("_", ""))
        number = self._take(_INT)
        if number is not None:
            return int(number.group().replace("_", ""))
        raise _Outside

    def _basic(self) -> str:
        string = self._take(_BASIC)
        if string is None:
            raise _Outside
        return _ESCAPE.sub(_unescape, string.group(1))

    def _array(self) -> list[Any]:
        self.pos += 1
        items: list[Any] = []
        while True:
            self._take(_GAP)
            if self.text.startswith("]", self.pos):
                self.pos += 1
                return items
            items.append(self._value())
            self._take(_GAP)
            if self.text.startswith(",", self.pos):
                self.pos += 1
            elif not self.text.startswith("]", self.pos):
                raise _Outside

    def _inline_table(self) -> dict[str, Any]:
        self.pos += 1
        table: dict[str, Any] = {}
        self._take(_WS)
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return table
        while True:
            self._pair(table)
            self._take(_WS)
            if self.text.startswith("}", self.pos):
                self.pos += 1
                return table
            if not self.text.startswith(",", self.pos):
                raise _Outside
            self.pos += 1
            self._take(_WS)


def _unescape(match: re.Match[str]) -> str:
    simple, short, long = match.groups()
    if simple is not None:
        return _ESCAPED[simple]
    code = int(short or long, 16)
    if 0xD800 <= code <= 0xDFFF or code > 0x10FFFF:
        raise _Outside  # not a Unicode scalar value: an error tomllib names
    return chr(code)
