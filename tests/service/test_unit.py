"""The systemd unit passes ``systemd-analyze verify`` (offline) and keeps the settings healthd relies on."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from healthd_testkit.namespace import in_mount_namespace
from healthd_testkit.paths import REPO

UNIT = REPO / "packaging" / "systemd" / "healthd.service"
ROLE_UNIT = REPO / "deploy" / "ansible" / "roles" / "healthd" / "files" / "healthd.service"
ANALYZE = shutil.which("systemd-analyze")

# Slow (systemd-analyze verify, a second or more a unit): left out of the fast tier, `pytest -m "not slow"`.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze (Debian package systemd) is not installed"),
]


INSTALLED = "/opt/healthd/bin/healthd"


def _verify(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    # verify needs ExecStart's binary to exist: point the copy at a real executable here.
    binary = tmp_path / "bin" / "healthd"
    binary.parent.mkdir(exist_ok=True)
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    unit = tmp_path / "healthd.service"
    assert INSTALLED in text
    unit.write_text(text.replace(INSTALLED, str(binary)))
    assert ANALYZE is not None
    return subprocess.run([ANALYZE, "verify", str(unit)], capture_output=True, text=True, check=False)


def test_unit_verifies_without_any_warning(tmp_path: Path) -> None:
    done = _verify(UNIT.read_text(), tmp_path)
    assert done.returncode == 0, done.stderr
    # systemd only warns (exit 0) about unknown keys and bad values; any output is a defect.
    assert [line for line in done.stderr.splitlines() if "healthd.service" in line] == []


@pytest.mark.parametrize(
    "mutation",
    [("Type=notify", "Type=notfy"), ("WatchdogSec=60s", "WatchdogSec=soon"), ("CPUQuota=25%", "CPUQuotaa=25%")],
)
def test_a_broken_unit_is_caught(tmp_path: Path, mutation: tuple[str, str]) -> None:
    done = _verify(UNIT.read_text().replace(*mutation), tmp_path)
    assert done.returncode != 0 or "healthd.service" in done.stderr


def test_a_missing_binary_is_caught(tmp_path: Path) -> None:
    missing = tmp_path / "no-venv" / "bin" / "healthd"
    unit = tmp_path / "healthd.service"
    unit.write_text(UNIT.read_text().replace(INSTALLED, str(missing)))
    assert ANALYZE is not None
    done = subprocess.run([ANALYZE, "verify", str(unit)], capture_output=True, text=True, check=False)
    assert done.returncode != 0 and str(missing) in done.stderr


def test_the_unit_runs_healthd_where_the_documented_install_puts_it() -> None:
    # The README's install, docs/service.md's manual steps and the role's default virtualenv
    # all make /opt/healthd; the unit must start the healthd that they install there.
    venv = str(Path(INSTALLED).parents[1])
    for doc in ("README.md", "docs/service.md"):
        assert f"python3 -m venv {venv} && {venv}/bin/pip install ." in (REPO / doc).read_text(), doc
    defaults = (REPO / "deploy" / "ansible" / "roles" / "healthd" / "defaults" / "main.yml").read_text()
    assert f"\nhealthd_venv: {venv}\n" in defaults
    assert f"ExecStart={INSTALLED} run" in UNIT.read_text().splitlines()


def test_unit_keeps_what_healthd_relies_on() -> None:
    lines = {line.strip() for line in UNIT.read_text().splitlines() if line.strip() and not line.startswith("#")}
    for required in (
        "Type=notify",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "Restart=on-failure",
        "StartLimitIntervalSec=0",
        "StateDirectory=healthd",
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        "SystemCallFilter=@system-service",
        f"ExecStart={INSTALLED} run",  # no --config: a missing file means defaults, not exit 78 forever
    ):
        assert required in lines
    # These would hide /dev/kmsg, /dev/nvidia* or /home from the checks.
    for forbidden in ("PrivateDevices=yes", "ProtectKernelLogs=yes", "ProtectClock=yes", "ProtectHome=yes"):
        assert forbidden not in lines
    # A refused config or textfile directory (exit 78) is retried, never left as a node without its daemon.
    assert not any(line.startswith("RestartPreventExitStatus=") for line in lines)


def test_the_role_ships_the_one_unit_file() -> None:
    # One unit file in the repository: the role's is a link to it, which Ansible's copy
    # follows, so the role, the packages and a manual install cannot drift apart.
    assert ROLE_UNIT.is_symlink()
    assert ROLE_UNIT.resolve() == UNIT.resolve()


def test_ioctl_is_in_the_system_service_filter() -> None:
    # NVML drives /dev/nvidia* by ioctl and mmap; the filter must keep both.
    assert ANALYZE is not None
    done = subprocess.run([ANALYZE, "syscall-filter", "@system-service"], capture_output=True, text=True, check=False)
    listed = {line.strip() for line in done.stdout.splitlines()}
    assert "ioctl" in listed and "@basic-io" in listed and "@process" in listed


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare(1)")
def test_protect_system_strict_leaves_the_mounts_check_its_view(tmp_path: Path) -> None:
    # What ProtectSystem=strict does, by hand: a private mount namespace where "/" is
    # read-only and only the state directory is bound writable (as StateDirectory= is).
    state = tmp_path / "state"
    state.mkdir()
    config = tmp_path / "healthd.toml"
    config.write_text(
        f'[paths]\nstate_dir = "{state}"\n[slurm]\nenabled = false\nnode_name = "node-test"\n'
        '[checks.mounts]\nexpect = [{ path = "/", rw = true }]\n'
    )
    healthd = [sys.executable, "-m", "healthd.cli.main", "check", "--once", "--json", "--only", "mounts"]
    script = (
        f'mount --bind "{state}" "{state}" && mount -o remount,bind,ro / && '
        'if touch /healthd-probe 2>/dev/null; then echo "/ is writable"; exit 99; fi && '
        f'exec {" ".join(healthd)} --config "{config}"'
    )
    done = in_mount_namespace(script, expected=0)
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads(done.stdout)
    # healthd's own view of "/" is read-only, yet the check reads PID 1's mountinfo: rw, OK.
    mounts = next(c for c in document["checks"] if c["name"] == "mounts")
    assert mounts["status"] == "OK", mounts
    # Written in the one writable directory (as other-pass.json: an --only pass is not the node's last whole pass).
    assert json.loads((state / "other-pass.json").read_text())["status"] == "OK"
    assert document["action"]["errors"] == []
