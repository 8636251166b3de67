"""``[checks.dcgm]``: the ``dcgm`` check's settings model (pydantic: imported only to validate a config)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from healthd.checks.settings import AbsolutePath, CheckSettings


class ModelExpectation(BaseModel):
    """What one GPU model must reach in the diagnostic's measurements (only what ``dcgmi diag`` reports)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pcie_bandwidth_gbps_min: Optional[float] = Field(
        default=None, gt=0, description="GB/s the PCIe test must measure each way (host to GPU, GPU to host)"
    )


class DcgmSettings(CheckSettings):
    """``[checks.dcgm]``."""

    # Level 1 takes seconds, level 2 a couple of minutes (DCGM User Guide, "Run levels"); the
    # check's deadline covers every run, retries included.
    timeout: float = Field(default=600.0, gt=0, le=600, description="seconds before the check is abandoned")
    dcgmi: AbsolutePath = Field(
        default=Path("/usr/bin/dcgmi"), description="dcgmi, by absolute path (absent: not applicable)"
    )
    level: Literal[1, 2] = Field(default=1, description="`dcgmi diag -r LEVEL`: 1 quick, 2 medium")
    run_timeout: float = Field(default=280.0, gt=0, le=600, description="seconds one `dcgmi diag` run may take")
    retries: int = Field(default=1, ge=0, le=3, description="runs again before a failed test counts")
    expected: dict[str, ModelExpectation] = Field(
        default_factory=dict,
        description='per GPU model, by the PCI device ID dcgmi reports (H100 SXM5 80GB: "2330")',
    )

    @field_validator("expected")
    @classmethod
    def _device_ids(cls, value: dict[str, ModelExpectation]) -> dict[str, ModelExpectation]:
        bad = [key for key in value if not (len(key) == 4 and all(c in "0123456789abcdefABCDEF" for c in key))]
        if bad:
            raise ValueError(f"expected: {bad[0]!r} is not a PCI device ID (four hex digits, as dcgmi reports)")
        return {key.lower(): spec for key, spec in value.items()}

    @model_validator(mode="after")
    def _runs_fit(self) -> DcgmSettings:
        runs = 1 + self.retries
        if runs * self.run_timeout > self.timeout:
            raise ValueError(
                f"{runs} runs of run_timeout = {self.run_timeout:g}s do not fit in timeout = {self.timeout:g}s"
            )
        return self
