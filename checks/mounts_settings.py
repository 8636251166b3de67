"""``[checks.mounts]``: the ``mounts`` check's settings model (pydantic: imported only to validate a config)."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from healthd.checksettings import CheckSettings
from healthd.config import identified_by, moved_from_node


class MountSpec(BaseModel):
    """A filesystem the node must have mounted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(min_length=1)
    fstype: Optional[str] = None
    source: Optional[str] = None
    rw: Optional[bool] = None

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("mount path must be absolute")
        return value.rstrip("/") or "/"


class MountsSettings(CheckSettings):
    expect: list[MountSpec] = Field(
        default_factory=list,
        description="filesystems this node must have mounted: { path, fstype, source, rw }, one per path",
        json_schema_extra={**moved_from_node("mounts"), **identified_by("path")},
    )
    min_free_percent: float = Field(default=5.0, ge=0, le=100, description="WARNING below this much free space")
    min_free_inodes_percent: float = Field(default=5.0, ge=0, le=100, description="WARNING below this many inodes")
    namespace_pid: int = Field(
        default=1, ge=1, description="judge the mounts as this process sees them (1: the node's, not our sandbox's)"
    )
    probe_usage: bool = Field(default=True, description="probe space, inodes and hangs (statvfs in a child)")
    include_root: bool = Field(default=True, description="also watch space and inodes of /")
    probe_timeout: float = Field(default=3.0, gt=0, le=60, description="seconds before a statvfs probe is hung")

    @field_validator("expect")
    @classmethod
    def _one_per_path(cls, value: list[MountSpec]) -> list[MountSpec]:
        # Two expectations of one mount point contradict each other or repeat one another;
        # either way the node would be judged against the wrong one.
        paths = [spec.path for spec in value]
        twice = next((path for path in paths if paths.count(path) > 1), None)
        if twice is not None:
            raise ValueError(f"{twice} is expected more than once: give each mount path one entry")
        return value
