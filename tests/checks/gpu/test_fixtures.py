"""Every fixture snapshot, through the check's run() and through the real command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.paths import FIXTURES as ALL_FIXTURES

from healthd.checks.plugin import NotApplicable
from healthd.cli import main as cli
from healthd.model import Status
from healthd_checks.gpu.check import CHECK
from healthd_checks.nvml.snapshot import SnapshotFile

FIXTURES = ALL_FIXTURES / "nvml"
run = CHECK.run
SYSFS_H100 = ALL_FIXTURES / "sysfs-h100"

CASES = [
    ("h100-healthy", []),
    (
        "h100-ecc-uncorrected",
        [("ECC_UNCORRECTED", Status.WARNING, "gpu2"), ("ROW_REMAP_PENDING", Status.WARNING, "gpu2")],
    ),
    ("h100-row-remap-pending", [("ROW_REMAP_PENDING", Status.WARNING, "gpu5")]),
    ("h100-row-remap-failed", [("ROW_REMAP_FAILED", Status.CRITICAL, "gpu6")]),
    ("h100-gpu-lost", [("GPU_LOST", Status.CRITICAL, "gpu3")]),
    ("h100-pcie-x8", [("PCIE_WIDTH_DEGRADED", Status.CRITICAL, "gpu1")]),
    ("h100-gpu-missing", [("GPU_MISSING", Status.CRITICAL, "gpus")]),
    ("h100-no-driver", [("NVML_UNAVAILABLE", Status.CRITICAL, "nvml")]),
    # Fabric registration is the nvlink check's (tests/checks/nvlink); the gpu check leaves it alone.
    ("h100-fabric-not-started", []),
    ("h100-fabric-failed", []),
]


@pytest.mark.parametrize(("name", "expected"), CASES, ids=[c[0] for c in CASES])
def test_fixture_gives_its_findings(make_ctx: Callable[..., Any], name: str, expected: list[Any]) -> None:
    findings = list(run(make_ctx(snapshot=FIXTURES / f"{name}.json")))
    assert sorted((f.code, f.status, f.subject) for f in findings) == sorted(expected)


def test_every_fixture_is_covered_and_says_it_is_modelled() -> None:
    names = {p.stem for p in FIXTURES.glob("*.json")}
    assert names == {c[0] for c in CASES}
    for name in names:
        document = json.loads((FIXTURES / f"{name}.json").read_text())
        assert "modelled, not recorded" in document["source"]
        SnapshotFile(FIXTURES / f"{name}.json").read()


def test_gpu_findings_carry_uuid_and_bus_id(make_ctx: Callable[..., Any]) -> None:
    (finding,) = run(make_ctx(snapshot=FIXTURES / "h100-pcie-x8.json"))
    assert finding.details["pci_bus_id"] == "00000000:2A:00.0"
    assert str(finding.details["uuid"]).startswith("GPU-")
    assert finding.details["width"] == 8 and finding.details["width_max"] == 16


def test_missing_gpu_names_the_bus_id_nvml_does_not_see(make_ctx: Callable[..., Any]) -> None:
    (finding,) = run(make_ctx(snapshot=FIXTURES / "h100-gpu-missing.json"))
    assert finding.details["nvml_count"] == 7
    assert finding.details["pci_count"] == 8
    assert finding.details["unseen_pci_bus_ids"] == "0000:9a:00.0"


def test_missing_gpu_found_from_the_pci_bus_alone(make_ctx: Callable[..., Any]) -> None:
    findings = list(run(make_ctx(gpus=None, snapshot=FIXTURES / "h100-gpu-missing.json")))
    assert [(f.code, f.status) for f in findings] == [("GPU_MISSING", Status.CRITICAL)]


def test_no_driver_and_nothing_expected_is_not_applicable(make_ctx: Callable[..., Any], tmp_path: Path) -> None:
    ctx = make_ctx(gpus=None, sysfs=tmp_path / "empty-sysfs", snapshot=FIXTURES / "h100-no-driver.json")
    with pytest.raises(NotApplicable, match="LIBRARY_NOT_FOUND"):
        run(ctx)


def test_no_driver_but_gpus_on_the_bus_is_critical(make_ctx: Callable[..., Any]) -> None:
    findings = list(run(make_ctx(gpus=None, snapshot=FIXTURES / "h100-no-driver.json")))
    assert [(f.code, f.status, f.details["pci_count"]) for f in findings] == [("NVML_UNAVAILABLE", Status.CRITICAL, 8)]


def _config(tmp_path: Path, snapshot: str, gpus: int = 8) -> Path:
    config = tmp_path / "healthd.toml"
    config.write_text(
        f'[paths]\nsysfs = "{SYSFS_H100}"\nstate_dir = "{tmp_path / "state"}"\n[slurm]\nenabled = false\n'
        f'[checks.gpu]\nexpect_gpus = {gpus}\nsnapshot = "{FIXTURES / snapshot}"\n'
    )
    return config


@pytest.mark.parametrize(
    ("snapshot", "exit_code", "codes"),
    [
        ("h100-healthy.json", 0, []),
        ("h100-gpu-lost.json", 2, ["GPU_LOST"]),
        ("h100-no-driver.json", 2, ["NVML_UNAVAILABLE"]),
    ],
)
def test_check_once_json_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], snapshot: str, exit_code: int, codes: list[str]
) -> None:
    rc = cli.main(["check", "--once", "--json", "--only", "gpu", "--config", str(_config(tmp_path, snapshot))])
    document = json.loads(capsys.readouterr().out)
    assert rc == exit_code == document["exit_code"]
    (gpu,) = document["checks"]
    assert gpu["name"] == "gpu" and gpu["state"] == "ran"
    assert [f["code"] for f in gpu["findings"]] == codes
    if codes == ["GPU_LOST"]:
        assert gpu["findings"][0]["subject"] == "gpu3"
        assert gpu["findings"][0]["status"] == "CRITICAL"


def test_bad_snapshot_is_unknown_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "healthd-nvml-snapshot", "version": 1, "source": "x", "gpus": "no"}')
    config = _config(tmp_path, "h100-healthy.json")
    config.write_text(config.read_text().replace(str(FIXTURES / "h100-healthy.json"), str(bad)))
    rc = cli.main(["check", "--once", "--json", "--only", "gpu", "--config", str(config)])
    (finding,) = json.loads(capsys.readouterr().out)["checks"][0]["findings"]
    assert rc == 3
    assert finding["code"] == "NVML_SNAPSHOT_INVALID"
    assert str(bad) in finding["message"] and "gpus" in finding["message"]


def test_min_gpus_fails_a_node_without_driver_or_gpus_as_nhcs_gpu_health_checks_do(
    make_ctx: Callable[..., Any], tmp_path: Path
) -> None:
    # NHC's check_nvsmi_healthmon fails where nvidia-smi finds no GPU; min_gpus = 1 says the same.
    empty = tmp_path / "empty-sysfs"
    findings = list(run(make_ctx(gpus=None, sysfs=empty, snapshot=FIXTURES / "h100-no-driver.json", min_gpus=1)))
    assert [(f.code, f.status) for f in findings] == [("NVML_UNAVAILABLE", Status.CRITICAL)]


def test_min_gpus_is_a_floor_not_a_count(make_ctx: Callable[..., Any]) -> None:
    assert list(run(make_ctx(gpus=None, snapshot=FIXTURES / "h100-healthy.json", min_gpus=1))) == []
    findings = list(run(make_ctx(gpus=None, snapshot=FIXTURES / "h100-gpu-missing.json", min_gpus=8)))
    assert [(f.code, f.details["nvml_count"]) for f in findings] == [("GPU_MISSING", 7)]
    assert "at least 8 expected" in findings[0].message
