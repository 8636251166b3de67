"""Finds the system programs healthd runs, by absolute path only.

healthd runs as root, and as a HealthCheckProgram it has no PATH at all, so a
program is never looked up through PATH (where a writable directory could shadow
it): only in the fixed system directories below.
"""

from __future__ import annotations

import os
from typing import Sequence

SYSTEM_DIRS = ("/usr/bin", "/bin", "/usr/sbin", "/sbin")


def locate(name: str, directories: Sequence[str] = SYSTEM_DIRS) -> str:
    """The absolute path of ``name`` in the first of ``directories`` that has it."""
    for directory in directories:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(f"{name} not found in {', '.join(directories)}")
