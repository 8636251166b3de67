"""Reading the config file, and the values every caller of the config shares, without pydantic.

``ConfigError`` (every problem, each naming file and key; exit 78) and
``LoadedConfig`` (a validated config and each check's settings) are needed by
commands that must stay cheap, so they live here rather than in ``healthd.config``,
which holds the pydantic models and the full validation. ``read_config`` is the
one place that decides which file is read and refuses one that others could have
written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from healthd.defaults import DEFAULT_CONFIG_PATH, DEFAULT_STATE_DIR, toml_module

if TYPE_CHECKING:
    from healthd.config import Config

BUILT_IN = "(built-in defaults)"


class ConfigError(Exception):
    """A configuration that must not be acted on; ``str()`` names file, key and problem."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__("\n".join(f"{source}: {p}" for p in problems))


@dataclass(frozen=True)
class LoadedConfig:
    """A validated config, where it came from, each check's validated settings, and deprecation notes.

    ``config`` and the settings are the models' values as read-only views
    (``healthd.settingsview``) when they came through the cache or were stored in it.
    """

    source: str
    config: Config
    check_settings: Mapping[str, Any]
    deprecated: tuple[str, ...] = ()
    # SHA-256 of the file's exact bytes, when it was read through healthd.configcache.
    sha256: str = ""


def read_config(path: Optional[Path]) -> tuple[str, bytes]:
    """The config's source name and exact bytes.

    With ``None``: the default path if it exists, else no file (``BUILT_IN``, no bytes).
    Raises ``ConfigError`` for an untrusted or unreadable file.
    """
    if path is None:
        if not DEFAULT_CONFIG_PATH.exists():
            return BUILT_IN, b""
        path = DEFAULT_CONFIG_PATH
    from healthd.trust import untrusted_reason

    reason = untrusted_reason(path) if path.exists() else None
    if reason:
        raise ConfigError(str(path), [f"refusing to load a config that others could have written: {reason}"])
    try:
        return str(path), path.read_bytes()
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read: {exc.strerror or exc}"]) from None


def decode_config(raw: bytes, source: str) -> str:
    """The config's text; raises ``ConfigError`` when it is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(source, [f"not UTF-8 text: {exc}"]) from None


def state_dir_of(raw: bytes) -> Optional[Path]:
    """``[paths].state_dir`` as the file writes it (the default when absent); None when it cannot be read."""
    try:
        table = toml_module().loads(raw.decode("utf-8")).get("paths", {})
        value = table.get("state_dir", str(DEFAULT_STATE_DIR)) if isinstance(table, dict) else None
    except (ValueError, UnicodeDecodeError):
        return None
    return Path(value) if isinstance(value, str) and value else None
