"""The Ansible role: lint, syntax check, a real run on localhost into a temporary root, idempotence."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO / "deploy" / "ansible"
BIN = Path(sys.executable).parent

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


def _tool(name: str) -> str | None:
    # Prefer the tools installed with the test extras next to this interpreter.
    candidate = BIN / name
    return str(candidate) if candidate.exists() else shutil.which(name)


PLAYBOOK = _tool("ansible-playbook")
LINT = _tool("ansible-lint")

pytestmark = pytest.mark.skipif(PLAYBOOK is None, reason="ansible-playbook is not installed")


def _env(tmp_path: Path) -> dict[str, str]:
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


def _play(tmp_path: Path, variables: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    assert PLAYBOOK is not None
    playbook = tmp_path / "play.yml"
    playbook.write_text("- name: Install healthd\n  hosts: all\n  gather_facts: false\n  roles:\n    - role: healthd\n")
    command = [PLAYBOOK, "-i", "localhost,", "-c", "local", str(playbook), "-e", json.dumps(variables)]
    return subprocess.run(command, env=_env(tmp_path), capture_output=True, text=True, check=False, timeout=600)


def test_role_refuses_the_daemon_and_the_hook_together(tmp_path: Path) -> None:
    done = _play(tmp_path, {"healthd_root": str(tmp_path / "root"), "healthd_slurm_health_check": True})
    assert done.returncode != 0
    assert "use one or the other" in done.stdout, done.stdout[-3000:]
    assert not (tmp_path / "root" / "opt").exists()  # refused before installing anything


def test_role_installs_into_a_temporary_root_idempotently(tmp_path: Path) -> None:
    # Install from a copy of the source tree, so the build leaves nothing in the checkout.
    source = tmp_path / "src"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache"),
    )
    root = tmp_path / "root"
    (root / "etc" / "slurm").mkdir(parents=True)
    # slurm.conf(5) keys are case-insensitive and may have spaces around "=".
    (root / "etc" / "slurm" / "slurm.conf").write_text("ClusterName=test\nhealthcheckinterval = 30\n")
    state_dir = tmp_path / "state"
    textfile = tmp_path / "textfile" / "healthd.prom"
    variables: dict[str, Any] = {
        "healthd_root": str(root),
        "healthd_package": str(source),
        "healthd_manage_service": False,
        "healthd_daemon": False,
        "healthd_state_dir": str(state_dir),
        "healthd_slurm_enabled": False,
        "healthd_slurm_health_check": True,
        "healthd_slurm_node_name": "node-test",
        "healthd_slurm_conf_path": "/etc/slurm/slurm.conf",
        "healthd_node_gpus": 0,
        "healthd_node_mounts": [{"path": "/", "rw": True}],
        "healthd_node_services": [],
        "healthd_metrics_textfile": str(textfile),
        "healthd_policy": {"unknown_action": "drain", "unknown_passes": 2},
        "healthd_runner": {"pass_timeout": 30},
        # Dict-valued options: nested tables, and keys that are not bare TOML keys.
        "healthd_checks": {
            "mounts": {"timeout": 5},
            "xid": {"overrides": {"63": "CRITICAL", "SXID_20034": "WARNING"}},
            "services": {"severities": {"munge": "WARNING"}, "process_names": {"munge": ["munged", "munge d"]}},
        },
        "healthd_extra_config": {"slurm": {"timeout": 10}, "metrics": {"listen": "127.0.0.1:9101"}},
    }

    first = _play(tmp_path, variables)
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
    assert _recap(first.stdout)["failed"] == 0
    assert _recap(first.stdout)["changed"] > 0

    second = _play(tmp_path, variables)
    assert second.returncode == 0, second.stdout[-6000:] + second.stderr[-3000:]
    assert _recap(second.stdout)["changed"] == 0, second.stdout[-6000:]

    venv = root / "opt" / "healthd"
    config = root / "etc" / "healthd" / "healthd.toml"
    assert tomllib.loads(config.read_text()) == {
        "paths": {"state_dir": str(state_dir)},
        "node": {"gpus": 0, "services": [], "mounts": [{"path": "/", "rw": True}]},
        "slurm": {"enabled": False, "conf": "/etc/slurm/slurm.conf", "node_name": "node-test", "timeout": 10},
        "policy": {"dry_run": False, "unknown_action": "drain", "unknown_passes": 2},
        "runner": {"pass_timeout": 30},
        "daemon": {"interval": 300, "splay": True},
        "metrics": {"textfile": str(textfile), "listen": "127.0.0.1:9101"},
        "checks": variables["healthd_checks"],
    }
    # The file that was validated is the root-owned candidate next to the config, never a
    # temp copy of the login user's (which healthd's trust check refuses under become).
    candidate = config.with_name("healthd.toml.new")
    assert candidate.read_text() == config.read_text()
    assert (candidate.stat().st_uid, stat.S_IMODE(candidate.stat().st_mode)) == (0, 0o644)
    tasks = (ANSIBLE_DIR / "roles" / "healthd" / "tasks" / "main.yml").read_text().splitlines()
    assert not [line for line in tasks if line.strip().startswith("validate:")]
    unit = root / "etc" / "systemd" / "system" / "healthd.service"
    assert unit.read_text() == (REPO / "packaging" / "systemd" / "healthd.service").read_text()
    dropin = (unit.parent / "healthd.service.d" / "10-virtualenv.conf").read_text()
    assert "ExecStart=/opt/healthd/bin/healthd run\n" in dropin
    paths = (unit.parent / "healthd.service.d" / "20-paths.conf").read_text().splitlines()
    assert f"ReadWritePaths=-{state_dir}" in paths and f"ReadWritePaths=-{textfile.parent}" in paths
    assert os.readlink(root / "usr" / "local" / "sbin" / "healthd") == "/opt/healthd/bin/healthd"
    slurm_conf = (root / "etc" / "slurm" / "slurm.conf").read_text().splitlines()
    assert slurm_conf == [
        "ClusterName=test",
        "HealthCheckInterval=300",
        "HealthCheckProgram=/opt/healthd/bin/healthd-hook",
        "HealthCheckNodeState=ANY,CYCLE",
    ]
    hook = venv / "bin" / "healthd-hook"
    assert hook.stat().st_mode & 0o111
    # A console script: its own interpreter by absolute path, no shell and no PATH needed.
    assert hook.read_text().splitlines()[0].startswith(f"#!{venv}/bin/python")

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

    # Typos in values are not coerced ("eight" -> 0, "ture" -> false): the play fails
    # naming each key, and the configuration in place stays the valid one.
    before = config.read_text()
    typo = _play(tmp_path, {**variables, "healthd_interval": "eight", "healthd_dry_run": "ture"})
    assert typo.returncode != 0
    assert "daemon.interval" in typo.stdout and "policy.dry_run" in typo.stdout, typo.stdout[-4000:]
    assert config.read_text() == before
