"""Reading the config file, without pydantic: the part of config loading that the cheap commands share.

``ConfigError`` (every problem, each naming file and key; exit 78) is needed by
commands that must stay cheap, so it lives here rather than in ``healthd.config.models``,
which holds the pydantic models and the full validation. ``read_config`` is the
one place that decides which file is read and refuses one that others could have
written; ``parse_toml`` the one place that parses it; ``node_settings`` the one reader
of the node's own keys (``[paths].state_dir``, ``[daemon].interval``, ``[slurm].node_name``)
without validating the rest, which ``node_local_problems`` keeps out of host sections.
``healthd status``, the hook and the config cache read those keys; everything else
comes from the full load (``healthd.config.cache.load_checks``). docs/configuration.md
says why there are these two readers and no more.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple, Optional

from healthd.config.defaults import DEFAULT_CONFIG_PATH, DEFAULT_INTERVAL_SECONDS, DEFAULT_STATE_DIR, toml_module
from healthd.store.trust import untrusted_reason

BUILT_IN = "(built-in defaults)"


class ConfigError(Exception):
    """A configuration that must not be acted on; ``str()`` names file, key and problem."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__("\n".join(f"{source}: {p}" for p in problems))


def read_config(path: Optional[Path]) -> tuple[str, bytes]:
    """The config's source name and exact bytes.

    With ``None``: the default path if it exists, else no file (``BUILT_IN``, no bytes).
    Raises ``ConfigError`` for an untrusted or unreadable file.
    """
    if path is None:
        if not DEFAULT_CONFIG_PATH.exists():
            return BUILT_IN, b""
        path = DEFAULT_CONFIG_PATH
    reason = untrusted_reason(path) if path.exists() else None
    if reason:
        raise ConfigError(str(path), [f"refusing to load a config that others could have written: {reason}"])
    try:
        return str(path), path.read_bytes()
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read: {exc.strerror or exc}"]) from None


NESTED_TOO_DEEPLY = "arrays or inline tables nested too deeply to read"


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """``text`` (the config ``source``) as TOML; raises ``ConfigError`` naming the line of a syntax error."""
    try:
        parsed: dict[str, Any] = toml_module().loads(text)
    except RecursionError:  # tomllib's reader is recursive: arrays nested past the interpreter's limit
        raise ConfigError(source, [f"not valid TOML: {NESTED_TOO_DEEPLY}"]) from None
    except ValueError as exc:  # tomllib's TOMLDecodeError
        raise ConfigError(source, [f"not valid TOML: {exc}"]) from None
    return parsed


