"""The TOML configuration's validation (pydantic), and error messages that name the key.

The config's own tables are ``healthd.config.sections``' classes (re-exported here), which
pydantic validates through their annotations; the result's type is the same whether it was
validated now or read from the cache. Unknown keys are rejected everywhere. ``[paths]`` is the contract that deployment
tools and tests rely on; each ``[checks.NAME]`` table is validated by that check's
own settings model, which holds the check's node expectations too (what mounts,
services, GPUs, ports this node must have). Every error becomes a ``ConfigError``
whose lines read ``file: key.path: problem``; the CLI exits 78 (EX_CONFIG) on it. A config file
is loaded by ``healthd.config.cache.load_checks`` alone, which runs this validation
(``validate_bytes``) only when its cache cannot serve; ``parse_config`` validates a text in
hand, for tests and benchmarks that have settings models but no installed checks.

``[node]`` held those expectations before they moved to the checks. It is still
read: each key goes to the check setting that declares it replaces it
(``moved_from_node``), with a deprecation note naming the new place, so a config
that worked keeps its meaning; a key set in both places is an error. A setting that
moved from one check to another (``moved_from_check``) is carried over the same way.
"""

from __future__ import annotations

import copy
import functools
import logging
import types
import typing
from typing import Annotated, Any, Mapping, Optional, Sequence, Union, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError

from healthd.config.hosts import for_host, host_sections, merge, overlaid
from healthd.config.load import ConfigError, decode_config, node_local_problems, parse_toml
from healthd.config.loaded import LoadedConfig
from healthd.config.nodename import this_node

# The config's own tables: defined without pydantic, validated here (healthd.config.sections).
from healthd.config.sections import (
    ActiveSettings,
    Config,
    ConfigTable,
    DaemonSettings,
    EscalationSettings,
    MetricsSettings,
    Paths,
    PolicySettings,
    RemediationSettings,
    RunnerSettings,
    SlurmSettings,
)
from healthd.text import did_you_mean

__all__ = [
    "ActiveSettings",
    "Config",
    "ConfigError",
    "DaemonSettings",
    "EscalationSettings",
    "LoadedConfig",
    "MetricsSettings",
    "Paths",
    "PolicySettings",
    "RemediationSettings",
    "RunnerSettings",
    "SlurmSettings",
    "parse_config",
]

log = logging.getLogger(__name__)

_REPLACES = "replaces"
_IDENTITY = "identity"


def moved_from_node(key: str) -> dict[str, Any]:
    """``json_schema_extra`` of a check setting that replaces ``[node] key``: old configs then keep working."""
    return {_REPLACES: f"node.{key}"}


def moved_from_check(check: str, key: str) -> dict[str, Any]:
    """``json_schema_extra`` of a setting that replaces ``[checks.CHECK] key``: old configs then keep working."""
    return {_REPLACES: f"checks.{check}.{key}"}


def identified_by(key: str) -> dict[str, Any]:
    """``json_schema_extra`` of a list of tables whose items are one subject each, named by their ``key``.

    A ``[[hosts]]`` section's item then replaces the file's item about the same subject
    (healthd.config.hosts) instead of adding a second one beside it.
    """
    return {_IDENTITY: key}


# ``X | None`` is a types.UnionType from Python 3.10 on, typing.Union before.
_UNIONS = (Union, getattr(types, "UnionType", Union))
# Top-level keys outside the Config model: the host sections (healthd.config.hosts).
_TOP_LEVEL_EXTRA = ("hosts",)


def _is_model(kind: Any) -> bool:
    """A settings model: a check's (pydantic) or one of the config's own tables (``ConfigTable``)."""
    return isinstance(kind, type) and issubclass(kind, (BaseModel, ConfigTable))


def _fields(kind: Any) -> dict[str, Any]:
    """A settings model's fields -> their annotations."""
    if issubclass(kind, BaseModel):
        return {name: info.annotation for name, info in kind.model_fields.items()}
    return _table_fields(kind)


@functools.cache
def _table_fields(kind: Any) -> dict[str, Any]:
    hints = typing.get_type_hints(kind, include_extras=True)
    return {name: hints[name] for name in kind._names}


@functools.lru_cache(maxsize=1)
def _config_adapter() -> TypeAdapter[Config]:
    return TypeAdapter(Config)


