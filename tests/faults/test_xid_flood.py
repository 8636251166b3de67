"""A kernel-log flood: 100,000 Xid lines in one pass, and no Xid lost or counted twice across a restart.

The xid check reads a regular file holding /dev/kmsg records as it reads the
device (checks/healthd_checks/kernlog/source.py), so the flood is written to such a file and
``[paths].kmsg`` points at it; the real ring buffer would overwrite most of
100,000 records before anyone read them. The check runs under the real runner, with a
deadline and pass budget far above the defaults: these tests prove what is counted, and how
fast a flood is read is bench/bench_scan_log.py's figure (a loaded machine would fail a timed
test for the wrong reason).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.faults import Harness, builtin

from healthd.model import RunState, Status

# Slow (100,000 kernel-log lines through the real runner): left out of the fast tier, `pytest -m "not slow"`.
pytestmark = pytest.mark.slow

GPUS = {"0000:3b:00.0": "gpu0", "0000:86:00.0": "gpu1"}
LINES = {
    79: "NVRM: Xid (PCI:{bus}): 79, pid=1234, name=python, GPU has fallen off the bus.",
    48: "NVRM: Xid (PCI:{bus}): 48, pid=2345, name=python, An uncorrectable double bit error (DBE) has been detected.",
}
TOTAL = 100_000
_XID = '[checks.xid]\nsource = "kmsg"\ntimeout = 300\n'


def _node(root: Path) -> str:
    random = root / "proc" / "sys" / "kernel" / "random"
    random.mkdir(parents=True)
    (random / "boot_id").write_text("11111111-2222-3333-4444-555555555555\n")
    for address in GPUS:
        device = root / "sys" / "bus" / "pci" / "devices" / address
        device.mkdir(parents=True)
        (device / "vendor").write_text("0x10de\n")
        (device / "device").write_text("0x2330\n")
        (device / "class").write_text("0x030200\n")
    (root / "kmsg").write_text("6,0,0,-;Linux version\n")  # a real kernel numbers records from 0
    return f'procfs = "{root / "proc"}"\nsysfs = "{root / "sys"}"\nkmsg = "{root / "kmsg"}"'


def _flood(kmsg: Path, first: int, count: int) -> None:
    """Records ``first`` .. ``first + count - 1``, cycling over both GPUs and both Xids."""
    kinds = [(bus[:-2], xid) for bus in GPUS for xid in LINES]
    with kmsg.open("a") as handle:
        for seq in range(first, first + count):
            bus, xid = kinds[seq % len(kinds)]
            handle.write(f"3,{seq},{seq * 10},-;{LINES[xid].format(bus=bus)}\n")


def _pass(node: Harness) -> dict[str, Any]:
    result = node.engine().run_checks()  # a new engine each time: a restart of healthd
    (xid,) = result.results
    assert xid.state is RunState.RAN, xid.reason  # finished, not abandoned
    return {f"{f.code}@{f.subject}": f for f in xid.findings}


def test_flood_of_100000_xids_is_one_finding_per_gpu_and_xid(harness: Callable[..., Harness], tmp_path: Path) -> None:
    node = harness(*builtin("xid"), paths=_node(tmp_path), extra=_XID, pass_timeout=300)
    _flood(tmp_path / "kmsg", 1, TOTAL)
    found = _pass(node)
    assert sorted(found) == ["XID_48@gpu0", "XID_48@gpu1", "XID_79@gpu0", "XID_79@gpu1"]
    assert sum(int(f.details["count"]) for f in found.values()) == TOTAL
    assert {int(f.details["count"]) for f in found.values()} == {TOTAL // 4}
    assert all(f.status is Status.CRITICAL for f in found.values())


def test_no_xid_lost_or_doubled_across_a_restart_mid_flood(harness: Callable[..., Harness], tmp_path: Path) -> None:
    node = harness(*builtin("xid"), paths=_node(tmp_path), extra=_XID, pass_timeout=300)
    _flood(tmp_path / "kmsg", 1, 60_000)
    first = _pass(node)
    assert sum(int(f.details["count"]) for f in first.values()) == 60_000
    _flood(tmp_path / "kmsg", 60_001, TOTAL - 60_000)
    second = _pass(node)
    assert sum(int(f.details["count"]) for f in second.values()) == TOTAL
    # One event per GPU and Xid: the restart did not open new ones.
    assert {k: f.details["event"] for k, f in first.items()} == {k: f.details["event"] for k, f in second.items()}
    assert sum(int(f.details["count"]) for f in _pass(node).values()) == TOTAL  # nothing re-read


def test_flood_of_forged_xids_is_read_in_time_and_counts_for_nothing(
    harness: Callable[..., Harness], tmp_path: Path
) -> None:
    """100,000 forged lines (written to /dev/kmsg by a process, or a crashing task's report) among real ones."""
    node = harness(*builtin("xid"), paths=_node(tmp_path), extra=_XID, pass_timeout=300)
    forged = [
        "12,{seq},{usec},-;" + LINES[79].format(bus="0000:3b:00"),  # facility 1: a process wrote it
        "6,{seq},{usec},-;Xid (PCI:0000:f[{seq}]: segfault at 0 ip 00007f0000001000 error 6 in Xid (PCI:0000:86:00)"
        ": 79[0,7f0000001000+1000] likely on CPU 0 (core 0, socket 0)",
        "6,{seq},{usec},-;NVRM: Xid (PCI:[{seq}]: segfault at 0 ip 00007f0000001000 error 6 in x\\x0a"
        + LINES[48].format(bus="0000:86:00"),
    ]
    with (tmp_path / "kmsg").open("a") as handle:
        for seq in range(1, TOTAL + 1):
            if seq % 10_000 == 0:
                handle.write(f"3,{seq},{seq * 10},-;{LINES[48].format(bus='0000:3b:00')}\n")
            else:
                handle.write(forged[seq % len(forged)].format(seq=seq, usec=seq * 10) + "\n")
    found = _pass(node)
    assert sorted(found) == ["XID_48@gpu0"]
    assert found["XID_48@gpu0"].details["count"] == TOTAL // 10_000
