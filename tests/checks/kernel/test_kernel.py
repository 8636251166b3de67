"""The kernel check: stuck D-state tasks across passes, watchdog reports in the kernel log, forged ones ignored."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.checks import FixtureNode
from healthd_testkit.nvml import Clock
from healthd_testkit.paths import FIXTURES
from healthd_testkit.waiting import wait_for
from hypothesis import example, given
from hypothesis import settings as examples
from hypothesis import strategies as st

from healthd.model import Finding, Status
from healthd_checks.kernel.check import CHECK, PATTERNS
from healthd_checks.kernel.settings import KernelSettings
from healthd_checks.kernel.tasks import _candidate, parse_stat, parse_switches, read_d_state
from healthd_checks.kernlog.events import match_line

STUCK = FIXTURES / "procfs/stuck"
KMSG = FIXTURES / "kernlog/kmsg-stuck.txt"
HEALTHY = FIXTURES / "kernlog/kmsg-healthy.txt"


class Node(FixtureNode):
    """Passes of the kernel check over a copy of the stuck process table, with a controlled clock."""

    def __init__(self, root: Path, clock: Clock) -> None:
        super().__init__(root, clock)
        self.procfs = self.copy(STUCK, "proc")

    def run(self, kmsg: Path = KMSG, **settings: Any) -> list[Finding]:
        return self.passes(CHECK, KernelSettings(source="kmsg", **settings), procfs=self.procfs, kmsg=kmsg)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path, Clock())


def codes(findings: list[Finding]) -> dict[str, tuple[Status, Any]]:
    return {f"{f.code}@{f.subject}": (f.status, f.details.get("count")) for f in findings}


def test_watchdog_reports_are_found_once_and_forgeries_are_not(node: Node) -> None:
    first = codes(node.run())
    assert first == {
        "HUNG_TASK@hung_task": (Status.WARNING, 2),
        "SOFT_LOCKUP@cpu17": (Status.CRITICAL, 1),
        "HARD_LOCKUP@cpu42": (Status.CRITICAL, 1),
        "RCU_STALL@rcu": (Status.WARNING, 1),
    }
    assert codes(node.run()) == first  # read once: a second pass adds nothing


def test_hung_task_details_name_the_task_cleanly(node: Node) -> None:
    (hung,) = [f for f in node.run() if f.code == "HUNG_TASK"]
    assert hung.details["task"] == "pt_data_worker" and hung.details["pid"] == 4107
    assert hung.details["seconds"] == 245


def test_userspace_records_count_only_with_the_test_switch(node: Node) -> None:
    found = codes(node.run(accept_userspace_kmsg=True))
    assert found["SOFT_LOCKUP@cpu3"] == (Status.CRITICAL, 1)
    assert found["HUNG_TASK@hung_task"] == (Status.WARNING, 3)
    assert found["KERNEL_LOG_USERSPACE_ACCEPTED@accept_userspace_kmsg"][0] is Status.OK


def test_events_older_than_the_window_are_ok_but_still_counted(node: Node) -> None:
    node.run(window=60)
    node.clock.now += 61
    assert {status for status, _ in codes(node.run(window=60)).values()} == {Status.OK}


def test_d_state_tasks_are_stuck_only_after_stuck_after_without_a_switch(node: Node) -> None:
    assert not [f for f in node.run(kmsg=HEALTHY) if f.code == "D_STATE_STUCK"]
    node.clock.now += 599
    assert not [f for f in node.run(kmsg=HEALTHY) if f.code == "D_STATE_STUCK"]
    node.clock.now += 1
    (stuck,) = [f for f in node.run(kmsg=HEALTHY, user_tasks="count") if f.code == "D_STATE_STUCK"]
    assert (stuck.status, stuck.details["count"], stuck.details["tids"]) == (Status.WARNING, 2, "4107,4300")
    assert "pt_data_worker[4107]" in stuck.message and "dd[4300]" in stuck.message


@pytest.mark.root
def test_a_users_stuck_task_is_a_note_and_roots_is_acted_on(node: Node) -> None:
    # pt_data_worker is uid 1001's (a job's thread), dd root's: only root's drains by default.
    node.own_as_the_kernel(node.procfs)
    node.run(kmsg=HEALTHY)
    node.clock.now += 600
    found = {f.code: f for f in node.run(kmsg=HEALTHY) if f.code.startswith("D_STATE")}
    stuck, users = found["D_STATE_STUCK"], found["D_STATE_USER_TASKS"]
    assert (stuck.status, stuck.subject, stuck.details["count"], stuck.details["tids"]) == (
        Status.WARNING,
        "d_state",
        1,
        "4300",
    )
    assert (users.status, users.subject, users.details["count"], users.details["tids"]) == (
        Status.OK,
        "d_state_user",
        1,
        "4107",
    )
    assert "pt_data_worker[4107]" in users.message and "not acted on" in users.message


def test_a_task_that_switched_starts_over(node: Node) -> None:
    node.run(kmsg=HEALTHY)
    # One task, two names: a process of one thread shows the same counters in its own status file.
    for status in (node.procfs / "4300/task/4300/status", node.procfs / "4300/status"):
        status.write_text(status.read_text().replace("voluntary_ctxt_switches:\t88", "voluntary_ctxt_switches:\t89"))
    node.clock.now += 600
    found = node.run(kmsg=HEALTHY, stuck_severity="CRITICAL", user_tasks="count")
    (stuck,) = [f for f in found if f.code == "D_STATE_STUCK"]
    assert (stuck.status, stuck.details["tids"]) == (Status.CRITICAL, "4107")


def test_ignored_and_tolerated_tasks(node: Node) -> None:
    node.run(kmsg=HEALTHY)
    node.clock.now += 600
    assert not [f for f in node.run(kmsg=HEALTHY, ignore_tasks=["dd", "pt_data_worker"]) if f.code == "D_STATE_STUCK"]
    assert not [f for f in node.run(kmsg=HEALTHY, stuck_tasks_max=2) if f.code == "D_STATE_STUCK"]


def test_a_new_boot_starts_the_clocks_over(node: Node) -> None:
    node.run(kmsg=HEALTHY)
    (node.procfs / "sys/kernel/random/boot_id").write_text("0b1f6a4e-1d2c-4e5f-8a9b-0c1d2e3f4a5b\n")
    node.clock.now += 600
    assert not [f for f in node.run(kmsg=HEALTHY) if f.code == "D_STATE_STUCK"]


def test_unreadable_kernel_log_and_process_table_are_unknown(node: Node, tmp_path: Path) -> None:
    found = codes(node.run(kmsg=tmp_path / "absent"))
    assert found[f"KERNEL_LOG_UNREADABLE@{tmp_path / 'absent'}"][0] is Status.UNKNOWN
    shutil.rmtree(node.procfs)
    node.procfs.mkdir()
    (node.procfs / "7").mkdir()
    (node.procfs / "7/stat").write_text("garbage\n")
    found = codes(node.run(kmsg=HEALTHY))
    assert found[f"PROCESS_STAT_MALFORMED@{node.procfs}"][0] is Status.UNKNOWN


def test_reader_finds_d_threads_and_is_not_fooled_by_names() -> None:
    found = read_d_state(STUCK).found
    assert [(t.tid, t.pid, t.name, t.switches) for t in found] == [
        (4107, 4100, "pt_data_worker", 5529),
        (4300, 4300, "dd", 90),
    ]


def _process(procfs: Path, pid: int, state: str, threads: dict[int, str], uids: str = "") -> None:
    """A process whose leader is in ``state``, with ``threads`` (tid -> state) under task/ when there are any.

    ``uids`` is the status file's ``Uid:`` line (real, effective, saved, filesystem); none by default.
    """

    def stat(tid: int, state: str) -> str:
        return f"{tid} (t{tid}) {state} 1 {pid} {pid} 0 -1 0 0 0 0 0 0 0 0 0 20 0 {len(threads)} 0 {tid + 5} 0 0 0\n"

    status = f"Uid:\t{uids}\n" * bool(uids) + "voluntary_ctxt_switches:\t5\nnonvoluntary_ctxt_switches:\t1\n"
    (procfs / str(pid)).mkdir(parents=True)
    (procfs / str(pid) / "stat").write_text(stat(pid, state))
    (procfs / str(pid) / "status").write_text(status)
    for tid, thread_state in threads.items():
        (procfs / f"{pid}/task/{tid}").mkdir(parents=True)
        (procfs / f"{pid}/task/{tid}/stat").write_text(stat(tid, thread_state))
        (procfs / f"{pid}/task/{tid}/status").write_text(status)


def test_reader_reaches_every_thread_of_a_process_of_several_or_with_its_leader_gone(tmp_path: Path) -> None:
    _process(tmp_path, 10, "S", {10: "S", 11: "S", 12: "D"})  # a hung thread beside a sleeping leader
    _process(tmp_path, 20, "Z", {21: "D"})  # the leader exited; its one live thread hangs
    _process(tmp_path, 30, "D", {30: "D"})  # one thread: the process's own line is the thread's
    _process(tmp_path, 40, "S", {40: "S"})
    found = read_d_state(tmp_path).found
    assert [(t.tid, t.pid, t.name, t.start_ticks, t.switches) for t in found] == [
        (12, 10, "t12", 17, 6),
        (21, 20, "t21", 26, 6),
        (30, 30, "t30", 35, 6),
    ]


# Whose a task is, by its four uids (real, effective, saved, filesystem): acted on when all are
# root's or system accounts' (Debian Policy 9.2.2: 0-999, 60000-64999), noted otherwise.
OWNERS = {
    50: ("0\t0\t0\t0", "acted"),  # root
    51: ("64030\t64030\t64030\t64030", "acted"),  # Debian's slurm account
    52: ("", "acted"),  # no Uid line to read: counted as before
    60: ("1001\t1001\t1001\t1001", "noted"),  # a person
    61: ("65534\t65534\t65534\t65534", "noted"),  # nobody
    62: ("1001\t0\t0\t0", "noted"),  # a setuid-root program a user ran
    63: ("0\t1001\t0\t1001", "noted"),  # a root daemon acting for a user (seteuid)
    64: ("100000\t100000\t100000\t100000", "noted"),  # root of a rootless container
}


@pytest.mark.root
def test_who_owns_a_stuck_task_decides_whether_it_is_acted_on(tmp_path: Path) -> None:
    procfs = tmp_path / "proc"
    for pid, (uids, _) in OWNERS.items():
        _process(procfs, pid, "D", {pid: "D"}, uids)
    shutil.copytree(STUCK / "sys", procfs / "sys")
    node = FixtureNode(tmp_path, Clock())
    node.own_as_the_kernel(procfs)

    def tids(**settings: Any) -> dict[str, set[int]]:
        found = node.passes(CHECK, KernelSettings(source="kmsg", **settings), procfs=procfs, kmsg=HEALTHY)
        return {f.code: {int(tid) for tid in str(f.details["tids"]).split(",")} for f in found}

    assert tids() == {}
    node.clock.now += 600
    assert tids() == {
        "D_STATE_STUCK": {pid for pid, (_, grade) in OWNERS.items() if grade == "acted"},
        "D_STATE_USER_TASKS": {pid for pid, (_, grade) in OWNERS.items() if grade == "noted"},
    }
    assert tids(user_tasks="count") == {"D_STATE_STUCK": set(OWNERS)}


def test_a_bad_stat_file_skips_its_task_alone_and_is_named(tmp_path: Path) -> None:
    _process(tmp_path, 10, "S", {10: "S", 11: "D"})
    _process(tmp_path, 30, "D", {30: "D"})
    thread = tmp_path / "10/task/11/stat"
    thread.write_text(thread.read_text().replace(" 20 0 2 0 ", " 20 0 -2 0 "))
    scan = read_d_state(tmp_path)
    assert [task.tid for task in scan.found] == [30]
    (skipped,) = scan.skipped
    assert skipped.startswith(f"{thread}: bad state, flags, thread count or start time")


NAMES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=0, max_size=16)


@given(NAMES, st.sampled_from("RSDZTtXIP"), st.integers(0, 2**63))
def test_stat_parses_whatever_the_name(name: str, state: str, start: int) -> None:
    line = f"42 ({name}) {state} 1 42 42 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0 0\n"
    parsed = parse_stat(line)
    assert (parsed.pid, parsed.name, parsed.state, parsed.start_ticks) == (42, name, state, start)


@given(st.text(max_size=300))
def test_stat_parser_rejects_garbage_with_valueerror_only(text: str) -> None:
    try:
        parsed = parse_stat(text)
    except ValueError:
        return
    assert len(parsed.state) == 1 and text.startswith(f"{parsed.pid} (")


def test_switches_need_both_lines() -> None:
    assert parse_switches("voluntary_ctxt_switches:\t3\nnonvoluntary_ctxt_switches:\t4\n") == 7
    assert parse_switches("voluntary_ctxt_switches:\t3\n") is None


@given(st.text(max_size=15), st.integers(1, 4_194_304), st.text(max_size=200))
def test_a_segfault_report_never_reads_as_a_watchdog_report(comm: str, pid: int, filename: str) -> None:
    # kernel/arch/x86/mm/fault.c show_signal_msg: the line begins with the task's name.
    message = f"{comm}[{pid}]: segfault at 0 ip 00007f0893980000 sp 00007ffcae9198a8 error 6 in {filename}[0+1000]"
    assert match_line(message, PATTERNS) is None


@given(st.text(max_size=200), st.text(max_size=200))
def test_only_the_start_of_the_first_line_counts(before: str, after: str) -> None:
    report = "watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [kworker/3:1:88]"
    hit = match_line(f"{report}\n{after}", PATTERNS)
    assert hit is not None and hit.subject == "cpu3"
    assert match_line(f"sshd[1]: {before}{report}", PATTERNS) is None
    assert match_line(f"sshd[1]: {before}\n{report}", PATTERNS) is None


def test_cli_on_the_stuck_fixture(check_outcome: Callable[[str, str], tuple[str, set[str]]]) -> None:
    config = f'[paths]\nprocfs = "{STUCK}"\nkmsg = "{KMSG}"\n[checks.kernel]\nsource = "kmsg"\n'
    expected = {"HUNG_TASK", "SOFT_LOCKUP", "HARD_LOCKUP", "RCU_STALL"}
    assert check_outcome("kernel", config) == ("CRITICAL", expected)


@given(
    st.text(max_size=15),
    st.sampled_from(["[4711]: segfault at 0 ip 0 sp 0 error 6 in ", " (4711): drop_caches: "]),
    st.text(),
)
def test_a_task_name_heading_a_kernel_line_never_reads_as_a_watchdog_report(comm: str, then: str, rest: str) -> None:
    # The kernel puts a task's name (15 characters at most) first in some lines, then "[pid]" or " (pid)".
    assert match_line(f"{comm}{then}{rest}", PATTERNS) is None


# A task any user can park in D: a parent in vfork(2) whose child never execs waits for it
# killable (kernel/fork.c, wait_for_vfork_done), which /proc shows as D. The child pauses on
# in the parent's memory, so the parent never returns from vfork; only a kill ends them.
# The parent names itself (prctl(2) PR_SET_NAME, 15) after dropping to the account.
VFORK = """
import ctypes, os, sys
libc = ctypes.CDLL(None)
uid, gid = int(sys.argv[1]), int(sys.argv[2])
os.setgroups([])
os.setgid(gid)
os.setuid(uid)
libc.prctl(15, os.fsencode(sys.argv[3]), 0, 0, 0)
if libc.vfork() == 0:
    libc.pause()
