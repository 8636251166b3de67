"""Defaults shared by the config models and the cheap commands, without pydantic.

``healthd status`` (and the slurmd hook reading the last pass) must stay cheap, so
it cannot import ``healthd.config.models``; the values both need live here, once.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

DEFAULT_CONFIG_PATH = Path("/etc/healthd/healthd.toml")
DEFAULT_STATE_DIR = Path("/var/lib/healthd")
# The source paper's five minutes between passes.
DEFAULT_INTERVAL_SECONDS = 300.0


def toml_module() -> ModuleType:
    """The TOML parser: ``tomllib`` from Python 3.11, the ``tomli`` backport before."""
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    import tomli

    module: ModuleType = tomli
    return module
