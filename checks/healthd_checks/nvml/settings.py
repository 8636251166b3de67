"""The NVML options shared by the checks that read NVML (pydantic: imported only to validate a config)."""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from healthd.checks.settings import CheckSettings, SettingPath


class NvmlSettings(CheckSettings):
    """The NVML options shared by the checks that read NVML (each under its own ``[checks.NAME]``)."""

    snapshot: Optional[SettingPath] = Field(
        default=None, description="replay this NVML snapshot instead of asking NVML"
    )
