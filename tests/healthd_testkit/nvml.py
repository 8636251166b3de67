"""A fake NVML for the gpu check's tests and the fault suite: NVML is the one component that cannot run here.

``FakeNvml`` replaces pynvml's functions at the boundary with answers modelled on an
H100 node (``healthy_gpu``), per GPU, so a test changes one answer and sees what the
check makes of it. ``SYSFS_H100`` is the matching sysfs capture under fixtures/.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Optional

import pynvml

from healthd_testkit.paths import FIXTURES as ALL_FIXTURES

FIXTURES = ALL_FIXTURES / "nvml"
SYSFS_H100 = FIXTURES / "sysfs-h100"
BUSES = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class Clock:
    """A controllable wall clock for rate checks."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def fabric_info(state: int = 3, status: int = 0, cluster: bytes = bytes(16), health_mask: int = 0) -> Any:
    """An answer to nvmlDeviceGetGpuFabricInfoV: fills the caller's structure (passed by reference) like NVML."""

    def fill(reference: Any) -> int:
        info = reference._obj
        info.state, info.status, info.healthMask, info.cliqueId = state, status, health_mask, 0
        info.clusterUuid[:] = list(cluster)
        return pynvml.NVML_SUCCESS

    return fill


def healthy_gpu(index: int) -> dict[str, Any]:
    """pynvml function name -> answer for one H100 (a value, an exception, or a callable of the args)."""
    not_supported = nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def link_state(link: int) -> int:
        if link >= 18:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return 1

    return {
        "nvmlDeviceGetUUID": f"GPU-{index:08x}-1111-2222-3333-444455556666",
        "nvmlDeviceGetSerial": f"165{index:010d}",
        "nvmlDeviceGetPciInfo": SimpleNamespace(busId=f"00000000:{BUSES[index]}:00.0".encode()),
        "nvmlDeviceGetName": "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetVbiosVersion": "96.00.99.00.01",
        "nvmlDeviceGetEccMode": [1, 1],
        "nvmlDeviceGetTotalEccErrors": lambda error_type, counter_type: 0,
        "nvmlDeviceGetRetiredPages": not_supported,
        "nvmlDeviceGetRetiredPagesPendingStatus": not_supported,
        "nvmlDeviceGetRemappedRows": (0, 0, 0, 0),
        "nvmlDeviceGetCurrPcieLinkGeneration": 5,
        "nvmlDeviceGetMaxPcieLinkGeneration": 5,
        "nvmlDeviceGetCurrPcieLinkWidth": 16,
        "nvmlDeviceGetMaxPcieLinkWidth": 16,
        "nvmlDeviceGetPcieReplayCounter": 0,
        "nvmlDeviceGetCurrentClocksEventReasons": 0,
        "nvmlDeviceGetUtilizationRates": SimpleNamespace(gpu=90, memory=35),
        "nvmlDeviceGetNvLinkState": link_state,
        "nvmlDeviceGetNvLinkErrorCounter": lambda link, counter: 0,
        "nvmlDeviceGetGpuFabricInfoV": fabric_info(),
        "nvmlDeviceGetFieldValues": lambda ids: [
            SimpleNamespace(nvmlReturn=pynvml.NVML_SUCCESS, value=SimpleNamespace(uiVal=0)) for _ in ids
        ],
    }


class FakeNvml:
    """Answers pynvml calls from per-GPU tables; ``calls`` counts init/shutdown."""

    def __init__(self, gpus: int = 8) -> None:
        self.gpus = [healthy_gpu(i) for i in range(gpus)]
        self.init_error: Optional[BaseException] = None
        self.handle_errors: dict[int, BaseException] = {}
        self.driver = "550.54.15"
        self.shutdowns = 0

    @staticmethod
    def _answer(value: Any, *args: Any) -> Any:
        if isinstance(value, BaseException):
            raise value
        return value(*args) if callable(value) else value

    def install(self, mocker: Any) -> FakeNvml:
        def init() -> None:
            if self.init_error is not None:
                raise self.init_error

        def shutdown() -> None:
            self.shutdowns += 1

        def handle(index: int) -> tuple[str, int]:
            if index in self.handle_errors:
                raise self.handle_errors[index]
            return ("handle", index)

        mocker.patch.object(pynvml, "nvmlInit", side_effect=init)
        mocker.patch.object(pynvml, "nvmlShutdown", side_effect=shutdown)
        mocker.patch.object(pynvml, "nvmlSystemGetDriverVersion", side_effect=lambda: self.driver)
        mocker.patch.object(pynvml, "nvmlDeviceGetCount", side_effect=lambda: len(self.gpus))
        mocker.patch.object(pynvml, "nvmlDeviceGetHandleByIndex", side_effect=handle)
        for name in healthy_gpu(0):

            def call(h: tuple[str, int], *args: Any, name: str = name) -> Any:
                return self._answer(self.gpus[h[1]][name], *args)

            mocker.patch.object(pynvml, name, side_effect=call)
        return self
