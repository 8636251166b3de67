"""The TOML configuration: its pydantic models, loading, and error messages that name the key.

Unknown keys are rejected everywhere. ``[paths]`` is the contract that deployment
tools and tests rely on; each ``[checks.NAME]`` table is validated by that check's
own settings model, which holds the check's node expectations too (what mounts,
services, GPUs, ports this node must have). Every error becomes a ``ConfigError``
whose lines read ``file: key.path: problem``; the CLI exits 78 (EX_CONFIG) on it.

``[node]`` held those expectations before they moved to the checks. It is still
read: each key goes to the check setting that declares it replaces it
(``moved_from_node``), with a deprecation note naming the new place, so a config
that worked keeps its meaning; a key set in both places is an error. A setting that
moved from one check to another (``moved_from_check``) is carried over the same way.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
import types
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Optional, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from healthd.checks.settings import AbsolutePath, SettingPath
from healthd.config.defaults import DEFAULT_INTERVAL_SECONDS, DEFAULT_STATE_DIR
from healthd.config.hosts import for_host, host_sections, merge
from healthd.config.load import ConfigError, decode_config, node_local_problems, parse_toml, read_config
from healthd.config.loaded import LoadedConfig
from healthd.config.nodename import this_node
from healthd.text import did_you_mean

log = logging.getLogger(__name__)

_PREFIX_WORD = r"[A-Za-z0-9_.,:;/@+#%()\-]+"
_REASON_PREFIX = re.compile(rf"{_PREFIX_WORD}(?: {_PREFIX_WORD})*")
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


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Paths(_Model):
    """Filesystem roots, settable so tests and post-mortems can point at captured trees."""

    sysfs: SettingPath = Path("/sys")
    procfs: SettingPath = Path("/proc")
    kmsg: SettingPath = Path("/dev/kmsg")
    state_dir: SettingPath = DEFAULT_STATE_DIR


class SlurmSettings(_Model):
    """How healthd reaches Slurm. The adapter is the only code that uses these."""

    enabled: bool = True
    bin_dir: Optional[AbsolutePath] = None
    conf: Optional[AbsolutePath] = None
    node_name: Optional[str] = None
    # Per scontrol call, and for all calls of one pass together: with the default
    # [runner].pass_timeout a hook run stays well inside slurmd's 60 s kill.
    timeout: float = Field(default=5.0, gt=0, le=120)
    budget: float = Field(default=12.0, gt=0, le=300)
    reason_prefix: str = Field(default="healthd:", min_length=1, max_length=32)
    reconcile_interval: float = Field(
        default=3600.0, ge=0, description="seconds between node-state reads on passes that need none (0: every pass)"
    )
    lock_timeout: float = Field(default=3.0, gt=0, le=60)
    # The most a pass with a fault waits, a stable per-node delay, before its first
    # Slurm call (docs/scale.md, "Spread"). At most 60 s: the bound on how long a
    # CRITICAL take-out is put off; the default keeps a hook run inside slurmd's 60 s kill.
    act_splay: float = Field(default=10.0, ge=0, le=60)

    @field_validator("reason_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        # The prefix is how healthd recognises its own reasons, so it must reach
        # Slurm exactly as written: no characters scontrol or sanitizing would change.
        if not _REASON_PREFIX.fullmatch(value):
            raise ValueError(
                f"{value!r} must be words of letters, digits and _ . , : ; / @ + # % ( ) - separated by single spaces"
            )
        return value


class PolicySettings(_Model):
    """What healthd does with a pass's results (see docs/policy.md)."""

    dry_run: bool = False
    unknown_action: Literal["report", "drain"] = "report"
    unknown_passes: int = Field(default=3, ge=1)
    fail_passes: int = Field(default=1, ge=1)
    clean_passes: int = Field(default=1, ge=1)
    max_out_fraction: float = Field(default=0.10, gt=0, le=1)
    # Seconds between a drain and the circuit breaker's confirming read. It must exceed
    # the one-second resolution of slurmctld's reason stamps (see breaker.breaker_confirm).
    breaker_settle: float = Field(default=2.0, ge=1.2, le=20)
    # Seconds a take-out holds its place under the circuit breaker: the breaker limits a wave
    # of take-outs, not the backlog of nodes waiting for hardware work (docs/policy.md,
    # "The window"). An hour covers a shared fault reaching every node within a few
    # five-minute passes and the held nodes' 12.5 min backoff, and gives an operator paged
    # by DRAIN_HELD that long before the next nodes may go.
    breaker_window: float = Field(default=3600.0, ge=30, le=7 * 86400)


