"""The documented schema of ``check --once --json`` (and of the saved last pass), as pydantic models.

``report.py`` builds the document with plain dicts so that printing needs no
validation; these models are the contract: ``docs/check-output.schema.json`` is
generated from them (``python -m healthd.cli.schema``) and the tests validate real
output against them.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Optional, Union

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


class PassOut(_Strict):
    schema_version: Literal[1]
    healthd_version: str
    node: str
    started_at: str = Field(description="UTC, ISO 8601, seconds")
    duration_seconds: float = Field(ge=0)
    status: StatusName = Field(description="worst of the checks: CRITICAL > UNKNOWN > WARNING > OK")
    exit_code: Literal[0, 1, 2, 3]
    checks: list[CheckOut]
    action: Optional[dict[str, Any]] = Field(default=None, description="what the Slurm policy decided and did")


def json_schema() -> str:
    return json.dumps(PassOut.model_json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(json_schema(), end="")
