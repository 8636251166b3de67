"""``[checks.kernel]``: the ``kernel`` check's settings model (pydantic: imported only to validate a config)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..kernlog.settings import KernelLogSettings


class KernelSettings(KernelLogSettings):
    """``[checks.kernel]``."""

    stuck_after: float = Field(
        default=600.0, ge=10, le=86400, description="seconds a D-state task may go without a context switch"
    )
    stuck_severity: Literal["WARNING", "CRITICAL"] = Field(default="WARNING", description="grade of stuck tasks")
    stuck_tasks_max: int = Field(default=0, ge=0, description="stuck tasks tolerated")
    ignore_tasks: list[str] = Field(default_factory=list, description="thread names never counted as stuck")
    user_tasks: Literal["note", "count"] = Field(
        default="note",
        description=(
            "stuck tasks of ordinary users (a uid that is not root's or a system account's), and tasks "
            "stuck in an ordinary user's own FUSE filesystem (D state or a hung-task report): "
            "an OK note ('note') or counted like root's ('count')"
        ),
    )
