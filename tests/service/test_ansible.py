"""The Ansible role: lint, syntax check, a real run on localhost into a temporary root, idempotence."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO / "deploy" / "ansible"
BIN = Path(sys.executable).parent


def _tool(name: str) -> str | None:
    # Prefer the tools installed with the test extras next to this interpreter.
    candidate = BIN / name
    return str(candidate) if candidate.exists() else shutil.which(name)


PLAYBOOK = _tool("ansible-playbook")
LINT = _tool("ansible-lint")

pytestmark = pytest.mark.skipif(PLAYBOOK is None, reason="ansible-playbook is not installed")


def _env(tmp_path: Path) -> dict[str, str]:
    import os

    return {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(ANSIBLE_DIR / "roles"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_REMOTE_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
    }


@pytest.mark.skipif(LINT is None, reason="ansible-lint is not installed")
def test_ansible_lint(tmp_path: Path) -> None:
    assert LINT is not None
    done = subprocess.run(
        [LINT, "--offline", "--nocolor", "site.yml", "roles/healthd"],
        cwd=ANSIBLE_DIR,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_syntax_check(tmp_path: Path) -> None:
    assert PLAYBOOK is not None
    done = subprocess.run(
        [PLAYBOOK, "--syntax-check", "-i", "inventory/hosts.yml", "site.yml"],
        cwd=ANSIBLE_DIR,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _recap(output: str) -> dict[str, int]:
    match = re.search(r"^localhost\s*:\s*(.*)$", output, re.MULTILINE)
    assert match, output
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", match.group(1))}


def test_role_installs_into_a_temporary_root_idempotently(tmp_path: Path) -> None:
    assert PLAYBOOK is not None
    # Install from a copy of the source tree, so the build leaves nothing in the checkout.
    source = tmp_path / "src"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache"),
    )
    root = tmp_path / "root"
    (root / "etc" / "slurm").mkdir(parents=True)
    (root / "etc" / "slurm" / "slurm.conf").write_text("ClusterName=test\nHealthCheckInterval=30\n")
    state_dir = tmp_path / "state"
    playbook = tmp_path / "play.yml"
    playbook.write_text("- name: Install healthd\n  hosts: all\n  gather_facts: false\n  roles:\n    - role: healthd\n")
    variables = {
        "healthd_root": str(root),
        "healthd_package": str(source),
        "healthd_manage_service": False,
        "healthd_state_dir": str(state_dir),
        "healthd_slurm_enabled": False,
        "healthd_slurm_health_check": True,
        "healthd_node_gpus": 0,
        "healthd_node_mounts": [{"path": "/", "rw": True}],
        "healthd_node_services": [],
        "healthd_checks": {"mounts": {"timeout": 5}},
    }
    command = [PLAYBOOK, "-i", "localhost,", "-c", "local", str(playbook), "-e", json.dumps(variables)]

    first = subprocess.run(command, env=_env(tmp_path), capture_output=True, text=True, check=False, timeout=600)
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
    assert _recap(first.stdout)["failed"] == 0
    assert _recap(first.stdout)["changed"] > 0

    second = subprocess.run(command, env=_env(tmp_path), capture_output=True, text=True, check=False, timeout=600)
    assert second.returncode == 0, second.stdout[-6000:] + second.stderr[-3000:]
    assert _recap(second.stdout)["changed"] == 0, second.stdout[-6000:]

    venv = root / "opt" / "healthd"
    config = root / "etc" / "healthd" / "healthd.toml"
    unit = root / "etc" / "systemd" / "system" / "healthd.service"
    assert unit.read_text() == (REPO / "packaging" / "systemd" / "healthd.service").read_text()
    dropin = (unit.parent / "healthd.service.d" / "10-virtualenv.conf").read_text()
    assert "ExecStart=/opt/healthd/bin/healthd run --config /etc/healthd/healthd.toml" in dropin
    slurm_conf = (root / "etc" / "slurm" / "slurm.conf").read_text().splitlines()
    assert "HealthCheckProgram=/usr/local/sbin/healthd-slurm-check" in slurm_conf
    assert "HealthCheckInterval=300" in slurm_conf and "HealthCheckInterval=30" not in slurm_conf
    assert (root / "usr" / "local" / "sbin" / "healthd-slurm-check").stat().st_mode & 0o111

    check = subprocess.run(
        [str(venv / "bin" / "healthd"), "check", "--once", "--json", "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert check.returncode in (0, 1, 2, 3), check.stderr
    document = json.loads(check.stdout)
    assert document["exit_code"] == check.returncode
    mounts = next(c for c in document["checks"] if c["name"] == "mounts")
    assert mounts["status"] == "OK", mounts
