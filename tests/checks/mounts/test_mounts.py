"""The mounts check: presence, type, source and rw from mountinfo; space, inodes, hung and broken mounts from probes."""

from __future__ import annotations

import errno
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from healthd_testkit.checks import FixtureNode
from healthd_testkit.nvml import Clock
from hypothesis import given, settings
from hypothesis import strategies as st

from healthd.checks.plugin import JudgeContext
from healthd_checks.common.mountinfo import MountEntry, parse_mountinfo
from healthd_checks.mounts.check import CHECK, MountsObservation, answered_from_memory, judge
from healthd_checks.mounts.fsprobe import (
    Failed,
    ProbeOutcome,
    ProbeTable,
    Usage,
    df_percent,
    parse_stat_output,
    read_here,
    stat_failed,
)
from healthd_checks.mounts.settings import MountsSettings

FIXTURE_PROC = "procfs/gpu-node"


def findings(doc: dict[str, Any], check: str) -> list[tuple[str, str, str]]:
    (result,) = [c for c in doc["checks"] if c["name"] == check]
    return [(f["status"], f["code"], f["subject"]) for f in result["findings"]]


def config(fixtures: Path, mounts: str, extra: str = "") -> str:
    return (
        f'[paths]\nprocfs = "{fixtures / FIXTURE_PROC}"\n'
        f"[checks.mounts]\nexpect = [{mounts}]\ninclude_root = false\nprobe_usage = false\n{extra}"
    )


def test_all_expected_mounts_present(fixtures: Path, write_config: Callable[[str], Path], cli_json: Any) -> None:
    # Presence, type, source and rw come from the fixture; the space probe runs on this machine's "/".
    body = config(
        fixtures,
        '{ path = "/", fstype = "ext4", rw = true }, { path = "/datasets", fstype = "nfs4" }',
    )
    code, doc = cli_json("check", "--once", "--json", "--only", "mounts", "--config", str(write_config(body)))
    assert findings(doc, "mounts") == [] and code == 0


def test_absent_required_mount_exits_2(fixtures: Path, write_config: Callable[[str], Path], cli_json: Any) -> None:
    body = config(fixtures, '{ path = "/lustre2" }')
    code, doc = cli_json("check", "--once", "--json", "--only", "mounts", "--config", str(write_config(body)))
    assert code == 2 and doc["status"] == "CRITICAL"
    assert findings(doc, "mounts") == [("CRITICAL", "MOUNT_MISSING", "/lustre2")]


def test_wrong_type_source_and_read_only(fixtures: Path, write_config: Callable[[str], Path], cli_json: Any) -> None:
    body = config(
        fixtures,
        '{ path = "/home", fstype = "lustre" }, { path = "/scratch", source = "10.9.9.9@o2ib:/scratch" },'
        ' { path = "/datasets", rw = true }',
    )
    code, doc = cli_json("check", "--once", "--json", "--only", "mounts", "--config", str(write_config(body)))
    assert code == 2
    assert sorted(findings(doc, "mounts")) == [
        ("CRITICAL", "MOUNT_READ_ONLY", "/datasets"),
        ("CRITICAL", "MOUNT_WRONG_SOURCE", "/scratch"),
        ("CRITICAL", "MOUNT_WRONG_TYPE", "/home"),
    ]


def test_a_malformed_line_is_a_note_and_the_rest_is_judged(
    fixtures: Path, write_config: Callable[[str], Path], cli_json: Any
) -> None:
    # Line 2 of the capture does not parse; /x is missing all the same.
    body = f'[paths]\nprocfs = "{fixtures / "procfs/broken"}"\n[checks.mounts]\nexpect = [{{ path = "/x" }}]\n'
    code, doc = cli_json("check", "--once", "--json", "--only", "mounts", "--config", str(write_config(body)))
    (result,) = [c for c in doc["checks"] if c["name"] == "mounts"]
    source = fixtures / "procfs/broken/1/mountinfo"
    assert code == 2 and findings(doc, "mounts") == [
        ("CRITICAL", "MOUNT_MISSING", "/x"),
        ("OK", "MOUNTINFO_LINES_SKIPPED", str(source)),
    ]
    assert result["findings"][1]["message"].startswith(f"{source}:2: ")


