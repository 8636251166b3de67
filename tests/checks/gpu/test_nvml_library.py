"""The real-library path (NvmlLibrary) with pynvml's functions replaced at the boundary."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import pynvml
import pytest

from healthd.checks.plugin import NotApplicable
from healthd.cli import main as cli
from healthd.model import Status
from healthd_checks.gpu.check import CHECK
from healthd_checks.nvml.snapshot import SnapshotFile
from healthd_checks.nvml.source import NvmlError, NvmlLibrary, RemappedRows

run = CHECK.run


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def test_library_not_found_is_recorded_not_raised(mocker: Any) -> None:
    mocker.patch.object(pynvml, "nvmlInit", side_effect=_error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    reading = NvmlLibrary().read()
    assert reading.init_error == NvmlError("LIBRARY_NOT_FOUND", "NVML Shared Library Not Found")
    assert reading.gpus == ()


def _nvml_library_loads() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_nvml_library_loads(), reason="libnvidia-ml.so.1 loads: this machine has an NVIDIA driver")
def test_unpatched_library_on_this_machine_has_no_driver() -> None:
    # No NVIDIA driver here: the genuine binding fails in nvmlInit, and we say so.
    reading = NvmlLibrary().read()
    assert reading.init_error is not None
    assert reading.init_error.code in {"LIBRARY_NOT_FOUND", "DRIVER_NOT_LOADED"}


def test_library_not_found_with_gpus_expected_is_critical(mocker: Any, make_ctx: Callable[..., Any]) -> None:
    mocker.patch.object(pynvml, "nvmlInit", side_effect=_error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    (finding,) = run(make_ctx())
    assert (finding.code, finding.status, finding.subject) == ("NVML_UNAVAILABLE", Status.CRITICAL, "nvml")
    assert finding.details["nvml_error"] == "LIBRARY_NOT_FOUND"


def test_library_not_found_and_nothing_expected_is_not_applicable(
    mocker: Any, make_ctx: Callable[..., Any], tmp_path: Path
) -> None:
    mocker.patch.object(pynvml, "nvmlInit", side_effect=_error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    with pytest.raises(NotApplicable):
        run(make_ctx(gpus=0, sysfs=tmp_path))


def test_rm_version_mismatch_is_critical(mocker: Any, make_ctx: Callable[..., Any]) -> None:
    mocker.patch.object(pynvml, "nvmlInit", side_effect=_error(pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH))
    (finding,) = run(make_ctx())
    assert (finding.code, finding.status) == ("NVML_VERSION_MISMATCH", Status.CRITICAL)


def test_healthy_node_reads_every_field(fake_nvml: Any, make_ctx: Callable[..., Any]) -> None:
    reading = NvmlLibrary().read()
    assert reading.init_error is None and reading.device_count == 8 and reading.driver_version == "550.54.15"
    gpu = reading.gpus[1]
    assert gpu.uuid == "GPU-00000001-1111-2222-3333-444455556666"
    assert gpu.pci_bus_id == "00000000:2A:00.0"
    assert gpu.ecc_mode_current is True and gpu.ecc_volatile_uncorrected == 0
    assert gpu.remapped_rows == RemappedRows(0, 0, False, False)
    assert gpu.retired_pages_pending == NvmlError("NOT_SUPPORTED", "Not Supported")
    assert gpu.utilization_gpu == 90 and gpu.recovery_action == 0
    assert not isinstance(gpu.nvlinks, NvmlError) and len(gpu.nvlinks) == 18
    assert fake_nvml.shutdowns == 1
    assert list(run(make_ctx())) == []


def test_gpu_is_lost_on_one_handle(fake_nvml: Any, make_ctx: Callable[..., Any]) -> None:
    fake_nvml.handle_errors[3] = _error(pynvml.NVML_ERROR_GPU_IS_LOST)
    reading = NvmlLibrary().read()
    assert reading.gpus[3].uuid == NvmlError("GPU_IS_LOST", "GPU is lost")
    assert reading.gpus[3].nvlinks == NvmlError("GPU_IS_LOST", "GPU is lost")
    assert reading.gpus[4].uuid == "GPU-00000004-1111-2222-3333-444455556666"
    findings = list(run(make_ctx()))
    assert [(f.code, f.status, f.subject) for f in findings] == [("GPU_LOST", Status.CRITICAL, "gpu3")]


@pytest.mark.parametrize(
    ("error", "code", "status"),
    [
        # NVML's nvmlReturn_t: "a device's external power cables are not properly attached".
        (pynvml.NVML_ERROR_INSUFFICIENT_POWER, "GPU_INSUFFICIENT_POWER", Status.CRITICAL),
        (pynvml.NVML_ERROR_IRQ_ISSUE, "GPU_IRQ_ISSUE", Status.CRITICAL),
        (pynvml.NVML_ERROR_RESET_REQUIRED, "GPU_RESET_REQUIRED", Status.CRITICAL),
        # Codes that mean "not offered" for one reading must not hide a whole GPU.
        (pynvml.NVML_ERROR_INVALID_ARGUMENT, "GPU_HANDLE_ERROR", Status.UNKNOWN),
        (pynvml.NVML_ERROR_NOT_FOUND, "GPU_HANDLE_ERROR", Status.UNKNOWN),
        (pynvml.NVML_ERROR_NO_PERMISSION, "GPU_HANDLE_ERROR", Status.UNKNOWN),
    ],
)
def test_a_gpu_nvml_cannot_open_is_one_finding_of_its_own(
    fake_nvml: Any, make_ctx: Callable[..., Any], error: int, code: str, status: Status
) -> None:
    fake_nvml.handle_errors[3] = _error(error)
    name = NvmlLibrary().read().gpus[3].handle_error
    assert name is not None
    (finding,) = run(make_ctx())
    assert (finding.code, finding.status, finding.subject) == (code, status, "gpu3")
    assert finding.details["nvml_error"] == name.code
    assert "remedy" not in finding.details  # no PCI address to reset, and power cables need a person


def test_gpu_lost_after_the_handle_was_obtained(fake_nvml: Any, make_ctx: Callable[..., Any]) -> None:
    lost = _error(pynvml.NVML_ERROR_GPU_IS_LOST)
    fake_nvml.gpus[6] = {name: lost for name in fake_nvml.gpus[6]}
    findings = list(run(make_ctx()))
    assert [(f.code, f.subject) for f in findings] == [("GPU_LOST", "gpu6")]


def test_reset_required_is_critical(fake_nvml: Any, make_ctx: Callable[..., Any]) -> None:
    fake_nvml.gpus[0]["nvmlDeviceGetRemappedRows"] = _error(pynvml.NVML_ERROR_RESET_REQUIRED)
    (finding,) = run(make_ctx())
    assert (finding.code, finding.status, finding.subject) == ("GPU_RESET_REQUIRED", Status.CRITICAL, "gpu0")


def test_an_interrupt_issue_on_an_opened_gpu_is_critical_too(fake_nvml: Any, make_ctx: Callable[..., Any]) -> None:
    fake_nvml.gpus[2]["nvmlDeviceGetRemappedRows"] = _error(pynvml.NVML_ERROR_IRQ_ISSUE)
    (finding,) = run(make_ctx())
    assert (finding.code, finding.status, finding.subject) == ("GPU_IRQ_ISSUE", Status.CRITICAL, "gpu2")


def test_not_supported_fields_are_not_findings(fake_nvml: Any, make_ctx: Callable[..., Any]) -> None:
    not_supported = _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
    unsupported = (
        "nvmlDeviceGetEccMode",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetPcieReplayCounter",
        "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetFieldValues",
        "nvmlDeviceGetTotalEccErrors",
    )
    for name in unsupported:
        fake_nvml.gpus[2][name] = not_supported
    reading = NvmlLibrary().read()
    assert reading.gpus[2].ecc_mode_current == NvmlError("NOT_SUPPORTED", "Not Supported")
    assert reading.gpus[2].nvlinks == ()
    assert list(run(make_ctx())) == []


def test_other_read_errors_are_unknown(fake_nvml: Any, make_ctx: Callable[..., Any]) -> None:
    fake_nvml.gpus[4]["nvmlDeviceGetPcieReplayCounter"] = _error(pynvml.NVML_ERROR_NO_PERMISSION)
    (finding,) = run(make_ctx())
    assert (finding.code, finding.status, finding.subject) == ("NVML_READ_ERROR", Status.UNKNOWN, "gpu4")
    assert finding.details["fields"] == "pcie_replay_counter"


def test_old_binding_without_event_reasons_falls_back(fake_nvml: Any, mocker: Any) -> None:
    mocker.patch.object(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", new=None)
    mocker.patch.object(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", side_effect=lambda h: 0x48)
    assert NvmlLibrary().read().gpus[0].clock_event_reasons == 0x48


def test_recovery_action_field(fake_nvml: Any, make_ctx: Callable[..., Any]) -> None:
    fake_nvml.gpus[7]["nvmlDeviceGetFieldValues"] = lambda ids: [
        SimpleNamespace(nvmlReturn=pynvml.NVML_SUCCESS, value=SimpleNamespace(uiVal=2))
    ]
    fake_nvml.gpus[6]["nvmlDeviceGetFieldValues"] = lambda ids: [
        SimpleNamespace(nvmlReturn=pynvml.NVML_ERROR_NOT_SUPPORTED, value=SimpleNamespace(uiVal=0))
    ]
    reading = NvmlLibrary().read()
    assert reading.gpus[6].recovery_action == NvmlError("NOT_SUPPORTED", "field 230 returned NOT_SUPPORTED")
    (finding,) = run(make_ctx())
    assert (finding.code, finding.status, finding.subject) == ("GPU_RECOVERY_ACTION", Status.CRITICAL, "gpu7")
    assert finding.details["action"] == "node_reboot"


def test_vbios_version_is_read(fake_nvml: Any, make_ctx: Callable[..., Any]) -> None:
    fake_nvml.gpus[3]["nvmlDeviceGetVbiosVersion"] = b"96.00.61.00.01"
    reading = NvmlLibrary().read()
    assert reading.gpus[3].vbios_version == "96.00.61.00.01"
    assert reading.gpus[0].vbios_version == "96.00.99.00.01"
    (finding,) = run(make_ctx(expect_vbios=["96.00.99.00.01"]))
    assert (finding.code, finding.status, finding.subject) == ("VBIOS_VERSION", Status.WARNING, "gpu3")
    assert finding.details["found"] == "96.00.61.00.01"


def test_record_gpus_round_trip(fake_nvml: Any, tmp_path: Path, make_ctx: Callable[..., Any]) -> None:
    fake_nvml.handle_errors[3] = _error(pynvml.NVML_ERROR_GPU_IS_LOST)
    fake_nvml.gpus[1]["nvmlDeviceGetCurrPcieLinkWidth"] = 8
    out = tmp_path / "node.json"
    assert cli.main(["record-gpus", str(out), "--source", "test node"]) == 0
    document = json.loads(out.read_text())
    assert document["source"] == "test node" and document["recorded_at"].endswith("Z")
    live = NvmlLibrary().read()
    assert SnapshotFile(out).read() == live
    replayed = sorted((f.code, f.subject) for f in run(make_ctx(snapshot=out)))
    assert replayed == sorted((f.code, f.subject) for f in run(make_ctx()))
    assert replayed == [("GPU_LOST", "gpu3"), ("PCIE_WIDTH_DEGRADED", "gpu1")]


def test_record_gpus_keeps_a_handle_error_only_where_there_was_one(
    fake_nvml: Any, tmp_path: Path, make_ctx: Callable[..., Any]
) -> None:
    fake_nvml.handle_errors[5] = _error(pynvml.NVML_ERROR_NOT_FOUND)
    out = tmp_path / "node.json"
    assert cli.main(["record-gpus", str(out)]) == 0
    gpus = json.loads(out.read_text())["gpus"]
    assert [index for index, gpu in enumerate(gpus) if "handle_error" in gpu] == [5]
    assert gpus[5]["handle_error"]["error"] == "NOT_FOUND"
    assert SnapshotFile(out).read() == NvmlLibrary().read()
    assert [(f.code, f.subject) for f in run(make_ctx(snapshot=out))] == [("GPU_HANDLE_ERROR", "gpu5")]


def test_record_gpus_without_driver_writes_the_error(mocker: Any, tmp_path: Path) -> None:
    mocker.patch.object(pynvml, "nvmlInit", side_effect=_error(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    out = tmp_path / "node.json"
    assert cli.main(["record-gpus", str(out)]) == 69
    assert SnapshotFile(out).read().init_error == NvmlError("DRIVER_NOT_LOADED", "Driver Not Loaded")


def test_record_gpus_unwritable_destination(fake_nvml: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "missing-dir" / "node.json"
    assert cli.main(["record-gpus", str(out)]) == 73
    assert str(out) in capsys.readouterr().err


def test_record_gpus_gives_up_on_a_hung_nvml(
    fake_nvml: Any, mocker: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], make_ctx: Callable[..., Any]
) -> None:
    release = threading.Event()
    # NVML blocking inside the driver, as it can on a GPU that fell off the bus.
    mocker.patch.object(pynvml, "nvmlDeviceGetCount", side_effect=lambda: release.wait(30) and 8)
    out = tmp_path / "node.json"
    try:
        started = time.monotonic()
        assert cli.main(["record-gpus", str(out), "--timeout", "0.3"]) == 69
        assert time.monotonic() - started < 10
    finally:
        release.set()
        for thread in threading.enumerate():
            if thread.name == "record-gpus-nvml":
                thread.join(10)
    assert "NVML did not answer within 0.3 s" in capsys.readouterr().err
    error = SnapshotFile(out).read().init_error
    assert error is not None and error.code == "TIMEOUT"
    (finding,) = run(make_ctx(snapshot=out))
    assert (finding.code, finding.status, finding.details["nvml_error"]) == (
        "NVML_UNAVAILABLE",
        Status.CRITICAL,
        "TIMEOUT",
    )


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon", "3601"])
def test_record_gpus_rejects_a_bad_timeout(tmp_path: Path, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["record-gpus", str(tmp_path / "node.json"), "--timeout", value])
    assert exit_info.value.code != 0
    assert "--timeout" in capsys.readouterr().err
    assert not (tmp_path / "node.json").exists()
