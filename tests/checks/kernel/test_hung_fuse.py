"""Hung-task reports blamed on their cause: a task stuck in a user's own FUSE filesystem is a note, not a node fault.

Real: a FUSE filesystem that never answers, served by a real unprivileged user (nobody) or
by root (tests/healthd_testkit/hangfs.py ``--user``); a process of the server's owner stuck
on it in uninterruptible sleep that survives SIGKILL (fs/fuse/dev.c, ``request_wait_answer``:
once the server has read the request, a killed caller waits the answer out); the FUSE
control filesystem mounted under the test's own sysfs root; the real /proc. Only the
hung-task detector's report is written by the test, in the kernel's format: it logs after
120 s, which a test cannot wait.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest
from healthd_testkit.checks import FixtureNode, mounted
from healthd_testkit.nvml import Clock
from healthd_testkit.paths import REPO
from healthd_testkit.waiting import wait_for

from healthd.model import Status
from healthd_checks.kernel.check import CHECK
from healthd_checks.kernel.fuseblame import FuseMount, FuseView, HungReport, Trace, read_trace, report_blames
from healthd_checks.kernel.settings import KernelSettings
from healthd_checks.kernel.tasks import StuckCandidate
from healthd_checks.kernlog.source import LogLine

HANGFS = REPO / "tests" / "healthd_testkit" / "hangfs.py"
FUSE_LOOKUP = 1  # include/uapi/linux/fuse.h


@dataclass
class Stuck:
    """A process stuck on a FUSE mount: its pid and name, the mount, the node's sysfs root with fusectl."""

    pid: int
    comm: str
    mount: str
    sysfs: Path
    server: subprocess.Popen[bytes]
    victim: subprocess.Popen[bytes]

    def release(self) -> None:
        _release(self.server, self.victim)


def _release(server: subprocess.Popen[bytes], victim: Optional[subprocess.Popen[bytes]]) -> None:
    """Kill the server: the waiting request fails (ENOTCONN), and the killed victim exits."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGKILL)
    server.wait()
    if victim is not None:
        victim.wait(timeout=10)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
        return handle.read().rpartition(") ")[2][:1]


@contextlib.contextmanager
def _served(
    account: str, base: Path, allow_other: bool = False
) -> Iterator[tuple[Path, subprocess.Popen[bytes], Path]]:
    """A FUSE filesystem at ``base/mnt`` that ``account`` mounted and serves (never answering), with its request log."""
    owner = pwd.getpwnam(account)
    mount, requests = base / "mnt", base / "requests"
    mount.mkdir()
    os.chown(mount, owner.pw_uid, owner.pw_gid)
    with requests.open("w") as log:
        server_options = ["--user", f"{owner.pw_uid}:{owner.pw_gid}"] + ["--allow-other"] * allow_other
        command = [sys.executable, "-I", str(HANGFS), *server_options, str(mount)]
        server = subprocess.Popen(command, stdout=log, start_new_session=True)
    try:
        wait_for(lambda: mounted(str(mount)), timeout=15, what=f"{account}'s FUSE server to mount {mount}")
        yield mount, server, requests
    finally:
        _release(server, None)
        subprocess.run(["umount", "-l", str(mount)], check=False, capture_output=True)
        # Gone before the next test reads fusectl: a root FUSE mount left behind changes its view.
        wait_for(lambda: not mounted(str(mount)), timeout=10, what=f"{mount} unmounted")


@contextlib.contextmanager
def idle_fuse(account: str) -> Iterator[Path]:
    """A FUSE filesystem of ``account``'s that nothing waits on: fusectl shows its connection, owned by that uid."""
    base = Path(tempfile.mkdtemp(prefix="healthd-idlefuse-"))
    base.chmod(0o755)
    try:
        with _served(account, base) as (mount, _, _):
            yield mount
    finally:
        shutil.rmtree(base, ignore_errors=True)


