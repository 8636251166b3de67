"""The dcgm check through a stand-in dcgmi (a real program): grading, retries, deadlines, absence, settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from healthd_testkit.checks import check_context
from healthd_testkit.dcgmi import Dcgmi
from pydantic import ValidationError

from healthd.checks.plugin import NotApplicable
from healthd.model import Finding, Status
from healthd_checks.dcgm.check import CHECK, unrecovered
from healthd_checks.dcgm.parse import parse_diag
from healthd_checks.dcgm.settings import DcgmSettings


@pytest.fixture
def dcgmi(tmp_path: Path) -> Dcgmi:
    return Dcgmi(tmp_path)


def graded(findings: list[Finding]) -> set[tuple[Status, str, str]]:
    return {(f.status, f.code, f.subject) for f in findings}


def test_a_passing_diagnostic_reports_nothing_and_runs_once(dcgmi: Dcgmi) -> None:
    dcgmi.prints("level1-pass.json")
    assert dcgmi.run() == []
    assert dcgmi.levels == ["1"]


def test_a_failure_every_run_repeats_is_a_warning_with_the_tests_own_code(dcgmi: Dcgmi) -> None:
    dcgmi.prints("level2-pcie-fail.json", rc=226)  # dcgmi exits non-zero on a failure, and still prints the JSON
    findings = dcgmi.run(level=2)
    assert graded(findings) == {(Status.WARNING, "DCGM_PCIE_FAILED", "GPU 1")}
    assert findings[0].details == {"test": "PCIe", "runs": 2, "failed": 2}
    assert "3.91 GB/s is below the minimum" in findings[0].message
    assert dcgmi.levels == ["2", "2"], "a failure is run again before it counts"


def test_a_failure_that_a_rerun_does_not_repeat_is_only_a_note(dcgmi: Dcgmi) -> None:
    dcgmi.prints("level2-pcie-fail.json", run="run1")
    dcgmi.prints("level2-pass-slow-pcie.json")
    assert graded(dcgmi.run(level=2)) == {(Status.OK, "DCGM_PCIE_RECOVERED", "GPU 1")}
    assert len(dcgmi.levels) == 2


def diagnostic(**statuses: str) -> str:
    """dcgmi's JSON with one result per test, on the GPU its name ends in: ``diagnostic(Memory_0="Fail")``."""
    tests = []
    for name, status in statuses.items():
        test, gpu = name.rsplit("_", 1)
        warnings = [] if status == "Pass" else [f"{test} {status.lower()}ed on GPU {gpu}"]
        tests.append({"name": test, "results": [{"status": status, "gpu_ids": int(gpu), "warnings": warnings}]})
    return json.dumps({"DCGM GPU Diagnostic": {"test_categories": [{"category": "Integration", "tests": tests}]}})


def test_a_failure_first_seen_in_the_last_run_counts(dcgmi: Dcgmi) -> None:
    # The rerun passes Memory but fails PCIe, which nothing ran again: PCIe is not "recovered".
    (dcgmi.root / "run1.json").write_text(diagnostic(Memory_0="Fail", PCIe_1="Pass"))
    (dcgmi.root / "run2.json").write_text(diagnostic(Memory_0="Pass", PCIe_1="Fail"))
    findings = {f.code: f for f in dcgmi.run(retries=1)}
    assert graded(list(findings.values())) == {
        (Status.OK, "DCGM_MEMORY_RECOVERED", "GPU 0"),
        (Status.WARNING, "DCGM_PCIE_FAILED", "GPU 1"),
    }
    assert findings["DCGM_PCIE_FAILED"].message == (
        "DCGM PCIe (Integration) failed in 1 of 2 runs, and no run after its last failure passed it: "
        "PCIe failed on GPU 1"
    )
    assert findings["DCGM_PCIE_FAILED"].details == {"test": "PCIe", "runs": 2, "failed": 1}
    assert len(dcgmi.levels) == 2


def test_retries_go_on_until_every_failure_has_a_later_pass(dcgmi: Dcgmi) -> None:
    (dcgmi.root / "run1.json").write_text(diagnostic(Memory_0="Fail", PCIe_1="Pass"))
    (dcgmi.root / "run2.json").write_text(diagnostic(Memory_0="Pass", PCIe_1="Fail"))
    (dcgmi.root / "run3.json").write_text(diagnostic(Memory_0="Pass", PCIe_1="Warn"))
    (dcgmi.root / "run4.json").write_text(diagnostic(Memory_0="Fail", PCIe_1="Fail"))
    assert graded(dcgmi.run(retries=3, run_timeout=100)) == {
        (Status.OK, "DCGM_MEMORY_RECOVERED", "GPU 0"),
        (Status.OK, "DCGM_PCIE_RECOVERED", "GPU 1"),
        (Status.OK, "DCGM_PCIE_WARN", "GPU 1"),
    }
    assert len(dcgmi.levels) == 3, "no fourth run once every failure has passed since (Warn is DCGM's pass)"


