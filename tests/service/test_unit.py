"""The systemd unit passes ``systemd-analyze verify`` (offline) and keeps the settings healthd relies on."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "packaging" / "systemd" / "healthd.service"
ANALYZE = shutil.which("systemd-analyze")

pytestmark = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze (Debian package systemd) is not installed")


def _verify(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    # verify needs ExecStart's binary to exist: point the copy at a real executable here.
    binary = tmp_path / "bin" / "healthd"
    binary.parent.mkdir(exist_ok=True)
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    unit = tmp_path / "healthd.service"
    unit.write_text(text.replace("/usr/bin/healthd", str(binary)))
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
    unit = tmp_path / "healthd.service"
    unit.write_text(UNIT.read_text())
    if Path("/usr/bin/healthd").exists():
        pytest.skip("a healthd is installed in /usr/bin on this machine")
    assert ANALYZE is not None
    done = subprocess.run([ANALYZE, "verify", str(unit)], capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "/usr/bin/healthd" in done.stderr


def test_unit_keeps_what_healthd_relies_on() -> None:
    lines = {line.strip() for line in UNIT.read_text().splitlines() if line.strip() and not line.startswith("#")}
    for required in (
        "Type=notify",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "Restart=on-failure",
        "RestartPreventExitStatus=78",
        "StateDirectory=healthd",
        "ProtectSystem=full",
    ):
        assert required in lines
    # These would hide /dev/kmsg, /dev/nvidia* or /home from the checks.
    for forbidden in ("PrivateDevices=yes", "ProtectKernelLogs=yes", "ProtectClock=yes", "ProtectHome=yes"):
        assert forbidden not in lines
