"""Reads ``healthd check --expect LINE``: one NHC check or one check's TOML, an overlay on the config for one pass.

An operator trying one thing at 3 a.m. writes it as NHC's ``-e`` takes it
(``check_fs_mount_rw -f /scratch``, converted by ``healthd.config.nhcimport.convert_check``)
or as healthd's own ``NAME: TOML`` (``mounts: expect = [{path = "/scratch", rw = true}]``):
the check's name and a colon, then keys of its ``[checks.NAME]`` table. The two cannot be
confused: a first word ending in a colon is never an NHC check (NHC's checks are shell
functions named ``check_...``, and NHC's lines are commands).

Each expectation is laid over the node's config as ``healthd.config.hosts.overlaid`` says,
after its ``[[hosts]]`` sections: what it sets replaces what the config sets (a list
included), the rest of the check's table stays as configured, and the check is enabled
unless the expectation says otherwise. Validation errors name the expectation: the file is
known good before the overlay is laid on, so whatever fails then is the expectation's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Sequence

from healthd.config.cache import load_checks
from healthd.config.load import ConfigError, parse_toml
from healthd.config.nhcimport import convert_check
from healthd.text import one_line

if TYPE_CHECKING:
    from healthd.checks.plugin import AnyCheck
    from healthd.config.loaded import LoadedConfig

# healthd's form: a check's name (an entry point's name: letters, digits, "_" and "-") and a colon.
_OWN_FORM = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_-]*):(.*)", re.DOTALL)


class Layer(NamedTuple):
    """Top-level tables laid over the config for one pass, and how the command line gave them (for errors)."""

    label: str
    tables: dict[str, Any]
    notes: tuple[str, ...] = ()

    @property
    def checks(self) -> tuple[str, ...]:
        """The checks this layer names: those the pass runs."""
        return tuple(self.tables.get("checks", {}))


class NotConverted(Exception):
    """An NHC line ``healthd.config.nhcimport`` does not convert whole; ``reasons`` say what it leaves out."""

    def __init__(self, label: str, reasons: Sequence[str]) -> None:
        self.label = label
        self.reasons = tuple(reasons)
        super().__init__(f"{label}: " + "; ".join(self.reasons))


def label(option: str, text: str) -> str:
    """How an error names what the command line gave: ``--expect 'LINE'``, one bounded printable line."""
    return f"{option} '{one_line(text, 160)}'"


def expectation(text: str) -> Layer:
    """The overlay ``--expect text`` asks for; raises ``ConfigError`` (its TOML) or ``NotConverted`` (its NHC line)."""
    name = label("--expect", text)
    own = _OWN_FORM.fullmatch(text)
    if own is None:
        return _from_nhc(name, text)
    check, body = own.groups()
    table = parse_toml(body, name)
    table.setdefault("enabled", True)
    return Layer(name, {"checks": {check: table}})


def _from_nhc(name: str, text: str) -> Layer:
    imported = convert_check(text)
    lost = [note.reason for note in imported.notes if note.lost]
    if lost:
        raise NotConverted(name, lost)
    checks: dict[str, dict[str, Any]] = imported.document["checks"]
    for table in checks.values():
        table.setdefault("enabled", True)
    return Layer(name, {"checks": checks}, tuple(note.reason for note in imported.notes))


def pass_timeout(seconds: float) -> Layer:
    """``--timeout SECONDS``: ``[runner].pass_timeout`` for this pass."""
    return Layer(label("--timeout", f"{seconds:g}"), {"runner": {"pass_timeout": seconds}})


def load_with(path: Optional[Path], layers: Sequence[Layer]) -> tuple[LoadedConfig, list[AnyCheck]]:
    """The config at ``path`` with ``layers`` laid on, validated; the cache is neither read nor written.

    Raises ``ConfigError``: naming the file when the file is bad, else naming the layer that is.
    """
    try:
        return load_checks(path, overlays=[layer.tables for layer in layers])
    except ConfigError as together:
        load_checks(path)  # the file's own problems, named by the file
        for layer in layers:
            try:
                load_checks(path, overlays=[layer.tables])
            except ConfigError as exc:
                raise ConfigError(layer.label, exc.problems) from None
        raise ConfigError(" with ".join(layer.label for layer in layers), together.problems) from None
