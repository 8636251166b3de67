"""The edac check: EDAC counters by their change, machine checks in the kernel log, forged ones ignored."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.checks import FixtureNode
from healthd_testkit.nvml import Clock
from healthd_testkit.paths import FIXTURES
from hypothesis import given
from hypothesis import strategies as st

from healthd.checks.plugin import NotApplicable
from healthd.model import CheckResult, Finding, PassResult, RunState, Status
from healthd.plan.acks import Ack, FindingRef, apply_acks
from healthd_checks.edac.check import CHECK, PATTERNS
from healthd_checks.edac.settings import EdacSettings
from healthd_checks.kernlog import source as kernlog
from healthd_checks.kernlog.events import match_line

BASE = FIXTURES / "sysfs/base"
GPU_NODE = FIXTURES / "procfs/gpu-node"
MCE = FIXTURES / "kernlog/kmsg-mce.txt"
HEALTHY = FIXTURES / "kernlog/kmsg-healthy.txt"


class Node(FixtureNode):
    """Passes of the edac check over a copy of the fixture node's EDAC tree, with a controlled clock."""

    def __init__(self, root: Path, clock: Clock) -> None:
        super().__init__(root, clock)
        self.mc = self.copy(BASE / "devices/system/edac", "sys/devices/system/edac") / "mc"
        self.sysfs = root / "sys"

    def set(self, relative: str, value: int) -> None:
        (self.mc / relative).write_text(f"{value}\n")

    def run(self, kmsg: Path = HEALTHY, **settings: Any) -> list[Finding]:
        edac = EdacSettings(source="kmsg", **settings)
        return self.passes(CHECK, edac, sysfs=self.sysfs, procfs=GPU_NODE, kmsg=kmsg)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path, Clock())


def found(findings: list[Finding]) -> dict[str, Status]:
    return {f"{f.code}@{f.subject}": f.status for f in findings}


def test_healthy_controllers_have_no_findings(node: Node) -> None:
    assert node.run(expect_controllers=2) == []


def test_uncorrected_errors_this_boot_are_critical_and_name_the_dimm(node: Node) -> None:
    node.set("mc1/ue_count", 1)
    node.set("mc1/dimm1/dimm_ue_count", 1)
    (finding,) = node.run()
    assert (finding.code, finding.status, finding.subject) == ("EDAC_UNCORRECTED", Status.CRITICAL, "mc1")
    assert "CPU_SrcID#1_MC#0_Chan#1_DIMM#0 (1)" in finding.message


def test_corrected_errors_are_judged_by_their_rate_per_dimm(node: Node) -> None:
    node.run()
    node.clock.now += 3600
    node.set("mc0/dimm0/dimm_ce_count", 503)  # 500 in an hour: under the limit
    assert node.run() == []
    node.clock.now += 3600
    node.set("mc0/dimm0/dimm_ce_count", 2003)
    (finding,) = node.run()
    assert (finding.code, finding.subject, finding.details["increase"]) == ("EDAC_CORRECTED_RATE", "mc0/dimm0", 1500)
    node.clock.now += 60
    node.set("mc0/dimm0/dimm_ce_count", 5)  # lower: a reset, a new baseline
    assert node.run() == []


def test_a_pass_seconds_after_another_cannot_inflate_the_rate(node: Node) -> None:
    node.run()
    node.clock.now += 5
    node.set("mc0/dimm0/dimm_ce_count", 100)  # 97 in 5 s, judged over rate_window (600 s): 582/h
    assert node.run() == []


def test_machine_checks_in_the_kernel_log_and_no_forgeries(node: Node) -> None:
    assert found(node.run(kmsg=MCE)) == {
        "MCE@cpu12": Status.WARNING,
        "MCE@cpu40": Status.CRITICAL,
        "EDAC_UE_LOGGED@mc1": Status.CRITICAL,
        "MEMORY_FAILURE@memory": Status.WARNING,
        "MCE_MEMORY_UNCORRECTED@memory": Status.CRITICAL,
    }


def test_uncorrected_machine_checks_hold_until_reboot_corrected_ones_do_not(node: Node) -> None:
    node.run(kmsg=MCE, window=60)
    node.clock.now += 61
    assert found(node.run(kmsg=MCE, window=60)) == {
        "MCE@cpu12": Status.OK,
        "MCE@cpu40": Status.CRITICAL,
        "EDAC_UE_LOGGED@mc1": Status.CRITICAL,
        "MEMORY_FAILURE@memory": Status.OK,
        "MCE_MEMORY_UNCORRECTED@memory": Status.CRITICAL,
    }


def test_an_uncorrected_machine_check_after_a_corrected_one_is_a_new_event_no_ack_covers(
    node: Node, tmp_path: Path
) -> None:
    """An acknowledged corrected machine check (``healthd ack``, a resume) never hides an uncorrected one on its CPU."""
    kmsg = tmp_path / "kmsg"
    corrected = "0,7,9500000,-;mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 5: 8c00004000010090\n"
    kmsg.write_text(HEALTHY.read_text() + corrected)
    (first,) = node.run(kmsg=kmsg)
    assert (first.key, first.status) == ("edac/MCE/cpu3", Status.WARNING)
    ack = Ack(FindingRef.of(first), node.clock.now, "cli")
    node.clock.now += 60
    assert apply_acks(_edac_pass(node.run(kmsg=kmsg)), [ack])[0].status is Status.OK
    with kmsg.open("a") as log:
        log.write("0,8,9600000,-;mce: [Hardware Error]: CPU 3: Machine Check Exception: 0 Bank 5: b200000000000005\n")
    node.clock.now += 60
    (worse,) = node.run(kmsg=kmsg)
    assert (worse.key, worse.status, worse.details["count"]) == ("edac/MCE/cpu3", Status.CRITICAL, 2)
    assert worse.details["event"] != first.details["event"], "the line that raised the grade starts a new event"
    # Even an ack that does not know the status it was given at (an old acks.json) does not cover it.
    old = Ack(FindingRef(first.key, str(first.details["event"])), 0.0, "cli")
    for earlier in (ack, old):
        acked, kept = apply_acks(_edac_pass([worse]), [earlier])
        assert acked.status is Status.CRITICAL and kept == ()


