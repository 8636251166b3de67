"""Real processes named like daemons, run as root or as a real unprivileged user, for the checks that read /proc.

A copy of /bin/sleep under a daemon's name is a process the kernel names as it would the
daemon: its command name (``comm``, cut to 15 characters) and its executable's file name.
Run through a link of another name, the two differ: the command name is the link's, the
executable the copy's (fs/exec.c names the task after the file it was asked to run).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import pytest

TEST_USER = "healthd-svc-user"


@dataclass(frozen=True)
class Started:
    exe: Path
    pid: int


Start = Callable[..., Started]


def unprivileged_user() -> pwd.struct_passwd:
    """A real unprivileged account (created once, kept: useradd is not undone between runs)."""
    if os.geteuid() != 0:
        pytest.skip("creating a user and switching to it needs root")
    try:
        return pwd.getpwnam(TEST_USER)
    except KeyError:
        pass
    # A parallel run may create it at the same moment; only that it exists matters.
    subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--comment", "healthd test user", TEST_USER],
        check=False,
        capture_output=True,
    )
    account = pwd.getpwnam(TEST_USER)
    assert account.pw_uid >= 1000, f"{TEST_USER} must be an ordinary account, got uid {account.pw_uid}"
    return account


def _running(pid: int, exe: Path, deadline: float) -> None:
    """Wait until ``pid`` has exec'd ``exe`` (setpriv execs it after switching users)."""
    while time.monotonic() < deadline:
        try:
            if os.readlink(f"/proc/{pid}/exe") == str(exe):
                return
        except OSError:
            pass
        time.sleep(0.02)
    pytest.fail(f"process {pid} did not start {exe}")


@contextmanager
def sleeping_copies() -> Iterator[Start]:
    """``start(name, user=None, setuid_root=False, where="bin", called=None)``: run a copy of sleep named ``name``.

    ``called`` runs it through a link of that name beside the copy: its command name. The
    copies live in a fresh world-readable directory so that another account can run them;
    every process started is killed and reaped afterwards.
    """
    base = Path(tempfile.mkdtemp(prefix="healthd-svc-"))
    base.chmod(0o755)
    started: list[subprocess.Popen[bytes]] = []

    def start(
        name: str,
        user: Optional[pwd.struct_passwd] = None,
        setuid_root: bool = False,
        where: str = "bin",
        called: Optional[str] = None,
    ) -> Started:
        directory = base / where
        directory.mkdir(exist_ok=True)
        directory.chmod(0o755)
        exe = directory / name
        if not exe.exists():
            shutil.copy("/bin/sleep", exe)
            exe.chmod(0o4755 if setuid_root else 0o755)
        path = exe
        if called is not None:
            path = directory / called
            path.symlink_to(name)
        argv = [str(path), "300"]
        if user is not None:
            argv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", *argv]
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        started.append(process)
        _running(process.pid, exe, time.monotonic() + 10)
        return Started(exe, process.pid)

    try:
        yield start
    finally:
        for process in started:
            process.kill()
            process.wait()
        shutil.rmtree(base, ignore_errors=True)
