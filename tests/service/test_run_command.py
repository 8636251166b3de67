"""``healthd run`` as a real process: sd_notify, SIGHUP reload, SIGTERM stop, exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

# Slow (``healthd run`` as a real process, signalled and waited on): left out of the fast tier, `pytest -m "not slow"`.
pytestmark = pytest.mark.slow


def _config(tmp_path: Path, interval: int = 1, extra: str = "") -> Path:
    config = tmp_path / "healthd.toml"
    config.write_text(
        f'[paths]\nstate_dir = "{tmp_path}/state"\n[slurm]\nenabled = false\nnode_name = "node-test"\n'
        f"[daemon]\ninterval = {interval}\n{extra}"
    )
    return config


def _start(config: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "healthd.cli.main", "run", "--config", str(config)],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_real_process_notifies_reloads_and_stops_on_sigterm(tmp_path: Path, abstract_listener: Any) -> None:
    config = _config(tmp_path)
    process = _start(config, {"NOTIFY_SOCKET": abstract_listener.address, "WATCHDOG_USEC": "400000"})
    try:
        abstract_listener.wait_for("READY=1", timeout=30)
        document = json.loads((tmp_path / "state" / "last-pass.json").read_text())
        assert document["node"] == "node-test"
        abstract_listener.wait_for("WATCHDOG=1")

        process.send_signal(signal.SIGHUP)
        abstract_listener.wait_for("RELOADING=1")
        deadline = time.monotonic() + 10
        while sum("READY=1" in text for _, text in abstract_listener.messages) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sum("READY=1" in text for _, text in abstract_listener.messages) == 2

        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert time.monotonic() - started < 5
        abstract_listener.wait_for("STOPPING=1")
        stderr = process.stderr.read() if process.stderr else ""
        assert "reloaded configuration" in stderr and "stopping" in stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_invalid_config_exits_78_naming_the_key(tmp_path: Path) -> None:
    config = _config(tmp_path, extra="[runner]\npass_timeout = 0\n")
    process = _start(config, {})
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 78
    assert f"{config}: runner.pass_timeout" in stderr
