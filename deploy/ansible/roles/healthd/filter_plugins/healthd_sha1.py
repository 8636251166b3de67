"""The ``healthd_sha1`` filter: the SHA-1 of each file on the controller, by file name.

The wheelhouse copy compares these with what ``ansible.builtin.find`` (``get_checksum``)
returns for the node's copies, in one round trip for the whole wheelhouse, where a copy
task per wheel makes one or two round trips each even when nothing changes. SHA-1 is what
``find`` and the ``copy`` module compare files with (ansible-core 2.14); the wheel healthd
installs is verified apart, by its SHA-256 (``healthd_wheel_sha256``).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Callable


def healthd_sha1(paths: list[str]) -> dict[str, str]:
    """``{basename: sha1 hex}`` of the files at ``paths``."""
    sums = {}
    for path in paths:
        digest = hashlib.sha1()  # noqa: S324 (a comparison with find's checksum, not a signature)
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        sums[os.path.basename(path)] = digest.hexdigest()
    return sums


class FilterModule:
    """Ansible's entry point for the role's filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"healthd_sha1": healthd_sha1}
