"""``healthd fleet backtest`` as a table and as the JSON document of ``docs/fleet-backtest.schema.json``."""

from __future__ import annotations

from typing import Any, Optional

from healthd import __version__
from healthd.fleet import html as h
from healthd.fleet.backtest import Backtest, Flag
from healthd.fleet.html import _esc, _figure, _html_table
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
        # The text output's first line, as a value and as the same words.
        "verdict": {"outcome": outcome(bt), "text": verdict(bt)[len("verdict: ") :]},
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


def _names(nodes: list[str], most: int = 8) -> str:
    shown = ", ".join(one_line(n, NAME_LIMIT) for n in nodes[:most])
    return shown + (f" and {len(nodes) - most} more" if len(nodes) > most else "")


def _count(nodes: list[str], what: str) -> str:
    return f"{len(nodes)} {what}{'' if len(nodes) == 1 else 's'}"


def outcome(bt: Backtest) -> str:
    """The verdict as a value (``VerdictOut.outcome`` in the schema): what ``verdict`` says in words."""
    if not bt.large_runs:
        return "no_large_runs"
    if not bt.drains:
        return "nothing_drained"
    return "helped" if bt.avoided else "not_helped"


def verdict(bt: Backtest) -> str:
    """One line: would draining the replay's nodes have cut the large runs' failures, and from what to what."""
    size = f"runs of >= {bt.settings.min_gpus} GPUs"
    judged = outcome(bt)
    if judged == "no_large_runs":
        return f"verdict: no {size} started in the replay: nothing to judge (a smaller --min-gpus counts more runs)"
    if judged == "nothing_drained":
        return f"verdict: the test flagged no node to drain at any step: draining would not have changed the {size}"
    drained = sorted({d.node for d in bt.drains})
    these = f"draining these {len(drained)} nodes ({_names(drained)})"
    if judged == "not_helped":
        return (
            f"verdict: {these} would not have helped: {len(bt.held)} of the {bt.large_runs} {size} held one, "
            "and none failed there"
        )
    few = " (few runs: each moves the rate; read the counts)" if bt.large_runs < 30 else ""
    return (
        f"verdict: {these} would have cut failures of {size} from {_percent(bt.failure_rate)} to "
        f"{_percent(bt.failure_rate_drained)} ({len(bt.avoided)} of {bt.large_failed} failures avoided){few}"
    )


def left_out_lines(bt: Backtest) -> list[str]:
    """The report's lemons the replay did not drain, and why: silent (and how to include them), or flagged late."""
    drained = {d.node for d in bt.drains}
    silent = [v.node for v in bt.report.lemons if v.node not in drained and not v.incident_evidence]
    late = [v.node for v in bt.report.lemons if v.node not in drained and v.incident_evidence]
    lines = []
    if silent and not bt.settings.drain_silent:
        lines.append(
            f"not drained: {_count(silent, 'silent lemon')} of the report ({_names(silent)}), flagged on job failures "
            "alone, as lemons --drain leaves them; --drain-silent drains them in the replay too"
        )
    elif silent:
        lines.append(
            f"not drained: {_count(silent, 'silent lemon')} of the report ({_names(silent)}): no step flagged them"
        )
    if late:
        lines.append(
            f"not drained: {_count(late, 'lemon')} of the report ({_names(late)}): flagged on the whole window, "
            "by no step's history before it"
        )
    return lines


def summary_lines(bt: Backtest) -> list[str]:
    s = bt.settings
    return [
        verdict(bt),
        f"backtest: {len(bt.steps)} steps of {s.every / 86400:g} days, large jobs >= {s.min_gpus} GPUs",
        f"large runs started in the replay: {bt.large_runs}, failed {bt.large_failed} "
        f"({_percent(bt.failure_rate)} as it happened)",
        f"held a drained node: {len(bt.held)} runs, {len(bt.avoided)} failed there (avoided): "
        f"{_percent(bt.failure_rate_drained)} with draining "
        f"(runs that held none: {_percent(bt.failure_rate_elsewhere)})",
        f"cost: {bt.node_hours_drained:.0f} node-hours drained, {len(bt.held)} large runs would have waited, "
        f"{bt.unschedulable} could not have been scheduled",
        *left_out_lines(bt),
    ]


