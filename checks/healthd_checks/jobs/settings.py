"""``[checks.jobs]``: the ``jobs`` check's settings model (pydantic: imported only to validate a config)."""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from healthd.checks.settings import CheckSettings


class JobsSettings(CheckSettings):
    prolog_timeout: float = Field(
        default=1.0, gt=0, le=60, description="seconds the prolog may take; at its end it lets the job start (exit 0)"
    )
    prolog_checks: list[str] = Field(
        default_factory=lambda: ["xid", "gpu"], description="checks the prolog runs, scoped to the job's GPUs"
    )
    epilog_timeout: float = Field(default=20.0, gt=0, le=300, description="seconds the epilog may take; then exit 0")
    app_xid_jobs: int = Field(default=3, ge=2, description="distinct jobs with the same application Xid on one GPU")
    # At least 2: one user controls all of their jobs (resubmits, a job array), so their
    # jobs are one piece of evidence however many there are (docs/jobs.md).
    app_xid_users: int = Field(default=2, ge=2, description="distinct users among those jobs (one user never drains)")
    app_xid_window_days: float = Field(default=7.0, gt=0, le=180, description="days within which jobs are counted")
    gpu_gres: Optional[bool] = Field(
        default=None,
        description="the node gives out its GPUs through Slurm GRES (a job without SLURM_JOB_GPUS owns none);"
        " unset: yes once a job of the last 30 days came with a GPU list",
    )
