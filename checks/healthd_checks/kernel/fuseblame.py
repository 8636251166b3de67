"""Whose doing a stuck task is: one waiting on an ordinary user's own FUSE server is not a node fault.

Any user may mount a FUSE filesystem (Debian's fusermount3 is setuid root), and a server
that never answers holds its caller past SIGKILL, until the hung-task detector reports it.
This module decides, from what the ``kernel`` check gathered, whether a stuck thread (one
in D state, or one a hung-task report names) is such a user's doing, and on which of the
user's filesystems (``blame``, ``report_blames``). It reads only what cannot hang on the
filesystem: fusectl's connection directories (owner and ``waiting``, answered by the
kernel from its counters) and mountinfo. docs/host.md gives the rules and their reasons.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Optional, Sequence

from healthd.text import read_kernel_text

from ..common.mountinfo import MountinfoError, fuse_connection, parse_mountinfo, read_fuse_connections
from ..common.procs import system_uid, user_name
from ..kernlog.source import LogLine, Origin, origin_of
from .tasks import StuckCandidate


class FuseMount(NamedTuple):
    """A FUSE connection of an ordinary user with requests its server has not answered.

    ``uid`` is the uid that mounted it (fusectl's owner of the connection), ``mount_point``
    where healthd's mount namespace shows it ("" where it does not: a user's namespace),
    ``allow_other`` whether tasks of other users may enter it. ``GONE`` stands for a FUSE
    filesystem that no longer holds a task that is gone.
    """

    connection: int
    uid: int
    user: str
    mount_point: str
    allow_other: bool

    def record(self) -> dict[str, Any]:
        return {
            "connection": self.connection,
            "uid": self.uid,
            "user": self.user,
            "mount_point": self.mount_point,
            "allow_other": self.allow_other,
        }

    @classmethod
    def from_record(cls, raw: Any) -> Optional[FuseMount]:
        """The mount a saved task clock names, or None for anything that is not such a record."""
        if not isinstance(raw, dict):
            return None
        numbers = [raw.get("connection"), raw.get("uid")]
        texts = [raw.get("user"), raw.get("mount_point")]
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
            return None
        if not all(isinstance(t, str) for t in texts) or not isinstance(raw.get("allow_other"), bool):
            return None
        return cls(raw["connection"], raw["uid"], raw["user"], raw["mount_point"], raw["allow_other"])


GONE = FuseMount(-1, -1, "", "", allow_other=False)


class FuseView(NamedTuple):
    """The node's FUSE connections as a pass saw them.

    ``users_waiting``: ordinary users' connections with requests waiting; ``system`` and
    ``system_waiting``: whether root or a system account has any connection, and one with
    requests waiting; ``readable``: whether fusectl could be read at all.
    """

    users_waiting: tuple[FuseMount, ...] = ()
    system: bool = False
    system_waiting: bool = False
    readable: bool = False


def read_fuse_view(sysfs: Path, procfs: Path) -> FuseView:
    """The FUSE connections under ``sysfs``'s fusectl, named from ``procfs``'s mountinfo. Never touches a mount."""
    try:
        connections = read_fuse_connections(sysfs / "fs/fuse/connections")
    except OSError:
        return FuseView()  # no fusectl: nothing can be blamed on a user's server, and every report counts
    system = [c for c in connections if system_uid(c.owner)]
    waiting = [c for c in connections if c.waiting > 0 and not system_uid(c.owner)]
    points: dict[int, tuple[str, bool]] = {}
    if waiting:
        source = f"{procfs}/self/mountinfo"
        try:
            # No text mode: its newline translation turns a "\r" in a user's mount point into a line break.
            entries = parse_mountinfo(read_kernel_text(source, "surrogateescape"), source).entries
        except (OSError, MountinfoError):
            entries = ()
        for entry in entries:
            number = fuse_connection(entry)
            if number is not None:
                points.setdefault(number, (entry.mount_point, "allow_other" in entry.super_options))
    mounts = tuple(
        FuseMount(c.connection, c.owner, user_name(c.owner), *points.get(c.connection, ("", False))) for c in waiting
    )
    return FuseView(mounts, bool(system), any(c.waiting > 0 for c in system), readable=True)


# A frame of a call trace, as the kernel prints it (lib/vsprintf.c %pB: "function+0xoff/0xsize [module]");
# "? " marks a guess of the unwinder, left out.
_FRAME = re.compile(
    r" (?P<function>[A-Za-z0-9_.]{1,128})\+0x[0-9a-f]{1,16}/0x[0-9a-f]{1,16}(?: \[(?P<module>\w{1,64})\])?"
)
# FUSE's waits for its server (fs/fuse/dev.c request_wait_answer; the rest of fs/fuse is fuse_*).
_FUSE_WAIT = re.compile(r"request_wait_answer|fuse_\w{1,64}")
# Lines of the report looked at after its first: the trace of one task is some 20 to 40.
_TRACE_LINES = 100


def waits_in_fuse(wchan: Optional[str]) -> bool:
    """Whether a thread's ``wchan`` (the function it sleeps in) is FUSE waiting for its server."""
    return wchan is not None and _FUSE_WAIT.fullmatch(wchan) is not None


class Trace(NamedTuple):
    """What the kernel's call trace under a report shows: a FUSE wait, and the modules whose code it runs through."""

    fuse: bool = False
    modules: frozenset[str] = frozenset()

    @property
    def elsewhere(self) -> bool:
        """Whether it waits in another module's code (a driver, NFS, Lustre) and not in FUSE."""
        return not self.fuse and bool(self.modules - {"fuse"})