# The victim, when it names itself (prctl(2) PR_SET_NAME, 15) after dropping to the account
# (started as root: this interpreter may live where the account cannot read), then the stat that hangs.
NAMED_STAT = """
import ctypes, os, sys
uid, gid, name, target = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
os.setgroups([])
os.setgid(gid)
os.setuid(uid)
ctypes.CDLL(None).prctl(15, os.fsencode(name), 0, 0, 0)
os.stat(target)
"""


@contextlib.contextmanager
def stuck_on_fuse(account: str, victim_account: str = "", allow_other: bool = False, name: str = "") -> Iterator[Stuck]:
    """A process stuck for good in a FUSE filesystem that ``account`` mounted and serves.

    The process is ``victim_account``'s (by default ``account``'s own) and, with ``name``,
    called that; ``allow_other`` lets other users' processes in, as fusermount3 does where
    /etc/fuse.conf allows it.
    """
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        pytest.skip("mounting FUSE and fusectl needs root and /dev/fuse")
    caller = pwd.getpwnam(victim_account or account)
    base = Path(tempfile.mkdtemp(prefix="healthd-hungtask-"))
    base.chmod(0o755)
    control = base / "sys/fs/fuse/connections"
    control.mkdir(parents=True)
    subprocess.run(["mount", "-t", "fusectl", "fusectl", str(control)], check=True)
    try:
        with _served(account, base, allow_other) as (mount, server, requests):
            target = str(mount / "x")
            if name:
                ids = [str(caller.pw_uid), str(caller.pw_gid)]
                victim = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", NAMED_STAT, *ids, name, target],
                    cwd="/",
                    stdout=subprocess.DEVNULL,
                )
            else:
                victim = subprocess.Popen(
                    ["stat", target],
                    user=caller.pw_uid,
                    group=caller.pw_gid,
                    extra_groups=[],
                    cwd="/",
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            try:
                sent = f"{FUSE_LOOKUP} 1 {victim.pid}\n"
                wait_for(
                    lambda: sent in requests.read_text(), timeout=10, what="the server to read the victim's lookup"
                )
                victim.send_signal(signal.SIGKILL)
                wait_for(lambda: _state(victim.pid) == "D", timeout=10, what="the killed victim in D state")
                time.sleep(0.2)
                assert _state(victim.pid) == "D", "the victim left D state: it was not stuck"
                yield Stuck(victim.pid, name or "stat", str(mount), base / "sys", server, victim)
            finally:
                _release(server, victim)
    finally:
        subprocess.run(["umount", "-l", str(control)], check=False, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _kmsg_escaped(text: str) -> str:
    """``text`` as /dev/kmsg shows it: every byte below 0x20, from 0x7f up, and the backslash as ``\\xHH``.

    kernel/printk/printk.c (``msg_add_ext_text``, ``info_print_ext_header``'s escaping).
    """
    return "".join(chr(b) if 0x20 <= b < 0x7F and b != 0x5C else f"\\x{b:02x}" for b in text.encode())


def hung_task_report(path: Path, tasks: list[tuple[str, int]], seconds: int = 122) -> Path:
    """The hung-task detector's report for each (name, tid), as /dev/kmsg records logged now.

    kernel/hung_task.c ``check_hung_task``: three ``pr_err`` lines (the report, the taint
    and release line, the hint to turn it off), then ``sched_show_task`` (kernel/sched/core.c)
    with the task's line and its call trace. The record time is the kernel's clock
    since boot (CLOCK_BOOTTIME), as /dev/kmsg stamps it (Documentation/ABI/testing/dev-kmsg).
    """
    usec = time.clock_gettime_ns(time.CLOCK_BOOTTIME) // 1000
    release = os.uname().release
    records: list[tuple[int, str]] = []
    for comm, tid in tasks:
        records += [
            (3, f"INFO: task {comm}:{tid} blocked for more than {seconds} seconds."),
            (3, f"      Not tainted {release} #1"),
            (3, '"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.'),
            (6, f"task:{comm:<15.15} state:D stack:0     pid:{tid:<5} ppid:1      flags:0x00004006"),
            (4, "Call Trace:"),
            (4, " <TASK>"),
            (4, " __schedule+0x34d/0x9e0"),
            (4, " schedule+0x5a/0xd0"),
            # The stack of such a stuck stat, as /proc/PID/stack showed it on Linux 6.18.
            (4, " request_wait_answer+0x151/0x210 [fuse]"),
            (4, " __fuse_simple_request+0x120/0x330 [fuse]"),
            (4, " fuse_lookup_name+0xbf/0x220 [fuse]"),
            (4, " fuse_lookup+0x75/0x1b0 [fuse]"),
            (4, " __lookup_slow+0x87/0x150"),
            (4, " walk_component+0x108/0x190"),
            (4, " path_lookupat+0xa7/0x180"),
            (4, " filename_lookup+0xe4/0x200"),
            (4, " vfs_statx+0x66/0x160"),
            (4, " vfs_fstatat+0x67/0xb0"),
            (4, " </TASK>"),
        ]
    lines = (f"{level},{seq},{usec},-;{_kmsg_escaped(text)}\n" for seq, (level, text) in enumerate(records, 1))
    path.write_text("".join(lines))
    return path


@pytest.mark.root
def test_a_users_task_named_like_roots_uid_line_in_their_own_hung_fuse_is_still_theirs(
    tmp_path: Path, check_once: Callable[[str, str], dict[str, Any]]
) -> None:
    # A "\r" (where str.splitlines() cuts) and a Uid line of zeros in the stuck task's name. With a
    # FUSE filesystem of root's on the node too, nothing but the task's owner says it is the user's.
    with idle_fuse("root"), stuck_on_fuse("nobody", name="x\rUid:0 0 0 0") as stuck:
        with open(f"/proc/{stuck.pid}/status", "rb") as handle:
            assert handle.read().startswith(b"Name:\tx\rUid:0 0 0 0\n")
        check = _kernel_check(check_once, stuck, hung_task_report(tmp_path / "kmsg", [(stuck.comm, stuck.pid)]))
    found = {f["code"]: f for f in check["findings"] if f["code"].startswith("HUNG_TASK")}
    assert {code: f["status"] for code, f in found.items()} == {"HUNG_TASK_USER_FUSE": "OK"}
    note = found["HUNG_TASK_USER_FUSE"]
    assert (note["details"]["pid"], note["details"]["uid"], note["details"]["mount"]) == (stuck.pid, 65534, stuck.mount)
    assert check["status"] == "OK"


def _kernel_check(check_once: Callable[[str, str], dict[str, Any]], stuck: Stuck, kmsg: Path) -> dict[str, Any]:
    body = f'[paths]\nprocfs = "/proc"\nsysfs = "{stuck.sysfs}"\nkmsg = "{kmsg}"\n[checks.kernel]\nsource = "kmsg"\n'
    return check_once("kernel", body)


@pytest.mark.root
def test_a_task_stuck_in_a_users_own_fuse_server_is_a_note_and_a_kernel_threads_hang_still_counts(
    tmp_path: Path, check_once: Callable[[str, str], dict[str, Any]]
) -> None:
    kthreadd = 2  # a kernel thread (PF_KTHREAD): never a user's doing, whatever is mounted
    with stuck_on_fuse("nobody") as stuck:
        kmsg = hung_task_report(tmp_path / "kmsg", [(stuck.comm, stuck.pid), ("kthreadd", kthreadd)])
        check = _kernel_check(check_once, stuck, kmsg)
    found = {f["code"]: f for f in check["findings"] if f["code"].startswith("HUNG_TASK")}
    assert {code: f["status"] for code, f in found.items()} == {"HUNG_TASK_USER_FUSE": "OK", "HUNG_TASK": "WARNING"}
    note, hung = found["HUNG_TASK_USER_FUSE"], found["HUNG_TASK"]
    assert (note["details"]["pid"], note["details"]["mount"]) == (stuck.pid, stuck.mount)
    assert (note["details"]["user"], note["details"]["uid"]) == ("nobody", 65534)
    assert stuck.mount in note["message"] and "nobody" in note["message"]
    assert (hung["details"]["pid"], hung["details"]["count"]) == (kthreadd, 1)
    assert check["status"] == "WARNING"


@pytest.mark.root
def test_a_task_stuck_in_a_root_served_fuse_mount_still_counts(
    tmp_path: Path, check_once: Callable[[str, str], dict[str, Any]]
) -> None:
    with stuck_on_fuse("root") as stuck:
        check = _kernel_check(check_once, stuck, hung_task_report(tmp_path / "kmsg", [(stuck.comm, stuck.pid)]))
    (hung,) = [f for f in check["findings"] if f["code"].startswith("HUNG_TASK")]
    assert (hung["code"], hung["status"], hung["details"]["pid"]) == ("HUNG_TASK", "WARNING", stuck.pid)
    assert check["status"] == "WARNING"


@pytest.mark.root
def test_only_the_report_of_a_users_stuck_task_is_ok(
    tmp_path: Path, check_once: Callable[[str, str], dict[str, Any]]
) -> None:
    # The whole check is OK when the one report is a user's own hang: nothing drains the node.
    with stuck_on_fuse("nobody") as stuck:
        check = _kernel_check(check_once, stuck, hung_task_report(tmp_path / "kmsg", [(stuck.comm, stuck.pid)]))
    assert check["status"] == "OK"
    assert [f["code"] for f in check["findings"] if f["status"] != "OK"] == []


@pytest.mark.root
@pytest.mark.parametrize("seen", [True, False], ids=["seen-in-d-state", "never-seen"])
def test_a_report_read_after_the_user_freed_the_task_is_still_theirs(tmp_path: Path, seen: bool) -> None:
    # The dodge: hang a task in one's own FUSE mount, let the detector report it, then kill
    # the server before healthd reads the report. The task is gone. A pass that saw it in D
    # remembers whose mount held it; without one, its trace went through FUSE and this node
    # has no FUSE mount of root's, so the server that held it was a user's.
    node = FixtureNode(tmp_path, Clock())
    settings = KernelSettings(source="kmsg")
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    with stuck_on_fuse("nobody") as stuck:
        if seen:
            node.passes(CHECK, settings, procfs=Path("/proc"), sysfs=stuck.sysfs, kmsg=kmsg)
        stuck.release()
        assert not Path(f"/proc/{stuck.pid}").exists()
        hung_task_report(kmsg, [(stuck.comm, stuck.pid)])
        node.clock.now += 60
        found = {f.code: f for f in node.passes(CHECK, settings, procfs=Path("/proc"), sysfs=stuck.sysfs, kmsg=kmsg)}
    assert "HUNG_TASK" not in found
    note = found["HUNG_TASK_USER_FUSE"]
    assert (note.status, note.details["pid"]) == (Status.OK, stuck.pid)
    if seen:
        assert (note.subject, note.details["mount"], note.details["user"]) == ("uid65534", stuck.mount, "nobody")
    else:
        assert note.subject == "fuse_gone" and "no FUSE filesystem here is root's" in note.message


@pytest.mark.root
def test_a_root_process_a_user_trapped_in_their_allow_other_mount_drains_nothing(tmp_path: Path) -> None:
    # An admin's ls, a backup: root's process stuck in a user's mount is still the user's doing,
    # both its hung-task report and its D state.
    node = FixtureNode(tmp_path, Clock())
    settings = KernelSettings(source="kmsg")
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    with stuck_on_fuse("nobody", victim_account="root", allow_other=True) as stuck:
        node.passes(CHECK, settings, procfs=Path("/proc"), sysfs=stuck.sysfs, kmsg=kmsg)
        hung_task_report(kmsg, [(stuck.comm, stuck.pid)])
        node.clock.now += settings.stuck_after
        found = node.passes(CHECK, settings, procfs=Path("/proc"), sysfs=stuck.sysfs, kmsg=kmsg)
    codes = {f.code: f for f in found if f.code.startswith("HUNG_TASK")}
    assert {code: f.status for code, f in codes.items()} == {"HUNG_TASK_USER_FUSE": Status.OK}
    assert codes["HUNG_TASK_USER_FUSE"].details["mount"] == stuck.mount
    # The machine's own D tasks may show too: only where this one is listed matters.
    listed = [
        f.code for f in found if f.code.startswith("D_STATE") and str(stuck.pid) in str(f.details["tids"]).split(",")
    ]
    assert listed == ["D_STATE_USER_TASKS"]


# Pure: which reports are blamed on a user's FUSE server, from what gather saw.
BOOT = "4d0c5e7e-8f1a-4c52-9b1e-2b7f0d1c9a11"
HZ = 100
NOBODYS = FuseMount(41, 65534, "nobody", "/tmp/sshfs", allow_other=False)
VIEW = FuseView((NOBODYS,), readable=True)
# A report logged at 10 s after boot; the task started at 5 s (500 ticks).
AT = 10_000_000
NOBODY = (65534, 65534, 65534, 65534)
ROOT = (0, 0, 0, 0)
IN_FUSE = Trace(fuse=True, modules=frozenset({"fuse"}))


def _thread(
    tid: int, uids: tuple[int, ...], start: int = 500, kthread: bool = False, wchan: str = ""
) -> StuckCandidate:
    return StuckCandidate(tid, tid, "anything", start, 7, uids, kthread, wchan or None)


def _blamed(*reports: HungReport, view: FuseView = VIEW, **previous: Any) -> dict[int, str]:
    blamed = report_blames(reports, view, previous, BOOT, HZ)
    return {tid: mount.mount_point or f"uid {mount.uid}" for tid, mount in blamed.items()}


def test_a_users_task_in_their_own_waiting_mount_is_blamed_on_it() -> None:
    assert _blamed(HungReport(77, AT, _thread(77, NOBODY))) == {77: "/tmp/sshfs"}
    assert _blamed(HungReport(77, AT, _thread(77, NOBODY), trace=IN_FUSE)) == {77: "/tmp/sshfs"}
    # The kernel's trace shows it in a driver's code: the user's job hit a node fault.
    in_driver = Trace(modules=frozenset({"nvidia"}))
    assert _blamed(HungReport(77, AT, _thread(77, NOBODY), trace=in_driver)) == {}
    assert _blamed(HungReport(77, AT, _thread(77, NOBODY)), view=FuseView(readable=True)) == {}  # none waits


def test_a_reused_tid_a_kernel_thread_or_another_users_task_is_not() -> None:
    reused = HungReport(77, AT, _thread(77, NOBODY, start=1001))  # started after the report was logged
    kthread = HungReport(2, AT, _thread(2, NOBODY, kthread=True), trace=IN_FUSE)
    roots = HungReport(78, AT, _thread(78, ROOT))  # FUSE turns other uids away: root waits elsewhere
    setuid = HungReport(79, AT, _thread(79, (65534, 0, 0, 0)))  # a setuid program: its euid is not the mounter's
    undated = HungReport(80, None, _thread(80, NOBODY))  # no kernel time: the tid cannot be matched
    assert _blamed(reused, kthread, roots, setuid, undated) == {}


def test_a_root_task_in_a_users_allow_other_mount_only_when_it_waits_on_fuse_and_no_root_server_does() -> None:
    shared = FuseView((FuseMount(42, 1001, "alice", "/home/alice/mnt", allow_other=True),), readable=True)
    assert _blamed(HungReport(78, AT, _thread(78, ROOT), trace=IN_FUSE), view=shared) == {78: "/home/alice/mnt"}
    assert _blamed(HungReport(78, AT, _thread(78, ROOT, wchan="request_wait_answer")), view=shared) == {
        78: "/home/alice/mnt"
    }
    # Not shown waiting on FUSE (a local disk's hang), or a root-served FUSE mount waits too: root's own hang.
    assert _blamed(HungReport(78, AT, _thread(78, ROOT, wchan="io_schedule")), view=shared) == {}
    busy_root = FuseView(shared.users_waiting, system=True, system_waiting=True, readable=True)
    assert _blamed(HungReport(78, AT, _thread(78, ROOT), trace=IN_FUSE), view=busy_root) == {}


def test_a_gone_task_is_blamed_as_the_last_pass_remembered_it() -> None:
    remembered = {"since": 1.0, "switches": 7, "fuse": NOBODYS.record()}
    tasks = {"77:500": remembered, "78:2000": remembered, "79:500": {"since": 1.0, "switches": 7}}
    previous = {"version": 1, "boot_id": BOOT, "tasks": tasks}
    gone = [HungReport(tid, AT, None) for tid in (77, 78, 79)]
    # 78 started after the report (another task at that tid); 79 was seen but blamed on nothing.
    assert _blamed(*gone, view=FuseView(readable=True), **previous) == {77: "/tmp/sshfs"}
    assert _blamed(*gone, view=FuseView(readable=True), **{**previous, "boot_id": "another boot"}) == {}
    forged = {"version": 1, "boot_id": BOOT, "tasks": {"77:500": {**remembered, "fuse": {"uid": "0"}}}}
    assert _blamed(*gone, view=FuseView(readable=True), **forged) == {}


def test_a_gone_task_whose_trace_went_through_fuse_is_a_users_only_where_root_has_no_fuse_mount() -> None:
    gone = HungReport(77, AT, None, trace=IN_FUSE)
    assert _blamed(gone, view=FuseView(readable=True)) == {77: "uid -1"}
    assert _blamed(gone, view=FuseView(system=True, readable=True)) == {}  # root's FUSE mount may have held it
    assert _blamed(gone, view=FuseView()) == {}  # fusectl unreadable: nothing known
    assert _blamed(HungReport(77, AT, None)) == {}  # no FUSE in its trace: a disk, a driver, NFS
    kthread = HungReport(2, AT, _thread(2, ROOT, kthread=True), trace=IN_FUSE)
    assert _blamed(kthread, view=FuseView(readable=True)) == {}


def test_two_reports_of_one_tid_that_disagree_count() -> None:
    assert _blamed(HungReport(77, AT, _thread(77, NOBODY)), HungReport(77, AT, _thread(77, ROOT))) == {}


def _kmsg_lines(path: Path) -> list[LogLine]:
    lines = []
    for record in path.read_text().splitlines():
        head, _, message = record.partition(";")
        priority, seq, usec, _ = head.split(",")
        lines.append(LogLine(message, seq, int(usec), None, int(priority) >> 3))
    return lines


def test_the_trace_under_a_report_is_the_named_tasks_only(tmp_path: Path) -> None:
    lines = _kmsg_lines(hung_task_report(tmp_path / "kmsg", [("stat", 4242), ("x pid:9 ", 9)]))
    assert read_trace(lines, 0, "stat", 4242, userspace=False) == IN_FUSE
    # A name holding "pid:" does not make another task's line its own, nor the other way round.
    second = next(index for index, line in enumerate(lines) if line.message.startswith("INFO: task x pid:9 "))
    assert read_trace(lines, second, "x pid:9 ", 9, userspace=False) == IN_FUSE
    assert read_trace(lines, 0, "stat", 9, userspace=False) == Trace()
    # A trace through a driver's code (sched_show_task's format of Linux 6.1), and one a process wrote.
    task = "task:python3         state:D stack:0     pid:77    ppid:1      flags:0x00004006"
    frames = [" <TASK>", " __schedule+0x34d/0x9e0", " os_acquire_mutex+0x2a/0x40 [nvidia]", " </TASK>"]
    report = ["INFO: task python3:77 blocked for more than 122 seconds.", task, "Call Trace:", *frames]
    driver = [LogLine(text, str(seq), AT, None, 0) for seq, text in enumerate(report)]
    assert read_trace(driver, 0, "python3", 77, userspace=False) == Trace(modules=frozenset({"nvidia"}))
    forged = [LogLine(line.message, line.record_id, line.usec, None, 1) for line in lines[:second]]
    assert read_trace(forged, 0, "stat", 4242, userspace=False) == Trace()