def test_mountinfo_with_no_line_that_parses_is_unknown(
    tmp_path: Path, write_config: Callable[[str], Path], cli_json: Any
) -> None:
    (tmp_path / "proc/1").mkdir(parents=True)
    (tmp_path / "proc/1/mountinfo").write_text("23 29 0:22 /proc rw,nosuid shared:13 sysfs\n")
    body = f'[paths]\nprocfs = "{tmp_path / "proc"}"\n[checks.mounts]\nexpect = [{{ path = "/x" }}]\n'
    code, doc = cli_json("check", "--once", "--json", "--only", "mounts", "--config", str(write_config(body)))
    assert code == 3 and findings(doc, "mounts") == [
        ("UNKNOWN", "MOUNTINFO_MALFORMED", str(tmp_path / "proc/1/mountinfo"))
    ]


def test_real_full_filesystem_warns(
    tmpfs: Callable[[str, str], Path], write_config: Callable[[str], Path], cli_json: Any
) -> None:
    tiny_tmpfs = tmpfs("tiny", "size=1m,nr_inodes=64")
    (tiny_tmpfs / "fill").write_bytes(b"\0" * (1024 * 1024 - 8192))
    for i in range(60):
        (tiny_tmpfs / f"f{i}").touch()
    body = f'[checks.mounts]\nexpect = [{{ path = "{tiny_tmpfs}", fstype = "tmpfs", rw = true }}]\n'
    body += "include_root = false\nmin_free_percent = 10\nmin_free_inodes_percent = 10\n"
    code, doc = cli_json("check", "--once", "--json", "--only", "mounts", "--config", str(write_config(body)))
    assert code == 1
    assert sorted(findings(doc, "mounts")) == [
        ("WARNING", "MOUNT_INODES_LOW", str(tiny_tmpfs)),
        ("WARNING", "MOUNT_SPACE_LOW", str(tiny_tmpfs)),
    ]
    (result,) = [c for c in doc["checks"] if c["name"] == "mounts"]
    space = next(f for f in result["findings"] if f["code"] == "MOUNT_SPACE_LOW")
    assert 0 <= space["details"]["free_percent"] < 10


def test_usage_limits_judge_only_their_own_mounts_while_mounted(
    tmpfs: Callable[[str, str], Path], write_config: Callable[[str], Path], cli_json: Any
) -> None:
    # NHC's check_fs_used judges the one mount it names and passes when it is not mounted
    # (scripts/lbnl_fs.nhc); a full read-only image elsewhere is nobody's business.
    limited, other = tmpfs("limited", "size=1m"), tmpfs("other", "size=1m")
    for mount in (limited, other):
        (mount / "fill").write_bytes(b"\0" * (1024 * 1024 - 8192))
    body = f'[checks.mounts]\nexpect = [{{ path = "{other}", fstype = "tmpfs" }}]\n'
    body += "include_root = false\nmin_free_percent = 0\nmin_free_inodes_percent = 0\n"
    limits = f'{{ path = "{limited}", min_free_percent = 10 }}, {{ path = "/not/mounted", min_free_percent = 50 }}'
    body += f"usage_limits = [{limits}]\n"
    code, doc = cli_json("check", "--once", "--json", "--only", "mounts", "--config", str(write_config(body)))
    assert findings(doc, "mounts") == [("WARNING", "MOUNT_SPACE_LOW", str(limited))]
    assert code == 1


def test_a_mount_path_is_limited_once() -> None:
    with pytest.raises(ValueError, match="/data is expected more than once"):
        MountsSettings(usage_limits=[{"path": "/data"}, {"path": "/data/", "min_free_percent": 1}])


# Errnos of a filesystem that is gone while still mounted: a dead client (docs: README, `mounts`).
BROKEN = ("ENOTCONN", "ESTALE", "EIO", "ETIMEDOUT", "EHOSTDOWN", "ENODEV")