@pytest.mark.parametrize(
    ("statuses", "counted"),
    [
        (["Fail", "Pass"], False),
        (["Fail", "Fail", "Pass"], False),
        (["Fail", "Pass", "Fail"], True),
        (["Pass", "Fail"], True),
        (["Fail", "Skip"], True),
        (["Fail", "Warn"], False),
    ],
)
def test_only_a_later_pass_forgives_a_failure(statuses: list[str], counted: bool) -> None:
    runs = [parse_diag(diagnostic(Memory_0=status), "test") for status in statuses]
    assert unrecovered(runs) == ({("Memory", "0")} if counted else set())


def test_without_retries_one_failure_counts(dcgmi: Dcgmi) -> None:
    dcgmi.prints("level2-pcie-fail.json", run="run1")
    dcgmi.prints("level2-pass-slow-pcie.json")
    assert graded(dcgmi.run(level=2, retries=0)) == {(Status.WARNING, "DCGM_PCIE_FAILED", "GPU 1")}
    assert len(dcgmi.levels) == 1


def test_warn_and_skip_are_notes(dcgmi: Dcgmi) -> None:
    dcgmi.prints("level2-warn-skip.json")
    assert graded(dcgmi.run(level=2)) == {
        (Status.OK, "DCGM_GPU_MEMORY_WARN", "GPU 0"),
        (Status.OK, "DCGM_DIAGNOSTIC_SKIPPED", "GPU 0"),
        (Status.OK, "DCGM_DIAGNOSTIC_SKIPPED", "GPU 1"),
        (Status.OK, "DCGM_INFOROM_SKIPPED", "dcgmi diag"),
    }


def test_pcie_bandwidth_below_the_models_expectation_is_a_warning(dcgmi: Dcgmi) -> None:
    dcgmi.prints("level2-pass-slow-pcie.json")
    assert dcgmi.run(level=2) == [], "nothing is expected of a model the config does not name"
    expected = {"2330": {"pcie_bandwidth_gbps_min": 20.0}}
    (finding,) = dcgmi.run(level=2, expected=expected)
    assert (finding.status, finding.code, finding.subject) == (Status.WARNING, "DCGM_PCIE_BANDWIDTH_LOW", "GPU 1")
    assert finding.details == {"gbps": 11.5, "expected": 20.0}
    assert dcgmi.run(level=2, expected={"2331": {"pcie_bandwidth_gbps_min": 20.0}}) == []


def test_output_that_is_not_dcgmis_json_is_unknown(dcgmi: Dcgmi) -> None:
    dcgmi.prints_text('{"DCGM GPU Diagnostic": {"test_categories": "none"}}')
    (finding,) = dcgmi.run()
    assert (finding.status, finding.code) == (Status.UNKNOWN, "DCGM_MALFORMED")
    assert "test_categories is not a list" in finding.message
    dcgmi.prints_text("Error: unable to connect to host engine\n", rc=1)
    (finding,) = dcgmi.run()
    assert (finding.status, finding.code) == (Status.UNKNOWN, "DCGM_FAILED")
    assert "unable to connect to host engine" in finding.message


def test_a_hung_dcgmi_is_unknown_and_not_started_twice(dcgmi: Dcgmi) -> None:
    dcgmi.prints("level1-pass.json")
    (dcgmi.root / "sleep").write_text("30")
    (finding,) = dcgmi.run(run_timeout=0.5)
    assert (finding.status, finding.code) == (Status.UNKNOWN, "DCGM_TIMEOUT")
    assert dcgmi.levels == ["1"]


def test_not_applicable_without_dcgmi(tmp_path: Path) -> None:
    ctx = check_context("dcgm", DcgmSettings(dcgmi=tmp_path / "dcgmi"), tmp_path)
    with pytest.raises(NotApplicable, match="no dcgmi at"):
        list(CHECK.run(ctx))


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        ({"dcgmi": "dcgmi"}, "must be an absolute path"),
        ({"level": 3}, "level"),
        ({"retries": 2, "run_timeout": 250}, "3 runs of run_timeout = 250s do not fit in timeout = 600s"),
        ({"expected": {"H100": {"pcie_bandwidth_gbps_min": 20}}}, "'H100' is not a PCI device ID"),
        ({"expected": {"2330": {"memory_gbps": 1}}}, "memory_gbps"),
    ],
)
def test_bad_settings_are_named(settings: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ValidationError, match=complaint):
        DcgmSettings(**settings)


def test_the_check_is_active() -> None:
    assert CHECK.active
