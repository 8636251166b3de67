"""The documented schema of ``check --once --json`` (and of the saved last pass), as pydantic models.

``report.py`` builds the document with plain dicts so that printing needs no
validation; these models are the contract: ``docs/check-output.schema.json`` is
generated from them (``python -m healthd.cli.schema``) and the tests validate real
output against them.
"""

from __future__ import annotations

import json
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

StatusName = Literal["OK", "WARNING", "CRITICAL", "UNKNOWN"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FindingOut(_Strict):
    check: str
    status: StatusName
    code: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$", description="short, stable, machine-matchable")
    subject: str
    message: str
    details: dict[str, Union[str, int, float, bool, None]]


class CheckOut(_Strict):
    name: str
    status: StatusName
    state: Literal["ran", "not_applicable", "error", "timeout", "stuck", "disabled"]
    duration_seconds: float = Field(ge=0)
    reason: str
    findings: list[FindingOut]


class SlurmErrorOut(_Strict):
    kind: Literal["unreachable", "not_found", "read_failed", "rejected", "taken_over"] = Field(
        description="unreachable: no usable answer (timed out, not run, slurm.conf or slurmctld unusable);"
        " not_found: the command is not installed; read_failed: an answer healthd cannot use;"
        " rejected: slurmctld refused a change; taken_over: the node carries someone else's reason after the drain"
    )
    command: str = Field(description='the Slurm command, "" when none was run')
    detail: str = Field(description="what Slurm or the system said, one short line")
    error: int = Field(ge=0, description="where the same error's whole text stands in action.errors")


class ActionOut(BaseModel):
    """The ``action`` section; only its additive keys are described here, the rest is open (docs/commands.md)."""

    model_config = ConfigDict(extra="allow")

    slurm_errors: Optional[list[SlurmErrorOut]] = Field(
        default=None,
        description="the Slurm failures among errors, as values; absent when there are none,"
        " and in documents saved by a healthd older than this key",
    )
    one_shot: Optional[bool] = Field(
        default=None,
        description="true: a one-shot pass (healthd check, the hook), which no later pass of its own retries;"
        " absent in documents saved by a healthd older than this key",
    )


class PassOut(_Strict):
    schema_version: Literal[1]
    healthd_version: str
    node: str
    started_at: str = Field(description="UTC, ISO 8601, seconds")
    duration_seconds: float = Field(ge=0)
    status: StatusName = Field(description="worst of the checks: CRITICAL > UNKNOWN > WARNING > OK")
    exit_code: Literal[0, 1, 2, 3]
    checks: list[CheckOut]
    action: Optional[ActionOut] = Field(default=None, description="what the Slurm policy decided and did")


def json_schema() -> str:
    return json.dumps(PassOut.model_json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(json_schema(), end="")
