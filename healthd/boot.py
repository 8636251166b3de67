"""This boot's id: the one reader the pass, the job hooks, the node history and the checks share.

proc(5): ``/proc/sys/kernel/random/boot_id`` holds a random UUID the kernel makes at
each boot. Hardware counters and the kernel log restart at boot, so a changed id tells a
reset from a value that merely went down; the history keys boots and reboots on it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: the hook from the daemon's pass imports this module (bench/README.md)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Optional

# A UUID is 36 characters; one page is far more than any boot id, and no more is read.
_MAX_BYTES = 4096
_ID_CHARS = frozenset("0123456789abcdef-")


class BootIdUnreadable(Exception):
    """The boot id file could not be read or holds no boot id; names the file."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


def read_boot_id(procfs: Path, default: Optional[str] = None) -> str:
    """This boot's id, lower-cased, from ``<procfs>/sys/kernel/random/boot_id``.

    ``BootIdUnreadable`` naming the file when it cannot be read or is not a boot id, unless
    ``default`` is given: the pass and the job hooks record "" then (a boot they cannot name),
    while a check reports the file as unobserved.
    """
    path = procfs / "sys" / "kernel" / "random" / "boot_id"
    try:
        with open(path, "rb") as handle:
            raw = handle.read(_MAX_BYTES)
    except OSError as exc:
        if default is not None:
            return default
        raise BootIdUnreadable(path, f"cannot read: {exc.strerror or exc}") from None
    value = raw.decode("ascii", "replace").strip().lower()
    if 16 <= len(value) <= 64 and _ID_CHARS.issuperset(value):
        return value
    if default is not None:
        return default
    shown = value[:80].encode("ascii", "backslashreplace").decode("ascii")
    raise BootIdUnreadable(path, f"expected a boot id such as '5b1c2a9e-0d6f-4a57-9c0e-3f1e2d4c5b6a' (reads {shown!r})")