def _judged(outcome: ProbeOutcome) -> list[tuple[str, str, Any]]:
    observed = MountsObservation(Path("/proc/1/mountinfo"), outcomes=(("/scratch", outcome),))
    verdict = judge(observed, JudgeContext("mounts", MountsSettings(), 1e9))
    return [(f.status.name, f.code, f.details.get("errno")) for f in verdict.findings]


@pytest.mark.parametrize("name", BROKEN)
def test_a_dead_clients_errno_is_a_broken_mount(name: str) -> None:
    assert _judged(Failed("lost", getattr(errno, name))) == [("CRITICAL", "MOUNT_BROKEN", name)]


@pytest.mark.parametrize("number", [errno.EACCES, errno.EPERM, errno.ENOENT, None])
def test_a_refusal_or_the_probes_own_failure_stays_unknown(number: Optional[int]) -> None:
    assert _judged(Failed("no", number)) == [("UNKNOWN", "MOUNT_PROBE_FAILED", None)]


def test_both_probes_report_the_errno(tmp_path: Path) -> None:
    # In this process and in the child alike; absent paths give ENOENT, whatever their names say.
    absent = {str(tmp_path / "gone: Input/output error"): "0:1", str(tmp_path / "-also gone\n1 ~ 0:2"): "0:1"}
    together = ProbeTable().probe_all(absent, 10, {})
    here = {path: read_here(path, "0:1") for path in absent}
    for outcome in (*together.values(), *here.values()):
        assert isinstance(outcome, Failed) and outcome.errno == errno.ENOENT, outcome


def test_stat_messages_are_read_back_to_their_errno() -> None:
    # The root alone is probed by stat, whose failure is a message on stderr.
    for name in BROKEN:
        message = f"/usr/bin/stat: cannot read file system information for '/': {os.strerror(getattr(errno, name))}"
        assert stat_failed(message).errno == getattr(errno, name)
    # A message that is not stat's failure to read the filesystem is the probe's own.
    assert stat_failed("stat: write error: Input/output error").errno is None
    assert stat_failed("/usr/bin/stat: cannot read file system information for '/x': gibberish").errno is None


def _mountinfo(*mounts: tuple[str, str]) -> list[MountEntry]:
    """Mountinfo lines in mount order: each on the mount visible at its point (stacked) or its nearest ancestor."""
    lines, visible = [], {}
    for number, (point, fstype) in enumerate(mounts, 20):
        ancestors = [p for p in visible if point == p or point.startswith(p.rstrip("/") + "/")]
        parent = visible[max(ancestors, key=len)] if ancestors else 1
        lines.append(f"{number} {parent} 0:{number} / {point} rw,relatime - {fstype} src rw")
        visible[point] = number
    return list(parse_mountinfo("\n".join(lines), "mountinfo").entries)


def test_only_memory_filesystems_reached_without_a_network_one_are_read_in_process() -> None:
    local = _mountinfo(("/", "ext4"), ("/proc", "proc"), ("/dev", "devtmpfs"), ("/dev/shm", "tmpfs"), ("/a", "autofs"))
    assert [p for p in ("/", "/proc", "/dev/shm", "/a") if answered_from_memory(local, p)] == ["/proc", "/dev/shm"]
    # A diskless node's NFS root: walking to /dev/shm may ask the server, so the child probes it.
    assert not answered_from_memory(_mountinfo(("/", "nfs4"), ("/dev", "devtmpfs"), ("/dev/shm", "tmpfs")), "/dev/shm")
    # A tmpfs under a FUSE or overlay mount, or hidden by an NFS mount over it, likewise.
    for above in ("fuse.sshfs", "overlay"):
        under = _mountinfo(("/", "xfs"), ("/home", above), ("/home/u/tmp", "tmpfs"))
        assert not answered_from_memory(under, "/home/u/tmp")
    assert not answered_from_memory(_mountinfo(("/", "ext4"), ("/scratch", "tmpfs"), ("/scratch", "nfs")), "/scratch")
    # A tmpfs stacked over an automount trigger is reached through the autofs mount beneath it.
    assert not answered_from_memory(_mountinfo(("/", "ext4"), ("/x", "autofs"), ("/x", "tmpfs")), "/x")
    assert answered_from_memory(_mountinfo(("/", "ext4"), ("/x", "ramfs"), ("/x", "tmpfs")), "/x")
    # A tmpfs whose parent directory an NFS mount covered since: the path now leads into NFS.
    assert not answered_from_memory(_mountinfo(("/", "ext4"), ("/a/b", "tmpfs"), ("/a", "nfs")), "/a/b")
    # A chain that does not reach the namespace's root (a truncated or odd mountinfo): not trusted.
    odd = parse_mountinfo("30 29 0:30 / /dev/shm rw - tmpfs tmpfs rw", "mountinfo").entries
    assert not answered_from_memory(odd, "/dev/shm")


