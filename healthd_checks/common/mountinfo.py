"""Pure parser for /proc/<pid>/mountinfo (proc(5)), with errors that name the file and line; FUSE connections.

The FUSE control filesystem (``fusectl``, mounted by systemd at /sys/fs/fuse/connections)
has one directory per FUSE connection, named by the connection's device number, which
is also the ``major:minor`` of its mount in mountinfo. The kernel makes the directory
and its files owned by the uid that mounted the filesystem (fs/fuse/control.c,
``fuse_ctl_add_dentry``: ``inode->i_uid = fc->user_id``), and ``waiting`` counts the
requests sent to the server and not yet answered (``fc->num_waiting``). Reading them
never sends a request to the server, so they answer when the filesystem hangs.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

_ESCAPE = re.compile(r"\\([0-7]{3})")


class MountinfoError(ValueError):
    """A mountinfo line that does not have the documented shape."""

    def __init__(self, source: str, line_number: int, problem: str):
        self.source = source
        self.line_number = line_number
        super().__init__(f"{source}:{line_number}: {problem}")


class MountEntry(NamedTuple):
    mount_point: str
    fstype: str
    source: str
    options: frozenset[str]
    super_options: frozenset[str]
    device: str = ""  # major:minor of the filesystem (field 3)
    mount_id: int = 0  # field 1, unique in the namespace
    parent_id: int = 0  # field 2: the mount this one is mounted on (its own id for the namespace's root)

    @property
    def read_only(self) -> bool:
        # A bind mount can be ro over an rw superblock and vice versa: either makes writes fail.
        return "ro" in self.options or "ro" in self.super_options


def _unescape(field: str) -> str:
    # The kernel octal-escapes space, tab, newline and backslash in paths (fs/proc_namespace.c).
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str, source: str) -> list[MountEntry]:
    """Every mount in ``text``, in file order (later entries mount over earlier ones)."""
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split(" ")
        try:
            separator = fields.index("-", 6)
        except ValueError:
            raise MountinfoError(source, number, "no ' - ' separator after the optional fields") from None
        if len(fields) < separator + 4:
            raise MountinfoError(source, number, "missing fstype, source or super options after ' - '")
        if not fields[0].isdigit() or not fields[4].startswith("/"):
            raise MountinfoError(source, number, "mount id or mount point malformed")
        major, colon, minor = fields[2].partition(":")
        if not (colon and major.isdigit() and minor.isdigit()):
            raise MountinfoError(source, number, f"device {fields[2][:20]!r} is not major:minor")
        entries.append(
            MountEntry(
                mount_point=_unescape(fields[4]),
                fstype=fields[separator + 1],
                source=_unescape(fields[separator + 2]),
                options=frozenset(fields[5].split(",")),
                super_options=frozenset(fields[separator + 3].split(",")),
                device=fields[2],
                mount_id=int(fields[0]),
                parent_id=int(fields[1]) if fields[1].isdigit() else 0,
            )
        )
    return entries


def find_mount(entries: list[MountEntry], path: str) -> MountEntry | None:
    """The entry visible at ``path``: the last one mounted there."""
    for entry in reversed(entries):
        if entry.mount_point == path:
            return entry
    return None


def fuse_connection(entry: MountEntry) -> int | None:
    """The FUSE connection of a mount (its directory name under fusectl), or None for any other filesystem.

    fusectl names a connection by the superblock's device number (``fc->dev``), the
    kernel's ``MKDEV(major, minor)``: ``major << 20 | minor`` (include/linux/kdev_t.h).
    """
    if entry.fstype not in ("fuse", "fuseblk") and not entry.fstype.startswith(("fuse.", "fuseblk.")):
        return None
    major, _, minor = entry.device.partition(":")
    return int(major) << 20 | int(minor) if major.isdigit() and minor.isdigit() else None


class FuseConnection(NamedTuple):
    """One FUSE connection under fusectl: its number, the uid that mounted it, and its requests unanswered."""

    connection: int
    owner: int
    waiting: int


def read_fuse_connections(directory: Path) -> list[FuseConnection]:
    """Every connection under the fusectl ``directory``. Raises OSError when it cannot be listed.

    A connection that goes away while it is read is left out. Where fusectl is not
    mounted the directory is empty: no connection, so nothing is attributed to one.
    """
    found = []
    for name in sorted(os.listdir(directory)):
        if not name.isdigit():
            continue
        try:
            owner = os.stat(f"{directory}/{name}").st_uid
            with open(f"{directory}/{name}/waiting", encoding="ascii") as handle:
                waiting = handle.read().strip()
        except FileNotFoundError:
            continue
        if not waiting.isdigit():
            raise OSError(f"{directory}/{name}/waiting: not a count: {waiting[:20]!r}")
        found.append(FuseConnection(int(name), owner, int(waiting)))
    return found
