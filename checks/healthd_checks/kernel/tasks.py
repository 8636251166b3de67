"""Tasks in uninterruptible sleep (state D), read from ``[paths].procfs`` without ever waiting on them.

A task stuck in D state on a hung filesystem or a wedged driver blocks whatever touches
what it holds, and so can a reader of the wrong /proc file. This module reads only:

- ``/proc/PID/stat`` of every process: its state, thread count and start time. The kernel
  fills it, like each thread's ``/proc/PID/task/TID/stat``, from the task structure under
  the task's signal lock (fs/proc/array.c, ``do_task_stat``), never from the task's memory
  map or any file it has open;
- ``/proc/PID/task/TID/stat`` for every thread of a process with more than one thread, or
  whose leader has exited (state Z or X): a hung thread is often one thread of many, and
  the process's own line shows only its leader's state. A process of one thread is its
  leader, so its own line says all; most processes (kernel threads, daemons) are such, and
  this spares listing their ``task/`` directories: about half the cost of a walk. A thread
  started after its process's line was read is seen by the next pass;
- ``status`` of the threads found in D state, for their context switch counts
  (``voluntary_ctxt_switches``, ``nonvoluntary_ctxt_switches``), which stay still while a
  task sleeps without waking: the kernel's own hung-task detector (kernel/hung_task.c)
  uses the same sum; and for the thread's uids (``Uid:`` real, effective, saved,
  filesystem: credentials are each thread's own), parsed by ``procs`` (records split on
  newline alone, fields by their exact ``Key:\t`` prefix: the thread's name cannot forge
  a line), with the owner of the thread's directory, which the kernel keeps and says
  whose it is whatever the file reads (``procs.task_owner``);
- ``wchan`` of those threads: the function each sleeps in (a FUSE request's wait says
  whose server holds it, see ``fuseblame``). fs/proc/base.c ``proc_pid_wchan`` reads it
  from the sleeping task's saved stack under spinlocks only (``get_wchan``); a reader
  not allowed to trace the task gets ``0``;
- the same files of a thread a hung-task report names (``read_task``), in whatever
  state it is now.

It never reads ``cmdline``, ``environ``, ``maps`` or ``smaps`` (they take the task's
mmap lock, held by a task stuck in a page fault on a hung mount), ``stack`` (root only,
and it stops the task), nor follows ``cwd``, ``root`` or ``fd/*`` (a path on the hung
filesystem). The thread's name, which its owner chooses, is only shown cleaned.
Each stat file is read with one ``open``/``read``/``close`` of its path as a string: a
walk of 20,000 tasks is that many reads, and Python's file objects cost more than the
reads. The few threads in D state are read through a descriptor of their directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple, Optional

from ..common.procs import parse_uids, read_task_file, status_fields, task_owner

# include/linux/sched.h: the task flag of a kernel thread, field 9 of /proc/PID/stat.
PF_KTHREAD = 0x00200000


class TaskStat(NamedTuple):
    """The fields of /proc/PID/stat this check uses: pid, name, state (one letter), start ticks, thread count, flags."""

    pid: int
    name: str
    state: str
    start_ticks: int
    threads: int = 1
    flags: int = 0

    @property
    def kernel_thread(self) -> bool:
        """Whether the task is a kernel thread: ``PF_KTHREAD`` in its flags, which only the kernel sets."""
        return bool(self.flags & PF_KTHREAD)


def parse_stat(text: str) -> TaskStat:
    """Parse one ``/proc/PID/stat`` line (proc(5)): ``pid (comm) state ppid ... flags ... num_threads ... starttime``.

    The name is between the first ``(`` and the *last* ``)``: a task may put parentheses,
    spaces or a newline in its own name. Raises ValueError on anything else.
    """
    head, open_paren, rest = text.partition(" (")
    name, close_paren, fields_text = rest.rpartition(") ")
    # Field 3 is the state, field 9 flags, field 20 num_threads, field 22 starttime: index 0, 6, 17 and 19
    # after the name.
    fields = fields_text.split(maxsplit=20)
    if not open_paren or not close_paren or len(fields) < 20 or not head.isdigit():
        raise ValueError(f"not a /proc/PID/stat line: {text[:80]!r}")
    if len(fields[0]) != 1 or not all(fields[i].isdigit() for i in (6, 17, 19)):
        raise ValueError(f"bad state, flags, thread count or start time in /proc/PID/stat: {text[:80]!r}")
    return TaskStat(int(head), name, fields[0], int(fields[19]), int(fields[17]), int(fields[6]))


def parse_switches(text: str) -> Optional[int]:
    """The sum of voluntary and non-voluntary context switches in a status file, None without both lines."""
    counts = status_fields(text, ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")).values()
    return sum(int(count) for count in counts) if len(counts) == 2 and all(c.isdigit() for c in counts) else None


def parse_status_uids(text: str) -> Optional[tuple[int, ...]]:
    """The four uids of a status file's ``Uid:`` line (real, effective, saved, filesystem), None without one."""
    value = status_fields(text, ("Uid",)).get("Uid")
    return parse_uids(value) if value is not None else None


