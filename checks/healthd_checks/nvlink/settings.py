"""``[checks.nvlink]``: the ``nvlink`` check's settings model (pydantic: imported only to validate a config)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from healthd.config.models import moved_from_check

from ..nvml.settings import NvmlSettings


class NvlinkSettings(NvmlSettings):
    """``[checks.nvlink]``."""

    fabric_manager: Literal["auto", "required", "off"] = Field(
        default="auto", description="auto: Fabric Manager must run exactly where NVSwitches are on the PCI bus"
    )
    fabric_manager_process: str = Field(
        default="nv-fabricmanager", min_length=1, description="the daemon's process name, owned by root"
    )
    expect_nvswitches: Optional[int] = Field(default=None, ge=0, le=64, description="NVSwitches on the PCI bus")
    # NVLink5 (Blackwell) has 18 links per GPU, as Hopper's NVLink4 does; 36 leaves room.
    expect_active_links: Optional[int] = Field(
        default=None,
        ge=0,
        le=36,
        description="active NVLinks each GPU must have (unset: some of a GPU's links down while others are up)",
        json_schema_extra=moved_from_check("gpu", "nvlinks_expected"),
    )
    expect_cluster_uuid: bool = Field(
        default=False,
        description="GPUs must carry a non-zero cluster UUID (multi-node NVLink, where Fabric Manager assigns one)",
    )

    @field_validator("fabric_manager_process")
    @classmethod
    def _process_name(cls, value: str) -> str:
        if "/" in value or not value.isprintable():
            raise ValueError(f"fabric_manager_process {value!r} must be a process name, not a path")
        return value
