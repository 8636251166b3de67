"""Writes the TOML that healthd's config generators produce (``import-nhc``, ``baseline``).

Python's standard library reads TOML but does not write it; a config needs only
strings, numbers, booleans, lists, tables and arrays of tables, so this small
writer covers exactly that. Keys are quoted when they are not bare keys, strings
always are (TOML 1.0, "Keys" and "String"), and each table may carry a comment.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
COMMENT_KEY = "#"  # a table's own comment, written above its header


def key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else json.dumps(name)


def value(item: Any) -> str:
    """One inline TOML value."""
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, int):
        return str(item)
    if isinstance(item, float):
        if not math.isfinite(item):
            raise ValueError(f"TOML has no place for {item!r} in a config")
        return repr(item)
    if isinstance(item, str):
        # JSON's string escapes are TOML's basic-string escapes, and it writes no others.
        return json.dumps(item)
    if isinstance(item, (list, tuple)):
        return "[" + ", ".join(value(v) for v in item) + "]"
    if isinstance(item, Mapping):
        return "{" + ", ".join(f"{key(k)} = {value(v)}" for k, v in item.items() if k != COMMENT_KEY) + "}"
    raise TypeError(f"cannot write {type(item).__name__} as TOML")


def _is_table_array(item: Any) -> bool:
    return isinstance(item, list) and bool(item) and all(isinstance(v, Mapping) for v in item)


def _header(out: list[str], table: Mapping[str, Any], header: str) -> None:
    if out:
        out.append("")
    comment = table.get(COMMENT_KEY)
    if comment:
        out.extend(f"# {line}".rstrip() for line in str(comment).splitlines())
    out.append(header)


def _body(path: list[str], table: Mapping[str, Any], out: list[str]) -> None:
    """The table's own values, then each subtable under its dotted header."""
    for name, item in table.items():
        if name == COMMENT_KEY or isinstance(item, Mapping) or (path == [] and name == "hosts"):
            continue
        out.append(f"{key(name)} = {value(item)}")
    for name, item in table.items():
        if name == COMMENT_KEY or not isinstance(item, Mapping):
            continue
        sub = [*path, name]
        own = [k for k, v in item.items() if k != COMMENT_KEY and not isinstance(v, Mapping)]
        # A table holding only tables needs no header of its own (TOML's implicit super-tables).
        if own or item.get(COMMENT_KEY) or not any(isinstance(v, Mapping) for v in item.values()):
            _header(out, item, "[" + ".".join(key(p) for p in sub) + "]")
        _body(sub, item, out)


def dumps(document: Mapping[str, Any]) -> str:
    """``document`` as TOML: its values, its tables, then a top-level ``hosts`` list as ``[[hosts]]`` entries."""
    out: list[str] = []
    _body([], document, out)
    hosts = document.get("hosts")
    if hosts is not None and not _is_table_array(hosts):
        raise TypeError("hosts must be a list of tables")
    for entry in hosts or []:
        _header(out, entry, "[[hosts]]")
        _body(["hosts"], entry, out)
    return "\n".join(out) + "\n"
