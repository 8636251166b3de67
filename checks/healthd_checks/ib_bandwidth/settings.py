"""``[checks.ib_bandwidth]``: the ``ib_bandwidth`` check's settings (pydantic: imported only to validate a config)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from pydantic import Field, field_validator, model_validator

from healthd.checks.settings import AbsolutePath, CheckSettings

# An RDMA device's name as the kernel lists it under /sys/class/infiniband (mlx5_0, ibp12s0, rxe0).
_DEVICE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class IbBandwidthSettings(CheckSettings):
    """``[checks.ib_bandwidth]``."""

    # Eight HCAs one after another, each for `duration` seconds and its connection set-up.
    timeout: float = Field(default=300.0, gt=0, le=600, description="seconds all the HCAs' runs may take together")
    ib_write_bw: AbsolutePath = Field(
        default=Path("/usr/bin/ib_write_bw"),
        description="perftest's ib_write_bw, by absolute path (absent: not applicable)",
    )
    hcas: Optional[list[str]] = Field(
        default=None, description="the HCAs to measure, in order; default: every device whose port 1 is InfiniBand"
    )
    min_gbps: Optional[float] = Field(
        default=None, gt=0, description="Gb/s each HCA's write bandwidth to itself must reach (none: not judged)"
    )
    use_cuda: bool = Field(
        default=False,
        description="GPUDirect RDMA: the i-th HCA writes from and to the i-th GPU's memory (`--use_cuda`)",
    )
    message_size: int = Field(default=1048576, ge=1, le=2**30, description="bytes per write (`-s`)")
    duration: int = Field(default=5, ge=1, le=60, description="seconds each HCA is measured (`-D`)")
    queue_pairs: int = Field(default=1, ge=1, le=64, description="queue pairs the writes are spread over (`-q`)")
    port: int = Field(default=18515, ge=1024, le=65535, description="TCP port the server and client meet on (`-p`)")
    run_timeout: float = Field(default=30.0, gt=0, le=600, description="seconds one HCA's measurement may take")

    @field_validator("hcas")
    @classmethod
    def _names(cls, value: Optional[list[str]]) -> Optional[list[str]]:
        bad = [name for name in value or [] if not _DEVICE.fullmatch(name)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not an RDMA device name (as /sys/class/infiniband lists them)")
        if value is not None and len(set(value)) != len(value):
            raise ValueError("an HCA is named twice")
        return value

    @model_validator(mode="after")
    def _fits(self) -> IbBandwidthSettings:
        if self.run_timeout <= self.duration:
            raise ValueError(f"run_timeout = {self.run_timeout:g}s leaves no time past duration = {self.duration}s")
        if self.run_timeout > self.timeout:
            raise ValueError(f"run_timeout = {self.run_timeout:g}s does not fit in timeout = {self.timeout:g}s")
        return self
