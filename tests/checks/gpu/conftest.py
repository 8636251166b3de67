"""Fixtures of the gpu check's tests: a controllable clock, a check context, and the fake NVML.

NVML is the one component that cannot run here (no GPU, no driver), so ``fake_nvml``
installs ``healthd_testkit.nvml.FakeNvml`` at the boundary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from healthd_testkit.nvml import SYSFS_H100, Clock, FakeNvml

from healthd.checks.plugin import CheckContext
from healthd.config.models import Paths
from healthd.store.state import StateFile
from healthd_checks.gpu.settings import GpuSettings


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_ctx(tmp_path: Path, clock: Clock) -> Callable[..., CheckContext[GpuSettings]]:
    """A context whose state persists in ``tmp_path`` across calls (like passes)."""
    state = StateFile(tmp_path / "state", "check-gpu")

    def make(gpus: Optional[int] = 8, sysfs: Path = SYSFS_H100, **settings: Any) -> CheckContext[GpuSettings]:
        return CheckContext(
            name="gpu",
            settings=GpuSettings(expect_gpus=gpus, **settings),
            paths=Paths(sysfs=sysfs, state_dir=tmp_path / "state"),
            state=state,
            clock=clock,
        )

    return make


@pytest.fixture
def fake_nvml(mocker: Any) -> FakeNvml:
    return FakeNvml().install(mocker)
