"""The wall clock jumping backwards and forwards (NTP step, a wrong RTC at boot).

The Engine takes the clock that checks and the policy see. Rates and windows in
the xid, infiniband and gpu checks and the policy's retry backoff must not crash,
must not report negative or huge rates or other spurious alarms, and must go
back to normal once the clock is sane again.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Callable

from healthd_testkit import nvml as fake_nvml_module
from healthd_testkit.faults import Harness, builtin
from healthd_testkit.paths import REPO

from healthd.config.cache import load_checks
from healthd.cycle.engine import Engine
from healthd.cycle.pipeline import PassTools, run_pass
from healthd.model import PassResult, Status

DAY = 86400.0
T0 = 1_750_000_000.0
# Backwards a day, forwards again, a month ahead, then small steps.
JUMPS = [T0, T0 - DAY, T0 - DAY + 60, T0 + 30 * DAY, T0 + 30 * DAY + 60, T0 + 30 * DAY + 120]


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _engine(node: Harness, clock: Clock) -> Engine:
    return Engine(*load_checks(node.write(), specs=node.specs, store=False), clock=clock)


def _no_rates_negative(result: PassResult) -> None:
    for finding in result.findings:
        for key, value in finding.details.items():
            if "rate" in key and isinstance(value, (int, float)):
                assert value >= 0, finding


def test_infiniband_counters_across_clock_jumps(harness: Callable[..., Harness], tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    shutil.copytree(REPO / "fixtures" / "sysfs" / "base", sysfs, symlinks=True)
    counter = sysfs / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "counters" / "symbol_error"
    node = harness(*builtin("infiniband"), paths=f'sysfs = "{sysfs}"')
    clock = Clock()
    engine = _engine(node, clock)
    for step, now in enumerate(JUMPS):
        clock.now = now
        counter.write_text(f"{step}\n")  # one symbol error per pass: far below any alarm
        result = engine.run_checks()
        _no_rates_negative(result)
        assert result.findings == (), [(f.code, f.subject, f.message) for f in result.findings]


def test_gpu_replay_rate_across_clock_jumps(harness: Callable[..., Harness], mocker: Any, tmp_path: Path) -> None:
    fake = fake_nvml_module.FakeNvml().install(mocker)
    sysfs = f'sysfs = "{fake_nvml_module.SYSFS_H100}"'
    node = harness(*builtin("gpu"), paths=sysfs, extra="[checks.gpu]\nexpect_gpus = 8\n")
    clock = Clock()
    engine = _engine(node, clock)
    for step, now in enumerate(JUMPS):
        clock.now = now
        replays = step * 2  # two replays per pass: a tiny rate whatever the clock says
        fake.gpus[0]["nvmlDeviceGetPcieReplayCounter"] = replays
        result = engine.run_checks()
        _no_rates_negative(result)
        assert result.findings == (), [(f.code, f.subject, f.message) for f in result.findings]
    # A real replay storm is still seen once the clock is sane.
    clock.now += 60
    fake.gpus[0]["nvmlDeviceGetPcieReplayCounter"] = 10_000
    (finding,) = engine.run_checks().findings
    assert (finding.code, finding.subject, finding.status) == ("PCIE_REPLAY_RATE", "gpu0", Status.WARNING)


def test_xid_windows_across_clock_jumps(harness: Callable[..., Harness], tmp_path: Path) -> None:
    random = tmp_path / "proc" / "sys" / "kernel" / "random"
    random.mkdir(parents=True)
    (random / "boot_id").write_text("11111111-2222-3333-4444-555555555555\n")
    (tmp_path / "sys").mkdir()
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("6,0,0,-;Linux version\n")  # a real kernel numbers records from 0
    paths = f'procfs = "{tmp_path / "proc"}"\nsysfs = "{tmp_path / "sys"}"\nkmsg = "{kmsg}"'
    extra = '[checks.xid]\nsource = "kmsg"\napp_repeat_count = 3\n'
    node = harness(*builtin("xid"), paths=paths, extra=extra)
    clock = Clock()
    engine = _engine(node, clock)
    xid13 = "NVRM: Xid (PCI:0000:3b:00): 13, pid={}, name=train, Graphics Exception: ESR 0x4041b0=0x3f"
    hours_apart = [T0, T0 - DAY, T0 - DAY + 60, T0 + 30 * DAY, T0 + 30 * DAY + 7200, T0 + 30 * DAY + 14400]
    for seq, now in enumerate(hours_apart, start=1):
        clock.now = now
        with kmsg.open("a") as handle:
            handle.write(f"4,{seq},{seq},-;{xid13.format(seq)}\n")
        result = engine.run_checks()
        (finding,) = result.findings
        # Never three within the hour on a sane clock: never a repeat alarm.
        assert (finding.code, finding.status) == ("XID_13", Status.OK), finding.message
        assert finding.details["count"] == seq
    for seq in (7, 8):  # two more processes within the hour: now it is a real repeat
        clock.now += 60
        with kmsg.open("a") as handle:
            handle.write(f"4,{seq},{seq},-;{xid13.format(seq)}\n")
        (finding,) = engine.run_checks().findings
    assert (finding.code, finding.status) == ("XID_13", Status.WARNING)
    fallen = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."
    with kmsg.open("a") as handle:
        handle.write(f"3,9,1,-;{fallen}\n")
    clock.now = T0 - 10 * DAY
    found = {f.code: f for f in engine.run_checks().findings}
    assert found["XID_79"].status is Status.CRITICAL  # a real fault is reported whatever the clock says
    clock.now = T0 + 60 * DAY
    assert {f.code: f.status for f in engine.run_checks().findings}["XID_79"] is Status.CRITICAL  # sticky


def test_pending_action_survives_the_clock_jumping_back(cluster: Any, cut_off: Harness) -> None:
    node = cut_off
    node.faults(("CRITICAL", "INJECTED", "gpu0"))
    now = time.time()
    assert run_pass(node.engine(), tools=PassTools(clock=lambda: now)).action.pending
    # The clock steps back a day and Slurm is reachable again: the retry must not wait a day.
    node.slurm_extra = ""
    outcome = run_pass(node.engine(), tools=PassTools(clock=lambda: now - DAY))
    assert outcome.action.applied, outcome.action.errors
    assert cluster.state("node1") in ("down", "drained")
