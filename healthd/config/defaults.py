"""Defaults shared by the config models and the cheap commands, without pydantic.

``healthd status`` (and the slurmd hook reading the last pass) must stay cheap, so
it cannot import ``healthd.config.models``; the values both need live here, once.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

if sys.version_info >= (3, 11):
    import tomllib
else:  # the backport, a dependency before 3.11 (pyproject.toml)
    import tomli as tomllib

DEFAULT_CONFIG_PATH = Path("/etc/healthd/healthd.toml")
DEFAULT_STATE_DIR = Path("/var/lib/healthd")
# The source paper's five minutes between passes.
DEFAULT_INTERVAL_SECONDS = 300.0


def toml_module() -> ModuleType:
    """The TOML parser: ``tomllib`` from Python 3.11, the ``tomli`` backport before."""
    module: ModuleType = tomllib
    return module
