"""The kernel-log options shared by the checks that read it (pydantic: imported only to validate a config)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from healthd.checks.settings import CheckSettings, SettingPath


class KernelLogSettings(CheckSettings):
    """The kernel-log options shared by the checks that read it (each under its own ``[checks.NAME]``)."""

    source: Literal["auto", "kmsg", "journal"] = Field(
        default="auto", description="auto: the journal where systemd booted the node and systemd-python imports"
    )
    journal_directory: Optional[SettingPath] = Field(
        default=None, description="journal files to read (default: system's)"
    )
    window: float = Field(default=3600.0, gt=0, description="seconds an event keeps its grade after its last line")
    accept_userspace_kmsg: bool = Field(
        default=False,
        description="TESTS ONLY: count records that processes wrote to /dev/kmsg (a facility other than the "
        "kernel's) like the kernel's own; anyone who can write /dev/kmsg can then report a fault",
        json_schema_extra={"trust_switch": True},
    )
