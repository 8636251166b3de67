"""The services check's process-table reader and matcher, on a captured process table (fixtures/procfs/services).

A fixture tree's directories belong to whoever checked it out, while the kernel makes each
/proc/PID directory its task's effective uid's (fs/proc/base.c ``task_dump_owner``):
``as_the_kernel_owns`` gives the records read from a fixture the owner the kernel would
show. Hostile task names are written as the kernel writes them (``kernel_status``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import pytest
from healthd_testkit.checks import check_context, raises_only
from healthd_testkit.nvml import Clock
from hypothesis import given
from hypothesis import strategies as st

from healthd.checks.plugin import JudgeContext
from healthd_checks.common.procs import (
    COMM_MAX,
    Process,
    ProcStatusError,
    TaskStatus,
    parse_status,
    plain_name,
    read_processes,
)
from healthd_checks.services.check import ProcessRule, Sighting, find_service, gather, judge
from healthd_checks.services.settings import ServicesSettings


@pytest.fixture
def table(fixtures: Path) -> Path:
    return fixtures / "procfs/services"


def as_the_kernel_owns(processes: Iterable[Process]) -> list[Process]:
    return [process._replace(owner=process.status.effective_uid) for process in processes]


def read(table: Path) -> list[Process]:
    return as_the_kernel_owns(read_processes(table).processes)


def test_reader_keeps_what_the_kernel_wrote(table: Path) -> None:
    by_pid = {p.pid: p for p in read(table)}
    assert sorted(by_pid) == [2, 1200, 1201, 1300, 4242, 31337, 31338, 31339]
    assert by_pid[2].status == TaskStatus(name="kthreadd", state="S", uids=(0, 0, 0, 0))
    assert by_pid[2].exe is None
    assert by_pid[1201].exe == "/usr/sbin/munged (deleted)" and by_pid[1201].exe_name == "munged"
    assert by_pid[4242].status.state == "Z" and not by_pid[4242].alive
    # The setuid-root copy: effective uid 0, real uid the user's.
    assert (by_pid[31337].status.real_uid, by_pid[31337].status.effective_uid) == (1001, 0)
    # Spaces around a name are part of it; an escaped newline forges no Uid line, and is undone.
    assert by_pid[31338].status.name == " munged"
    assert by_pid[31339].status.name == "munged\nUid:\t0\t0"
    assert by_pid[31339].status.real_uid == 1001


def test_the_owner_is_the_directorys(table: Path) -> None:
    owners = {p.pid: p.owner for p in read_processes(table).processes}
    assert set(owners.values()) == {os.stat(table / "2").st_uid}


def test_names_match_the_truncated_command_name_or_the_executable(table: Path) -> None:
    by_pid = {p.pid: p for p in read(table)}
    assert by_pid[1300].status.name == "nvidia-persiste"
    assert by_pid[1300].named("nvidia-persistenced")
    assert not by_pid[1300].named("nvidia-smi")
    assert not by_pid[31338].named("munged")
    assert not by_pid[2].named("munged")
    # Its executable is /tmp/munged, but its name holds a newline and a tab: a user's.
    assert not by_pid[31339].named("munged")


def rule(owners: dict[int, str], exe: str | None = None) -> ProcessRule:
    return ProcessRule(names=("munged",), owners=owners, exe=exe, exe_paths=frozenset({exe} if exe else set()))


def test_users_processes_never_count(table: Path) -> None:
    users_only = [p for p in read(table) if p.pid >= 31337]
    assert find_service(rule({0: "root"}), users_only) == Sighting(running=False, other_owners=(1001,))


def test_root_and_service_accounts_count(table: Path) -> None:
    processes = read(table)
    root_started = [p for p in processes if p.pid != 1201]
    assert find_service(rule({0: "root"}), root_started).running
    as_munge = [p for p in processes if p.pid != 1200]
    assert find_service(rule({0: "root"}), as_munge) == Sighting(running=False, other_owners=(102, 1001))
    assert find_service(rule({0: "root", 102: "munge"}), as_munge).running


def test_a_users_directory_is_never_roots_whatever_the_status_reads(table: Path) -> None:
    # The status file says root (as a forged line would); the kernel's owner of /proc/PID says uid 1001.
    (munged,) = [p._replace(owner=1001) for p in read(table) if p.pid == 1200]
    assert munged.status.uids == (0, 0, 0, 0)
    assert find_service(rule({0: "root"}), [munged]) == Sighting(running=False, other_owners=(1001,))
    assert find_service(rule({0: "root", 1001: "uid 1001"}), [munged]).running  # named in process_users


def test_executable_must_match_and_a_deleted_binary_still_counts(table: Path) -> None:
    processes = [p for p in read(table) if p.pid == 1201]
    assert find_service(rule({102: "munge"}, "/usr/sbin/munged"), processes).running
    assert find_service(rule({102: "munge"}, "/opt/munge/sbin/munged"), processes) == Sighting(
        running=False, other_exes=("/usr/sbin/munged (deleted)",)
    )


def test_zombies_do_not_count(table: Path) -> None:
    zombie = [p for p in read(table) if p.pid == 4242]
    assert not find_service(ProcessRule(names=("true",), owners={0: "root"}), zombie).running


# The capture of munged started by root (1200/status), as bytes: the template of a status file.
TEMPLATE = (Path(__file__).parents[3] / "fixtures/procfs/services/1200/status").read_bytes()


def kernel_status(name: bytes, uids: tuple[int, int, int, int] = (0, 0, 0, 0)) -> bytes:
    """A status file as fs/proc/array.c writes it for a task called ``name``: only newline and backslash escaped."""
    escaped = name.replace(b"\\", b"\\\\").replace(b"\n", b"\\n")
    head, _, rest = TEMPLATE.partition(b"\n")
    uid_line = b"Uid:\t" + b"\t".join(b"%d" % uid for uid in uids)
    body = rest.replace(b"Uid:\t0\t0\t0\t0", uid_line)
    assert head == b"Name:\tmunged" and uid_line in body
    return b"Name:\t" + escaped + b"\n" + body


def parsed(status: bytes) -> TaskStatus:
    return parse_status(status.decode("utf-8", "replace"), "test")


# Every control byte a task name may hold (NUL ends it), and bytes that are not UTF-8.
CONTROL = [bytes((byte,)) for byte in [*range(0x01, 0x20), 0x7F]]
NOT_UTF8 = [b"\xff", b"\xc3", b"\x80", b"\xed\xa0\x80", b"\xc0\xaf"]
HOSTILE = CONTROL + NOT_UTF8
USER = (1001, 1001, 1001, 1001)


def test_every_hostile_byte_in_every_position_changes_nothing_but_the_name() -> None:
    plain = parsed(kernel_status(b"munged", USER))
    for byte in HOSTILE:
        for position in range(len(b"munged") + 1):
            name = (b"munged"[:position] + byte + b"munged"[position:])[:COMM_MAX]
            status = parsed(kernel_status(name, USER))
            assert (status.state, status.uids) == (plain.state, plain.uids), (byte, position)
            assert not plain_name(status.name), (byte, position)
            roots = Process(1, status._replace(uids=(0, 0, 0, 0)), "/usr/sbin/munged", owner=0)
            assert not roots.named("munged"), (byte, position)  # never the service, even as root's


FORGERIES = [b"x\rUid:0 0 0 0", b"x\rUid:\t0\t0\t0\t0", b"\x0bUid:\t0\t0\t0\t0", b"munged\x85Uid:\t0\t0"]


@pytest.mark.parametrize("name", FORGERIES)
def test_a_name_that_forges_a_uid_line_forges_nothing(name: bytes) -> None:
    status = parsed(kernel_status(name, USER))
    assert status.uids == USER and status.name == name.decode("utf-8", "replace")


@given(
    st.lists(st.sampled_from([*HOSTILE, b"a", b"U", b"i", b"d", b":", b"0", b" ", b"\\", b"\n", b"\t"]), max_size=15)
)
def test_any_name_leaves_the_other_fields_as_the_kernel_wrote_them(pieces: list[bytes]) -> None:
    name = b"".join(pieces)[:COMM_MAX]
    status = parsed(kernel_status(name, USER))
    assert (status.state, status.uids) == ("S", USER)
    assert status.name == name.decode("utf-8", "replace")


def _write(procfs: Path, pid: int, status: bytes) -> None:
    (procfs / str(pid)).mkdir(parents=True)
    (procfs / str(pid) / "status").write_bytes(status)


def test_one_malformed_status_file_is_skipped_and_named_the_rest_still_judged(tmp_path: Path) -> None:
    procfs = tmp_path / "proc"
    me = os.getuid()  # the owner of the directories this test makes: named in process_users below
    _write(procfs, 10, kernel_status(b"munged", (me,) * 4))
    _write(procfs, 11, b"Name:\tchronyd\nState:\tS (sleeping)\nUid:\t0\t0\n")  # a Uid line cut short
    table = read_processes(procfs)
    assert [p.pid for p in table.processes] == [10]
    assert table.skipped == (
        f"{procfs / '11/status'}: expected 'State:\\tX (...)' and 'Uid:\\tREAL\\tEFFECTIVE\\tSAVED\\tFS'",
    )
    settings = ServicesSettings(expect=["munge", "chronyd"], manager="process", process_users=[me])
    ctx = check_context("services", settings, tmp_path, procfs=procfs)
    findings = judge(gather(ctx), JudgeContext("services", settings, Clock()())).findings
    by_code = {f.code: f for f in findings}
    assert sorted(by_code) == ["PROCESS_STATUS_SKIPPED", "SERVICE_INACTIVE"]
    assert by_code["SERVICE_INACTIVE"].subject == "chronyd"  # munge still seen, chronyd still judged
    assert by_code["SERVICE_INACTIVE"].details["skipped_processes"] == 1
    note = by_code["PROCESS_STATUS_SKIPPED"]
    assert note.status.name == "OK" and str(procfs / "11/status") in note.message


def test_a_table_of_nothing_but_malformed_status_files_is_unknown(tmp_path: Path) -> None:
    _write(tmp_path, 7, b"Name:\tmunged\nState:\tS (sleeping)\nUid:\t0\t0\n")
    settings = ServicesSettings(expect=["munge"], manager="process")
    ctx = check_context("services", settings, tmp_path / "state", procfs=tmp_path)
    (finding,) = judge(gather(ctx), JudgeContext("services", settings, Clock()())).findings
    assert (finding.status.name, finding.code) == ("UNKNOWN", "PROCESS_STATUS_MALFORMED")
    assert finding.message.startswith(f"{tmp_path / '7/status'}: expected")


@given(st.text())
def test_status_parser_raises_only_its_error(text: str) -> None:
    raises_only(parse_status, ProcStatusError, text)


def test_no_name_makes_the_reader_skip_a_process(tmp_path: Path) -> None:
    names = [(b"munged"[:at] + byte + b"munged"[at:])[:COMM_MAX] for byte in HOSTILE for at in range(7)]
    for pid, name in enumerate(names, start=100):
        _write(tmp_path, pid, kernel_status(name, USER))
    table = read_processes(tmp_path)
    assert table.skipped == () and len(table.processes) == len(names)
    assert {p.status.uids for p in table.processes} == {USER}
    assert not any(p.named("munged") for p in table.processes)
