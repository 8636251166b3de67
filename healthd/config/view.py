"""Validated settings as plain, read-only values that need no pydantic to rebuild.

A validated config (the pydantic models of ``healthd.config.models`` and of each check)
is turned into a tagged JSON-able tree by ``encode`` and back into ``View``s by
``decode``. A ``View`` answers the same attribute reads as the model it came from,
with the same value types (``Path`` stays ``Path``, a tuple a tuple, a ``Status`` a
``Status``), so code that reads settings cannot tell the two apart. Every config a
pass uses goes through this round trip, whether it was validated just now or read
back from the cache (``healthd.config.cache``), so both paths give identical values.

Tags (one-key objects): ``m`` a model's fields, ``c`` one of the config's own
tables (``healthd.config.sections``, rebuilt as itself: module, class, fields), ``t`` a tuple, ``d`` a dict as
pairs, ``p`` a path, ``e`` an enum member as (module, class, value). Lists and
scalars are themselves. A value of any other type cannot be encoded
(``Unencodable``): such a config is used as validated and never cached.
"""

from __future__ import annotations

import enum
import importlib
from pathlib import Path, PurePath
from typing import Any, Optional

from healthd.config.sections import ConfigTable


class Unencodable(TypeError):
    """A validated value of a type the view cannot carry."""


class View:
    """A model's validated fields, read as attributes; immutable, compared by value."""

    __slots__ = ("_fields", "_kind")

    def __init__(self, kind: str, fields: dict[str, Any]) -> None:
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_fields", fields)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(f"{self._kind} has no setting {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{self._kind} is read-only")

    def __eq__(self, other: object) -> bool:
        if isinstance(getattr(type(other), "model_fields", None), dict):  # the model this view stands for
            try:
                other = as_view(other)
            except Unencodable:
                return False
        if not isinstance(other, View):
            return NotImplemented
        return bool(self._kind == other._kind and self._fields == other._fields)

    def __hash__(self) -> int:
        return hash((self._kind, tuple(self._fields.items())))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._fields.items())
        return f"{self._kind}({inner})"


def encode(value: Any) -> Any:
    """The tagged tree of a validated value; raises ``Unencodable``."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        kind = type(value)
        return {"e": [kind.__module__, kind.__qualname__, encode(value.value)]}
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, PurePath):
        return {"p": str(value)}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, tuple):
        return {"t": [encode(v) for v in value]}
    if isinstance(value, dict):
        return {"d": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, ConfigTable):  # the config's own tables
        table = type(value)
        values = {name: encode(v) for name, v in value.values().items()}
        return {"c": [table.__module__, table.__qualname__, values]}
    fields = fields_of(value)  # a pydantic model, or the view of one
    if fields is not None:
        name = value._kind if isinstance(value, View) else type(value).__name__
        return {"m": [name, {key: encode(v) for key, v in fields.items()}]}
    raise Unencodable(f"cannot keep a {type(value).__name__} in a settings view")


def fields_of(value: Any) -> Optional[dict[str, Any]]:
    """The fields of a pydantic model or of its ``View``, in the model's order; None for any other value."""
    if isinstance(value, View):
        return dict(value._fields)
    fields = getattr(type(value), "model_fields", None)
    if isinstance(fields, dict):
        return {name: getattr(value, name) for name in fields}
    return None


def decode(tree: Any) -> Any:
    """The value ``encode`` gave ``tree`` for, with models as ``View``s; raises ``ValueError`` on a bad tree."""
    if tree is None or isinstance(tree, (bool, str, int, float)):
        return tree
    if isinstance(tree, list):
        return [decode(v) for v in tree]
    if not isinstance(tree, dict) or len(tree) != 1:
        raise ValueError(f"not a settings tree: {tree!r}")
    ((tag, body),) = tree.items()
    if tag == "m" and isinstance(body, list) and len(body) == 2 and isinstance(body[1], dict):
        return View(str(body[0]), {str(k): decode(v) for k, v in body[1].items()})
    if tag == "t" and isinstance(body, list):
        return tuple(decode(v) for v in body)
    if tag == "d" and isinstance(body, list):
        return {decode(k): decode(v) for k, v in body}
    if tag == "p" and isinstance(body, str):
        return Path(body)
    if tag == "c" and isinstance(body, list) and len(body) == 3 and isinstance(body[2], dict):
        kind = getattr(importlib.import_module(str(body[0])), str(body[1]))
        if not (isinstance(kind, type) and issubclass(kind, ConfigTable)):
            raise ValueError(f"{body[0]}.{body[1]} is not a config table")
        return kind(**{str(k): decode(v) for k, v in body[2].items()})
    if tag == "e" and isinstance(body, list) and len(body) == 3:
        kind = getattr(importlib.import_module(str(body[0])), str(body[1]))
        if not (isinstance(kind, type) and issubclass(kind, enum.Enum)):
            raise ValueError(f"{body[0]}.{body[1]} is not an enum")
        return kind(decode(body[2]))
    raise ValueError(f"not a settings tree: {tree!r}")


def as_view(value: Any) -> Any:
    """``value`` after the round trip every config takes; raises ``Unencodable``."""
    return decode(encode(value))


def updated(settings: Any, **changes: Any) -> Any:
    """``settings`` (a ``View`` or the model it stands for) with ``changes``, as the same kind of value.

    For code that asks a check's own gather what it would see under other settings
    (``healthd baseline``). The changes are not validated: the caller sets known keys.
    """
    if isinstance(settings, View):
        fields = settings._fields
        unknown = set(changes) - set(fields)
        if unknown:
            raise AttributeError(f"{settings._kind} has no setting {sorted(unknown)[0]!r}")
        return View(settings._kind, {**fields, **changes})
    return settings.model_copy(update=changes)
