"""The documented schema of ``healthd fleet report --json``, as pydantic models.

``render.document`` builds the document with plain values; these models are the
contract: ``docs/fleet-report.schema.json`` is generated from them
(``python -m healthd.fleet.schema``) and the tests validate real output against them.
"""

from __future__ import annotations

import json
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Window(_Strict):
    start: Optional[str] = Field(description="local time with offset, ISO 8601")
    end: Optional[str]
    days: float = Field(ge=0)


class BadLine(_Strict):
    line: int = Field(ge=1)
    why: str


class InputOut(_Strict):
    source: str
    records: int = Field(ge=0)
    bad_lines: int = Field(ge=0)
    first_bad_lines: list[BadLine]
    skipped: int = Field(ge=0, description="well-formed records not used: not started, running, outside the window")


class Inputs(_Strict):
    jobs: InputOut
    events: InputOut
    submit_lines: Optional[InputOut] = Field(description="sacct JobID,SubmitLine; null when not given")


class Settings(_Strict):
    window_before_seconds: float
    window_after_seconds: float
    incident_gap_seconds: float
    checkpoint_interval_seconds: float
    restart_overhead_seconds: float
    gpus_per_node: int = Field(ge=1)
    alpha: float
    causes: list[str]
    healthd_prefix: str
    shared_window_seconds: float = Field(ge=0)
    shared_nodes: int = Field(ge=1, description="cause events on more nodes than this within the window are shared")


class AttributedOut(_Strict):
    job_id: str
    node: str
    cause: str
    state: Literal["FAILED", "NODE_FAIL"]
    gpus: int = Field(ge=0)
    end: Optional[str]
    job_name: Optional[str] = Field(
        default=None, description="the job's name where the runs came from sacct --json; absent from sacct -P"
    )


class MttfOut(_Strict):
    gpus: int = Field(ge=1, description="bucket: the largest power of two <= the runs' GPUs")
    runs: int = Field(ge=0)
    job_hours: float = Field(ge=0)
    failures: int = Field(ge=0)
    mttf_hours: Optional[float] = Field(description="job hours / attributed failures; null without failures")


class SizeOut(_Strict):
    gpus: int = Field(ge=1)
    nodes: float
    mttf_hours: Optional[float] = Field(description="from the fitted model 1 / (nodes * r_f)")
    ettr: float = Field(ge=0, le=1)
    observed: bool


class CauseOut(_Strict):
    cause: str
    failures: int = Field(ge=0)
    gpu_hours_lost: float = Field(ge=0)
    incidents: int = Field(ge=0)


class Signals(_Strict):
    out_count: int = Field(ge=0)
    xids: list[str]
    single_node_failures_caused: int = Field(ge=0)
    multi_node_failures_caused: int = Field(ge=0)
    single_node_runs: int = Field(ge=0)
    single_node_failures: int = Field(ge=0)
    single_node_failure_rate: Optional[float]
    expected_single_node_failures: float = Field(ge=0)
    excluded_by_jobs: int = Field(ge=0)
    pinned_runs: int = Field(
        ge=0, description="single-node runs their own request placed on the node (-w, #SBATCH, -x of all others)"
    )
    pinned_failures: int = Field(ge=0, description="of those, failed: no evidence against the node")
    counted_failures: int = Field(ge=0, description="failed single-node runs not pinned: the failure evidence")
    counted_expected: float = Field(ge=0, description="the failures the users' rates predict for those runs")
    failing_users: int = Field(ge=0, description="distinct users with a counted failure on the node")
    top_user_failures: int = Field(ge=0, description="counted failures of the user with the largest excess")
    p_incidents: float = Field(ge=0, le=1)
    p_failures: float = Field(ge=0, le=1)
    q_value: float = Field(ge=0, le=1)


class SharedOut(_Strict):
    start: Optional[str]
    codes: list[str]
    nodes: list[str]


class LemonOut(_Strict):
    node: str
    score: float = Field(description="-log10 of the Benjamini-Hochberg adjusted p-value")
    incident_evidence: bool = Field(
        description="the incident test alone flags it; false: a silent lemon (lemons --drain-silent)"
    )
    why: list[str] = Field(description="evidence the test set aside or lacked")
    signals: Signals


class FloorsOut(_Strict):
    min_nodes: int = Field(ge=1)
    min_days: float = Field(ge=0)
    min_incidents: int = Field(ge=1)
    min_failures: int = Field(ge=1)


class HeldBackOut(_Strict):
    node: str
    plain_q_value: float = Field(ge=0, le=1, description="what the test without the guards gives")
    q_value: float = Field(ge=0, le=1)
    why: list[str]


class LemonTestOut(_Strict):
    floors: FloorsOut
    below_floors: list[str] = Field(description="why the fleet or window is too small: nothing is flagged")
    notes: list[str] = Field(description="what else the test could not see")
    held_back: list[HeldBackOut] = Field(description="nodes the unguarded test flags and this one does not")


class BaselineOut(_Strict):
    nodes: int = Field(ge=0)
    incidents_per_node: float = Field(ge=0)
    variance: float = Field(ge=0)


class FleetReportOut(_Strict):
    schema_version: Literal[1]
    healthd_version: str
    window: Window
    inputs: Inputs
    settings: Settings
    runs: int = Field(ge=0)
    failed_runs: int = Field(ge=0)
    attributed_failures: list[AttributedOut]
    mttf: list[MttfOut]
    node_failure_rate_per_1000_node_days: Optional[float]
    projection: list[SizeOut]
    ettr: list[SizeOut]
    taxonomy: list[CauseOut]
    lemon_nodes: list[LemonOut] = Field(description="flagged nodes only, most suspicious first")
    lemon_test: LemonTestOut
    baseline: BaselineOut
    incidents: int = Field(ge=0, description="incidents of one node each; shared ones are apart")
    shared_incidents: list[SharedOut] = Field(description="causes on many nodes at once, counted against none")
    warnings: list[str]
    other_events: int = Field(ge=0, description="events whose reason is not a cause (maintenance, administrators)")


def json_schema() -> str:
    return json.dumps(FleetReportOut.model_json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(json_schema(), end="")
