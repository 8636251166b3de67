"""``[checks.mounts]``: the ``mounts`` check's settings model (pydantic: imported only to validate a config)."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from healthd.checks.settings import CheckSettings
from healthd.config.models import identified_by, moved_from_node


def absolute_mount_path(value: str) -> str:
    """A mount path as mountinfo shows it: absolute, without a trailing slash."""
    if not value.startswith("/"):
        raise ValueError("mount path must be absolute")
    return value.rstrip("/") or "/"


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
        return absolute_mount_path(value)


class UsageLimit(BaseModel):
    """Space and inode limits of one mount point, in place of the check's own, judged only while it is mounted.

    NHC's check_fs_used, check_fs_free, check_fs_iused and check_fs_ifree (scripts/lbnl_fs.nhc)
    judge the one mount point they name and pass when it is not mounted; so does this.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(min_length=1)
    min_free_percent: Optional[float] = Field(default=None, ge=0, le=100)
    min_free_inodes_percent: Optional[float] = Field(default=None, ge=0, le=100)
    # NHC's check_fs_free MOUNT 1GB and check_fs_ifree MOUNT 1k (scripts/lbnl_fs.nhc): df's
    # Avail in kB and IFree, whichever free_space_as says; a filesystem without blocks or
    # without an inode table is not judged, as NHC passes it.
    min_free_kib: Optional[int] = Field(default=None, ge=0)
    min_free_inodes: Optional[int] = Field(default=None, ge=0)

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        return absolute_mount_path(value)


_PerPath = Union[MountSpec, UsageLimit]


class MountsSettings(CheckSettings):
    expect: list[MountSpec] = Field(
        default_factory=list,
        description="filesystems this node must have mounted: { path, fstype, source, rw }, one per path",
        json_schema_extra={**moved_from_node("mounts"), **identified_by("path")},
    )
    min_free_percent: float = Field(default=5.0, ge=0, le=100, description="WARNING below this much free space")
    min_free_inodes_percent: float = Field(default=5.0, ge=0, le=100, description="WARNING below this many inodes")
    # statvfs(3): f_bavail is what anyone but root may still write, so root's reserve (5% by
    # default on ext4, mke2fs -m) counts as used. df's Use% (coreutils df.c) leaves the
    # reserve out and rounds up; NHC's check_fs_free and check_fs_used read that column.
    free_space_as: Literal["statvfs", "df"] = Field(
        default="statvfs",
        description="how free space and inodes are counted: statvfs (f_bavail / f_blocks: root's reserve counts"
        " as used, what a job can still write) or df (100 minus df's Use% and IUse%, rounded up as df does:"
        " the reserve left out, as NHC judges)",
    )
    usage_limits: list[UsageLimit] = Field(
        default_factory=list,
        description="per mount point: { path, min_free_percent, min_free_inodes_percent, min_free_kib (df's Avail),"
        " min_free_inodes (df's IFree) }, judged while it is mounted",
        json_schema_extra=identified_by("path"),
    )
    namespace_pid: int = Field(
        default=1, ge=1, description="judge the mounts as this process sees them (1: the node's, not our sandbox's)"
    )
    probe_usage: bool = Field(default=True, description="probe space, inodes and hangs (statvfs in a child)")
    include_root: bool = Field(default=True, description="also watch space and inodes of /")
    probe_timeout: float = Field(default=3.0, gt=0, le=60, description="seconds before a statvfs probe is hung")

    @field_validator("expect", "usage_limits")
    @classmethod
    def _one_per_path(cls, value: list[_PerPath]) -> list[_PerPath]:
        # Two entries for one mount point contradict each other or repeat one another;
        # either way the node would be judged against the wrong one.
        seen: set[str] = set()
        for entry in value:
            if entry.path in seen:
                raise ValueError(f"{entry.path} is expected more than once: give each mount path one entry")
            seen.add(entry.path)
        return value
