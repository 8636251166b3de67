"""``healthd fleet backtest`` as a table and as the JSON document of ``docs/fleet-backtest.schema.json``."""

from __future__ import annotations

from typing import Any, Optional

from healthd import __version__
from healthd.fleet.backtest import Backtest, Flag
from healthd.fleet.render import NAME_LIMIT, Column, Table, local_iso, table_text
from healthd.text import one_line

ASSUMPTIONS = (
    "a large run that held a drained node runs elsewhere; if its failure was attributed to a drained node or to "
    "none, it would not have failed (an unattributed failure may be the user's: an upper bound)",
    "only runs that started on a drained node are moved: Slurm lets running jobs finish on a draining node",
    "every run of a requeued job counts as a run (sacct -D)",
    "accounting does not show idle nodes: every large run that held a drained node is counted as one that "
    "would have waited for another; 'could not be scheduled' counts those needing more nodes than were in service",
)


def _rate(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 4)


def _flag(flag: Flag) -> dict[str, Any]:
    return {
        "node": flag.node,
        "time": local_iso(flag.time),
        "incidents": flag.out_count,
        "counted_failures": flag.counted_failures,
        "counted_expected": round(flag.counted_expected, 3),
        "q_value": flag.q_value,
        "incident_evidence": flag.incident_evidence,
        "why": list(flag.why),
    }


def document(bt: Backtest) -> dict[str, Any]:
    report = bt.report
    return {
        "schema_version": 1,
        "healthd_version": __version__,
        "window": {"start": local_iso(report.start), "end": local_iso(report.end), "days": round(report.days, 3)},
        "settings": {
            "every_seconds": bt.settings.every,
            "min_gpus": bt.settings.min_gpus,
            "drain_silent": bt.settings.drain_silent,
            "alpha": report.settings.alpha,
        },
        "steps": [
            {
                "time": local_iso(step.time),
                "drained": [_flag(flag) for flag in step.flagged],
                "returned": list(step.returned),
                "below_floors": list(step.below_floors),
            }
            for step in bt.steps
        ],
        "drains": [
            {"node": d.node, "start": local_iso(d.start), "end": local_iso(d.end) if d.end is not None else None}
            for d in bt.drains
        ],
        "large_jobs": {
            "runs": bt.large_runs,
            "failed": bt.large_failed,
            "held_drained_node": len(bt.held),
            "avoided_failures": len(bt.avoided),
            "failure_rate": _rate(bt.failure_rate),
            "failure_rate_elsewhere": _rate(bt.failure_rate_elsewhere),
            "failure_rate_with_draining": _rate(bt.failure_rate_drained),
        },
        "avoided": [
            {
                "job_id": run.job_id,
                "start": local_iso(run.start),
                "end": local_iso(run.end),
                "gpus": run.gpus,
                "drained_nodes": list(run.drained),
                "attributed_to": run.attributed_to,
                **({"job_name": report.job_names[run.job_id]} if run.job_id in report.job_names else {}),
            }
            for run in bt.avoided
        ],
        "cost": {
            "node_hours_drained": round(bt.node_hours_drained, 1),
            "would_have_waited": len(bt.held),
            "could_not_be_scheduled": bt.unschedulable,
        },
        "assumptions": list(ASSUMPTIONS),
    }


def _percent(value: Optional[float]) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def step_table(bt: Backtest) -> Table:
    rows = tuple(
        (
            local_iso(f.time) or "-",
            one_line(f.node, NAME_LIMIT),
            str(f.out_count),
            str(f.counted_failures),
            f"{f.q_value:.2g}",
        )
        for step in bt.steps
        for f in step.flagged
    )
    return Table(
        "Drained by the replay, in order",
        (
            Column("step", "the step at which the test, on the history before it, flagged the node", left=True),
            Column("node", "drained from that step on", left=True),
            Column("incidents", "its own incidents before the step"),
            Column("failed", "its counted single-node failures before the step"),
            Column("q", "the Benjamini-Hochberg q-value at that step"),
        ),
        rows,
    )


def summary_lines(bt: Backtest) -> list[str]:
    s = bt.settings
    return [
        f"backtest: {len(bt.steps)} steps of {s.every / 86400:g} days, large jobs >= {s.min_gpus} GPUs",
        f"large runs started in the replay: {bt.large_runs}, failed {bt.large_failed} "
        f"({_percent(bt.failure_rate)} as it happened)",
        f"held a drained node: {len(bt.held)} runs, {len(bt.avoided)} failed there (avoided): "
        f"{_percent(bt.failure_rate_drained)} with draining "
        f"(runs that held none: {_percent(bt.failure_rate_elsewhere)})",
        f"cost: {bt.node_hours_drained:.0f} node-hours drained, {len(bt.held)} large runs would have waited, "
        f"{bt.unschedulable} could not have been scheduled",
    ]


def text(bt: Backtest) -> str:
    lines = summary_lines(bt)
    lines.append("")
    lines.extend(table_text(step_table(bt), key=True))
    lines.append("")
    lines.extend(f"assumption: {a}" for a in ASSUMPTIONS)
    return "\n".join(lines) + "\n"


def html_section(bt: Backtest) -> str:
    """The backtest as a section of the report's HTML page: its summary, the drains, the assumptions."""
    from healthd.fleet.html import _esc, _html_table

    summary = "".join(f"<li>{_esc(line)}</li>" for line in summary_lines(bt))
    assumptions = "".join(f"<li>{_esc(a)}</li>" for a in ASSUMPTIONS)
    return (
        f'<section id="backtest"><h2>Backtest: draining the lemons as they were flagged</h2>'
        f'<ul class="summary">{summary}</ul>{_html_table(step_table(bt))}'
        f'<p>Assumptions:</p><ul class="assumptions">{assumptions}</ul></section>'
    )
