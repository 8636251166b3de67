"""``[checks.nccl]``: the ``nccl`` check's settings model (pydantic: imported only to validate a config)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from pydantic import Field, field_validator, model_validator

from healthd.checks.settings import AbsolutePath, CheckSettings

# nccl-tests' sizes (its parsesize): bytes, or K, M, G (powers of 1024) after a whole number.
_SIZE = re.compile(r"[1-9][0-9]{0,12}[KMG]?")


class NcclSettings(CheckSettings):
    """``[checks.nccl]``."""

    # One run of 8 GiB on 8 GPUs takes seconds; the deadline covers every run, retries included.
    timeout: float = Field(default=300.0, gt=0, le=600, description="seconds all the runs may take together")
    all_reduce_perf: AbsolutePath = Field(
        default=Path("/opt/nccl-tests/build/all_reduce_perf"),
        description="nccl-tests' all_reduce_perf, by absolute path (absent: not applicable)",
    )
    gpus: Optional[int] = Field(
        default=None, ge=1, le=64, description="GPUs to run on (`-g`); default: every NVIDIA GPU in sysfs"
    )
    size_min: str = Field(default="8G", description="smallest message (`-b`), bytes or with K, M, G")
    size_max: str = Field(default="8G", description="largest message (`-e`), doubling from size_min")
    iterations: int = Field(default=20, ge=1, le=1000, description="timed iterations per size (`-n`)")
    min_busbw_gbps: Optional[float] = Field(
        default=None, gt=0, description="GB/s the average bus bandwidth must reach (none: not judged)"
    )
    ib_loopback_min_busbw_gbps: Optional[float] = Field(
        default=None,
        gt=0,
        description="GB/s of a second run through the node's own HCAs (NVLink and shared memory off)",
    )
    topo_file: Optional[AbsolutePath] = Field(
        default=None, description="NCCL_TOPO_FILE for the runs (a VM whose PCI tree hides the topology)"
    )
    run_timeout: float = Field(default=60.0, gt=0, le=600, description="seconds one all_reduce_perf run may take")
    retries: int = Field(default=0, ge=0, le=4, description="runs again while the bandwidth is below its floor")

    @field_validator("size_min", "size_max")
    @classmethod
    def _size(cls, value: str) -> str:
        if not _SIZE.fullmatch(value):
            raise ValueError(f"{value!r} is not a size nccl-tests reads (bytes, or a whole number and K, M or G)")
        return value

    @model_validator(mode="after")
    def _runs_fit(self) -> NcclSettings:
        if _bytes(self.size_min) > _bytes(self.size_max):
            raise ValueError(f"size_min {self.size_min} is larger than size_max {self.size_max}")
        runs = (1 + self.retries) * (2 if self.ib_loopback_min_busbw_gbps is not None else 1)
        if runs * self.run_timeout > self.timeout:
            raise ValueError(
                f"{runs} runs of run_timeout = {self.run_timeout:g}s do not fit in timeout = {self.timeout:g}s"
            )
        return self


def _bytes(size: str) -> int:
    return int(size.rstrip("KMG")) << (10 * " KMG".index(size[-1] if size[-1] in "KMG" else " "))