class RunnerSettings(_Model):
    """Deadlines: each check has its own (``[checks.NAME].timeout``); the pass has one."""

    pass_timeout: float = Field(default=30.0, gt=0, le=600)


class DaemonSettings(_Model):
    """``healthd run``: the interval between passes (the source paper's five minutes)."""

    interval: float = Field(default=DEFAULT_INTERVAL_SECONDS, ge=1, le=86400)
    splay: bool = True


class ActiveSettings(_Model):
    """When healthd starts the active checks by itself (docs/active.md). Both ways are off by default.

    ``at_epilog``: the epilog runs them once the job ended and no other job is on the
    node, within ``epilog_timeout`` seconds. ``when_drained``: the daemon runs them
    (with every other check) on a node it drained itself that Slurm shows idle. Either
    way at most once per ``interval`` seconds, counted from the last active run on the
    node, whoever started it (kept in the state directory, so restarts do not rerun them).
    """

    at_epilog: bool = False
    # A diagnostic at the epilog holds the node COMPLETING (no job starts on it) for its
    # whole length; dcgm's level 2, retried once, needs up to its default 600 s timeout.
    epilog_timeout: float = Field(default=600.0, gt=0, le=3600)
    when_drained: bool = False
    # Six hours: a node healthd holds out is re-examined a few times a day, while an
    # active run costs minutes of a node that does nothing else meanwhile.
    interval: float = Field(default=21600.0, ge=0, le=30 * 86400)


class MetricsSettings(_Model):
    """Prometheus exposition: an HTTP listener and/or a node_exporter textfile."""

    listen: Optional[str] = None
    textfile: Optional[SettingPath] = None
    # The account node_exporter runs as: the textfile's directory (and those above it) may be
    # its as well as root's (healthd.service.metrics.refuse_untrusted_textfile). Debian's package and
    # the common RPMs run node_exporter as `prometheus`; "" trusts root's directories only.
    textfile_owner: str = Field(default="prometheus", pattern=r"^([a-z_][a-z0-9_.-]{0,31})?$")

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: Optional[str]) -> Optional[str]:
        if value is None:
            return value
        _host, sep, port = value.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("listen must be HOST:PORT with a port 1-65535")
        return value


class EscalationSettings(_Model):
    """Repeat failures send a node to repair (docs/history.md, "Escalation").

    The same hardware finding code (``CheckSpec.hardware``, docs/escalation.md) raised
    ``repeats`` times on the same unit (a GPU by UUID or serial, an IB port, a DIMM)
    within ``window_days`` keeps the node out for hardware work; ``overrides`` sets
    ``repeats`` per code (0: never escalate it). A code no check declares hardware
    never escalates, whatever ``overrides`` says.
    """

    repeats: int = Field(default=3, ge=0)
    window_days: float = Field(default=30.0, gt=0, le=3650)
    overrides: dict[str, int] = Field(default_factory=dict)

    @field_validator("overrides")
    @classmethod
    def _counts(cls, value: dict[str, int]) -> dict[str, int]:
        for code, count in value.items():
            if count < 0:
                raise ValueError(f"{code} = {count}: a repeat count must be 0 (never) or more")
        return value


