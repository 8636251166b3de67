"""The services check end to end: real processes, real users, `healthd check --once --json --only services`.

Process-table tests start copies of /bin/sleep named like daemons, as root or as a
real unprivileged user, and pin `process_exe` to their copy where another process
of that name (a test cluster's real munged) could otherwise answer for it.

The processes come from ``healthd_testkit.processes`` (the ``start_process`` and ``user``
fixtures of tests/checks/conftest.py).
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.checks import raises_only
from healthd_testkit.processes import TEST_USER, Start
from hypothesis import given
from hypothesis import strategies as st

from healthd_checks.services.check import ModulesError, parse_modules


def uids(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/status", encoding="utf-8") as handle:
        line = next(line for line in handle if line.startswith("Uid:"))
    real, effective = line.split()[1:3]
    return int(real), int(effective)


def toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def process_table(tmp_path: Path, services: list[str], settings: str = "") -> str:
    """A config that reads the real process table (systemd or not) and leaves Slurm alone."""
    listed = ", ".join(toml_string(s) for s in services)
    return (
        f"[paths]\nstate_dir = {toml_string(str(tmp_path / 'state'))}\n[slurm]\nenabled = false\n"
        f'[checks.services]\nexpect = [{listed}]\nmanager = "process"\n{settings}\n'
    )


def pinned(exe: Path, service: str = "munge") -> str:
    return f"process_exe = {{ {toml_string(service)} = {toml_string(str(exe))} }}\n"


def findings(doc: dict[str, Any]) -> list[dict[str, Any]]:
    (result,) = [c for c in doc["checks"] if c["name"] == "services"]
    return list(result["findings"])


def codes(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    return sorted((f["status"], f["code"], f["subject"]) for f in findings(doc))


CheckJson = Callable[[str], tuple[int, dict[str, Any]]]


@pytest.fixture
def check(write_config: Callable[[str], Path], cli_json: Any) -> CheckJson:
    def run(body: str) -> tuple[int, dict[str, Any]]:
        result: tuple[int, dict[str, Any]] = cli_json(
            "check", "--once", "--json", "--only", "services", "--config", str(write_config(body))
        )
        return result

    return run


def test_a_users_process_named_munged_does_not_make_munge_alive(
    start_process: Start, user: pwd.struct_passwd, tmp_path: Path, check: CheckJson
) -> None:
    munged = start_process("munged", user=user)
    code, doc = check(process_table(tmp_path, ["munge"], pinned(munged.exe)))
    (finding,) = findings(doc)
    assert code == 2
    assert (finding["status"], finding["code"], finding["subject"]) == ("CRITICAL", "SERVICE_INACTIVE", "munge")
    assert f"uid {user.pw_uid}" in finding["message"]
    assert "[checks.services] process_users" in finding["message"]
    assert finding["details"]["ignored_other_owners"] >= 1


def test_a_setuid_root_copy_run_by_a_user_is_still_the_users(
    start_process: Start, user: pwd.struct_passwd, tmp_path: Path, check: CheckJson
) -> None:
    munged = start_process("munged", user=user, setuid_root=True)
    assert uids(munged.pid) == (user.pw_uid, 0), "the copy must run with effective uid 0 for this test to mean anything"
    code, doc = check(process_table(tmp_path, ["munge"], pinned(munged.exe)))
    assert code == 2 and codes(doc) == [("CRITICAL", "SERVICE_INACTIVE", "munge")]


# A process that drops to an account, then names itself (prctl(2) PR_SET_NAME, 15), then waits.
NAMED = """
import ctypes, os, signal, sys
os.setgroups([])
os.setgid(int(sys.argv[2]))
os.setuid(int(sys.argv[1]))
ctypes.CDLL(None).prctl(15, os.fsencode(sys.argv[3]), 0, 0, 0)
sys.stdout.write("named\\n")
sys.stdout.flush()
signal.pause()
"""


# 15 bytes each, what the kernel keeps; the last one's Uid line is short: it would blind a strict reader.
@pytest.mark.parametrize("name", ["zqx\rUid:0 0 0 0", "zqx\x0cUid:0 0 0 0", "zqx\x0bUid:\t0\t0\t0"])
def test_a_users_process_named_like_the_service_and_roots_uid_line_is_not_the_service(
    intruder: tuple[int, int], tmp_path: Path, check: CheckJson, name: str
) -> None:
    # Its name reads "zqx", then a "\r", "\f" or "\v" (where str.splitlines() cuts) and a Uid line of zeros.
    uid, gid = intruder
    process = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", NAMED, str(uid), str(gid), name],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == b"named\n"
        with open(f"/proc/{process.pid}/status", "rb") as handle:
            assert handle.read().startswith(b"Name:\t" + name.encode() + b"\n")
        code, doc = check(process_table(tmp_path, ["zqx"]))
    finally:
        process.kill()
        process.wait()
    assert code == 2 and codes(doc) == [("CRITICAL", "SERVICE_INACTIVE", "zqx")]


def test_a_root_process_named_munged_is_munge(start_process: Start, tmp_path: Path, check: CheckJson) -> None:
    munged = start_process("munged")
    code, doc = check(process_table(tmp_path, ["munge"], pinned(munged.exe)))
    assert code == 0 and findings(doc) == []


def test_munged_as_the_munge_account_is_munge(start_process: Start, tmp_path: Path, check: CheckJson) -> None:
    # Debian's munge.service has User=munge and /etc/init.d/munge starts munged with --chuid munge.
    try:
        munge = pwd.getpwnam("munge")
    except KeyError:
        pytest.fail("the munge package (and its munge account) is installed wherever these tests run")
    munged = start_process("munged", user=munge)
    code, doc = check(process_table(tmp_path, ["munge"], pinned(munged.exe)))
    assert code == 0 and findings(doc) == []


def test_another_executable_is_not_the_service(start_process: Start, tmp_path: Path, check: CheckJson) -> None:
    impostor = start_process("munged", where="elsewhere").exe
    code, doc = check(process_table(tmp_path, ["munge"], pinned(impostor.parent.parent / "sbin/munged")))
    (finding,) = findings(doc)
    assert code == 2 and finding["code"] == "SERVICE_INACTIVE"
    assert repr(str(impostor)) in finding["message"]
    assert "[checks.services] process_exe" in finding["message"]


def test_a_binary_replaced_since_start_is_still_the_service(
    start_process: Start, tmp_path: Path, check: CheckJson
) -> None:
    munged = start_process("munged")
    munged.exe.unlink()  # as a package upgrade does
    assert os.readlink(f"/proc/{munged.pid}/exe") == f"{munged.exe} (deleted)"
    code, doc = check(process_table(tmp_path, ["munge"], pinned(munged.exe)))
    assert code == 0 and findings(doc) == []


def test_process_users_lets_a_daemons_account_count(
    start_process: Start, user: pwd.struct_passwd, tmp_path: Path, check: CheckJson
) -> None:
    munged = start_process("munged", user=user)
    for account in (toml_string(TEST_USER), str(user.pw_uid)):
        code, doc = check(process_table(tmp_path, ["munge"], pinned(munged.exe) + f"process_users = [{account}]\n"))
        assert code == 0 and findings(doc) == [], account


def test_default_aliases_map_units_to_their_daemons(start_process: Start, tmp_path: Path, check: CheckJson) -> None:
    # No process_names: munge is found as munged, nvidia-dcgm as nv-hostengine.
    munged = start_process("munged").exe
    hostengine = start_process("nv-hostengine").exe
    settings = (
        f'process_exe = {{ "munge" = {toml_string(str(munged))}, "nvidia-dcgm" = {toml_string(str(hostengine))} }}\n'
    )
    code, doc = check(process_table(tmp_path, ["munge", "nvidia-dcgm.service"], settings))
    assert code == 0 and findings(doc) == []


def test_a_missing_service_names_the_setting_that_fixes_it(tmp_path: Path, check: CheckJson) -> None:
    settings = 'severities = { "healthd-absent-b" = "WARNING" }\nprocess_users = ["healthd-no-such-user"]\n'
    code, doc = check(process_table(tmp_path, ["healthd-absent-a", "healthd-absent-b"], settings))
    assert code == 2
    assert codes(doc) == [
        ("CRITICAL", "SERVICE_INACTIVE", "healthd-absent-a"),
        ("WARNING", "SERVICE_INACTIVE", "healthd-absent-b"),
    ]
    message = findings(doc)[0]["message"]
    assert "no process named healthd-absent-a owned by root" in message
    assert '[checks.services] process_names = { "healthd-absent-a" = ["NAME"] }' in message
    assert "process_users names no account on this node: healthd-no-such-user" in message


def test_process_names_map_a_unit_to_its_daemon(start_process: Start, tmp_path: Path, check: CheckJson) -> None:
    # 16 characters: the command name keeps 15, the executable's name all of them.
    daemon = start_process("healthd-test-svc")
    settings = 'process_names = { "fabricmanager" = ["healthd-test-svc"] }\n' + pinned(daemon.exe, "fabricmanager")
    code, doc = check(process_table(tmp_path, ["fabricmanager"], settings))
    assert code == 0 and findings(doc) == []


def test_an_unreadable_process_table_is_unknown(tmp_path: Path, check: CheckJson) -> None:
    body = process_table(tmp_path, ["munge"]).replace("[paths]\n", f'[paths]\nprocfs = "{tmp_path / "no-proc"}"\n')
    code, doc = check(body)
    assert code == 3 and codes(doc) == [("UNKNOWN", "PROCESSES_UNREADABLE", str(tmp_path / "no-proc"))]


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ('process_exe = { "munge" = "munged" }', "checks.services.process_exe"),
        ('process_users = ["munge", "two words"]', "checks.services.process_users"),
        ("process_users = [-1]", "checks.services.process_users"),
    ],
)
def test_bad_process_settings_name_the_key(
    setting: str, named: str, tmp_path: Path, write_config: Callable[[str], Path], cli: Any
) -> None:
    code, _out, err = cli(
        "check", "--once", "--json", "--config", str(write_config(process_table(tmp_path, [], setting)))
    )
    assert code == 78 and named in err


def test_missing_and_loaded_kernel_modules(fixtures: Path, tmp_path: Path, check: CheckJson) -> None:
    body = (
        f'[paths]\nprocfs = "{fixtures / "procfs/gpu-node"}"\nstate_dir = "{tmp_path / "state"}"\n'
        "[slurm]\nenabled = false\n"
        '[checks.services]\nexpect_kernel_modules = ["nvidia", "nvidia-peermem", "mlx5_ib", "nvidia_fs"]\n'
    )
    code, doc = check(body)
    assert code == 2 and codes(doc) == [("CRITICAL", "MODULE_NOT_LOADED", "nvidia_fs")]


def test_nothing_configured_is_not_applicable(check: CheckJson) -> None:
    code, doc = check("[slurm]\nenabled = false\n")
    assert code == 0 and doc["checks"][0]["state"] == "not_applicable"


def test_malformed_modules_file_names_the_line(fixtures: Path, tmp_path: Path, check: CheckJson) -> None:
    body = (
        f'[paths]\nprocfs = "{fixtures / "procfs/broken"}"\nstate_dir = "{tmp_path / "state"}"\n'
        '[slurm]\nenabled = false\n[checks.services]\nexpect_kernel_modules = ["nvidia"]\n'
    )
    code, doc = check(body)
    (finding,) = doc["checks"][0]["findings"]
    assert code == 3 and finding["code"] == "MODULES_MALFORMED"
    assert f"{fixtures / 'procfs/broken/modules'}:2:" in finding["message"]


@given(st.text())
def test_modules_parser_raises_only_its_error(text: str) -> None:
    raises_only(parse_modules, ModulesError, text)