"""


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
        return handle.read().rpartition(") ")[2][:1]


def _named(pid: int, name: str) -> bool:
    with open(f"/proc/{pid}/status", "rb") as handle:
        return handle.read().startswith(b"Name:\t" + os.fsencode(name) + b"\n")


def _parked_in_vfork(tmp_path: Path, account: str, name: str = "vfork-parent") -> tuple[dict[str, Finding], int]:
    """The kernel check's findings once ``account``'s vfork parent called ``name`` has been in D for stuck_after."""
    if os.geteuid() != 0:
        pytest.skip("running a process as nobody needs root")
    owner = pwd.getpwnam(account)
    parent = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", VFORK, str(owner.pw_uid), str(owner.pw_gid), name],
        cwd="/",
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # Named first: a process starting up under load may be in D (reading its pages from disk) before prctl.
        wait_for(lambda: _named(parent.pid, name), timeout=10, what=f"{account}'s vfork parent named {name!r}")
        wait_for(lambda: _state(parent.pid) == "D", timeout=10, what=f"{account}'s vfork parent in D")
        node = FixtureNode(tmp_path, Clock())
        settings = KernelSettings(source="kmsg")
        node.passes(CHECK, settings, procfs=Path("/proc"), kmsg=HEALTHY)
        node.clock.now += settings.stuck_after
        found = {f.code: f for f in node.passes(CHECK, settings, procfs=Path("/proc"), kmsg=HEALTHY)}
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
    return found, parent.pid


def _listed(found: dict[str, Finding], pid: int) -> list[str]:
    """The D-state findings that list ``pid`` (the machine's own D tasks may show too)."""
    tids = {name: str(f.details["tids"]).split(",") for name, f in found.items() if name.startswith("D_STATE")}
    return [name for name, listed in tids.items() if str(pid) in listed]


@pytest.mark.root
@pytest.mark.parametrize(("account", "code"), [("nobody", "D_STATE_USER_TASKS"), ("root", "D_STATE_STUCK")])
def test_a_real_task_parked_in_vfork_drains_only_when_roots(tmp_path: Path, account: str, code: str) -> None:
    found, pid = _parked_in_vfork(tmp_path, account)
    assert _listed(found, pid) == [code]
    assert found[code].status is (Status.OK if account == "nobody" else Status.WARNING)


# The name a user gives their own task to pass it off as root's: a "\r", where str.splitlines()
# cuts, then a Uid line of zeros (14 bytes; the kernel keeps 15).
FORGED_ROOT = "x\rUid:0 0 0 0"


@pytest.mark.root
@pytest.mark.parametrize("name", [FORGED_ROOT, "x\rUid:\t0\t0\t0\t0", "\x0bUid:\t0\t0\t0\t0"])
def test_a_users_vfork_parent_named_like_roots_uid_line_is_still_the_users(tmp_path: Path, name: str) -> None:
    found, pid = _parked_in_vfork(tmp_path, "nobody", name)
    assert _listed(found, pid) == ["D_STATE_USER_TASKS"]
    assert found["D_STATE_USER_TASKS"].status is Status.OK


# A task name holds up to 15 bytes of anything but NUL (prctl(2) PR_SET_NAME). /proc/PID/stat
# writes it raw, /proc/PID/status escapes only newline and backslash (fs/proc/array.c).
CONTROL = [bytes((byte,)) for byte in [*range(0x01, 0x20), 0x7F]]
NOT_UTF8 = [b"\xff", b"\xc3", b"\x80", b"\xed\xa0\x80", b"\xc0\xaf"]
HOSTILE = CONTROL + NOT_UTF8
NOBODY_UIDS = "65534\t65534\t65534\t65534"


def _named_task(procfs: Path, pid: int, name: bytes, uids: str) -> None:
    """A one-thread process in D state called ``name``, its stat and status as the kernel writes them."""
    escaped = name.replace(b"\\", b"\\\\").replace(b"\n", b"\\n")
    stat = b"%d (%s) D 1 %d %d 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0 0\n" % (pid, name, pid, pid, pid + 5)
    status = b"Name:\t%s\nUmask:\t0022\nState:\tD (disk sleep)\nUid:\t%s\n" % (escaped, uids.encode())
    status += b"voluntary_ctxt_switches:\t5\nnonvoluntary_ctxt_switches:\t1\n"
    (procfs / str(pid)).mkdir(parents=True)
    (procfs / str(pid) / "stat").write_bytes(stat)
    (procfs / str(pid) / "status").write_bytes(status)


def test_every_hostile_byte_in_every_position_reads_the_same_task(tmp_path: Path) -> None:
    plain = b"pt_data_worker"
    names = [(plain[:at] + byte + plain[at:])[:15] for byte in HOSTILE for at in range(len(plain) + 1)]
    for pid, name in enumerate([plain, *names], start=100):
        _named_task(tmp_path, pid, name, NOBODY_UIDS)
    scan = read_d_state(tmp_path)
    assert scan.skipped == () and len(scan.found) == len(names) + 1
    seen = {(t.start_ticks - t.tid, t.switches, t.uids, t.owner, t.kernel_thread) for t in scan.found}
    assert seen == {(5, 6, (65534,) * 4, os.stat(tmp_path / "100").st_uid, False)}


# What a name may carry after a hostile byte: nothing, or the start of a line the status file has.
FORGED_LINES = [b"", b"Uid:0 0 0 0", b"Uid:\t0\t0\t0\t0", b"State:\tS (x)", b"voluntary_ctxt_switches:\t9", b") S 1"]


@pytest.mark.slow
@examples(max_examples=40, deadline=None)
@given(
    st.binary(max_size=4),
    st.lists(st.sampled_from(HOSTILE), min_size=1, max_size=3),
    st.sampled_from(FORGED_LINES),
    st.binary(max_size=4),
)
@example(b"x", [b"\r"], b"Uid:0 0 0 0", b"")  # the name found on the cluster
@example(b"", [b"\x1e"], b"Uid:\t0\t0\t0\t0", b"")
def test_any_name_gets_the_findings_of_a_plain_name(
    head: bytes, hostile: list[bytes], line: bytes, tail: bytes
) -> None:
    # The same D-state task of nobody's and of root's, once named plainly and once with the name drawn.
    def findings(name: bytes) -> set[tuple[str, str, object]]:
        with tempfile.TemporaryDirectory() as directory:
            root = Path(directory)
            _named_task(root / "proc", 50, name, NOBODY_UIDS)
            _named_task(root / "proc", 51, name, "0\t0\t0\t0")
            shutil.copytree(STUCK / "sys", root / "proc/sys")
            node = FixtureNode(root, Clock())
            node.passes(CHECK, KernelSettings(source="kmsg"), procfs=root / "proc", kmsg=HEALTHY)
            node.clock.now += 600
            found = node.passes(CHECK, KernelSettings(source="kmsg"), procfs=root / "proc", kmsg=HEALTHY)
            return {(f.code, f.status.name, f.details.get("tids")) for f in found}

    name = (head + b"".join(hostile) + line + tail).replace(b"\0", b"")[:15]
    assert findings(name) == findings(b"plain")


def test_a_tid_reused_between_the_walk_and_the_read_gives_no_owner_nor_uids(tmp_path: Path) -> None:
    # The walk read the thread's stat; by the time its directory is opened another task may hold
    # that tid. Its stat, read again through the directory, gives another start time: nothing counts.
    _named_task(tmp_path, 60, b"dd", "0\t0\t0\t0")
    (found,) = read_d_state(tmp_path).found
    assert (found.owner, found.uids) == (os.stat(tmp_path / "60").st_uid, (0, 0, 0, 0))
    reused = parse_stat((tmp_path / "60/stat").read_text())._replace(start_ticks=found.start_ticks - 1)
    again = _candidate(str(tmp_path / "60"), reused, 60)
    assert (again.owner, again.uids, again.switches) == (None, None, None)
