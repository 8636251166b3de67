"""Pure parser for /proc/<pid>/mountinfo (proc(5)), with errors that name the file and line."""

from __future__ import annotations

import re
from dataclasses import dataclass

_ESCAPE = re.compile(r"\\([0-7]{3})")


class MountinfoError(ValueError):
    """A mountinfo line that does not have the documented shape."""

    def __init__(self, source: str, line_number: int, problem: str):
        self.source = source
        self.line_number = line_number
        super().__init__(f"{source}:{line_number}: {problem}")


@dataclass(frozen=True)
class MountEntry:
    mount_point: str
    fstype: str
    source: str
    options: frozenset[str]
    super_options: frozenset[str]

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
        entries.append(
            MountEntry(
                mount_point=_unescape(fields[4]),
                fstype=fields[separator + 1],
                source=_unescape(fields[separator + 2]),
                options=frozenset(fields[5].split(",")),
                super_options=frozenset(fields[separator + 3].split(",")),
            )
        )
    return entries


def find_mount(entries: list[MountEntry], path: str) -> MountEntry | None:
    """The entry visible at ``path``: the last one mounted there."""
    for entry in reversed(entries):
        if entry.mount_point == path:
            return entry
    return None