def _edac_pass(findings: list[Finding]) -> PassResult:
    return PassResult("n1", 0.0, 0.1, (CheckResult("edac", RunState.RAN, tuple(findings), 0.1),))


def test_no_edac_driver_is_not_applicable_unless_controllers_are_expected(node: Node) -> None:
    shutil.rmtree(node.sysfs / "devices/system/edac")
    with pytest.raises(NotApplicable):
        node.run()
    assert found(node.run(expect_controllers=2)) == {"EDAC_CONTROLLERS_MISSING@edac": Status.UNKNOWN}


def test_without_a_driver_the_log_is_read_once_and_what_is_logged_later_still_counts(
    node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[bytes] = []
    record = kernlog._record

    def spy(head: Any, raw: bytes) -> Any:
        parsed.append(raw)
        return record(head, raw)

    monkeypatch.setattr(kernlog, "_record", spy)
    kmsg = tmp_path / "kmsg"
    shutil.copy(HEALTHY, kmsg)
    shutil.rmtree(node.sysfs / "devices/system/edac")
    with pytest.raises(NotApplicable):
        node.run(kmsg=kmsg)
    assert len(parsed) == len(HEALTHY.read_text().splitlines())
    parsed.clear()
    with pytest.raises(NotApplicable):
        node.run(kmsg=kmsg)
    assert parsed == []  # not applicable, and yet no record parsed twice
    with kmsg.open("a") as log:
        log.write("3,7,9500000,-;mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 5: be00000000800400\n")
        # The same line written by a process (facility user): never a machine check.
        log.write("12,8,9500100,-;mce: [Hardware Error]: CPU 5: Machine Check: 0 Bank 5: be00000000800400\n")
    # The driver is loaded now: the counters are judged, and the machine check logged since is seen.
    shutil.copytree(BASE / "devices/system/edac", node.sysfs / "devices/system/edac")
    assert found(node.run(kmsg=kmsg)) == {"MCE@cpu3": Status.CRITICAL}
    assert len(parsed) == 2


def test_the_longest_task_name_cannot_spell_an_edac_line() -> None:
    assert match_line("EDAC MC0: 1 UE [4711]: segfault at 0 ip 0 sp 0 error 6 in x on y", PATTERNS) is None
    assert match_line("EDAC MC0: 1 UE memory read error on CPU_SrcID#1_MC#0_Chan#1_DIMM#0 (x)", PATTERNS) is not None


def test_unreadable_counter_is_unknown_naming_the_file(node: Node) -> None:
    (node.mc / "mc0/ce_count").write_text("lots\n")
    (finding,) = node.run()
    assert (finding.code, finding.status, finding.subject) == ("EDAC_SYSFS_UNREADABLE", Status.UNKNOWN, "mc0")
    assert "mc0/ce_count" in finding.message


@given(st.integers(0, 2**64 - 1), st.integers(0, 4096), st.integers(0, 63))
def test_mce_grade_follows_the_uc_and_pcc_bits(status: int, cpu: int, bank: int) -> None:
    hit = match_line(f"mce: [Hardware Error]: CPU {cpu}: Machine Check: 0 Bank {bank}: {status:016x}", PATTERNS)
    assert hit is not None and hit.subject == f"cpu{cpu}"
    assert (hit.status is Status.CRITICAL) == bool(status & (1 << 61 | 1 << 57))


@given(st.text(max_size=15), st.text(max_size=200))
def test_a_segfault_report_never_reads_as_a_memory_error(comm: str, filename: str) -> None:
    message = f"{comm}[4711]: segfault at 0 ip 00007f0893980000 sp 00007ffcae9198a8 error 6 in {filename}[0+1000]"
    assert match_line(message, PATTERNS) is None


def test_cli(check_once: Callable[[str, str], dict[str, Any]]) -> None:
    body = f'[paths]\nsysfs = "{BASE}"\nprocfs = "{GPU_NODE}"\nkmsg = "{MCE}"\n[checks.edac]\nsource = "kmsg"\n'
    check = check_once("edac", body)
    assert check["status"] == "CRITICAL"
    assert {f["code"] for f in check["findings"]} >= {"MCE", "EDAC_UE_LOGGED", "MCE_MEMORY_UNCORRECTED"}


@given(
    st.text(max_size=15),
    st.sampled_from(["[4711]: segfault at 0 ip 0 sp 0 error 6 in ", " (4711): drop_caches: "]),
    st.text(),
)
def test_a_task_name_heading_a_kernel_line_never_reads_as_a_memory_error(comm: str, then: str, rest: str) -> None:
    # The kernel puts a task's name (15 characters at most) first in some lines, then "[pid]" or " (pid)".
    assert match_line(f"{comm}{then}{rest}", PATTERNS) is None
