"""The process table read for a few names (`read_processes` with `names`, common/procs.py), on the real /proc."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from healthd_testkit.processes import Start

from healthd_checks.common.procs import read_processes


def test_a_search_by_name_reads_the_processes_so_named_alone_and_as_a_whole_read_does(
    start_process: Start, user: pwd.struct_passwd
) -> None:
    by_command = start_process("sleep", called="systemd-timesyncd")  # its command name: "systemd-timesyn"
    by_executable = start_process("chronyd", called="worker")
    users = start_process("chronyd", user=user, where="user")
    other = start_process("not-a-daemon")
    found = read_processes(Path("/proc"), ("systemd-timesyncd", "chronyd")).processes
    pids = {process.pid for process in found}
    assert {by_command.pid, by_executable.pid, users.pid} <= pids
    assert other.pid not in pids and os.getpid() not in pids
    # The same records as the whole table's: the trust rules are the caller's, asked of either.
    whole = {process.pid: process for process in read_processes(Path("/proc")).processes}
    for process in found:
        if process.pid in (by_command.pid, by_executable.pid, users.pid):
            assert process == whole[process.pid]
    assert {process.pid: process.users for process in found if process.pid in (users.pid, by_command.pid)} == {
        users.pid: True,
        by_command.pid: False,
    }