class RemediationSettings(_Model):
    """What healthd does besides draining (docs/history.md, docs/remediation.md).

    ``reboot`` lets a finding whose remedy is a reboot have Slurm reboot the node;
    ``reset`` lets one whose remedy is a GPU reset have ``nvidia_smi`` reset that GPU.

    ``on_repair`` is a program (absolute path, run without a shell, within
    ``on_repair_timeout`` seconds) that receives the node's history as JSON on
    stdin when the node is sent to repair: a ticketing hook.
    """

    on_repair: Optional[AbsolutePath] = None
    on_repair_timeout: float = Field(default=30.0, gt=0, le=300)
    # Off by default: a reboot or a GPU reset is healthd acting on the machine, not only on Slurm
    # (docs/remediation.md).
    reboot: bool = False
    reset: bool = False
    nvidia_smi: AbsolutePath = Path("/usr/bin/nvidia-smi")


class Config(_Model):
    """The whole file. ``checks`` holds raw tables, validated per check by ``resolve_checks``."""

    paths: Paths = Field(default_factory=Paths)
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    runner: RunnerSettings = Field(default_factory=RunnerSettings)
    daemon: DaemonSettings = Field(default_factory=DaemonSettings)
    active: ActiveSettings = Field(default_factory=ActiveSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    escalation: EscalationSettings = Field(default_factory=EscalationSettings)
    remediation: RemediationSettings = Field(default_factory=RemediationSettings)
    checks: dict[str, dict[str, Any]] = Field(default_factory=dict)


# ``X | None`` is a types.UnionType from Python 3.10 on, typing.Union before.
_UNIONS = (Union, getattr(types, "UnionType", Union))
# Top-level keys outside the Config model: the host sections (healthd.config.hosts).
_TOP_LEVEL_EXTRA = ("hosts",)


def _is_model(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


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
        info = kind.model_fields.get(part) if isinstance(part, str) else None
        return None if info is None else info.annotation
    origin, args = get_origin(kind), get_args(kind)
    if origin in (list, tuple, set, frozenset) and args and isinstance(part, int):
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return None


def known_keys(model: type[BaseModel], loc: tuple[Any, ...] = ()) -> tuple[str, ...]:
    """The keys the table at ``loc`` inside ``model`` accepts (a nested model's fields); () when it is no model."""
    kind: Any = model
    for part in loc:
        kind = _inner(kind, part)
        if kind is None:
            return ()
    kind = _unwrap(kind)
    names = tuple(kind.model_fields) if _is_model(kind) else ()
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
    error: Mapping[str, Any], prefix: tuple[str, ...] = (), model: Optional[type[BaseModel]] = None, at: Any = None
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
    text: str, source: str, checks: Mapping[str, type[BaseModel]], host: Optional[str] = None
) -> LoadedConfig:
    """Validate TOML ``text`` for the node ``host`` (by default this one); ``checks`` maps check names to models.

    The ``[[hosts]]`` sections that match the node are merged in first (healthd.config.hosts).
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
    if problems:
        raise ConfigError(source, problems)
    loaded = _validated(raw, source, checks)
    return dataclasses.replace(loaded, host=node, host_sections=tuple(s.label for s in applied))


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
        config = Config.model_validate(raw)
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


def load_config(
    path: Optional[Path], checks: Mapping[str, type[BaseModel]], host: Optional[str] = None
) -> LoadedConfig:
    """Load and fully validate ``path`` for the node ``host`` (this one by default).

    With ``None``, the default path if it exists, else built-in defaults.
    """
    source, raw = read_config(path)
    return load_bytes(source, raw, checks, host)


def load_bytes(
    source: str, raw: bytes, checks: Mapping[str, type[BaseModel]], host: Optional[str] = None
) -> LoadedConfig:
    """Fully validate the config bytes ``raw`` read from ``source``; deprecation notes are logged as warnings."""
    loaded = parse_config(decode_config(raw, source), source, checks, host)
    for note in loaded.deprecated:
        log.warning("%s: %s", loaded.source, note)
    return loaded
