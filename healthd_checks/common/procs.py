"""The process table, read from ``[paths].procfs``: each process's name, owner and executable.

The services check uses it where systemd is not PID 1. It reads three things per
process, all written by the kernel: ``status`` (the command name, the state and the
uids), and the ``exe`` link (the executable the process runs). It does not read
``cmdline``: argv is the caller's to write, and reading it takes the process's
mmap lock, so it blocks behind a process stuck in a page fault on a hung mount
(proc(5), ``/proc/pid/cmdline``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple, Optional

# include/linux/sched.h: TASK_COMM_LEN is 16, a NUL included, so comm keeps 15 characters.
COMM_MAX = 15

# fs/d_path.c: d_path() appends this to the path of a file that has been unlinked.
DELETED = " (deleted)"


def system_uid(uid: int) -> bool:
    """Whether ``uid`` is root's or a system account's: Debian Policy 9.2.2 reserves 0-999 and 60000-64999.

    Everything else belongs to people: 1000-59999 and past 65535 are ordinary accounts
    (and a rootless container's users, mapped from subuid ranges), and 65534 is ``nobody``.
    """
    return uid < 1000 or 60000 <= uid < 65000


def user_name(uid: int) -> str:
    """The account name of ``uid``, or the number itself where the passwd database has none."""
    import pwd  # here: only a finding that names a user needs it

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class ProcStatusError(ValueError):
    """A /proc/PID/status file without the documented Name, State or Uid lines."""


class TaskStatus(NamedTuple):
    """The fields of /proc/PID/status that say what a process is and who owns it."""

    name: str
    state: str
    real_uid: int
    effective_uid: int


def parse_status(text: str, source: str) -> TaskStatus:
    """Name, State and Uid (real, effective, saved, filesystem) from a status file (proc(5)).

    The kernel escapes newlines and backslashes in Name (fs/proc/array.c), so a
    process cannot forge a line of its own status by choosing its name.
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key not in fields:
            fields[key] = value
    missing = [key for key in ("Name", "State", "Uid") if key not in fields]
    if missing:
        raise ProcStatusError(f"{source}: no {', '.join(missing)} line")
    # "Name:\t%s": only the tab is the separator; spaces around the name are part of it.
    name = fields["Name"].removeprefix("\t")
    state = fields["State"].strip()[:1]
    uids = fields["Uid"].split()
    if not state or len(uids) != 4 or not all(uid.isdigit() for uid in uids):
        raise ProcStatusError(f"{source}: expected 'State: X (...)' and 'Uid: REAL EFFECTIVE SAVED FS'")
    return TaskStatus(name=name, state=state, real_uid=int(uids[0]), effective_uid=int(uids[1]))


class Process(NamedTuple):
    """One process: its status fields and the target of its ``exe`` link (None when unreadable)."""

    pid: int
    status: TaskStatus
    exe: Optional[str]

    @property
    def alive(self) -> bool:
        # A zombie (Z) or dead (X) task has exited: it keeps its name but runs nothing.
        return self.status.state not in ("Z", "X")

    @property
    def exe_name(self) -> str:
        """The file name of the executable, without the kernel's " (deleted)" mark."""
        if not self.exe:
            return ""
        return os.path.basename(self.exe.removesuffix(DELETED))

    def named(self, wanted: str) -> bool:
        """Whether the command name (truncated by the kernel) or the executable's file name is ``wanted``."""
        return wanted[:COMM_MAX] == self.status.name or wanted == self.exe_name


def _read_process(procfs: Path, pid: int) -> Optional[Process]:
    # Every read goes through one descriptor of /proc/PID: once that process exits,
    # reads fail with ESRCH instead of reaching a new process that reused the pid.
    try:
        directory = os.open(procfs / str(pid), os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    try:
        status_fd = os.open("status", os.O_RDONLY, dir_fd=directory)
        with open(status_fd, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        try:
            exe: Optional[str] = os.readlink("exe", dir_fd=directory)
        except (FileNotFoundError, PermissionError):
            # Kernel threads and zombies have no exe; another user's needs root (ptrace access mode).
            exe = None
    except (FileNotFoundError, ProcessLookupError):
        return None
    finally:
        os.close(directory)
    return Process(pid=pid, status=parse_status(text, str(procfs / str(pid) / "status")), exe=exe)


def read_processes(procfs: Path) -> list[Process]:
    """Every process listed under ``procfs``; those that exit while being read are left out.

    Raises OSError when ``procfs`` itself cannot be listed and ProcStatusError when a
    status file is malformed.
    """
    pids = sorted(int(entry.name) for entry in os.scandir(procfs) if entry.name.isdigit())
    return [process for pid in pids if (process := _read_process(procfs, pid)) is not None]
