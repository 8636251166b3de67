"""The synthetic fleet of the tests and benchmarks: the package's sample generator (``healthd.fleet.sample``)."""

from __future__ import annotations

from healthd.fleet.sample import (
    ADMIN_REASONS,
    CAUSE_REASONS,
    CO_REASON,
    SIZES,
    Fleet,
    FleetSpec,
    event_lines,
    job_lines,
    plant,
    submit_lines,
)

__all__ = [
    "ADMIN_REASONS",
    "CAUSE_REASONS",
    "CO_REASON",
    "SIZES",
    "Fleet",
    "FleetSpec",
    "event_lines",
    "job_lines",
    "plant",
    "submit_lines",
]
