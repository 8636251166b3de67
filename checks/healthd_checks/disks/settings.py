"""``[checks.disks]``: the ``disks`` check's settings model (pydantic: imported only to validate a config)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import Field

from healthd.checks.settings import AbsolutePath

from ..kernlog.settings import KernelLogSettings


class DisksSettings(KernelLogSettings):
    """``[checks.disks]``."""

    nvme_cli: AbsolutePath = Field(default=Path("/usr/sbin/nvme"), description="nvme-cli, by absolute path")
    smart_timeout: float = Field(default=5.0, gt=0, le=60, description="seconds nvme smart-log may take per drive")
    expect_nvme: Optional[int] = Field(default=None, ge=0, le=256, description="NVMe controllers this node must have")
    media_errors_max: int = Field(default=0, ge=0, description="new media errors tolerated between passes")
