"""``[checks.ipmi]``: the ``ipmi`` check's settings model (pydantic: imported only to validate a config)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from healthd.checks.settings import AbsolutePath, CheckSettings


class IpmiSettings(CheckSettings):
    """``[checks.ipmi]``."""

    timeout: float = Field(default=30.0, gt=0, le=600, description="seconds before the check is abandoned")
    ipmitool: AbsolutePath = Field(default=Path("/usr/bin/ipmitool"), description="ipmitool, by absolute path")
    device: AbsolutePath = Field(
        default=Path("/dev/ipmi0"), description="the BMC's device node (no BMC: not applicable)"
    )
    sel_timeout: float = Field(default=20.0, gt=0, le=300, description="seconds `ipmitool sel elist` may take")
    window: float = Field(default=3600.0, gt=0, description="seconds a WARNING event is reported after it was seen")