class StuckCandidate(NamedTuple):
    """A thread found in D state: its stat fields, its process, its context switches, uids and owner when readable.

    ``owner`` is the uid that owns its /proc directory (its effective uid, kept by the kernel:
    ``procs.task_owner``); None where the thread exited before it was read.
    """

    tid: int
    pid: int
    name: str
    start_ticks: int
    switches: Optional[int]
    uids: Optional[tuple[int, ...]] = None
    kernel_thread: bool = False
    wchan: Optional[str] = None
    owner: Optional[int] = None

    @property
    def key(self) -> str:
        """Names the thread for this boot: a tid is reused, a tid with its start time is not."""
        return f"{self.tid}:{self.start_ticks}"


def _read_small(path: str) -> Optional[str]:
    """The file's text, or None when the task is gone or the file unreadable (the task exited meanwhile)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
        return None
    try:
        return os.read(fd, 8192).decode("utf-8", errors="replace")
    except ProcessLookupError:  # the task exited between the open and the read
        return None
    finally:
        os.close(fd)


def _read_stat(directory: str) -> Optional[TaskStat]:
    """``directory``'s stat file parsed; None when the task is gone; ValueError naming the file when malformed."""
    text = _read_small(f"{directory}/stat")
    if text is None:
        return None
    try:
        return parse_stat(text)
    except ValueError as exc:
        raise ValueError(f"{directory}/stat: {exc}") from None


def _stat_or_skip(directory: str, skipped: list[str]) -> Optional[TaskStat]:
    """``_read_stat``, with a malformed file named in ``skipped`` instead of raised."""
    try:
        return _read_stat(directory)
    except ValueError as exc:
        skipped.append(str(exc))
        return None


def _threads(process: str, stat: TaskStat, skipped: list[str]) -> list[tuple[str, TaskStat]]:
    """The threads of a process (their directories and stat lines), sorted by thread id as text."""
    # One thread that is still running: the process's own line is that thread's (its leader's).
    if stat.threads == 1 and stat.state not in ("Z", "X"):
        return [(process, stat)]
    try:
        names = sorted(name for name in os.listdir(f"{process}/task") if name.isdigit())
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return [(process, stat)]  # a procfs without task/ (a fixture): the process itself
    threads = []
    for name in names:
        directory = f"{process}/task/{name}"
        thread = _stat_or_skip(directory, skipped)
        if thread is not None:
            threads.append((directory, thread))
    return threads


class DStateScan(NamedTuple):
    """The threads found in D state, and the stat files skipped as malformed (each named, with what is wrong)."""

    found: tuple[StuckCandidate, ...]
    skipped: tuple[str, ...] = ()


def read_d_state(procfs: Path) -> DStateScan:
    """Every thread under ``procfs`` in state D. Raises OSError when ``procfs`` cannot be listed.

    A thread that exits while it is read is left out. A stat file that cannot be parsed
    skips that task alone and is named in ``skipped``: the others are still read.
    """
    found: list[StuckCandidate] = []
    skipped: list[str] = []
    for name in sorted(os.listdir(procfs)):
        if not name.isdigit():
            continue
        process = f"{procfs}/{name}"
        stat = _stat_or_skip(process, skipped)
        if stat is None:
            continue
        for directory, thread in _threads(process, stat, skipped):
            if thread.state != "D":
                continue
            found.append(_candidate(directory, thread, int(name)))
    return DStateScan(tuple(found), tuple(skipped))


def _candidate(directory: str, thread: TaskStat, pid: int) -> StuckCandidate:
    """The thread with its owner and what its ``status`` and ``wchan`` say (None each where it exited meanwhile)."""
    owner, status, wchan = _read_thread(directory, thread.start_ticks)
    # wchan is "0" for a running task or a reader the kernel does not let see it (fs/proc/base.c).
    sleeping_in = wchan.strip() if wchan is not None and wchan.strip() not in ("", "0") else None
    return StuckCandidate(
        thread.pid,
        pid,
        thread.name,
        thread.start_ticks,
        parse_switches(status or ""),
        parse_status_uids(status or ""),
        thread.kernel_thread,
        sleeping_in,
        owner,
    )


def _read_thread(directory: str, start_ticks: int) -> tuple[Optional[int], Optional[str], Optional[str]]:
    """The owner, ``status`` and ``wchan`` of a thread's directory, read through one descriptor of it.

    The owner counts only when the reads after it find the thread alive, and the same
    thread (its ``stat`` gives the start time already read: a tid reused since is
    another's): the kernel says root for the directory of a task that is gone
    (``procs.task_owner``).
    """
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None, None, None
    try:
        owner = task_owner(fd)
        if parse_stat(read_task_file(fd, "stat")).start_ticks != start_ticks:
            return None, None, None
        status = read_task_file(fd, "status")
        return owner, status, _wchan(fd)
    except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
        return None, None, None
    finally:
        os.close(fd)


def _wchan(directory: int) -> Optional[str]:
    try:
        return read_task_file(directory, "wchan")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def read_task(procfs: Path, tid: int) -> Optional[StuckCandidate]:
    """The thread ``tid`` as it is now (any state), or None when no such thread is running.

    ``/proc/TID`` names every thread, not only a process's leader (proc(5)), and the
    hung-task report names a thread by its tid. Its process id is not read (0).
    """
    directory = f"{procfs}/{tid}"
    stat = _read_stat(directory)
    if stat is None or stat.pid != tid or stat.state in ("Z", "X"):
        return None
    return _candidate(directory, stat, 0)
