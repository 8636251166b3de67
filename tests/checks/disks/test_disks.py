"""The disks check: NVMe state and SMART through a real program standing in for nvme-cli, block I/O errors."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.checks import FixtureNode
from healthd_testkit.nvml import Clock
from healthd_testkit.paths import FIXTURES
from hypothesis import given
from hypothesis import strategies as st

from healthd.checks.plugin import NotApplicable
from healthd.model import Finding, Status
from healthd.store.state import StateFile
from healthd_checks.disks.check import CHECK, PATTERNS, parse_smart_log
from healthd_checks.disks.settings import DisksSettings
from healthd_checks.kernlog.events import match_line

BASE = FIXTURES / "sysfs/base"
GPU_NODE = FIXTURES / "procfs/gpu-node"
NVME = FIXTURES / "nvme"
DISK_LOG = FIXTURES / "kernlog/kmsg-disk.txt"
HEALTHY_LOG = FIXTURES / "kernlog/kmsg-healthy.txt"
HEALTHY_SMART = json.loads((NVME / "smart-log-healthy.json").read_text())


class Node(FixtureNode):
    """A copy of the fixture node's NVMe controllers and a stand-in nvme-cli whose answer per drive a test sets."""

    def __init__(self, root: Path, clock: Clock) -> None:
        super().__init__(root, clock)
        self.sysfs = self.copy(BASE / "class/nvme", "sys/class/nvme").parents[1]
        self.answers = root / "answers"
        self.answers.mkdir()
        for name in ("nvme0", "nvme1"):
            self.answer(name, HEALTHY_SMART)
        # A real program: prints the answer file named after the device, as nvme-cli prints the drive's log.
        self.cli = self.program("nvme", f'exec cat "{self.answers}/$(basename "$2").json"')

    def answer(self, name: str, document: Any) -> None:
        (self.answers / f"{name}.json").write_text(json.dumps(document))

    def run(self, kmsg: Path = HEALTHY_LOG, **settings: Any) -> list[Finding]:
        settings.setdefault("nvme_cli", self.cli)
        disks = DisksSettings(source="kmsg", **settings)
        return self.passes(CHECK, disks, sysfs=self.sysfs, procfs=GPU_NODE, kmsg=kmsg)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path, Clock())


def found(findings: list[Finding]) -> list[tuple[str, Status, str]]:
    return sorted(((f.code, f.status, f.subject) for f in findings), key=lambda t: (t[0], t[2]))


def test_healthy_drives(node: Node) -> None:
    assert node.run(expect_nvme=2) == []


def test_critical_warning_bits_are_named(node: Node) -> None:
    node.answer("nvme1", json.loads((NVME / "smart-log-failing.json").read_text()))
    (finding,) = node.run()
    assert (finding.code, finding.status, finding.subject) == ("NVME_CRITICAL_WARNING", Status.CRITICAL, "nvme1")
    assert finding.message.endswith(
        "0x0d: available spare below its threshold; reliability degraded by media or internal errors; "
        "media placed in read-only mode"
    )


def test_media_errors_count_by_their_rise_across_reboots(node: Node) -> None:
    node.answer("nvme0", {**HEALTHY_SMART, "media_errors": 5})
    assert node.run() == []  # a first reading is a baseline
    node.answer("nvme0", {**HEALTHY_SMART, "media_errors": 9})
    (finding,) = node.run()
    assert (finding.code, finding.subject, finding.details["increase"]) == ("NVME_MEDIA_ERRORS", "nvme0", 4)
    assert node.run() == []


def test_dead_and_resetting_controllers(node: Node) -> None:
    (node.sysfs / "class/nvme/nvme0/state").write_text("dead\n")
    (node.sysfs / "class/nvme/nvme1/state").write_text("resetting\n")
    assert found(node.run()) == [
        ("NVME_CONTROLLER_STATE", Status.CRITICAL, "nvme0"),
        ("NVME_CONTROLLER_STATE", Status.WARNING, "nvme1"),
    ]


def test_without_nvme_cli_smart_is_not_read_and_a_missing_drive_still_counts(node: Node, tmp_path: Path) -> None:
    shutil.rmtree(node.sysfs / "class/nvme/nvme1")
    assert found(node.run(nvme_cli=tmp_path / "absent", expect_nvme=2)) == [("NVME_MISSING", Status.CRITICAL, "nvme")]