def test_memory_filesystems_are_read_without_a_child_and_the_rest_by_one(
    tmpfs: Callable[[str, str], Path], write_config: Callable[[str], Path], cli_json: Any, mocker: Any
) -> None:
    tiny = tmpfs("tiny", "size=1m")
    (tiny / "fill").write_bytes(b"\0" * (1024 * 1024 - 8192))
    popen = mocker.spy(subprocess, "Popen")
    for include_root in ("false", "true"):
        body = f'[checks.mounts]\nexpect = [{{ path = "{tiny}" }}, {{ path = "/proc", fstype = "proc" }}]\n'
        body += f"include_root = {include_root}\nmin_free_percent = 10\nmin_free_inodes_percent = 0\n"
        code, doc = cli_json("check", "--once", "--json", "--only", "mounts", "--config", str(write_config(body)))
        assert code == 1 and findings(doc, "mounts") == [("WARNING", "MOUNT_SPACE_LOW", str(tiny))]
    # The tmpfs and /proc answered from this process both times; the root's ext4 (or overlay) by one stat.
    (call,) = popen.call_args_list
    assert call.args[0][0].endswith("stat") and call.args[0][-1] == "/"


def test_the_mounts_are_judged_safe_in_the_namespace_that_reads_them(
    tmp_path: Path, write_config: Callable[[str], Path], cli_json: Any, mocker: Any
) -> None:
    # PID 1 sees /proc as proc; this process (a service with mounts of its own) sees an NFS
    # mount there: its statvfs would walk into NFS, so the child probes /proc.
    procfs = tmp_path / "proc"
    for pid, fstype in (("1", "proc"), ("self", "nfs")):
        (procfs / pid).mkdir(parents=True)
        lines = ["20 1 8:1 / / rw - ext4 /dev/sda1 rw", f"21 20 0:21 / /proc rw - {fstype} src rw"]
        (procfs / pid / "mountinfo").write_text("\n".join(lines) + "\n")
    (procfs / "sys/kernel/random").mkdir(parents=True)
    (procfs / "sys/kernel/random/boot_id").write_text("0f0e0d0c-0b0a-4908-8706-050403020100\n")
    popen = mocker.spy(subprocess, "Popen")
    body = f'[paths]\nprocfs = "{procfs}"\n[checks.mounts]\nexpect = [{{ path = "/proc" }}]\ninclude_root = false\n'
    code, doc = cli_json("check", "--once", "--json", "--only", "mounts", "--config", str(write_config(body)))
    assert code == 0 and findings(doc, "mounts") == []
    (call,) = popen.call_args_list
    assert call.args[0][-2:] == ["/proc", ""]  # a captured mountinfo names no device of this node
    # Without this process's own mountinfo nothing is read here either.
    (procfs / "self" / "mountinfo").unlink()
    popen.reset_mock()
    code, doc = cli_json("check", "--once", "--json", "--only", "mounts", "--config", str(write_config(body)))
    assert code == 0 and [c.args[0][-2] for c in popen.call_args_list] == ["/proc"]


