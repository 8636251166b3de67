"""The config a pass uses: fully validated when it is new, read back from a cache when it is not.

Validating with the pydantic models costs more than the rest of a cold
``healthd check --once`` (importing pydantic and building every check's model).
A config seldom changes, so after a full validation the validated values are kept
in ``[paths].state_dir/config-cache.json`` (``healthd.config.view``'s tagged form,
written atomically like every state file), and a later process whose config file
has exactly the same bytes reads them back instead, importing only the checks the
config enables.

The cache is used only when everything it depends on is unchanged:

- the SHA-256 of the config's exact bytes and its source name, and the node's name
  (``[[hosts]]`` sections choose settings by it);
- the cache's format version and a SHA-256 of its own content, so a corrupt or
  edited entry is refused;
- healthd's version, the interpreter, the size and modification time of the
  files that define the settings models (healthd's config and each check's module
  and settings module), and the modification time of every directory on
  ``sys.path`` but the script's own (installing, upgrading or removing a plugin
  changes its ``site-packages``).

Anything else, an unreadable or untrusted cache included, means a full
validation, which is also what reports a bad config (every bad key named, exit 78):
an invalid config is never cached. Every full validation that may store also records its
verdict, the config's SHA-256 and its first problem or none, in ``config-verdict.json``:
``healthd status`` warns from it, cheaply, of a config on disk that would be refused. A
config whose validation found a plugin that cannot load is not cached either, so that
plugin is retried and reported each pass.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from healthd import __version__
from healthd.checks.plugin import (
    ENTRY_POINT_GROUP,
    AnyCheck,
    BrokenCheck,
    CheckSpec,
    UnloadedCheck,
    entry_points_of,
    load_entry,
    settings_models,
)
from healthd.config.load import ConfigError, node_settings, read_config, sha256_hex
from healthd.config.loaded import LoadedConfig
from healthd.config.nodename import this_node
from healthd.config.view import Unencodable, decode, encode
from healthd.store.state import StateDir, StateError, read_entry
from healthd.store.trust import UntrustedPath

if TYPE_CHECKING:
    import logging


def _log() -> logging.Logger:
    """This module's logger, ``logging`` imported with the first message: a prolog from the daemon's pass reads
    its config from this cache, logs nothing, and would pay about 3 ms to import it (bench/README.md)."""
    import logging

    return logging.getLogger(__name__)


FORMAT = 1
CACHE = "config-cache"
# What the last full validation said of which bytes: read by `healthd status` (config_warning).
VERDICT = "config-verdict"
_HERE = Path(__file__).resolve().parent


def load_checks(
    path: Optional[Path],
    *,
    host: Optional[str] = None,
    specs: Optional[Sequence[AnyCheck]] = None,
    use_cache: bool = True,
    store: bool = True,
    load: bool = True,
    overlays: Sequence[Mapping[str, Any]] = (),
) -> tuple[LoadedConfig, list[AnyCheck]]:
    """The validated config and its checks: the one way to load a config; raises ``ConfigError`` or ``UntrustedPath``.

    With ``use_cache`` a cached validation of the same bytes is used when it is still good
    (see the module's docstring); otherwise the config is validated with every installed
    check's model and the result is cached, unless not ``store``: a command that only reads
    (``config validate``, ``scan-log``) leaves the state directory alone. Without ``load``, a
    cached config comes with no checks: the caller wants only the settings.

    ``host`` validates for that node (``config validate --host``): which ``[[hosts]]`` sections
    apply; the cache, this node's, is then neither read nor written. ``specs`` validates
    against those checks instead of the installed ones (a running engine's on SIGHUP, a
    test's own), loading any that an earlier cached load left unloaded; the cache is then not
    read, and written only when every one of them is an installed entry point.

    ``overlays`` are laid on the config (``healthd check --expect``): what they give is not the
    file's, so the cache is neither read nor written.
    """
    source, raw = read_config(path)
    if use_cache and specs is None and host is None and not overlays:
        cached = _cached(source, raw, load)
        if cached is not None:
            return cached
    from healthd.config.models import validate_bytes  # pydantic: only when the config is validated (see above)

    keep = store and host is None and not overlays
    if specs is None:
        entries = entry_points_of(ENTRY_POINT_GROUP)
        checks = [_loaded(UnloadedCheck(name, module, attr)) for name, (module, attr) in sorted(entries.items())]
    else:
        checks = [_loaded(spec) for spec in specs]
        entries = _entry_points_of(checks) if keep else {}
    try:
        loaded = validate_bytes(source, raw, settings_models(checks), host, overlays)
    except ConfigError as exc:
        if keep:
            _verdict(source, raw, exc.problems[0] if exc.problems else str(exc))
        raise
    if keep:
        _verdict(source, raw, None)
    viewed = _remember(source, raw, loaded, checks, entries, store=keep)
    return viewed._replace(sha256=sha256_hex(raw)), checks


def _loaded(spec: AnyCheck) -> AnyCheck:
    """``spec``, its module imported now if it is not yet (an installed check, or one the old config disabled)."""
    if not isinstance(spec, UnloadedCheck):
        return spec
    found = load_entry(spec.name, spec.module, spec.attr, CheckSpec)
    return found if isinstance(found, CheckSpec) else BrokenCheck(spec.name, found)


def _entry_points_of(checks: list[AnyCheck]) -> dict[str, tuple[str, str]]:
    """The entry point of each of ``checks`` that is an installed one (a test's own checks are not)."""
    points = entry_points_of(ENTRY_POINT_GROUP)
    found: dict[str, tuple[str, str]] = {}
    for check in checks:
        if check.name in points and isinstance(check, CheckSpec):
            module, attr = points[check.name]
            if load_entry(check.name, module, attr, CheckSpec) is check:
                found[check.name] = (module, attr)
    return found


def _digest(data: Any) -> str:
    return sha256_hex(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())


def _stamp(files: list[str]) -> dict[str, Any]:
    """What a cached validation depends on besides the config's bytes (see the module's docstring)."""

    def stat(path: str) -> list[Any]:
        try:
            info = os.stat(path)
        except OSError:
            return [path, None, None]
        return [path, info.st_mtime_ns, info.st_size]

    return {
        "healthd": __version__,
        "python": sys.version,
        "files": [stat(f) for f in files],
        "sys_path": [stat(d)[:2] for d in _plugin_path() if os.path.isdir(d)],
    }


def _plugin_path() -> list[str]:
    """``sys.path`` without the script's directory (or the working directory), which holds no installed plugin.

    The ``healthd`` script and ``python -m healthd`` then share one cache.
    """
    safe = getattr(sys.flags, "safe_path", False)  # -P (Python 3.11): no such first entry
    return [d for d in (sys.path if safe else sys.path[1:]) if d]


def _model_files(specs: list[AnyCheck], entries: dict[str, tuple[str, str]]) -> Optional[list[str]]:
    """The files that define the settings models; None when one cannot be named (nothing is cached then)."""
    files = [str(_HERE / "config.py"), str(_HERE / "checksettings.py")]
    for spec in specs:
        if not isinstance(spec, CheckSpec):
            return None
        for module in (entries[spec.name][0], spec.settings_model().__module__):
            origin = getattr(sys.modules.get(module), "__file__", None)
            if not origin:
                return None
            files.append(origin)
    return sorted(set(files))


def _remember(
    source: str,
    raw: bytes,
    loaded: LoadedConfig,
    specs: list[AnyCheck],
    entries: dict[str, tuple[str, str]],
    *,
    store: bool,
) -> LoadedConfig:
    """``loaded`` as views, after storing it in the cache; ``loaded`` itself when it cannot be kept."""
    # Checks that are not entry points (a caller's own) can be viewed but never cached.
    files = _model_files(specs, entries) if set(entries) == set(loaded.check_settings) else None
    try:
        config = encode(loaded.config)
        checks = []
        for name, settings in sorted(loaded.check_settings.items()):
            module, attr = entries.get(name, ("", ""))
            checks.append({"name": name, "module": module, "attr": attr, "settings": encode(settings)})
    except Unencodable as exc:
        _log().debug("config not cached: %s", exc)
        return loaded
    viewed = LoadedConfig(
        loaded.source,
        decode(config),
        {c["name"]: decode(c["settings"]) for c in checks},
        loaded.deprecated,
        host=loaded.host,
        host_sections=loaded.host_sections,
    )
    if files is None or not store:
        return viewed
    body: dict[str, Any] = {
        "format": FORMAT,
        "source": source,
        "config_sha256": sha256_hex(raw),
        "stamp": _stamp(files),
        "config": config,
        "checks": checks,
        "deprecated": list(loaded.deprecated),
        # [[hosts]] sections make the settings depend on the node's name too (healthd.config.hosts).
        "host": loaded.host,
        "host_sections": list(loaded.host_sections),
    }
    state_dir = _state_dir(source, raw)
    if state_dir is not None:
        _store(state_dir, {**body, "digest": _digest(body)})
    return viewed


def _state_dir(source: str, raw: bytes) -> Optional[Path]:
    """``[paths].state_dir`` as the file writes it; None when the node's settings are bad (full validation says why)."""
    try:
        return node_settings(source, raw).state_dir
    except ConfigError:
        return None


def _store(state_dir: Path, document: dict[str, Any], name: str = CACHE) -> None:
    try:
        state = StateDir(state_dir)
        state.refuse_untrusted()  # a directory the command will refuse gets nothing new from it either
        state.file(name).save(document)
    except (StateError, UntrustedPath) as exc:  # the next process validates again; the pass reports the state dir
        _log().debug("config not cached: %s", exc)


def _verdict(source: str, raw: bytes, refused: Optional[str]) -> None:
    """Record what a full validation said of these bytes (``refused``: its first problem; None: accepted).

    ``healthd status`` compares the config on disk with it (and with the cache) to warn of a
    config the daemon would refuse without validating it itself (pydantic: bench/README.md).
    """
    state_dir = _state_dir(source, raw)
    # Into a state directory that is there already: a refused config does nothing on the node
    # (exit 78), not even make the directory; where there is none, no pass has a status to warn beside.
    if state_dir is not None and state_dir.is_dir():
        _store(state_dir, {"source": source, "config_sha256": sha256_hex(raw), "refused": refused}, VERDICT)


def _cached(source: str, raw: bytes, load: bool) -> Optional[tuple[LoadedConfig, list[AnyCheck]]]:
    """The cached validation of exactly these bytes, with the enabled checks loaded (``load``); None if unusable."""
    state_dir = _state_dir(source, raw)
    if state_dir is None:
        return None
    try:
        document = json.loads(read_entry(state_dir, f"{CACHE}.json"))
    except (OSError, UntrustedPath, ValueError):
        return None
    try:
        loaded = _valid(document, source, raw)
    except (KeyError, TypeError, ValueError, AttributeError, ImportError) as exc:
        _log().debug("config cache not used: %s", exc)
        return None
    if loaded is None:
        return None
    specs: list[AnyCheck] = []
    for check in document["checks"] if load else ():
        name = check["name"]
        if not getattr(loaded.check_settings[name], "enabled", True):
            specs.append(UnloadedCheck(name, check["module"], check["attr"]))
            continue
        spec = load_entry(name, check["module"], check["attr"], CheckSpec)
        specs.append(spec if isinstance(spec, CheckSpec) else BrokenCheck(name, spec))
    for note in loaded.deprecated:
        _log().warning("%s: %s", loaded.source, note)
    return loaded, specs


def _valid(document: Any, source: str, raw: bytes) -> Optional[LoadedConfig]:
    """The ``LoadedConfig`` that a cache ``document`` holds for the bytes ``raw`` of ``source``, or None."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        return None
    body = {k: v for k, v in document.items() if k != "digest"}
    if document.get("digest") != _digest(body):
        return None
    if body["source"] != source or body["config_sha256"] != sha256_hex(raw):
        return None
    files = [entry[0] for entry in body["stamp"]["files"]]
    if body["stamp"] != _stamp(files):
        return None
    config = decode(body["config"])
    if body["host"] != this_node(config.slurm.node_name):
        return None
    settings = {check["name"]: decode(check["settings"]) for check in body["checks"]}
    return LoadedConfig(
        source,
        config,
        settings,
        tuple(body["deprecated"]),
        body["config_sha256"],
        body["host"],
        tuple(body["host_sections"]),
    )
