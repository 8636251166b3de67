"""NVML missing and a GPU lost in the middle of a pass.

There is no NVIDIA driver on the CI machine, so "NVML missing" runs the real
library through the real CLI. A GPU lost mid-pass needs NVML to answer first and
fail later, so pynvml's functions are replaced at the boundary (the fake of
tests/healthd_testkit/nvml.py) and the loss starts after a few successful calls.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pynvml
import pytest
from healthd_testkit import nvml as fake_nvml_module
from healthd_testkit.faults import builtin, codes
from healthd_testkit.paths import REPO, run_healthd

from healthd.cycle.outcome import ActionOutcome
from healthd.model import Status
from healthd.plan.state import Action

SYSFS_H100 = REPO / "fixtures" / "nvml" / "sysfs-h100"


def _driver_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def _check_once(tmp_path: Path, node: str, sysfs: Path) -> tuple[int, dict[str, Any]]:
    config = tmp_path / "healthd.toml"
    config.write_text(
        f'[paths]\nstate_dir = "{tmp_path / "state"}"\nsysfs = "{sysfs}"\n[slurm]\nenabled = false\n{node}'
    )
    proc = run_healthd("check", "--once", "--json", "--dry-run", "--only", "gpu", "--config", str(config))
    assert "Traceback" not in proc.stderr
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.skipif(_driver_present(), reason="an NVIDIA driver is loaded here: NVML is not missing")
def test_nvml_missing_with_gpus_expected_is_critical(tmp_path: Path) -> None:
    code, document = _check_once(tmp_path, "[checks.gpu]\nexpect_gpus = 8\n", SYSFS_H100)
    (check,) = document["checks"]
    (finding,) = check["findings"]
    assert code == 2
    assert (finding["code"], finding["status"], finding["subject"]) == ("NVML_UNAVAILABLE", "CRITICAL", "nvml")
    assert finding["details"]["nvml_error"] in ("LIBRARY_NOT_FOUND", "DRIVER_NOT_LOADED")


@pytest.mark.skipif(_driver_present(), reason="an NVIDIA driver is loaded here: NVML is not missing")
def test_nvml_missing_with_no_gpus_expected_is_not_applicable(tmp_path: Path) -> None:
    empty_sysfs = tmp_path / "sys"
    (empty_sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    code, document = _check_once(tmp_path, "", empty_sysfs)
    (check,) = document["checks"]
    assert code == 0
    assert check["state"] == "not_applicable" and check["findings"] == []


class _LosesGpu(dict):  # type: ignore[type-arg]
    """One GPU's answer table that answers ``good`` lookups, then says GPU_IS_LOST forever."""

    def __init__(self, table: dict[str, Any], good: int) -> None:
        super().__init__(table)
        self.good = good
        self.lost = pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    def __getitem__(self, key: str) -> Any:
        if self.good <= 0:
            return self.lost
        self.good -= 1
        return super().__getitem__(key)


@pytest.mark.slow
def test_gpu_lost_mid_pass_is_critical_for_that_gpu_alone(
    mocker: Any, harness: Callable[..., Any], start_daemon: Callable[..., Any]
) -> None:
    fake = fake_nvml_module.FakeNvml().install(mocker)
    fake.gpus[5] = _LosesGpu(fake.gpus[5], good=3)  # the handle and three readings succeed
    node = harness(*builtin("gpu"), paths=f'sysfs = "{SYSFS_H100}"', extra="[checks.gpu]\nexpect_gpus = 8\n")
    running = start_daemon(node.daemon())
    reports = node.wait_passes(2)
    for report in reports[:2]:
        found = [(f.code, f.status, f.subject) for f in report.result.findings]
        assert found == [("GPU_LOST", Status.CRITICAL, "gpu5")]
        (action,) = report.actions
        assert (action.kind, action.outcome) == (Action.TAKE_OUT_NOW, ActionOutcome.DISABLED)
    assert fake.shutdowns >= 2  # NVML is shut down after every pass, lost GPU or not
    # The GPU comes back (reset): the next passes are clean again.
    fake.gpus[5] = fake_nvml_module.healthy_gpu(5)
    count = len(node.reports)
    node.wait_passes(count + 1)
    assert codes(node.reports[-1]) == {}
    assert running.stop() == 0
