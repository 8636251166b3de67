"""``[checks.edac]``: the ``edac`` check's settings model (pydantic: imported only to validate a config)."""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from ..kernlog.settings import KernelLogSettings


class EdacSettings(KernelLogSettings):
    """``[checks.edac]``."""

    expect_controllers: Optional[int] = Field(
        default=None, ge=0, le=256, description="EDAC memory controllers this node must show (mcN)"
    )
    ce_per_hour_max: float = Field(default=1000.0, ge=0, description="corrected errors per hour on one DIMM")
    rate_window: float = Field(default=600.0, ge=1, le=86400, description="rates divide by at least this many seconds")
