"""The ipmi check: new SEL records since the last pass, graded by description, through a stand-in ipmitool."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from healthd_testkit.checks import FixtureNode
from healthd_testkit.nvml import Clock
from healthd_testkit.paths import FIXTURES
from hypothesis import given
from hypothesis import strategies as st

from healthd.checks.plugin import NotApplicable
from healthd.model import Finding, Status
from healthd_checks.ipmi.check import CHECK, grade, parse_sel_line
from healthd_checks.ipmi.settings import IpmiSettings

IPMI = FIXTURES / "ipmi"
GPU_NODE = FIXTURES / "procfs/gpu-node"


class Bmc(FixtureNode):
    """A stand-in ipmitool (a real program) printing whichever SEL the test puts in place."""

    def __init__(self, root: Path, clock: Clock) -> None:
        super().__init__(root, clock)
        self.sel = root / "sel.txt"
        shutil.copy(IPMI / "sel-elist.txt", self.sel)
        self.tool = self.program("ipmitool", f'[ "$1 $2" = "sel elist" ] || exit 1\nexec cat "{self.sel}"')
        self.procfs = self.copy(GPU_NODE / "sys", "proc/sys").parent

    def run(self, **settings: Any) -> list[Finding]:
        settings = {"ipmitool": self.tool, "device": IPMI / "ipmi0", **settings}
        return self.passes(CHECK, IpmiSettings(**settings), procfs=self.procfs)


@pytest.fixture
def bmc(tmp_path: Path) -> Bmc:
    return Bmc(tmp_path, Clock())


def found(findings: list[Finding]) -> dict[str, tuple[Status, Any]]:
    return {f.subject: (f.status, f.details["count"]) for f in findings}


def test_old_events_are_a_baseline_new_ones_are_graded(bmc: Bmc) -> None:
    assert bmc.run() == []  # the first pass only takes the baseline: a SEL holds months of history
    shutil.copy(IPMI / "sel-elist-failing.txt", bmc.sel)
    assert found(bmc.run()) == {
        "Memory #0x87: Uncorrectable ECC (@DIMM B3(CPU1))": (Status.CRITICAL, 1),
        "Processor CPU1_Status: IERR": (Status.CRITICAL, 1),
        "Power Supply PS2 Status: Power Supply AC lost": (Status.WARNING, 1),
        "Power Supply PS2 Status: Predictive failure": (Status.WARNING, 1),
    }
    assert len(bmc.run()) == 4  # reported again, not counted again


def test_a_first_pass_on_a_failing_sel_reports_nothing(bmc: Bmc) -> None:
    shutil.copy(IPMI / "sel-elist-failing.txt", bmc.sel)
    assert bmc.run() == []


def test_warnings_pass_after_the_window_criticals_after_a_reboot(bmc: Bmc) -> None:
    bmc.run()
    shutil.copy(IPMI / "sel-elist-failing.txt", bmc.sel)
    bmc.run(window=60)
    bmc.clock.now += 61
    assert {s for s, _ in found(bmc.run(window=60)).values()} == {Status.CRITICAL}
    (bmc.procfs / "sys/kernel/random/boot_id").write_text("0b1f6a4e-1d2c-4e5f-8a9b-0c1d2e3f4a5b\n")
    assert bmc.run(window=60) == []


def test_a_cleared_sel_makes_every_record_new(bmc: Bmc) -> None:
    shutil.copy(IPMI / "sel-elist-failing.txt", bmc.sel)
    bmc.run()
    bmc.sel.write_text("   1 | 07/01/2025 | 01:00:00 | Processor CPU0_Status | Thermal Trip | Asserted\n")
    assert found(bmc.run()) == {"Processor CPU0_Status: Thermal Trip": (Status.CRITICAL, 1)}


# ipmitool's threshold event table (lib/ipmi_sel.c, generic event type 01h, IPMI 2.0 table 42-2),
# verbatim: the "going low" entries carry a trailing space.
THRESHOLDS = [
    ("Lower Non-critical going low ", None),
    ("Lower Non-critical going high", None),
    ("Lower Critical going low ", Status.WARNING),
    ("Lower Critical going high", Status.WARNING),
    ("Lower Non-recoverable going low ", Status.CRITICAL),
    ("Lower Non-recoverable going high", Status.CRITICAL),
    ("Upper Non-critical going low ", None),
    ("Upper Non-critical going high", None),
    ("Upper Critical going low ", Status.WARNING),
    ("Upper Critical going high", Status.WARNING),
    ("Upper Non-recoverable going low ", Status.CRITICAL),
    ("Upper Non-recoverable going high", Status.CRITICAL),
]


@pytest.mark.parametrize(("description", "expected"), THRESHOLDS)
def test_each_threshold_crossing_has_the_documented_grade(description: str, expected: Optional[Status]) -> None:
    line = f"  2a | 05/20/2025 | 10:00:00 | Temp Inlet | {description} | Asserted | Reading 48 > Threshold 45"
    record = parse_sel_line(line)
    assert record is not None and record.description == description.strip()
    assert grade(record) is expected
    assert grade(record._replace(asserted=False)) is None


def test_a_non_critical_crossing_is_not_reported(bmc: Bmc) -> None:
    bmc.run()
    with bmc.sel.open("a") as sel:
        sel.write("  7f | 05/20/2025 | 10:00:00 | Temperature Inlet_Temp | Upper Non-critical going high | Asserted\n")
        sel.write("  80 | 05/20/2025 | 10:00:05 | Fan FAN3 | Lower Non-critical going low  | Asserted\n")
        sel.write("  81 | 05/20/2025 | 10:00:09 | Temperature CPU0_Temp | Upper Critical going high | Asserted\n")
    assert found(bmc.run()) == {"Temperature CPU0_Temp: Upper Critical going high": (Status.WARNING, 1)}


def test_without_ipmitool_or_a_bmc_it_is_not_applicable(bmc: Bmc, tmp_path: Path) -> None:
    with pytest.raises(NotApplicable, match="no ipmitool"):
        bmc.run(ipmitool=tmp_path / "absent")
    with pytest.raises(NotApplicable, match="no BMC device"):
        bmc.run(device=tmp_path / "ipmi0")


def test_failing_ipmitool_is_unknown(bmc: Bmc) -> None:
    bmc.tool.write_text("#!/bin/sh\necho 'Could not open device at /dev/ipmi0: No such device' >&2\nexit 1\n")
    (finding,) = bmc.run()
    assert (finding.code, finding.status) == ("IPMI_SEL_FAILED", Status.UNKNOWN)
    assert "Could not open device" in finding.message


def test_relative_paths_are_refused() -> None:
    with pytest.raises(ValueError, match="absolute"):
        IpmiSettings(ipmitool=Path("ipmitool"))


@given(
    st.integers(0, 0xFFFF),
    st.text(max_size=40).filter(lambda t: "|" not in t),
    st.text(max_size=60).filter(lambda t: "|" not in t),
    st.sampled_from(["Asserted", "Deasserted"]),
)
def test_sel_lines_parse(record_id: int, sensor: str, description: str, direction: str) -> None:
    record = parse_sel_line(f"{record_id:4x} | 06/02/2025 | 03:41:27 | {sensor} | {description} | {direction}")
    assert record is not None and record.record_id == record_id
    assert record.asserted == (direction == "Asserted")
    assert "\n" not in record.sensor + record.description


@given(st.text(max_size=200))
def test_sel_parser_never_raises(line: str) -> None:
    parse_sel_line(line)


def test_cli(check_once: Callable[[str, str], dict[str, Any]]) -> None:
    tool, device = IPMI / "ipmitool", IPMI / "ipmi0"
    body = f'[paths]\nprocfs = "{GPU_NODE}"\n[checks.ipmi]\nipmitool = "{tool}"\ndevice = "{device}"\n'
    check = check_once("ipmi", body)
    assert (check["state"], check["status"], check["findings"]) == ("ran", "OK", [])
