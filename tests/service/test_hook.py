"""``healthd-hook``: slurmd's HealthCheckProgram, ``check --once`` on the default config, one line out."""

from __future__ import annotations

from pathlib import Path

import pytest

import healthd.config
from healthd.cli import hook_main


def _default_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node: str) -> None:
    config = tmp_path / "healthd.toml"
    config.write_text(
        f'[paths]\nstate_dir = "{tmp_path}/state"\n'
        '[slurm]\nenabled = false\nnode_name = "node-test"\n'
        f"{node}\n"
        + "".join(f"[checks.{name}]\nenabled = false\n" for name in ("services", "xid", "gpu", "infiniband", "pcie"))
    )
    # slurmd passes no arguments: the hook can only ever read the default path.
    monkeypatch.setattr(healthd.config, "DEFAULT_CONFIG_PATH", config)


def test_hook_prints_one_line_and_exits_with_the_pass_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _default_config(tmp_path, monkeypatch, '[node]\nmounts = [{ path = "/no/such/mount\\nforged" }]')
    assert hook_main() == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert out.startswith("healthd: CRITICAL on node-test: mounts/MOUNT_MISSING /no/such/mount forged")


def test_hook_on_a_healthy_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _default_config(tmp_path, monkeypatch, "")
    assert hook_main() == 0
    assert capsys.readouterr().out == "healthd: OK on node-test\n"


def test_hook_with_a_bad_config_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _default_config(tmp_path, monkeypatch, "[daemon]\ninterval = 'eight'")
    assert hook_main() == 78
    captured = capsys.readouterr()
    assert captured.out == "healthd: no result (exit 78); see the errors above\n"
    assert "daemon.interval" in captured.err
