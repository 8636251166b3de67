"""Pure parser for /proc/<pid>/mountinfo (proc(5)), with errors that name the file and line; FUSE connections.

What the kernel writes (fs/proc_namespace.c, ``show_mountinfo``): one mount a record, ended
by ``\n``; the root, the mount point, the filesystem type (with a FUSE mount's subtype,
``fuse.NAME``) and the source go through ``mangle``/``seq_path_root`` with the escape set
``" \t\n\\"``, so only space, tab, newline and backslash become ``\\ooo``. Every other byte
of a name a user chose (a directory they own, ``fusermount3 -o subtype=,fsname=``) reaches
the file raw: ``\r``, ``\v``, ``\f``, ``\x1c``, any control byte, bytes that are not UTF-8.
So a record is split on ``\n`` alone (``healthd.text.records``), its fields on the space
alone, and each field is taken by its fixed place around the ``-`` that ends the optional
fields: never by what a user's bytes look like. A record that still does not parse is
skipped and named (``Mountinfo.skipped``), and the rest is judged: one odd line never
blinds a check to every mount.

A FUSE mount whose super options name an ordinary user (``user_id=UID``, which
fusermount3 sets to the caller's uid) is that user's (``fuse_user``): it says nothing of
the node, and the node's own mount beneath it is the one to judge (``find_node_mount``).

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
from pathlib import Path, PurePosixPath
from typing import NamedTuple, Optional, Sequence

from healthd.text import records

from .procs import system_uid

_ESCAPE = re.compile(r"\\([0-7]{3})")
# The fixed fields before the optional ones: mount id, parent id, major:minor, root, mount point, options.
_FIXED = 6


class MountinfoError(ValueError):
    """A mountinfo file with no line of the documented shape, or one such line (``parse_line``)."""

    def __init__(self, source: str, line_number: int, problem: str):
        self.source = source
        self.line_number = line_number
        self.problem = problem
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


class SkippedLine(NamedTuple):
    """A mountinfo line that did not parse: its number, why, and its mount point where field 5 reads as one ("")."""

    line_number: int
    problem: str
    mount_point: str


class Mountinfo(NamedTuple):
    """Every mount of a mountinfo file, in file order (later entries mount over earlier ones), and the lines skipped."""

    entries: tuple[MountEntry, ...]
    skipped: tuple[SkippedLine, ...] = ()


def _number(field: str) -> bool:
    # ASCII digits only: str.isdigit() also takes "²", which int() refuses.
    return field.isascii() and field.isdigit()


def _unescape(field: str) -> str:
    # The kernel octal-escapes space, tab, newline and backslash (fs/proc_namespace.c, " \t\n\\"),
    # and only those: a raw backslash is itself \134, so every "\ooo" in the file is the kernel's.
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_line(line: str) -> MountEntry:
    """One mountinfo record; ``ValueError`` saying what is wrong with it when it has not the documented shape.

    Fields 1-6 are fixed; then come the optional fields (``shared:N``, ``master:N``,
    ``propagate_from:N``, ``unbindable``: the kernel's words, never a user's), the ``-``,
    and the type, source and super options. The fields a user shapes (root, mount point,
    type, source) are escaped, so none holds a space and none is a lone ``-`` before the
    separator: the first ``-`` after field 6 is the separator.
    """
    fields = line.split(" ")
    try:
        separator = fields.index("-", _FIXED)
    except ValueError:
        raise ValueError("no ' - ' separator after the optional fields") from None
    if len(fields) < separator + 4:
        raise ValueError("missing fstype, source or super options after ' - '")
    if not _number(fields[0]) or not _number(fields[1]) or not fields[4].startswith("/"):
        raise ValueError("mount id, parent id or mount point malformed")
    major, colon, minor = fields[2].partition(":")
    if not (colon and _number(major) and _number(minor)):
        raise ValueError(f"device {fields[2][:20]!r} is not major:minor")
    return MountEntry(
        mount_point=_unescape(fields[4]),
        fstype=_unescape(fields[separator + 1]),
        source=_unescape(fields[separator + 2]),
        options=frozenset(fields[5].split(",")),
        # A filesystem's show_options may print a space of its own: the rest of the line is its options.
        super_options=frozenset(" ".join(fields[separator + 3 :]).split(",")),
        device=fields[2],
        mount_id=int(fields[0]),
        parent_id=int(fields[1]),
    )


def parse_mountinfo(text: str, source: str) -> Mountinfo:
    """Every mount in ``text``, and each line that does not parse, skipped; ``MountinfoError`` when none parses.

    Every namespace has at least its root mount, so a file in which no line parses (or
    none at all) is not mountinfo as proc(5) documents it, and nothing in it is judged.
    """
    entries: list[MountEntry] = []
    skipped: list[SkippedLine] = []
    for number, line in enumerate(records(text), start=1):
        if not line.strip(" "):
            continue
        try:
            entries.append(parse_line(line))
        except ValueError as exc:
            fields = line.split(" ")
            point = _unescape(fields[4]) if len(fields) > 4 and fields[4].startswith("/") else ""
            skipped.append(SkippedLine(number, str(exc), point))
    if not entries:
        first = skipped[0] if skipped else SkippedLine(1, "no mount at all: not even the namespace's root", "")
        raise MountinfoError(source, first.line_number, first.problem)
    return Mountinfo(tuple(entries), tuple(skipped))


def find_mount(entries: Sequence[MountEntry], path: str) -> Optional[MountEntry]:
    """The entry visible at ``path``: the last one mounted there, whoever's it is (where a walk to ``path`` goes)."""
    for entry in reversed(entries):
        if entry.mount_point == path:
            return entry
    return None