NODE = (
    "20 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "21 20 0:30 / /scratch rw,relatime shared:2 - tmpfs tmpfs rw,size=1024k,mode=777\n"
)
# A user's FUSE mount over the node's /scratch, as fusermount3 makes it (nosuid,nodev, user_id= the caller).
USERS = "22 21 0:50 / /scratch rw,nosuid,nodev,relatime shared:3 - fuse.hangfs hangfs rw,user_id=1000,group_id=1000\n"
FULL = Usage(free_fraction=0.01, free_inode_fraction=0.5, total_bytes=1 << 20)
ZEROS = Usage(free_fraction=1.0, free_inode_fraction=None, total_bytes=0)


def _verdict(text: str, outcomes: dict[str, ProbeOutcome], **settings: Any) -> list[tuple[str, str, str]]:
    parsed = parse_mountinfo(text, "mountinfo")
    observed = MountsObservation(
        Path("mountinfo"),
        parsed.entries,
        outcomes=tuple(outcomes.items()),
        skipped=parsed.skipped,
        users=((1000, "alice"),),
    )
    verdict = judge(observed, JudgeContext("mounts", MountsSettings(include_root=False, **settings), 1e9))
    return [(f.status.name, f.code, f.subject) for f in verdict.findings]


def test_a_users_fuse_mount_over_an_expected_one_is_the_users() -> None:
    expect = [{"path": "/scratch", "fstype": "tmpfs", "rw": True}]
    # The node's tmpfs is judged for type and rw; its space cannot be read, and that is said.
    assert _verdict(NODE + USERS, {}, expect=expect) == [("UNKNOWN", "MOUNT_USER_FUSE", "/scratch")]
    assert _verdict(NODE + USERS, {}, expect=expect, probe_usage=False) == []
    # Without the node's mount beneath, the user's does not stand in for it.
    missing = _verdict(NODE.splitlines(keepends=True)[0] + USERS.replace("22 21", "22 20"), {}, expect=expect)
    assert missing == [("CRITICAL", "MOUNT_MISSING", "/scratch")]
    # A usage limit, and a mount under a user's FUSE mount on its parent directory, likewise.
    under = NODE + USERS + "23 21 0:31 / /scratch/data rw - xfs /dev/sdb rw\n"
    limits = [{"path": "/scratch/data", "min_free_percent": 10}]
    assert _verdict(under, {}, usage_limits=limits) == [("UNKNOWN", "MOUNT_USER_FUSE", "/scratch/data")]


def test_the_message_names_the_user_and_the_mount() -> None:
    parsed = parse_mountinfo(NODE + USERS, "mountinfo")
    observed = MountsObservation(Path("mountinfo"), parsed.entries, users=((1000, "alice"),))
    settings = MountsSettings(include_root=False, expect=[{"path": "/scratch"}])
    (finding,) = judge(observed, JudgeContext("mounts", settings, 1e9)).findings
    assert "alice (uid 1000) has a FUSE mount (fuse.hangfs) on /scratch" in finding.message
    assert finding.details == {"uid": 1000, "user": "alice", "user_mount": "/scratch"}


def test_a_node_fuse_mount_is_judged_as_before() -> None:
    roots = USERS.replace("user_id=1000,group_id=1000", "user_id=0,group_id=0")
    expect = [{"path": "/scratch", "fstype": "tmpfs"}]
    assert _verdict(NODE + roots, {"/scratch": FULL}, expect=expect) == [
        ("CRITICAL", "MOUNT_WRONG_TYPE", "/scratch"),
        ("WARNING", "MOUNT_SPACE_LOW", "/scratch"),
    ]