def _unwrap(kind: Any) -> Any:
    """``kind`` without ``Annotated`` and ``Optional``; of another union, its first model or container member."""
    while True:
        origin = get_origin(kind)
        if origin is Annotated:
            kind = get_args(kind)[0]
        elif origin in _UNIONS:
            members = [a for a in get_args(kind) if a is not type(None)]
            kind = next((a for a in members if _is_model(a) or get_origin(a) is not None), members[0])
        else:
            return kind


def _inner(kind: Any, part: Any) -> Any:
    """The type of the value at ``part`` (a field name, a list index, a table key) in a value of ``kind``."""
    kind = _unwrap(kind)
    if _is_model(kind):
        return _fields(kind).get(part) if isinstance(part, str) else None
    origin, args = get_origin(kind), get_args(kind)
    if origin in (list, tuple, set, frozenset) and args and isinstance(part, int):
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return None


def known_keys(model: type, loc: tuple[Any, ...] = ()) -> tuple[str, ...]:
    """The keys the table at ``loc`` inside ``model`` accepts (a nested model's fields); () when it is no model."""
    kind: Any = model
    for part in loc:
        kind = _inner(kind, part)
        if kind is None:
            return ()
    kind = _unwrap(kind)
    names = tuple(_fields(kind)) if _is_model(kind) else ()
    return names + _TOP_LEVEL_EXTRA if kind is Config else names


def _format_loc(loc: tuple[Any, ...], prefix: tuple[str, ...] = ()) -> str:
    parts: list[str] = list(prefix)
    for item in loc:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
        else:
            parts.append(str(item))
    return ".".join(parts) or "(top level)"


def _describe(
    error: Mapping[str, Any], prefix: tuple[str, ...] = (), model: Optional[type] = None, at: Any = None
) -> str:
    """One problem, ``key.path: what is wrong``; an unknown key of ``model`` gets the names it may have meant.

    ``at`` is the error's place inside ``model`` when ``error["loc"]`` was rewritten (a key moved from ``[node]``).
    """
    loc = tuple(error["loc"])
    key = _format_loc(loc, prefix)
    if error["type"] == "extra_forbidden":
        place = tuple(at if at is not None else loc)
        known = known_keys(model, place[:-1]) if model is not None and place else ()
        return f"{key}: unknown key{did_you_mean(str(place[-1]), known) if known else ''}"
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{key}: {message} (got {error.get('input')!r})" if error["type"] != "missing" else f"{key}: {message}"


# (check, setting) -> where its value was written: ("node", key) or ("checks", old check, key).
_Moved = Mapping[tuple[str, str], tuple[str, ...]]


def _claims(checks: Mapping[str, type[BaseModel]]) -> dict[tuple[str, ...], tuple[str, str]]:
    """Each old place of a setting (``("node", key)``, ``("checks", check, key)``) -> the (check, setting) now."""
    claims: dict[tuple[str, ...], tuple[str, str]] = {}
    for name, model in checks.items():
        for setting, info in model.model_fields.items():
            extra = info.json_schema_extra
            old = extra.get(_REPLACES) if isinstance(extra, dict) else None
            if isinstance(old, str):
                claims.setdefault(tuple(old.split(".")), (name, setting))
    return claims


def moved_settings(checks: Mapping[str, type[BaseModel]]) -> dict[tuple[str, ...], tuple[str, str]]:
    """Each old place of a setting that moved (``("node", key)``, ``("checks", check, key)``) -> its (check, setting).

    ``healthd config show`` names the old place of a value written there.
    """
    return _claims(checks)


def _identities(checks: Mapping[str, type[BaseModel]]) -> dict[tuple[str, ...], str]:
    """Where each list of tables with an identity key sits (its old place too, ``[node]``'s) -> that key."""
    identities: dict[tuple[str, ...], str] = {}
    for name, model in checks.items():
        for setting, info in model.model_fields.items():
            extra = info.json_schema_extra
            key = extra.get(_IDENTITY) if isinstance(extra, dict) else None
            if isinstance(key, str):
                identities[("checks", name, setting)] = key
                old = extra.get(_REPLACES) if isinstance(extra, dict) else None
                if isinstance(old, str):
                    identities[tuple(old.split("."))] = key
    return identities