def is_fuse(entry: MountEntry) -> bool:
    """Whether ``entry`` is a FUSE filesystem: ``fuse``, ``fuseblk``, or either with a subtype (``fuse.sshfs``)."""
    return entry.fstype in ("fuse", "fuseblk") or entry.fstype.startswith(("fuse.", "fuseblk."))


def fuse_user(entry: MountEntry) -> Optional[int]:
    """The ordinary user whose FUSE mount ``entry`` is, by the ``user_id=UID`` of its super options; None for any other.

    fusermount3 (setuid root) mounts for its caller with ``user_id`` set to the caller's uid
    (fs/fuse/inode.c prints it back in ``fuse_show_options``), so a user cannot name another
    uid there. A FUSE mount of root or a system account (``system_uid``) is the node's.
    """
    if not is_fuse(entry):
        return None
    for option in entry.super_options:
        key, _, value = option.partition("=")
        if key == "user_id" and _number(value) and not system_uid(int(value)):
            return int(value)
    return None


def find_node_mount(entries: Sequence[MountEntry], path: str) -> Optional[MountEntry]:
    """The node's own mount at ``path``: the last one mounted there that is not an ordinary user's FUSE mount.

    A user who may write a directory may mount FUSE on it, also over a mount the node is
    expected to have: what the node has there is still what was mounted before.
    """
    for entry in reversed(entries):
        if entry.mount_point == path and fuse_user(entry) is None:
            return entry
    return None


def user_mount_in_the_way(entries: Sequence[MountEntry], path: str) -> Optional[MountEntry]:
    """An ordinary user's FUSE mount that a walk to ``path`` enters: the visible mount at ``path`` or at an ancestor.

    Such a walk, and a ``statvfs`` at its end, asks the user's server (or, without
    ``allow_other``, is answered by the kernel with nothing: fs/fuse/inode.c, ``fuse_statfs``
    returns zeros when ``!fuse_allow_current_process``); whatever comes back is the user's.
    """
    for point in (path, *(str(parent) for parent in PurePosixPath(path).parents)):
        top = find_mount(entries, point)
        if top is not None and fuse_user(top) is not None:
            return top
    return None


def fuse_connection(entry: MountEntry) -> Optional[int]:
    """The FUSE connection of a mount (its directory name under fusectl), or None for any other filesystem.

    fusectl names a connection by the superblock's device number (``fc->dev``), the
    kernel's ``MKDEV(major, minor)``: ``major << 20 | minor`` (include/linux/kdev_t.h).
    """
    if not is_fuse(entry):
        return None
    major, _, minor = entry.device.partition(":")
    return int(major) << 20 | int(minor) if _number(major) and _number(minor) else None


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