def test_statvfs_with_no_blocks_is_no_reading_where_a_filesystem_has_a_size() -> None:
    expect = [{"path": "/scratch"}]
    xfs = NODE.replace("tmpfs tmpfs rw,size=1024k,mode=777", "xfs /dev/sdb rw")
    assert _verdict(xfs, {"/scratch": ZEROS}, expect=expect) == [("UNKNOWN", "MOUNT_USAGE_EMPTY", "/scratch")]
    # A tmpfs without a size limit says 0 blocks (mm/shmem.c, shmem_statfs); so may any memory filesystem.
    assert _verdict(NODE, {"/scratch": ZEROS}, expect=expect) == []
    # A path whose free space is not judged (min_free_percent = 0) needs no size.
    assert _verdict(xfs, {"/scratch": ZEROS}, expect=expect, min_free_percent=0) == []


def test_an_expected_mount_on_a_line_that_does_not_parse_is_unknown_not_missing() -> None:
    odd = NODE + "23 20 0:x / /lustre rw - lustre 10.0.0.1@o2ib:/l rw\n"
    expect = [{"path": "/lustre"}, {"path": "/gone"}]
    assert _verdict(odd, {}, expect=expect, probe_usage=False) == [
        ("UNKNOWN", "MOUNT_UNREADABLE", "/lustre"),
        ("CRITICAL", "MOUNT_MISSING", "/gone"),
        ("OK", "MOUNTINFO_LINES_SKIPPED", "mountinfo"),
    ]


def test_a_users_fuse_mount_is_never_read_in_process() -> None:
    # fsprobe's classification is judged on the visible mounts: a user's FUSE over a tmpfs, or
    # over a parent directory of one, leads the walk into the user's server.
    over = _mountinfo(("/", "ext4"), ("/dev", "devtmpfs"), ("/dev/shm", "tmpfs"), ("/dev/shm", "fuse.x"))
    assert not answered_from_memory(over, "/dev/shm")
    above = _mountinfo(("/", "ext4"), ("/t", "tmpfs"), ("/t/u", "tmpfs"), ("/t", "fuse.x"))
    assert not answered_from_memory(above, "/t/u")


# -- hostile names: a user's mount point, FUSE subtype and source hold any byte ------------------

# Every control byte, DEL, and bytes that are not UTF-8 (a lone continuation byte, a truncated
# sequence, an overlong "/", a surrogate's encoding), besides the bytes the kernel escapes and a "-".
HOSTILE = [bytes([b]) for b in [*range(0x01, 0x20), 0x7F]] + [
    b"\x80", b"\xff", b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b" ", b"\\", b"-", b"\\040", b" - ",
]  # fmt: skip


def _mangle(name: bytes) -> bytes:
    """What fs/proc_namespace.c writes of ``name``: ``mangle``, octal escapes of " \\t\\n\\\\" alone."""
    return b"".join(b"\\%03o" % byte if byte in b" \t\n\\" else bytes([byte]) for byte in name)


def _hostile_node(name: bytes) -> bytes:
    """PID 1's mountinfo with a user's FUSE mounts named ``name``: one under /home, one over the expected /dev/shm."""
    user = b" rw,user_id=1000,group_id=1000\n"
    fuse = b"fuse." + _mangle(name) + b" " + _mangle(name) + user
    return (
        b"20 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        b"21 20 0:5 / /dev rw,nosuid shared:2 - devtmpfs udev rw,size=10240k\n"
        b"22 21 0:21 / /dev/shm rw,nosuid,nodev shared:3 - tmpfs tmpfs rw\n"
        b"23 20 0:22 / /proc rw,nosuid shared:4 - proc proc rw\n"
        b"24 20 0:40 / /home rw,relatime shared:5 - nfs4 storage:/home rw,vers=4.2\n"
        b"30 24 0:50 / /home/u/" + _mangle(name) + b" rw,nosuid,nodev shared:9 - " + fuse +
        b"31 22 0:51 / /dev/shm rw,nosuid,nodev shared:10 - " + fuse
    )  # fmt: skip