def _old_values(
    raw: dict[str, Any], claims: Mapping[tuple[str, ...], tuple[str, str]]
) -> tuple[list[tuple[tuple[str, ...], Any]], list[str]]:
    """(old place, value) of every key written where it no longer belongs, taken out of ``raw``; and problems."""
    found: list[tuple[tuple[str, ...], Any]] = []
    problems: list[str] = []
    node = raw.pop("node", None)
    if node is not None and not isinstance(node, dict):
        problems.append(f"node: must be a table (got {node!r}); its keys now belong to [checks.NAME] tables")
    elif node is not None:
        raw.setdefault("checks", {})
        for key, value in node.items():
            if ("node", key) in claims:
                found.append((("node", key), value))
            else:
                known = [old[1] for old in claims if old[0] == "node"]
                problems.append(f"node.{key}: unknown key{did_you_mean(str(key), known)}")
    tables = raw.get("checks")
    for old in claims:
        table = tables.get(old[1]) if old[0] == "checks" and isinstance(tables, dict) else None
        if isinstance(table, dict) and old[2] in table:
            found.append((old, table.pop(old[2])))
    return found, problems


def _written(tables: Mapping[str, Any], place: tuple[str, ...]) -> bool:
    """Whether ``tables`` (a config's, or a ``[[hosts]]`` section's) sets the key at ``place``."""
    for part in place[:-1]:
        inner = tables.get(part)
        if not isinstance(inner, dict):
            return False
        tables = inner
    return place[-1] in tables


def _move_old_keys(
    raw: dict[str, Any], checks: Mapping[str, type[BaseModel]], section: Optional[Mapping[str, Any]] = None
) -> tuple[dict[tuple[str, str], tuple[str, ...]], list[str], list[str]]:
    """Move each key of ``raw`` that moved (``[node]``'s, a check's) to its new place; (moved, notes, problems).

    ``raw`` may be the config merged with a ``[[hosts]]`` section's ``section`` tables,
    whose problems are reported under the section: a conflict of an old key outside
    the section with a new one inside it is named by the new key, the one there.
    """
    claims = _claims(checks)
    found, problems = _old_values(raw, claims)
    moved: dict[tuple[str, str], tuple[str, ...]] = {}
    notes: list[str] = []
    tables = raw.get("checks")
    for old, value in found:
        check, setting = claims[old]
        written = f"[node] {old[1]}" if old[0] == "node" else f"[checks.{old[1]}] {old[2]}"
        table = tables.setdefault(check, {}) if isinstance(tables, dict) else None
        if not isinstance(table, dict):
            continue  # [checks] itself is malformed, and reported as such
        if setting in table:
            gone = "[node]" if old[0] == "node" else written
            keep = f"keep only [checks.{check}] {setting} ({gone} is deprecated)"
            if section is not None and _written(section, ("checks", check, setting)) and not _written(section, old):
                problems.append(f"checks.{check}.{setting}: also set as {'.'.join(old)} outside [[hosts]]; {keep}")
            else:
                problems.append(f"{'.'.join(old)}: also set as checks.{check}.{setting}; {keep}")
            continue
        table[setting] = value
        moved[(check, setting)] = old
        notes.append(f"{written} is deprecated: write it as [checks.{check}] {setting} (it means the same)")
    return moved, notes, problems


def _check_problems(
    tables: Mapping[str, Any], checks: Mapping[str, type[BaseModel]], settings: dict[str, Any], moved: _Moved
) -> list[str]:
    """Validate each ``[checks.NAME]`` table with its check's model, filling ``settings``.

    A value that came from ``[node]`` is named by the key it was written under there.
    """
    problems: list[str] = []
    for name, model in checks.items():
        try:
            settings[name] = model.model_validate(tables.get(name, {}))
        except ValidationError as exc:
            gone: Mapping[str, str] = getattr(model, "moved_out", {})
            for error in exc.errors():
                loc = tuple(error["loc"])
                old = moved.get((name, loc[0])) if loc and isinstance(loc[0], str) else None
                if old is not None:
                    problems.append(_describe({**error, "loc": loc[1:]}, old, model, loc))
                elif error["type"] == "extra_forbidden" and len(loc) == 1 and loc[0] in gone:
                    where = gone[str(loc[0])]
                    problems.append(
                        f"{_describe(error, ('checks', name))}: it moved to {where}, whose check is not loaded"
                    )
                else:
                    problems.append(_describe(error, ("checks", name), model))
    known = ", ".join(sorted(checks)) or "none"
    problems.extend(
        f"checks.{name}: unknown check{did_you_mean(name, checks)} (known: {known})"
        for name in tables
        if name not in checks
    )
    return problems


