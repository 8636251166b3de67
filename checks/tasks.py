"""Tasks in uninterruptible sleep (state D), read from ``[paths].procfs`` without ever waiting on them.

A task stuck in D state on a hung filesystem or a wedged driver blocks whatever touches
what it holds, and so can a reader of the wrong /proc file. This module reads only:

- ``/proc/PID/task/TID/stat`` for every thread: its state and start time. The kernel
  fills it from the task structure under the task's signal lock (fs/proc/array.c,
  ``do_task_stat``), never from the task's memory map or any file it has open;
- ``/proc/PID/task/TID/status`` of the threads found in D state, for their context
  switch counts (``voluntary_ctxt_switches``, ``nonvoluntary_ctxt_switches``), which
  stay still while a task sleeps without waking: the kernel's own hung-task detector
  (kernel/hung_task.c) uses the same sum.

It never reads ``cmdline``, ``environ``, ``maps`` or ``smaps`` (they take the task's
mmap lock, held by a task stuck in a page fault on a hung mount), ``stack`` (root only,
and it stops the task), ``wchan``, nor follows ``cwd``, ``root`` or ``fd/*`` (a path on
the hung filesystem). The thread's name, which its owner chooses, is only shown cleaned.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional


@dataclass(frozen=True)
class TaskStat:
    """The fields of /proc/PID/stat this check uses: pid, name, state (one letter), start time in clock ticks."""

    pid: int
    name: str
    state: str
    start_ticks: int


def parse_stat(text: str) -> TaskStat:
    """Parse one ``/proc/PID/stat`` line (proc(5)): ``pid (comm) state ppid ... starttime ...``.

    The name is between the first ``(`` and the *last* ``)``: a task may put parentheses,
    spaces or a newline in its own name. Raises ValueError on anything else.
    """
    head, open_paren, rest = text.partition(" (")
    name, close_paren, fields_text = rest.rpartition(") ")
    fields = fields_text.split()
    # Field 3 is the state, field 22 starttime: index 0 and 19 after the name.
    if not open_paren or not close_paren or len(fields) < 20 or not head.isdigit():
        raise ValueError(f"not a /proc/PID/stat line: {text[:80]!r}")
    if len(fields[0]) != 1 or not fields[19].isdigit():
        raise ValueError(f"bad state or start time in /proc/PID/stat: {text[:80]!r}")
    return TaskStat(int(head), name, fields[0], int(fields[19]))


def parse_switches(text: str) -> Optional[int]:
    """The sum of voluntary and non-voluntary context switches in a status file, None without both lines."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches") and value.strip().isdigit():
            counts.setdefault(key, int(value.strip()))
    return sum(counts.values()) if len(counts) == 2 else None


@dataclass(frozen=True)
class StuckCandidate:
    """A thread found in D state: its stat fields, its process, and its context switch count when readable."""

    tid: int
    pid: int
    name: str
    start_ticks: int
    switches: Optional[int]

    @property
    def key(self) -> str:
        """Names the thread for this boot: a tid is reused, a tid with its start time is not."""
        return f"{self.tid}:{self.start_ticks}"


def _read_small(path: Path) -> Optional[str]:
    """The file's text, or None when the task is gone or the file unreadable (the task exited meanwhile)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(8192).decode("utf-8", errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
        return None


def read_d_state(procfs: Path) -> list[StuckCandidate]:
    """Every thread under ``procfs`` in state D. Raises OSError when ``procfs`` cannot be listed.

    A thread that exits while it is read is left out; a stat file that cannot be parsed
    raises ValueError naming it.
    """
    found: list[StuckCandidate] = []
    for entry in sorted(os.scandir(procfs), key=lambda e: e.name):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        tasks = Path(entry.path) / "task"
        try:
            directories = [tasks / t.name for t in sorted(os.scandir(tasks), key=lambda t: t.name) if t.name.isdigit()]
        except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
            directories = [Path(entry.path)]  # a procfs without task/ (a fixture): the process itself
        for directory in directories:
            text = _read_small(directory / "stat")
            if text is None:
                continue
            try:
                stat = parse_stat(text)
            except ValueError as exc:
                raise ValueError(f"{directory / 'stat'}: {exc}") from None
            if stat.state != "D":
                continue
            status = _read_small(directory / "status")
            switches = parse_switches(status) if status is not None else None
            found.append(StuckCandidate(stat.pid, pid, stat.name, stat.start_ticks, switches))
    return found
