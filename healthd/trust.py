"""Refuses files that someone other than root (or us) could have written: configs and plugin code.

healthd runs as root and can drain every node of a cluster, so a config or plugin
that an unprivileged user could modify is as good as a root shell for them. The rule
is the one OpenSSH's StrictModes and sudo apply: the file and every directory above
it must belong to root or to the user running healthd, and must not be writable by
group (other than root's) or others. A world-writable directory with the sticky bit (``/tmp``) is
accepted, because there others cannot rename or replace what we own.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Optional


def untrusted_reason(path: Path) -> Optional[str]:
    """Why ``path`` must not be trusted, or ``None`` when it is safe to load."""
    me = os.geteuid()
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        return f"cannot resolve {path}: {exc}"
    for component in [target, *target.parents]:
        try:
            info = component.stat()
        except OSError as exc:
            return f"cannot stat {component}: {exc.strerror or exc}"
        if info.st_uid not in (0, me):
            return f"{component} belongs to uid {info.st_uid}, not root"
        # Group write is fine when the group is root's own.
        group_writable = info.st_mode & stat.S_IWGRP and info.st_gid != 0
        writable_by_others = group_writable or info.st_mode & stat.S_IWOTH
        sticky_dir = stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX
        if writable_by_others and not (sticky_dir and component != target):
            return f"{component} is writable by group or others (mode {stat.filemode(info.st_mode)})"
    return None