def _moved_to_disabled(settings: Mapping[str, Any], moved: _Moved) -> list[str]:
    """A key that moved to another check that the config disables: nothing would use it any more.

    Before the move the old check used it (links down were the gpu check's); reading
    it into a disabled check would silently end that checking, so it is an error.
    A ``[node]`` key is not: its check was the same one before the move.
    """
    problems = []
    for (check, setting), old in sorted(moved.items()):
        if old[0] == "checks" and not getattr(settings.get(check), "enabled", True):
            problems.append(
                f"{'.'.join(old)}: moved to checks.{check}.{setting}, but checks.{check}.enabled is false, so"
                f" nothing would use it: enable [checks.{check}] or remove [checks.{old[1]}] {old[2]}"
            )
    return problems


def parse_config(
    text: str,
    source: str,
    checks: Mapping[str, type[BaseModel]],
    host: Optional[str] = None,
    overlays: Sequence[Mapping[str, Any]] = (),
) -> LoadedConfig:
    """Validate TOML ``text`` for the node ``host`` (by default this one); ``checks`` maps check names to models.

    The ``[[hosts]]`` sections that match the node are merged in first (healthd.config.hosts),
    then ``overlays`` are laid on (``healthd.config.hosts.overlaid``).
    Every problem in the file is reported at once, the check tables' and every host
    section's included, so an operator fixes a config in one round.
    """
    raw = parse_toml(text, source)
    local = node_local_problems(raw, text)
    sections, problems = host_sections(raw)
    problems += local
    # A section that does not apply here is still validated: a typo must fail on every node, not only its own.
    # A problem of the tables outside [[hosts]] is named once, where it is, not again under every section.
    outside = _problems(raw, checks) if sections else []
    problems += outside
    identities = _identities(checks)
    for section in sections:
        merged = _problems(merge(raw, section.tables, identities), checks, section.tables)
        problems += [f"{section.label}: {p}" for p in merged if p not in outside]
    slurm = raw.get("slurm")
    configured = slurm.get("node_name") if isinstance(slurm, dict) else None
    node = host or this_node(configured if isinstance(configured, str) else None)
    raw, applied = for_host(raw, sections, node, identities)
    if overlays:
        raw = overlaid(raw, overlays, identities)
    if problems:
        raise ConfigError(source, problems)
    loaded = _validated(raw, source, checks)
    return loaded._replace(host=node, host_sections=tuple(s.label for s in applied))


def _problems(
    raw: dict[str, Any], checks: Mapping[str, type[BaseModel]], section: Optional[Mapping[str, Any]] = None
) -> list[str]:
    try:
        _validated(raw, "", checks, section)
    except ConfigError as exc:
        return exc.problems
    return []


def _validated(
    raw: dict[str, Any],
    source: str,
    checks: Mapping[str, type[BaseModel]],
    section: Optional[Mapping[str, Any]] = None,
) -> LoadedConfig:
    """``raw`` (one host's tables, or them merged with a host ``section``) validated; ``ConfigError`` if bad."""
    raw = copy.deepcopy(raw)
    moved, notes, problems = _move_old_keys(raw, checks, section)
    settings: dict[str, Any] = {}
    try:
        config = _config_adapter().validate_python(raw)
    except ValidationError as exc:
        problems += [_describe(e, model=Config) for e in exc.errors()]
        tables = raw.get("checks")
        if isinstance(tables, dict) and all(isinstance(t, dict) for t in tables.values()):
            problems += _check_problems(tables, checks, settings, moved)
        raise ConfigError(source, problems) from None
    problems += _check_problems(config.checks, checks, settings, moved)
    problems += _moved_to_disabled(settings, moved)
    if problems:
        raise ConfigError(source, problems)
    return LoadedConfig(source=source, config=config, check_settings=settings, deprecated=tuple(notes))


def validate_bytes(
    source: str,
    raw: bytes,
    checks: Mapping[str, type[BaseModel]],
    host: Optional[str] = None,
    overlays: Sequence[Mapping[str, Any]] = (),
) -> LoadedConfig:
    """Fully validate the config bytes ``raw`` read from ``source``; deprecation notes are logged as warnings.

    The loader's (``healthd.config.cache.load_checks``) step when its cache cannot serve: the
    one public way to load a config is that function, which reads the file and keeps the result.
    """
    loaded = parse_config(decode_config(raw, source), source, checks, host, overlays)
    for note in loaded.deprecated:
        log.warning("%s: %s", loaded.source, note)
    return loaded
