"""End to end against the real kernel log: records appended to /dev/kmsg are reported exactly once.

Other records (and earlier test runs) share the ring buffer, so every assertion
filters on a random PCI address used as this run's marker. Records written from
userspace get the user facility; /dev/kmsg and the parser see the full line.

The ring buffer keeps what is written until the machine reboots, and any later
``healthd check`` there reads it: so only Xids graded OK are injected (63 and 92
are informational, a single 13 is an application error), and nothing this test
leaves behind can alarm or drain the machine.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from healthd.config import parse_config
from healthd.engine import Engine
from healthd.model import Finding
from healthd_checks.xid import CHECK, XidSettings

KMSG = Path("/dev/kmsg")


def _kmsg_writable() -> str:
    if os.geteuid() != 0:
        return "needs root to write /dev/kmsg"
    if not os.access(KMSG, os.R_OK | os.W_OK):
        return f"{KMSG} is not readable and writable here"
    return ""


pytestmark = [pytest.mark.root, pytest.mark.skipif(bool(_kmsg_writable()), reason=_kmsg_writable() or "ok")]


def inject(*messages: str) -> None:
    fd = os.open(KMSG, os.O_WRONLY)
    try:
        for message in messages:
            # One write() is one record; without the newline the kernel holds the record
            # open for a continuation and readers do not see it until the next one.
            os.write(fd, f"<4>{message}\n".encode())
    finally:
        os.close(fd)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    (tmp_path / "sys").mkdir()
    path = tmp_path / "healthd.toml"
    path.write_text(
        f"""
[paths]
kmsg = "{KMSG}"
procfs = "/proc"
sysfs = "{tmp_path / "sys"}"
state_dir = "{tmp_path / "state"}"

[slurm]
enabled = false

[checks.xid]
source = "kmsg"
"""
    )
    return path


def engine_pass(config: Path) -> list[Finding]:
    loaded = parse_config(config.read_text(), str(config), {"xid": XidSettings})
    result = Engine(loaded, [CHECK]).run_pass(["xid"])
    return list(result.findings)


def process_pass(config: Path) -> list[dict[str, Any]]:
    healthd = Path(sys.executable).with_name("healthd")
    proc = subprocess.run(
        [str(healthd), "check", "--once", "--json", "--only", "xid", "--dry-run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.stdout, proc.stderr
    document = json.loads(proc.stdout)
    return [f for check in document["checks"] if check["name"] == "xid" for f in check["findings"]]


def test_injected_xids_are_reported_once_across_restarts(config: Path) -> None:
    bus = random.randint(0x10, 0xEF)
    device = random.randint(0, 0x1F)
    marker = f"0abc:{bus:02x}:{device:02x}"
    other = f"0abd:{bus:02x}:{device:02x}"
    inject(
        f"NVRM: Xid (PCI:{marker}): 63, pid={os.getpid()}, name=pytest, Row Remapper: New row marked for remapping",
        f"NVRM: Xid (PCI:{other}): 13, pid={os.getpid()}, name=pytest, Graphics Exception",
    )
    mine = [f for f in engine_pass(config) if f.subject in (marker, other)]
    assert sorted((f.code, f.subject, f.status.name, f.details["count"]) for f in mine) == [
        ("XID_13", other, "OK", 1),
        ("XID_63", marker, "OK", 1),
    ]
    event = next(f.details["event"] for f in mine if f.code == "XID_63")

    # A new process with the same state dir: the old records are not read again.
    again = [f for f in process_pass(config) if f["subject"] in (marker, other)]
    assert sorted((f["code"], f["details"]["count"], f["details"]["event"]) for f in again)[1] == ("XID_63", 1, event)
    assert len(again) == 2

    # A new record after the restart is seen once, by a fresh engine.
    inject(f"NVRM: Xid (PCI:{marker}): 92, pid={os.getpid()}, name=pytest, High single-bit ECC error rate")
    latest = {f.code: f for f in engine_pass(config) if f.subject == marker}
    assert set(latest) == {"XID_63", "XID_92"}
    assert latest["XID_92"].details["count"] == 1 and latest["XID_63"].details["count"] == 1
    final = [f for f in engine_pass(config) if f.subject in (marker, other)]
    assert {f.code: f.details["count"] for f in final if f.subject == marker} == {"XID_63": 1, "XID_92": 1}
    assert {f.status.name for f in final} == {"OK"}
