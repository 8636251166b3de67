"""``[checks.jobs]``: the ``jobs`` check's settings model (pydantic: imported only to validate a config)."""

from __future__ import annotations

from pydantic import Field

from healthd.checksettings import CheckSettings


class JobsSettings(CheckSettings):
    prolog_timeout: float = Field(
        default=1.0, gt=0, le=60, description="seconds the prolog may take; at its end it lets the job start (exit 0)"
    )
    prolog_checks: list[str] = Field(
        default_factory=lambda: ["xid", "gpu"], description="checks the prolog runs, scoped to the job's GPUs"
    )
    epilog_timeout: float = Field(default=20.0, gt=0, le=300, description="seconds the epilog may take; then exit 0")
    app_xid_jobs: int = Field(default=3, ge=2, description="distinct jobs with the same application Xid on one GPU")
    app_xid_users: int = Field(default=1, ge=1, description="distinct users among those jobs")
    app_xid_window_days: float = Field(default=7.0, gt=0, le=180, description="days within which jobs are counted")
