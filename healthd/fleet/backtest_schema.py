"""The documented schema of ``healthd fleet backtest --json``, as pydantic models.

``backtest_render.document`` builds the document with plain values; these models are
the contract: ``docs/fleet-backtest.schema.json`` is generated from them
(``python -m healthd.fleet.backtest_schema``) and the tests validate real output against them.
"""

from __future__ import annotations

import json
from typing import Literal, Optional

from pydantic import Field

from healthd.fleet.schema import Window, _Strict


class BacktestSettingsOut(_Strict):
    every_seconds: float = Field(gt=0)
    min_gpus: int = Field(ge=1, description="a large job has at least this many GPUs")
    drain_silent: bool = Field(description="lemons flagged on job failures alone are drained too")
    alpha: float


class FlagOut(_Strict):
    node: str
    time: Optional[str] = Field(description="the step: local time with offset, ISO 8601")
    incidents: int = Field(ge=0, description="the node's own incidents before the step")
    counted_failures: int = Field(ge=0)
    counted_expected: float = Field(ge=0, description="0 where the failure test needed none (below its floor)")
    q_value: float = Field(ge=0, le=1)
    incident_evidence: bool
    why: list[str]


class StepOut(_Strict):
    time: Optional[str]
    drained: list[FlagOut] = Field(description="flagged at this step on the history before it, and drained")
    returned: list[str] = Field(description="nodes back since the step before (a LEMON or REPAIR event ended)")
    below_floors: list[str]


class DrainOut(_Strict):
    node: str
    start: Optional[str]
    end: Optional[str] = Field(description="null: still drained at the end of the window")


class LargeJobsOut(_Strict):
    runs: int = Field(ge=0, description="large runs that started from the first step on")
    failed: int = Field(ge=0, description="those that ended FAILED or NODE_FAIL")
    held_drained_node: int = Field(ge=0, description="runs that started holding a node the replay had drained")
    avoided_failures: int = Field(
        ge=0, description="failed runs among them, attributed to a drained node they held or to no node"
    )
    failure_rate: Optional[float] = Field(description="failed / runs, as it happened")
    failure_rate_elsewhere: Optional[float] = Field(description="the rate of the runs that held no drained node")
    failure_rate_with_draining: Optional[float] = Field(description="(failed - avoided_failures) / runs")


class AvoidedOut(_Strict):
    job_id: str
    start: Optional[str]
    end: Optional[str]
    gpus: int = Field(ge=0)
    drained_nodes: list[str] = Field(description="the drained nodes it held when it started")
    attributed_to: Optional[str] = Field(description="the node its failure was attributed to, null if none")
    job_name: Optional[str] = Field(default=None, description="from sacct --json only; absent from sacct -P")


class CostOut(_Strict):
    node_hours_drained: float = Field(ge=0)
    would_have_waited: int = Field(ge=0, description="large runs that held a drained node (an upper bound)")
    could_not_be_scheduled: int = Field(ge=0, description="large runs needing more nodes than were in service")


class VerdictOut(_Strict):
    outcome: Literal["helped", "not_helped", "nothing_drained", "no_large_runs"] = Field(
        description="helped: draining would have avoided failures of large runs; not_helped: nodes were drained"
        " but no large run failed on one; nothing_drained: no step flagged a node; no_large_runs: nothing to judge"
    )
    text: str = Field(description="the verdict in words, as the first line of the text output says it")


class BacktestOut(_Strict):
    schema_version: Literal[1]
    healthd_version: str
    verdict: VerdictOut
    window: Window
    settings: BacktestSettingsOut
    steps: list[StepOut]
    drains: list[DrainOut]
    large_jobs: LargeJobsOut
    avoided: list[AvoidedOut]
    cost: CostOut
    assumptions: list[str]


def json_schema() -> str:
    return json.dumps(BacktestOut.model_json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(json_schema(), end="")
