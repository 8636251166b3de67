"""A user's own FUSE mounts, real ones: their names and where they stand never decide what the mounts check says.

Real: an unprivileged user's FUSE server (tests/healthd_testkit/hangfs.py ``--user``, mounted
as fusermount3 mounts for a user: ``nosuid,nodev,user_id=UID``), a real tmpfs, the real
/proc/PID/mountinfo of this process's namespace and the real ``statvfs``. fs/proc_namespace.c
escapes only space, tab, newline and backslash in a mount point, so the user's ``\\r`` reaches
mountinfo raw; fs/fuse/inode.c (``fuse_statfs``) answers root's statvfs of a user's mount that
does not allow others with every count 0, without asking the server.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from healthd_testkit.paths import REPO
from healthd_testkit.waiting import wait_for

from healthd.checks.plugin import JudgeContext
from healthd_checks.common.mountinfo import find_mount, parse_mountinfo
from healthd_checks.mounts.check import MountsObservation, judge
from healthd_checks.mounts.fsprobe import Changed, ProbeTable
from healthd_checks.mounts.settings import MountsSettings

HANGFS = REPO / "tests" / "healthd_testkit" / "hangfs.py"


def _hangfs_at(path: Path) -> bool:
    """Whether a hangfs mount is on ``path`` in this process's mountinfo, read as bytes: the kernel's escapes only."""
    mangled = b"".join(b"\\%03o" % byte if byte in b" \t\n\\" else bytes([byte]) for byte in bytes(path))
    with open("/proc/self/mountinfo", "rb") as handle:
        lines = [line.split(b" ") for line in handle.read().split(b"\n")]
    return any(len(fields) > 4 and fields[4] == mangled and b"fuse.hangfs" in fields for fields in lines)


@contextlib.contextmanager
def users_fuse(user: tuple[int, int], mount_point: Path, allow_other: bool = False) -> Iterator[None]:
    """The user's own FUSE filesystem mounted on ``mount_point`` (which the user may write), served as the user.

    Its server answers nothing after INIT; ``allow_other`` lets root's requests reach it
    (fusermount3 adds it where /etc/fuse.conf has ``user_allow_other``).
    """
    if not os.path.exists("/dev/fuse"):
        pytest.skip("/dev/fuse is absent on this machine")
    other = ["--allow-other"] if allow_other else []
    command = [sys.executable, "-I", str(HANGFS), "--user", f"{user[0]}:{user[1]}", *other, str(mount_point)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: _hangfs_at(mount_point), timeout=15, what=f"the user's FUSE server to mount {mount_point}")
        yield
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        subprocess.run(["umount", "-l", str(mount_point)], check=False, capture_output=True)


def _read_here_elsewhere(path: Path, device: str) -> str:
    """``fsprobe.read_here`` run in a plain interpreter: this one's host guard looks at each path opened."""
    code = "import sys; from healthd_checks.mounts.fsprobe import read_here; print(repr(read_here(*sys.argv[1:])))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(path), device], capture_output=True, text=True, env=env, timeout=60
    )
    return done.stdout.strip() or done.stderr


def _judging() -> JudgeContext[MountsSettings]:
    return JudgeContext("mounts", MountsSettings(), 1e9)


def _mounts_pass(cli_json: Callable[..., Any], write_config: Callable[[str], Path], body: str) -> tuple[int, Any]:
    # This process's namespace is the one the user mounted in (PID 1's may be another's here).
    config = f"[checks.mounts]\nnamespace_pid = {os.getpid()}\ninclude_root = false\n{body}"
    code, doc = cli_json("check", "--once", "--json", "--only", "mounts", "--config", str(write_config(config)))
    (result,) = [c for c in doc["checks"] if c["name"] == "mounts"]
    return code, result["findings"]


