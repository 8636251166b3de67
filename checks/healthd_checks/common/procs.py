"""The process table, read from ``[paths].procfs``: each process's name, owner and executable; the one status parser.

The services check uses it where systemd is not PID 1, and the ``kernel`` check parses
its D-state threads' status files with ``status_fields`` and ``parse_uids`` from here.
It reads, per process, only what the kernel writes: the owner of the ``/proc/PID``
directory, ``status`` (the command name, the state and the uids), and the ``exe`` link
(the executable the process runs); a search for a few names reads ``comm`` first (the
command name alone) and the rest only of a process so named. It does not read ``cmdline``: argv is the caller's to
write, and reading it takes the process's mmap lock, so it blocks behind a process stuck
in a page fault on a hung mount (proc(5), ``/proc/pid/cmdline``).

A task's name is the one field of ``status`` its owner writes (prctl(2) ``PR_SET_NAME``,
``/proc/PID/comm``, or the name of the file it executes), up to 15 bytes of anything but
NUL. fs/proc/array.c ``proc_task_name`` writes it with ``seq_escape_str(m, tcomm,
ESCAPE_SPACE | ESCAPE_SPECIAL, "\\n\\\\")``: only a newline and a backslash are escaped;
``\\r``, ``\\v``, ``\\f``, the other control bytes and bytes that are not UTF-8 reach the
file raw. So the file is split into records on ``\\n`` alone (``healthd.text.records``),
and each field is taken from the first record that starts with exactly ``Key:\\t``: the
kernel writes ``Name`` first, and a name cannot start a record of its own.

Who owns a process is read where the process cannot write at all: the owner (st_uid) of
its ``/proc/PID`` directory, through the descriptor every read of it goes through. The
kernel answers it from the task's credentials when asked (fs/proc/base.c ``pid_getattr``,
``task_dump_owner``: the effective uid; root for a kernel thread; a directory keeps it even
for a task that is not dumpable). The ``Uid:`` line adds the real, saved and filesystem
uids, read strictly; every rule that tells a user's process from root's asks the owner
first (``Process.users``), so a parser bug or a forged line can never make a user's
process root's.
"""

from __future__ import annotations

import os
import pwd
import re
from pathlib import Path
from typing import Iterable, NamedTuple, Optional

from healthd.text import records

# include/linux/sched.h: TASK_COMM_LEN is 16, a NUL included, so comm keeps 15 characters.
COMM_MAX = 15

# fs/d_path.c: d_path() appends this to the path of a file that has been unlinked.
DELETED = " (deleted)"

# fs/proc/array.c task_state(): "Uid:\t%u\t%u\t%u\t%u\n" (real, effective, saved, filesystem), in decimal.
_UIDS = re.compile(r"([0-9]{1,10})\t([0-9]{1,10})\t([0-9]{1,10})\t([0-9]{1,10})")
# fs/proc/array.c get_task_state(): "State:\tR (running)", one letter and its word(s) in parentheses.
_STATE = re.compile(r"([A-Za-z]) \([a-z ]{1,32}\)")


def system_uid(uid: int) -> bool:
    """Whether ``uid`` is root's or a system account's: Debian Policy 9.2.2 reserves 0-999 and 60000-64999.

    Everything else belongs to people: 1000-59999 and past 65535 are ordinary accounts
    (and a rootless container's users, mapped from subuid ranges), and 65534 is ``nobody``.
    """
    return uid < 1000 or 60000 <= uid < 65000


def status_fields(text: str, keys: Iterable[str]) -> dict[str, str]:
    """The value of each of ``keys`` in a status file: the rest of the first record that starts ``Key:\\t``."""
    wanted = frozenset(keys)
    found: dict[str, str] = {}
    for record in records(text):
        head, tab, value = record.partition("\t")
        key = head[:-1]
        if tab and head.endswith(":") and key in wanted and key not in found:
            found[key] = value
    return found


def parse_uids(value: str) -> Optional[tuple[int, int, int, int]]:
    """The four uids of a ``Uid:`` value (real, effective, saved, filesystem); None unless in the kernel's shape."""
    match = _UIDS.fullmatch(value)
    if match is None:
        return None
    real, effective, saved, filesystem = (int(uid) for uid in match.groups())
    return real, effective, saved, filesystem


def task_name(value: str) -> str:
    """A ``Name:`` value with the kernel's two escapes (``\\n``, ``\\\\``) undone: the name as the task set it."""
    if "\\" not in value:
        return value
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def plain_name(name: str) -> bool:
    """Whether a task name holds printable characters only: no control byte, nothing that was not UTF-8.

    A daemon's name is a word its package chose. A name with a control character
    (0x01-0x1f, 0x7f, or any other non-printable character) or with bytes that are not
    UTF-8 (read as U+FFFD) is one a user chose, and never stands for a service.
    """
    return name.isprintable() and "\ufffd" not in name