def decode_config(raw: bytes, source: str) -> str:
    """The config's text; raises ``ConfigError`` when it is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(source, [f"not UTF-8 text: {exc}"]) from None


# Tables a ``[[hosts]]`` section may not hold: where a node keeps its state and how often it
# checks are its deployment's, and the cheap readers (``healthd status``, the hook, the config
# cache) read them from the file's own tables without merging host sections (docs/hosts.md).
NODE_LOCAL_TABLES = ("paths", "daemon")


def node_local_problems(parsed: dict[str, Any], text: str = "") -> list[str]:
    """One problem per node-local table (``NODE_LOCAL_TABLES``) or ``[slurm] node_name`` set in a host section.

    Each names the section, the table and, from ``text`` (the file), the line it starts on.
    """
    hosts = parsed.get("hosts")
    problems = []
    for index, section in enumerate(hosts if isinstance(hosts, list) else []):
        for table in NODE_LOCAL_TABLES:
            if isinstance(section, dict) and table in section:
                line = _section_line(text, index, table)
                where = f"hosts[{index}].{table}" + (f" (line {line})" if line else "")
                problems.append(
                    f"{where}: [{table}] may not be set in a host section: it is the node's own, which"
                    f" healthd status and the hook read without host sections; set it in the file's own [{table}]"
                    " (docs/hosts.md)"
                )
        slurm = section.get("slurm") if isinstance(section, dict) else None
        if isinstance(slurm, dict) and "node_name" in slurm:
            # Sections are chosen by the node's name: one that renamed the node would choose itself,
            # and the cheap readers (status, the hook) would still use the file's own name.
            line = _section_line(text, index, "slurm")
            where = f"hosts[{index}].slurm.node_name" + (f" (line {line})" if line else "")
            problems.append(
                f"{where}: may not be set in a host section: sections are chosen by the node's name, which"
                " healthd status and the hook read without host sections; set it in the file's own [slurm]"
                " (docs/hosts.md)"
            )
    return problems


def _section_line(text: str, index: int, table: str) -> int:
    """The line (1-based) where the ``[[hosts]]`` entry ``index`` sets ``table``, or 0 when it is not found."""
    seen = -1
    in_body = False
    # TOML ends a line with LF or CRLF only (toml.io, "Spec"): splitting on "\n" numbers lines as tomllib does.
    for number, line in enumerate(text.split("\n"), 1):
        bare = line.replace(" ", "").replace("\t", "")
        if bare.startswith("[[hosts]]"):
            seen += 1
            in_body = True
        elif bare.startswith("["):
            in_body = False
            if seen == index and (bare.startswith(f"[hosts.{table}]") or bare.startswith(f"[hosts.{table}.")):
                return number
        elif seen == index and in_body and (bare.startswith(f"{table}=") or bare.startswith(f"{table}.")):
            return number
    return 0


class NodeSettings(NamedTuple):
    """The node's own keys, as the file writes them: a ``[[hosts]]`` section may not set them."""

    state_dir: Path
    interval: float
    node_name: Optional[str]


def node_settings(source: str, raw: bytes) -> NodeSettings:
    """``[paths].state_dir``, ``[daemon].interval`` and ``[slurm].node_name`` of the config bytes ``raw``.

    Defaults where absent. Raises ``ConfigError`` (file and key named, exit 78) when the
    file is not UTF-8 TOML, one of these keys is wrong, or a host section sets a
    node-local table (``node_local_problems``), as the full validation does; the rest of
    the file is not validated here.
    """
    text = decode_config(raw, source)
    parsed = parse_toml(text, source)
    local = node_local_problems(parsed, text)
    if local:
        raise ConfigError(source, local)
    paths, daemon, slurm = parsed.get("paths", {}), parsed.get("daemon", {}), parsed.get("slurm", {})
    state_dir = paths.get("state_dir", str(DEFAULT_STATE_DIR)) if isinstance(paths, dict) else None
    interval = daemon.get("interval", DEFAULT_INTERVAL_SECONDS) if isinstance(daemon, dict) else None
    # A NUL cannot be in a path (the full config refuses it too: healthd.checks.settings).
    if not isinstance(state_dir, str) or not state_dir or "\0" in state_dir:
        raise ConfigError(source, [f"paths.state_dir: must be a path string (got {state_dir!r})"])
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval <= 0:
        raise ConfigError(source, [f"daemon.interval: must be a positive number of seconds (got {interval!r})"])
    node = slurm.get("node_name") if isinstance(slurm, dict) else None
    return NodeSettings(Path(state_dir), float(interval), node if isinstance(node, str) else None)


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of ``data``, in hex.

    From CPython's built-in implementation where there is one: ``hashlib.sha256`` maps
    OpenSSL's libcrypto, which alone adds about 4 MiB to a cold check's resident memory.
    """
    for name in ("_sha2", "_sha256"):  # Python 3.12 and later; 3.9 to 3.11
        try:  # __import__, not importlib: the hook from the daemon's pass would import importlib for this alone
            digest: Any = __import__(name).sha256(data)
        except (ImportError, AttributeError):
            continue
        return str(digest.hexdigest())
    import hashlib

    return hashlib.sha256(data).hexdigest()
