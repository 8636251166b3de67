"""``[checks.gpu]``: the ``gpu`` check's settings model (pydantic: imported only to validate a config)."""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from healthd.config.models import moved_from_node

from ..nvml.settings import NvmlSettings


class GpuSettings(NvmlSettings):
    """``[checks.gpu]``. Defaults follow NVIDIA DCGM's hardware limits where it has one."""

    # Links down moved to the nvlink check (its expect_active_links says moved_from_check).
    moved_out = {"nvlinks_expected": "[checks.nvlink] expect_active_links"}

    expect_gpus: Optional[int] = Field(
        default=None,
        ge=0,
        le=64,
        description="GPUs this node must have (GPU_MISSING below it)",
        json_schema_extra=moved_from_node("gpus"),
    )
    min_gpus: Optional[int] = Field(
        default=None,
        ge=1,
        le=64,
        description="GPUs this node must have at least, more being fine (GPU_MISSING below it, or NVML_UNAVAILABLE"
        " without a driver)",
    )
    expect_model: Optional[str] = Field(
        default=None, min_length=1, description="the model every GPU must be (NVML's name, e.g. NVIDIA H100 80GB HBM3)"
    )
    expect_vbios: list[str] = Field(
        default_factory=list, description="VBIOS versions allowed (nvidia-smi's VBIOS Version); another is a WARNING"
    )
    expect_ecc: bool = Field(default=True, description="WARNING when ECC is disabled on a GPU that supports it")
    ecc_aggregate_corrected_max: Optional[int] = Field(
        default=None, ge=0, description="lifetime corrected ECC errors tolerated per GPU (unset: not judged)"
    )
    ecc_aggregate_uncorrected_max: Optional[int] = Field(
        default=None, ge=0, description="lifetime uncorrected ECC errors tolerated per GPU (unset: not judged)"
    )
    # DCGM (GpuHardwareLimits.h): 60 retired pages is the replacement limit.
    retired_pages_max: int = Field(default=60, ge=1, description="retired pages per GPU at which it needs replacing")
    busy_utilization_percent: int = Field(
        default=50, ge=0, le=100, description="GPU utilisation above which a GPU counts as busy (a job runs on it)"
    )
    # DCGM: "8 replays per minute is the maximum recommended by RM".
    pcie_replay_per_minute_max: float = Field(default=8.0, ge=0, description="PCIe replays per minute tolerated")
    # DCGM flags any new NVLink replay/recovery error; CRC errors matter only at 100+ per second.
    nvlink_errors_max: int = Field(default=0, ge=0, description="new replay+recovery errors tolerated per pass")
    nvlink_crc_per_second_max: float = Field(default=100.0, ge=0, description="NVLink CRC errors per second tolerated")
    # Two passes seconds apart (the daemon's, then an operator's or Slurm's hook) must
    # not turn one replay into "12 a minute": a rate is judged over at least this long.
    rate_window: float = Field(
        default=60.0, ge=1, le=86400, description="rates divide by max(seconds since the last pass, this)"
    )