def test_no_nvme_is_not_applicable_and_keeps_its_place_in_the_kernel_log(node: Node) -> None:
    shutil.rmtree(node.sysfs / "class/nvme")
    with pytest.raises(NotApplicable):
        node.run()
    # The next pass reads only the records after the last one of the fixture log.
    last = HEALTHY_LOG.read_text().splitlines()[-1].split(",")[1]
    log = StateFile(node.root / "state", "check-disks").load()["log"]
    assert (log["source"], log["cursor"], log["groups"]) == ("kmsg", last, {})


def test_bad_answers_are_unknown(node: Node) -> None:
    node.answer("nvme0", {"critical_warning": "lots", "media_errors": 0})
    (node.answers / "nvme1.json").unlink()
    assert found(node.run()) == [
        ("NVME_SMART_FAILED", Status.UNKNOWN, "nvme1"),
        ("NVME_SMART_MALFORMED", Status.UNKNOWN, "nvme0"),
    ]


def test_a_hung_nvme_cli_times_out_and_is_not_started_again(node: Node) -> None:
    node.cli.write_text("#!/bin/sh\nexec sleep 30\n")
    started = time.monotonic()
    assert {code for code, _, _ in found(node.run(smart_timeout=0.3))} == {"NVME_SMART_TIMEOUT"}
    assert time.monotonic() - started < 5
    hung = node.memory["program:nvme0"]
    hung.wait(5)  # the process group was killed; a program stuck in the kernel would still be here
    assert hung.returncode is not None


def test_a_program_others_can_write_is_refused(node: Node) -> None:
    os.chmod(node.cli, 0o777)
    assert {code for code, _, _ in found(node.run())} == {"NVME_SMART_UNTRUSTED"}


def test_relative_nvme_cli_is_refused() -> None:
    with pytest.raises(ValueError, match="absolute"):
        DisksSettings(nvme_cli=Path("nvme"))


def test_block_errors_in_the_kernel_log_and_no_forgeries(node: Node) -> None:
    findings = node.run(kmsg=DISK_LOG)
    assert found(findings) == [
        ("BLOCK_IO_ERROR", Status.WARNING, "nvme1n1"),
        ("BUFFER_IO_ERROR", Status.WARNING, "nvme1n1p1"),
    ]
    (block,) = [f for f in findings if f.code == "BLOCK_IO_ERROR"]
    assert block.details["count"] == 2


@given(
    st.text(max_size=15),
    st.sampled_from(["[4711]: segfault at 0 ip 0 sp 0 error 6 in ", " (4711): drop_caches: "]),
    st.text(),
)
def test_a_task_name_heading_a_kernel_line_never_reads_as_a_disk_error(comm: str, then: str, rest: str) -> None:
    assert match_line(f"{comm}{then}{rest}", PATTERNS) is None


SMART = st.fixed_dictionaries(
    {"critical_warning": st.integers(0, 255), "media_errors": st.integers(0, 2**128 - 1)},
    optional={"avail_spare": st.integers(0, 100), "percent_used": st.integers(0, 255)},
)


@given(SMART)
def test_smart_log_parses_what_nvme_cli_prints(document: dict[str, int]) -> None:
    parsed = parse_smart_log(json.dumps(document), "x")
    assert (parsed.critical_warning, parsed.media_errors) == (document["critical_warning"], document["media_errors"])
    assert parsed.available_spare == document.get("avail_spare")


@given(st.text(max_size=200))
def test_smart_log_parser_fails_only_with_valueerror_naming_the_source(text: str) -> None:
    try:
        parse_smart_log(text, "SRC")
    except ValueError as exc:
        assert str(exc).startswith("SRC: ")


def test_cli_on_the_fixture_node(check_outcome: Callable[[str, str], tuple[str, set[str]]]) -> None:
    body = (
        f'[paths]\nsysfs = "{BASE}"\nprocfs = "{GPU_NODE}"\nkmsg = "{DISK_LOG}"\n'
        f'[checks.disks]\nsource = "kmsg"\nnvme_cli = "{NVME / "nvme"}"\nexpect_nvme = 2\n'
    )
    assert check_outcome("disks", body) == ("WARNING", {"BLOCK_IO_ERROR", "BUFFER_IO_ERROR"})