def user_name(uid: int) -> str:
    """The account name of ``uid``, or the number itself where the passwd database has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class ProcStatusError(ValueError):
    """A /proc/PID/status file without the documented Name, State or Uid lines."""


class TaskStatus(NamedTuple):
    """The fields of /proc/PID/status that say what a process is and whose: its name, state and four uids."""

    name: str
    state: str
    uids: tuple[int, int, int, int]

    @property
    def real_uid(self) -> int:
        return self.uids[0]

    @property
    def effective_uid(self) -> int:
        return self.uids[1]


def parse_status(text: str, source: str) -> TaskStatus:
    """Name, State and Uid (real, effective, saved, filesystem) from a status file (proc(5)), each strictly."""
    fields = status_fields(text, ("Name", "State", "Uid"))
    missing = [key for key in ("Name", "State", "Uid") if key not in fields]
    if missing:
        raise ProcStatusError(f"{source}: no {', '.join(missing)} line")
    state = _STATE.fullmatch(fields["State"])
    uids = parse_uids(fields["Uid"])
    if state is None or uids is None:
        raise ProcStatusError(f"{source}: expected 'State:\\tX (...)' and 'Uid:\\tREAL\\tEFFECTIVE\\tSAVED\\tFS'")
    # "Name:\t%s": only the tab is the separator; spaces around the name are part of it.
    return TaskStatus(name=task_name(fields["Name"]), state=state.group(1), uids=uids)


class Process(NamedTuple):
    """One process: its status fields, the target of its ``exe`` link (None when unreadable), its owner.

    ``owner`` is the uid that owns ``/proc/PID`` (the task's effective uid, set by the kernel).
    """

    pid: int
    status: TaskStatus
    exe: Optional[str]
    owner: int

    @property
    def alive(self) -> bool:
        # A zombie (Z) or dead (X) task has exited: it keeps its name but runs nothing.
        return self.status.state not in ("Z", "X")

    @property
    def users(self) -> bool:
        """Whether an ordinary user runs it: the owner of /proc/PID, which no process writes, is not a system uid."""
        return not system_uid(self.owner)

    @property
    def exe_name(self) -> str:
        """The file name of the executable, without the kernel's " (deleted)" mark."""
        return executable_name(self.exe)

    def named(self, wanted: str) -> bool:
        """Whether the command name (truncated by the kernel) or the executable's file name is ``wanted``.

        Never for a process whose command name is not plain (``plain_name``): a user's.
        """
        if not plain_name(self.status.name):
            return False
        return wanted[:COMM_MAX] == self.status.name or wanted == self.exe_name


def executable_name(exe: Optional[str]) -> str:
    """The file name of an ``exe`` link's target, without the kernel's " (deleted)" mark; "" for none."""
    if not exe:
        return ""
    return os.path.basename(exe.removesuffix(DELETED))


def read_task_file(directory: int, name: str) -> str:
    """The file ``name`` under an open /proc/PID directory, whole, as ``read_kernel_text`` decodes it.

    Raises FileNotFoundError or ProcessLookupError once the task has exited.
    """
    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=directory)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")


def task_owner(directory: int) -> int:
    """The owner of an open /proc/PID (or /proc/PID/task/TID) directory: the task's effective uid.

    fs/proc/base.c ``pid_getattr`` asks the task's credentials on every stat, and says
    root once the task is gone: read a file of the task after this, and drop the owner
    when that read finds the task gone.
    """
    return os.fstat(directory).st_uid


class ProcessTable(NamedTuple):
    """The processes read, and each status file skipped as malformed (its path and what is wrong)."""

    processes: tuple[Process, ...]
    skipped: tuple[str, ...] = ()


def _read_process(procfs: Path, pid: int, names: Optional[frozenset[str]]) -> Optional[Process]:
    # Every read goes through one descriptor of /proc/PID: once that process exits,
    # reads fail with ESRCH instead of reaching a new process that reused the pid.
    try:
        directory = os.open(f"{procfs}/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    try:
        try:
            exe: Optional[str] = os.readlink("exe", dir_fd=directory)
        except (FileNotFoundError, PermissionError):
            # Kernel threads and zombies have no exe; another user's needs root (ptrace access mode).
            exe = None
        if names is not None and not _maybe_named(directory, exe, names):
            return None
        owner = task_owner(directory)
        text = read_task_file(directory, "status")
    except (FileNotFoundError, ProcessLookupError):
        return None
    finally:
        os.close(directory)
    return Process(pid=pid, status=parse_status(text, f"{procfs}/{pid}/status"), exe=exe, owner=owner)


def _maybe_named(directory: int, exe: Optional[str], names: frozenset[str]) -> bool:
    """Whether ``Process.named`` may hold for one of ``names``, from ``comm`` and the executable alone.

    ``comm`` is the name the status file's ``Name:`` line holds, unescaped, and a newline
    (fs/proc/base.c ``comm_show``), so no process this says no to could be named so: the
    rules (a plain name, the owner, the state) are the status file's, read only past here.
    """
    comm = read_task_file(directory, "comm").removesuffix("\n")
    return any(comm == name[:COMM_MAX] for name in names) or executable_name(exe) in names


def read_processes(procfs: Path, names: Optional[Iterable[str]] = None) -> ProcessTable:
    """Every process listed under ``procfs`` (with ``names``, those that may be one of them) but those that exit.

    With ``names``, a process's ``comm`` and ``exe`` link are read first, and its owner and
    status only where one of them is one of ``names`` (``_maybe_named``): a search of a
    node's hundreds of processes for one daemon then parses no status file but the
    daemon's. The caller still asks ``Process.named`` and the owner, as of any process.
    A malformed status file skips its process alone and is named in ``skipped``: one
    process the parser cannot read must not blind the check to all the others. Raises
    OSError when ``procfs`` itself cannot be listed.
    """
    wanted = None if names is None else frozenset(names)
    pids = sorted(int(entry.name) for entry in os.scandir(procfs) if entry.name.isdigit())
    processes: list[Process] = []
    skipped: list[str] = []
    for pid in pids:
        try:
            process = _read_process(procfs, pid, wanted)
        except ProcStatusError as exc:
            skipped.append(str(exc))
            continue
        if process is not None:
            processes.append(process)
    return ProcessTable(tuple(processes), tuple(skipped))