def read_trace(lines: Sequence[LogLine], start: int, comm: str, tid: int, userspace: bool) -> Trace:
    """The call trace after the hung-task report at ``lines[start]``, of the task it names.

    kernel/hung_task.c prints, after the report, ``sched_show_task`` (kernel/sched/core.c):
    ``task:COMM state:S ... pid:TID ...`` (COMM padded to 15) and the task's call trace,
    closed by ``</TASK>``. The line is found by the name the report gave, so a name that
    holds ``pid:`` cannot stand for another task's, and only the kernel's records count
    (``userspace``: records processes wrote too, for tests only).
    """
    head = f"task:{comm[:15]:<15} state:"
    ours, fuse, modules = False, False, set()
    for line in lines[start + 1 : start + 1 + _TRACE_LINES]:
        if origin_of(line.facility) is not Origin.KERNEL and not userspace:
            continue
        text = line.message.partition("\n")[0]
        if text.startswith("INFO: task ") or (ours and text.strip() == "</TASK>"):
            break
        if text.startswith(head):
            pid = re.search(r" pid: *(\d{1,10}) ", text[len(head) :])
            ours = pid is not None and int(pid.group(1)) == tid
            continue
        frame = _FRAME.fullmatch(text) if ours else None
        if frame is not None:
            fuse = fuse or frame.group("module") == "fuse" or _FUSE_WAIT.fullmatch(frame.group("function")) is not None
            modules.update([frame.group("module")] if frame.group("module") else [])
    return Trace(fuse, frozenset(modules))


class HungReport(NamedTuple):
    """A hung-task report read this pass: the thread it names, when the kernel logged it, that tid now, its trace."""

    tid: int
    usec: Optional[int]
    task: Optional[StuckCandidate]
    trace: Trace = Trace()


def blame(task: StuckCandidate, view: FuseView, trace: Trace = Trace()) -> Optional[FuseMount]:
    """The waiting FUSE filesystem of an ordinary user that ``task`` is held in by its server, or None.

    A FUSE filesystem admits only tasks whose real, effective and saved uids are all its
    mounter's, unless mounted with ``allow_other`` (fs/fuse/dir.c,
    ``fuse_allow_current_process``): so a task of the user's own may be held by the user's
    server, unless its trace shows it waiting in another module (a driver's hang of the
    user's job is the node's). Any other task (root's) only through ``allow_other``, and
    only when it is known to wait on FUSE (its trace or ``wchan``) and no FUSE server of
    root's or a system account's is waited on too: a user must not be able to pass root's
    real hang off as theirs. A kernel thread never waits on a user's server (FUSE writes
    back in the background for that reason), so it is never blamed on one.
    """
    if task.kernel_thread or task.uids is None or len(task.uids) < 3 or trace.elsewhere:
        return None
    for mount in view.users_waiting:
        if all(uid == mount.uid for uid in task.uids[:3]):
            return mount
    if (trace.fuse or waits_in_fuse(task.wchan)) and not view.system_waiting:
        for mount in view.users_waiting:
            if mount.allow_other:
                return mount
    return None


def remembered(previous: Mapping[str, Any], boot_id: Optional[str], tid: int, before: int) -> Optional[FuseMount]:
    """The user's FUSE filesystem the last pass blamed thread ``tid`` on, if it started by tick ``before``.

    ``previous`` is the saved document of D-state clocks (``{"boot_id", "tasks": {"TID:START": entry}}``).
    """
    entries = previous.get("tasks")
    if previous.get("boot_id") != boot_id or not isinstance(entries, dict):
        return None
    found = None
    for key, entry in sorted(entries.items()):
        thread, _, start = str(key).partition(":")
        if thread == str(tid) and start.isdigit() and int(start) <= before and isinstance(entry, dict):
            found = FuseMount.from_record(entry.get("fuse")) or found
    return found


def report_blames(
    reports: Sequence[HungReport], view: FuseView, previous: Mapping[str, Any], boot_id: Optional[str], hz: int
) -> dict[int, FuseMount]:
    """The reported tids whose hang is a user's FUSE server's doing, each with that filesystem (``GONE``: unknown).

    The thread must be the one the kernel reported: the one at its tid now or in the last
    pass, started before the kernel logged the report (a tid reused since started after).
    Its name, which its owner chooses, plays no part. When neither blames it (the user
    freed it before a pass saw it), the report is still a user's if its trace went
    through FUSE and the node has no FUSE filesystem of root's or a system account's at
    all: the FUSE server that held it was a user's. Reports of one tid that disagree count.
    """
    blames: dict[int, Optional[FuseMount]] = {}
    for report in reports:
        found = None
        if report.usec is not None:
            before = report.usec * hz // 1_000_000
            task = report.task if report.task is not None and report.task.start_ticks <= before else None
            found = blame(task, view, report.trace) if task is not None else None
            found = found or remembered(previous, boot_id, report.tid, before)
            not_kernels = task is None or not task.kernel_thread
            if found is None and not_kernels and report.trace.fuse and view.readable and not view.system:
                found = GONE
        blames[report.tid] = found if blames.get(report.tid, found) == found else None
    return {tid: mount for tid, mount in blames.items() if mount is not None}
