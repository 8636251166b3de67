"""``healthd-hook``: slurmd's HealthCheckProgram, ``check --once`` on the default config, one line out."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from healthd_testkit.checks import only_checks

import healthd.config.load
from healthd import __version__
from healthd.cli.hook import hook_main


def _default_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node: str, slurm: str = "enabled = false") -> None:
    config = tmp_path / "healthd.toml"
    config.write_text(
        f'[paths]\nstate_dir = "{tmp_path}/state"\n'
        f'[slurm]\n{slurm}\nnode_name = "node-test"\n'
        f"{node}\n" + only_checks("mounts")
    )
    # slurmd passes no arguments: the hook can only ever read the default path.
    monkeypatch.setattr(healthd.config.load, "DEFAULT_CONFIG_PATH", config)


def test_hook_prints_one_line_and_exits_with_the_pass_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _default_config(tmp_path, monkeypatch, '[checks.mounts]\nexpect = [{ path = "/no/such/mount\\nforged" }]')
    assert hook_main([]) == 2
    out = capsys.readouterr().out
    assert out == (
        "healthd: CRITICAL on node-test: mounts/MOUNT_MISSING /no/such/mount forged; action: not sent, [slurm] "
        "enabled = false: would take the node out now (CRITICAL from mounts; reason 'healthd: MOUNT_MISSING "
        "/no/such/mount forged')\n"
    )


def test_hook_on_a_healthy_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _default_config(tmp_path, monkeypatch, "")
    assert hook_main([]) == 0
    assert capsys.readouterr().out == "healthd: OK on node-test\n"


def test_hook_with_a_bad_config_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _default_config(tmp_path, monkeypatch, "[daemon]\ninterval = 'eight'")
    assert hook_main([]) == 78
    captured = capsys.readouterr()
    assert captured.out == "healthd: no result (exit 78); see the errors above\n"
    assert "daemon.interval" in captured.err


MISSING = '[checks.mounts]\nexpect = [{ path = "/no/such/mount" }]'


@pytest.mark.parametrize(("argv", "expected"), [(["--help"], "usage: healthd-hook"), (["-h"], "--dry-run")])
def test_help_answers_without_a_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    # The node is sick: a pass would act on it. Asking for help must not run one.
    _default_config(tmp_path, monkeypatch, MISSING)
    monkeypatch.setattr(sys, "argv", ["healthd-hook", *argv])  # what the console script passes on
    assert hook_main() == 0
    assert expected in capsys.readouterr().out
    assert not (tmp_path / "state").exists()


def test_version_answers_without_a_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _default_config(tmp_path, monkeypatch, MISSING)
    assert hook_main(["--version"]) == 0
    assert capsys.readouterr().out == f"healthd-hook {__version__}\n"
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["now"], "unrecognized arguments: now"),
        (["--dry"], "unrecognized arguments: --dry"),  # no abbreviations: a typo is not an option
        (["--dry-run=no"], "ignored explicit argument 'no'"),
        (["--config", "/tmp/other.toml"], "unrecognized arguments: --config"),
        (["--dry-run", "--once"], "unrecognized arguments: --once"),
    ],
)
def test_anything_else_is_refused_with_64_before_a_pass(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    named: str,
) -> None:
    _default_config(tmp_path, monkeypatch, MISSING)
    assert hook_main(argv) == 64
    captured = capsys.readouterr()
    assert captured.out == "" and named in captured.err
    assert not (tmp_path / "state").exists()


def test_dry_run_reports_the_pass_and_changes_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    controllerless_slurm_conf: Path,
) -> None:
    # Slurm on, through the real scontrol, with a slurm.conf that names no controller: it reaches nothing.
    _default_config(tmp_path, monkeypatch, MISSING, slurm=f'conf = "{controllerless_slurm_conf}"')
    assert hook_main(["--dry-run"]) == 2
    assert capsys.readouterr().out == (
        "healthd: CRITICAL on node-test: mounts/MOUNT_MISSING /no/such/mount; Slurm not reachable (sinfo: Unable "
        "to process configuration file); dry run: would take the node out now (CRITICAL from mounts; reason "
        "'healthd: MOUNT_MISSING /no/such/mount')\n"
    )
    policy = json.loads((tmp_path / "state" / "policy.json").read_text())
    assert policy.get("pending") is None  # nothing kept to retry: a dry run never acts later either