def _hostile_pass(root: Path, name: bytes) -> list[tuple[str, str, str]]:
    procfs = root / "proc"
    for pid in ("1", "self"):
        (procfs / pid).mkdir(parents=True, exist_ok=True)
        (procfs / pid / "mountinfo").write_bytes(_hostile_node(name))
    settings = MountsSettings(
        expect=[
            {"path": "/dev/shm", "fstype": "tmpfs", "rw": True},
            {"path": "/proc", "fstype": "proc"},
            {"path": "/home", "fstype": "nfs4", "source": "storage:/home"},
            {"path": "/lustre", "fstype": "lustre"},
        ],
        include_root=False,
        min_free_percent=0,
        min_free_inodes_percent=0,
    )
    found = FixtureNode(root, Clock()).passes(CHECK, settings, procfs=procfs)
    return sorted((f.status.name, f.code, f.subject) for f in found)


# What a plain name gives: the missing /lustre, and /dev/shm's space the user's mount hides.
PLAIN = [("CRITICAL", "MOUNT_MISSING", "/lustre"), ("UNKNOWN", "MOUNT_USER_FUSE", "/dev/shm")]


@pytest.mark.parametrize("byte", HOSTILE, ids=ascii)
def test_every_hostile_byte_anywhere_in_a_users_names_changes_nothing(tmp_path: Path, byte: bytes) -> None:
    assert sorted(PLAIN) == _hostile_pass(tmp_path / "plain", b"x")
    for at, name in enumerate((byte + b"x", b"x" + byte + b"y", b"x" + byte)):
        assert _hostile_pass(tmp_path / str(at), name) == sorted(PLAIN), name


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([*HOSTILE, b"a", b"shared:1", b"rw"]), min_size=1, max_size=8).map(b"".join))
def test_any_name_a_user_chooses_gives_the_findings_of_a_plain_one(name: bytes) -> None:
    with tempfile.TemporaryDirectory() as root:
        assert _hostile_pass(Path(root), name) == sorted(PLAIN)


def test_a_pass_records_and_shows_a_users_mount_whatever_bytes_it_holds(
    tmp_path: Path, write_config: Callable[[str], Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    # Bytes that are not UTF-8 reach a finding's message as \xNN: the node history (SQLite) and
    # the terminal take no lone surrogate, and a pass that failed on one would decide nothing.
    name = b"\xff\x1b[2J\r\xfe\x85"
    procfs = tmp_path / "proc"
    for pid in ("1", "self"):
        (procfs / pid).mkdir(parents=True)
        (procfs / pid / "mountinfo").write_bytes(_hostile_node(name))
    body = f'[paths]\nprocfs = "{procfs}"\n[checks.mounts]\nexpect = [{{ path = "/dev/shm", fstype = "tmpfs" }}]\n'
    for output in ([], ["--json"]):
        code, out, err = cli("check", "--once", *output, "--only", "mounts", "--config", str(write_config(body)))
        assert "PASS_FAILED" not in out + err and code == 3, err
        assert "fuse.\\xff" in out.replace("\\\\", "\\")  # JSON doubles the backslash


def test_df_counts_free_space_without_roots_reserve_and_rounds_up_as_df_does() -> None:
    # 1000 blocks, 400 of them reserved for root (mke2fs -m 40), 300 used: 300 left to anyone else.
    usage = parse_stat_output("1000 300 4096 100 99 700")
    assert round(usage.free_fraction * 100) == 30
    assert (usage.df_used_percent, usage.df_inodes_used_percent) == (50, 1)
    # coreutils df.c: the percentage is rounded up, and "-" where nothing is used or available.
    assert (df_percent(1, 299), df_percent(0, 0)) == (1, None)
    entries = parse_mountinfo("29 1 259:2 / / rw,relatime shared:1 - ext4 /dev/vda rw\n", "mountinfo").entries
    observed = MountsObservation(Path("mountinfo"), entries, outcomes=(("/", usage),))

    def codes(**settings: Any) -> list[str]:
        jc = JudgeContext("mounts", MountsSettings(min_free_percent=40, **settings), 0.0)
        return [f.code for f in judge(observed, jc).findings]

    assert codes() == ["MOUNT_SPACE_LOW"]
    assert codes(free_space_as="df") == []
    assert codes(free_space_as="df", min_free_inodes_percent=99.5) == ["MOUNT_INODES_LOW"]