def text(bt: Backtest) -> str:
    lines = summary_lines(bt)
    lines.append("")
    lines.extend(table_text(step_table(bt), key=True))
    lines.append("")
    lines.extend(f"assumption: {a}" for a in ASSUMPTIONS)
    return "\n".join(lines) + "\n"


CHART_CAPTION = (
    "The large runs that started in each step's interval: the share that failed as it happened, and the share "
    "that would have failed with the replay's drains (the avoided failures run elsewhere without failing). "
    "A step with few runs moves by whole runs: the bar's tooltip gives the counts."
)


def rate_chart(bt: Backtest) -> str:
    """An SVG of the large runs' failure rate per step: as it was, and with draining."""
    title = f"Failure rate of runs of >= {bt.settings.min_gpus} GPUs, by step"
    steps = [r for r in bt.by_step if r.runs]
    if not steps or bt.report.start is None or bt.report.end is None:
        return h._empty("plot-backtest", title, "no large runs started in the replay")
    rates = [(100 * r.failed / r.runs, 100 * (r.failed - r.avoided) / r.runs) for r in steps]
    y_axis = h.linear_axis(0.0, max(max(a, b) for a, b in rates))
    x_axis = h.time_axis(bt.by_step[0].start, bt.by_step[-1].end)
    keys = [h.Key("bar", h.PALETTE[1], "as it was"), h.Key("bar", h.PALETTE[0], "with draining")]
    box = h.Box(h._y_margin(y_axis), h.PLOT_H, h._legend_width(keys), width=2 * h.PLOT_W)
    body = h._x_ticks(box, x_axis) + h._y_ticks(box, y_axis)
    for step, pair in zip(steps, rates):
        left, right = x_axis.at(step.start, box.left, box.right), x_axis.at(step.end, box.left, box.right)
        half = max((right - left) / 2 - 2, 1.0)
        counts = f"{step.runs} runs from {local_iso(step.start)}: {step.failed} failed, {step.avoided} avoided"
        for i, (key, rate) in enumerate(zip(keys, pair)):
            top = y_axis.at(rate, box.bottom, box.top)
            body.append(
                f'<rect class="rate" data-series="{h._esc(key.text)}" data-rate="{rate:.2f}" '
                f'x="{left + 1 + i * (half + 1):.1f}" y="{top:.1f}" width="{half:.1f}" height="{box.bottom - top:.1f}" '
                f'fill="{key.color}"><title>{h._esc(key.text)}: {rate:.1f}% of {h._esc(counts)}</title></rect>'
            )
    zone = h._local(x_axis.low).strftime("%z")
    return h._frame("plot-backtest", title, box, (f"step (local time, UTC{zone})", "failed, % of runs"), body, keys)


def html_section(bt: Backtest) -> str:
    """The backtest as a section of the report's HTML page: its verdict, chart, summary, the drains, the assumptions."""
    lines = summary_lines(bt)
    summary = "".join(f"<li>{_esc(line)}</li>" for line in lines[1:])
    assumptions = "".join(f"<li>{_esc(a)}</li>" for a in ASSUMPTIONS)
    return (
        f'<section id="backtest"><h2>Backtest: draining the lemons as they were flagged</h2>'
        f'<p class="verdict">{_esc(lines[0])}</p>{_figure(rate_chart(bt), CHART_CAPTION)}'
        f'<ul class="summary">{summary}</ul>{_html_table(step_table(bt))}'
        f'<p>Assumptions:</p><ul class="assumptions">{assumptions}</ul></section>'
    )
