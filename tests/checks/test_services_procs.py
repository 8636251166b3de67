"""The services check's process-table reader and matcher, on a captured process table (fixtures/procfs/services)."""

from __future__ import annotations

from pathlib import Path

import pytest
from healthd_testkit.checks import raises_only
from hypothesis import given
from hypothesis import strategies as st

from healthd_checks.common.procs import ProcStatusError, TaskStatus, parse_status, read_processes
from healthd_checks.services.check import ProcessRule, Sighting, find_service


@pytest.fixture
def table(fixtures: Path) -> Path:
    return fixtures / "procfs/services"


def test_reader_keeps_what_the_kernel_wrote(table: Path) -> None:
    by_pid = {p.pid: p for p in read_processes(table)}
    assert sorted(by_pid) == [2, 1200, 1201, 1300, 4242, 31337, 31338, 31339]
    assert by_pid[2].status == TaskStatus(name="kthreadd", state="S", real_uid=0, effective_uid=0)
    assert by_pid[2].exe is None
    assert by_pid[1201].exe == "/usr/sbin/munged (deleted)" and by_pid[1201].exe_name == "munged"
    assert by_pid[4242].status.state == "Z" and not by_pid[4242].alive
    # The setuid-root copy: effective uid 0, real uid the user's.
    assert (by_pid[31337].status.real_uid, by_pid[31337].status.effective_uid) == (1001, 0)
    # Spaces around a name are part of it; an escaped newline forges no Uid line.
    assert by_pid[31338].status.name == " munged"
    assert by_pid[31339].status.name == "munged\\nUid:\t0\t0"
    assert by_pid[31339].status.real_uid == 1001


def test_names_match_the_truncated_command_name_or_the_executable(table: Path) -> None:
    by_pid = {p.pid: p for p in read_processes(table)}
    assert by_pid[1300].status.name == "nvidia-persiste"
    assert by_pid[1300].named("nvidia-persistenced")
    assert not by_pid[1300].named("nvidia-smi")
    assert not by_pid[31338].named("munged")
    assert not by_pid[2].named("munged")


def rule(owners: dict[int, str], exe: str | None = None) -> ProcessRule:
    return ProcessRule(names=("munged",), owners=owners, exe=exe, exe_paths=frozenset({exe} if exe else set()))


def test_users_processes_never_count(table: Path) -> None:
    users_only = [p for p in read_processes(table) if p.pid >= 31337]
    assert find_service(rule({0: "root"}), users_only) == Sighting(running=False, other_owners=(1001,))


def test_root_and_service_accounts_count(table: Path) -> None:
    processes = read_processes(table)
    root_started = [p for p in processes if p.pid != 1201]
    assert find_service(rule({0: "root"}), root_started).running
    as_munge = [p for p in processes if p.pid != 1200]
    assert find_service(rule({0: "root"}), as_munge) == Sighting(running=False, other_owners=(102, 1001))
    assert find_service(rule({0: "root", 102: "munge"}), as_munge).running


def test_executable_must_match_and_a_deleted_binary_still_counts(table: Path) -> None:
    processes = [p for p in read_processes(table) if p.pid == 1201]
    assert find_service(rule({102: "munge"}, "/usr/sbin/munged"), processes).running
    assert find_service(rule({102: "munge"}, "/opt/munge/sbin/munged"), processes) == Sighting(
        running=False, other_exes=("/usr/sbin/munged (deleted)",)
    )


def test_zombies_do_not_count(table: Path) -> None:
    zombie = [p for p in read_processes(table) if p.pid == 4242]
    assert not find_service(ProcessRule(names=("true",), owners={0: "root"}), zombie).running


def test_malformed_status_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7/status").write_text("Name:\tmunged\nState:\tS (sleeping)\nUid:\t0\t0\n")
    with pytest.raises(ProcStatusError, match=f"^{tmp_path / '7/status'}: expected"):
        read_processes(tmp_path)


@given(st.text())
def test_status_parser_raises_only_its_error(text: str) -> None:
    raises_only(parse_status, ProcStatusError, text)
