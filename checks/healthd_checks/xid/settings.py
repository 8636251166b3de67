"""``[checks.xid]``: the ``xid`` check's settings model (pydantic: imported only to validate a config)."""

from __future__ import annotations

import re
from typing import Any, Mapping

from pydantic import Field, field_validator

from healthd.model import Status

from ..kernlog.settings import KernelLogSettings

_OVERRIDE_KEY = re.compile(r"(?:XID_)?(\d{1,6})|SXID_(\d{1,6})")


class XidSettings(KernelLogSettings):
    """``[checks.xid]``: the kernel-log options every reader of the log has, and the Xid grading's own.

    The kernel-log options (``source``, ``journal_directory``, ``window``,
    ``accept_userspace_kmsg``) are ``KernelLogSettings``', declared there once. ``window``
    is one event's span too: repeats of an Xid on a GPU inside it are counted in that event
    (docs/xid.md).
    """

    # Off by default: users choose how often their programs fault, so counting their Xids
    # would let anyone drain a node (docs/xid.md, "Application Xids").
    app_repeat_count: int = Field(
        default=0,
        ge=0,
        description="distinct processes with one application Xid on one GPU (Xid 13: at one GPC/TPC) that make "
        "a WARNING; 0: never",
    )
    app_repeat_window: float = Field(default=3600.0, gt=0, description="seconds within which those processes count")
    overrides: dict[str, Status] = Field(
        default_factory=dict, description='grade per Xid, e.g. { "63" = "CRITICAL", "SXID_20034" = "WARNING" }'
    )

    @field_validator("overrides", mode="before")
    @classmethod
    def _normalize_overrides(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ValueError("overrides must be a table of Xid = grade")
        normalized: dict[str, Status] = {}
        for key, grade in value.items():
            match = _OVERRIDE_KEY.fullmatch(str(key).strip().upper())
            if match is None:
                raise ValueError(f"overrides key {key!r} is not an Xid number or SXID_<n>")
            if not isinstance(grade, (str, Status)):
                raise ValueError(f"overrides.{key}: grade must be OK, WARNING, CRITICAL or UNKNOWN, got {grade!r}")
            try:
                status = grade if isinstance(grade, Status) else Status.parse(grade)
            except ValueError as exc:
                raise ValueError(f"overrides.{key}: {exc}") from None
            normalized[str(int(match.group(1))) if match.group(1) else f"SXID_{int(match.group(2))}"] = status
        return normalized