@pytest.mark.parametrize("byte", ["\r", "\v", "\f", "\x1c"], ids=ascii)
def test_a_users_mount_point_with_a_line_break_of_python_hides_no_missing_mount(
    byte: str, intruder: tuple[int, int], write_config: Callable[[str], Path], cli_json: Any
) -> None:
    base = Path(tempfile.mkdtemp(prefix="healthd-usermount-"))
    base.chmod(0o755)
    mount_point = base / f"mine{byte}99 1 0:1 x"
    mount_point.mkdir()
    os.chown(mount_point, *intruder)
    try:
        with users_fuse(intruder, mount_point):
            body = 'expect = [{ path = "/healthd-test-absent/lustre", fstype = "lustre" }]\n'
            code, found = _mounts_pass(cli_json, write_config, body)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert [(f["status"], f["code"], f["subject"]) for f in found] == [
        ("CRITICAL", "MOUNT_MISSING", "/healthd-test-absent/lustre")
    ]
    assert code == 2


@pytest.mark.parametrize(
    ("pinned", "allow_other"),
    [(False, False), (True, False), (True, True)],
    ids=["any type", "fstype tmpfs", "allow_other"],
)
def test_a_users_fuse_mount_over_a_full_scratch_is_neither_ok_nor_a_take_out(
    pinned: bool,
    allow_other: bool,
    intruder: tuple[int, int],
    tmpfs: Callable[[str, str], Path],
    write_config: Callable[[str], Path],
    cli_json: Any,
) -> None:
    scratch = tmpfs("scratch", "size=1m,mode=0777")
    (scratch / "fill").write_bytes(b"\0" * (1024 * 1024 - 8192))
    assert os.stat(scratch).st_mode & 0o7777 == 0o777  # world-writable, not sticky: fusermount3 stacks on it
    expect = f'{{ path = "{scratch}", rw = true' + (', fstype = "tmpfs" }' if pinned else " }")
    # With allow_other, root's statvfs would be the server's to answer: it never does (MOUNT_HUNG).
    body = f"expect = [{expect}]\nmin_free_percent = 10\nprobe_timeout = 1\n"
    with users_fuse(intruder, scratch, allow_other):
        code, found = _mounts_pass(cli_json, write_config, body)
    (finding,) = found
    assert (finding["status"], finding["code"], finding["subject"]) == ("UNKNOWN", "MOUNT_USER_FUSE", str(scratch))
    assert finding["details"]["uid"] == intruder[0] and finding["details"]["user_mount"] == str(scratch)
    assert code == 3
    # Without the user's mount, the same scratch is judged full, as it is.
    code, found = _mounts_pass(cli_json, write_config, body)
    assert [(f["status"], f["code"]) for f in found] == [("WARNING", "MOUNT_SPACE_LOW")] and code == 1


def test_a_users_fuse_mounted_after_mountinfo_was_read_is_found_not_waited_on(
    intruder: tuple[int, int], tmpfs: Callable[[str, str], Path]
) -> None:
    # The race of a pass: mountinfo read (the tmpfs at the path), then the user mounts FUSE
    # there (allow_other: root's statvfs would wait on the user's server, which never
    # answers), then the probe. Both probes, the child's and this process's, find the other
    # mount before asking it anything, and say so: not hung, not the tmpfs's numbers.
    scratch = tmpfs("scratch", "size=1m,mode=0777")
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as handle:
        entry = find_mount(parse_mountinfo(handle.read(), "mountinfo").entries, str(scratch))
    assert entry is not None and entry.fstype == "tmpfs"
    with users_fuse(intruder, scratch, allow_other=True):
        child = ProbeTable().probe_all({str(scratch): entry.device}, 5, {})[str(scratch)]
        here = _read_here_elsewhere(scratch, entry.device)
    assert isinstance(child, Changed) and child.expected == entry.device and child.device != entry.device
    assert here == repr(child)
    judged = judge(MountsObservation(Path("mountinfo"), outcomes=((str(scratch), child),)), _judging())
    assert [(f.status.name, f.code) for f in judged.findings] == [("UNKNOWN", "MOUNT_CHANGED")]
