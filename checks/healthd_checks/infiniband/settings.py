"""``[checks.infiniband]``: the ``infiniband`` check's settings model (pydantic: imported only to validate a config)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from healthd.checks.settings import CheckSettings
from healthd.config.models import moved_from_node


class PerHourLimits(BaseModel):
    """Most increases per hour tolerated before a WARNING; 0 means any increase warns."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # NVIDIA's NIC health monitor design treats symbol errors above 120 per hour as fatal.
    symbol_error: float = Field(default=120, ge=0)
    # infiniband-diags' example thresholds file uses 10 for LinkErrorRecoveryCounter.
    link_error_recovery: float = Field(default=10, ge=0)
    # Our choice, in line with the infiniband-diags example thresholds (10 per counter).
    port_rcv_errors: float = Field(default=10, ge=0)
    # NVIDIA's NIC health monitor design treats any increase of these two as fatal.
    local_link_integrity_errors: float = Field(default=0, ge=0)
    excessive_buffer_overrun_errors: float = Field(default=0, ge=0)


class InfinibandSettings(CheckSettings):
    """``[checks.infiniband]``: the expected ports, counter limits, the rate window and the flapping rule."""

    expect_ports: Optional[list[str]] = Field(
        default=None,
        description="the ports to judge, DEVICE:PORT (a missing one is CRITICAL); default: every InfiniBand port",
        json_schema_extra=moved_from_node("ib_ports"),
    )
    expect_rate_gbps: Optional[int] = Field(
        default=None,
        gt=0,
        description="the rate every up port must run at (a port in expect_rates_gbps runs at its own)",
        json_schema_extra=moved_from_node("ib_rate_gbps"),
    )
    # One rate for every port cannot describe a node whose storage HCAs run slower than its
    # compute HCAs (NDR200 beside NDR400): each such port names its own rate.
    expect_rates_gbps: Optional[dict[str, Annotated[int, Field(strict=True, gt=0)]]] = Field(
        default=None,
        description="the rate each named up port must run at, DEVICE:PORT = Gb/s; a named port is required",
    )
    expect_link_layer: Optional[Literal["InfiniBand", "Ethernet"]] = Field(
        default=None,
        description="the link layer every judged port must have (and the one judged by default)",
        json_schema_extra=moved_from_node("ib_link_layer"),
    )
    per_hour: PerHourLimits = Field(
        default_factory=PerHourLimits, description="error counters' increases per hour tolerated, by counter"
    )
    rate_window: float = Field(
        default=3600.0, ge=60, le=7 * 86400, description="seconds of counter history a rate is judged over"
    )
    # Azure's node health agent errors when link_downed rises by more than 3 in 3 hours.
    flap_downs: int = Field(default=4, ge=1, le=255, description="link_downed increments that make a port flapping")
    flap_window: float = Field(default=3 * 3600.0, ge=60, le=7 * 86400, description="seconds the flap count spans")

    @field_validator("expect_ports", "expect_rates_gbps")
    @classmethod
    def _port_names(cls, value: Optional[Iterable[str]]) -> Optional[Iterable[str]]:
        for port in value or []:
            device, _, number = port.partition(":")
            if not device or not number.isdigit():
                raise ValueError(f"IB port {port!r} must look like DEVICE:PORT, e.g. mlx5_0:1")
        return value

    @model_validator(mode="after")
    def _rated_ports_are_judged(self) -> InfinibandSettings:
        # A rate for a port left out of expect_ports would never be looked at.
        if self.expect_ports is not None and self.expect_rates_gbps:
            unjudged = [port for port in self.expect_rates_gbps if port not in self.expect_ports]
            if unjudged:
                raise ValueError(f"expect_rates_gbps names {', '.join(unjudged)}, not in expect_ports")
        return self
