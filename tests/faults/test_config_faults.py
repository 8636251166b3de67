"""An invalid configuration at start (exit 78, nothing done) and at reload (SIGHUP: old one kept, key named).

Both run the real ``healthd`` executable with the installed checks, as systemd would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from healthd_testkit.paths import HEALTHD, run_healthd
from healthd_testkit.waiting import wait_for

EX_CONFIG = 78


def _config(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "healthd.toml"
    path.write_text(
        f'[paths]\nstate_dir = "{tmp_path / "state"}"\n'
        '[slurm]\nenabled = false\nnode_name = "node-test"\n'
        "[daemon]\ninterval = 1\nsplay = false\n"
        "[checks.xid]\nenabled = false\n"
        f"{extra}"
    )
    return path


BAD = [
    ("[checks.mounts]\ntimeout = -1\n", "checks.mounts.timeout"),
    ("[node]\ngpu = 8\n", "node.gpu: unknown key"),
    ('[node]\nmounts = [{ path = "scratch" }]\n', "node.mounts[0].path"),
    ("[checks.nosuch]\nenabled = true\n", "checks.nosuch: unknown check"),
    ("[slurm\n", "not valid TOML"),
]


@pytest.mark.parametrize("command", [["run"], ["check", "--once"]])
@pytest.mark.parametrize(("body", "named"), BAD)
def test_invalid_config_at_start_exits_78_and_does_nothing(
    tmp_path: Path, command: list[str], body: str, named: str
) -> None:
    config = _config(tmp_path, body)
    proc = run_healthd(*command, "--config", str(config), timeout=30)
    assert proc.returncode == EX_CONFIG, proc.stderr
    assert named in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "state").exists()  # no state, no pass, no Slurm call


def _last_pass(state: Path) -> dict[str, object]:
    try:
        document: dict[str, object] = json.loads((state / "last-pass.json").read_text())
    except (OSError, ValueError):
        return {}
    return document


@pytest.mark.slow
def test_invalid_config_at_reload_keeps_the_old_one_and_names_the_key(tmp_path: Path) -> None:
    config = _config(tmp_path)
    state = tmp_path / "state"
    log = tmp_path / "daemon.log"
    with log.open("w") as stderr:
        daemon = subprocess.Popen(
            [str(HEALTHD), "run", "--config", str(config)], stdout=subprocess.DEVNULL, stderr=stderr
        )
    try:
        wait_for(lambda: _last_pass(state), 20, "the first pass")
        config.write_text(config.read_text() + "[checks.mounts]\ntimeout = -1\n")
        daemon.send_signal(signal.SIGHUP)
        wait_for(lambda: "checks.mounts.timeout" in log.read_text(), 10, "the rejected key in the log")
        # One line names the rejection and the key: syslog splits a message at each newline.
        rejected = [line for line in log.read_text().split("\n") if "keeping the old one" in line]
        assert len(rejected) == 1 and "checks.mounts.timeout" in rejected[0], log.read_text()
        # The daemon goes on passing with the old configuration.
        before = _last_pass(state)["started_at"]
        wait_for(lambda: _last_pass(state).get("started_at") != before, 10, "a pass after the bad reload")
        assert daemon.poll() is None
        started = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=10) == 0
        assert time.monotonic() - started < 5
    finally:
        if daemon.poll() is None:
            os.kill(daemon.pid, signal.SIGKILL)
            daemon.wait()
    assert "Traceback" not in log.read_text()
