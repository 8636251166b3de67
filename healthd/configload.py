"""Reading the config file, without pydantic (or even dataclasses): what the cheap commands need of it.

``ConfigError`` (every problem, each naming file and key; exit 78) is needed by
commands that must stay cheap, so it lives here rather than in ``healthd.config``,
which holds the pydantic models and the full validation. ``read_config`` is the
one place that decides which file is read and refuses one that others could have
written; ``state_dir_of`` finds the state directory without validating the rest.
"""

from __future__ import annotations

from pathlib import Path

from healthd import plaintoml
from healthd.defaults import DEFAULT_CONFIG_PATH, DEFAULT_STATE_DIR

TYPE_CHECKING = False  # not typing's: importing typing at run time would slow `healthd status` (README)
if TYPE_CHECKING:
    from typing import Any, Optional

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
        table = plaintoml.loads(raw.decode("utf-8")).get("paths", {})
        value = table.get("state_dir", str(DEFAULT_STATE_DIR)) if isinstance(table, dict) else None
    except (ValueError, UnicodeDecodeError):
        return None
    return Path(value) if isinstance(value, str) and value else None


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
