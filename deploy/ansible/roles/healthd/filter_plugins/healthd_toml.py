"""The ``healthd_toml`` filter: renders the role's configuration dict as a TOML document.

Values are written as they are, never coerced: a typo such as ``interval = "eight"``
or ``dry_run = "ture"`` reaches healthd, whose validation names the key, instead of
silently becoming 0 or false. ``None`` means "not set" (the role's defaults use it
for optional keys) and is left out; TOML has no null. A table with nothing set
is left out too (to healthd an empty table means the same as none). Tables become ``[a.b]``
sections, dicts inside lists become inline tables, and keys that are not bare
TOML keys (``"63"`` for an Xid override, names with dots) are quoted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Callable

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
# TOML 1.0 basic strings: these must be escaped; every other control character as \uXXXX.
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


class TomlRenderError(ValueError):
    """A value TOML cannot hold; ``str()`` names its key path."""


def _string(text: str) -> str:
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _key(key: object, path: str) -> str:
    if not isinstance(key, (str, int)) or isinstance(key, bool):
        raise TomlRenderError(f"{path}: key {key!r} is not a string")
    text = str(key)
    return text if _BARE_KEY.match(text) else _string(text)


def _value(value: Any, path: str) -> str:
    """One value on the right of ``=``: scalars, arrays, inline tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, Mapping):
        items = [f"{_key(k, path)} = {_value(v, f'{path}.{k}')}" for k, v in value.items() if v is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    if isinstance(value, Sequence):
        items = []
        for index, item in enumerate(value):
            if item is None:
                raise TomlRenderError(f"{path}[{index}]: null in a list (TOML has no null)")
            items.append(_value(item, f"{path}[{index}]"))
        return "[" + ", ".join(items) + "]"
    raise TomlRenderError(f"{path}: {type(value).__name__} {value!r} cannot be written as TOML")


def _unset(value: Any) -> bool:
    """None, or a table holding nothing but unset values."""
    return value is None or (isinstance(value, Mapping) and all(_unset(v) for v in value.values()))


def _table(table: Mapping[Any, Any], path: str, lines: list[str]) -> None:
    subtables = []
    for key, value in table.items():
        name = _key(key, path or "(top level)")
        full = f"{path}.{name}" if path else name
        if _unset(value):
            continue
        if isinstance(value, Mapping):
            subtables.append((full, value))
        else:
            lines.append(f"{name} = {_value(value, full)}")
    for full, value in subtables:
        lines.extend(["", f"[{full}]"])
        _table(value, full, lines)


def healthd_toml(document: Mapping[Any, Any]) -> str:
    """``document`` (a dict of tables) as TOML text ending in a newline."""
    from ansible.errors import AnsibleFilterError

    if not isinstance(document, Mapping):
        raise AnsibleFilterError(f"healthd_toml: expected a dict, got {type(document).__name__}")
    lines: list[str] = []
    try:
        _table(document, "", lines)
    except TomlRenderError as exc:
        raise AnsibleFilterError(f"healthd_toml: {exc}") from None
    return "\n".join(lines).lstrip("\n") + "\n"


class FilterModule:
    """Ansible's entry point for the role's filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"healthd_toml": healthd_toml}
