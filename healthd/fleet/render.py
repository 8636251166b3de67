"""A ``FleetReport`` for people (a table) and programs (the JSON document of docs/fleet-report.schema.json).

Node names, users and job ids come from Slurm's records, which users influence
(job names are not shown at all): every such text is reduced to one printable
line before it is printed.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Optional

from healthd import __version__
from healthd.fleet.analyze import FleetReport
from healthd.fleet.reliability import NODE_DAYS, SizePoint
from healthd.text import one_line

SCHEMA_VERSION = 1
TABLE_LEMONS = 20
TABLE_CAUSES = 15


def local_iso(epoch: Optional[float]) -> Optional[str]:
    """Local time with its offset, seconds (sacct's times are local)."""
    if epoch is None:
        return None
    return _dt.datetime.fromtimestamp(epoch).astimezone().isoformat(timespec="seconds")


def per_1000_node_days(report: FleetReport) -> Optional[float]:
    rate = report.rate_per_node_hour
    return None if rate is None else rate * NODE_DAYS


def _points(points: tuple[SizePoint, ...]) -> list[dict[str, object]]:
    return [point.to_dict() for point in points]


def document(report: FleetReport) -> dict[str, Any]:
    """The ``--json`` document, version ``SCHEMA_VERSION``."""
    settings = report.settings
    rate = per_1000_node_days(report)
    return {
        "schema_version": SCHEMA_VERSION,
        "healthd_version": __version__,
        "window": {"start": local_iso(report.start), "end": local_iso(report.end), "days": round(report.days, 3)},
        "inputs": {
            "jobs": report.jobs.to_dict(),
            "events": report.events.to_dict(),
            "submit_lines": None if report.submit_lines is None else report.submit_lines.to_dict(),
        },
        "settings": {
            "window_before_seconds": settings.window_before,
            "window_after_seconds": settings.window_after,
            "incident_gap_seconds": settings.incident_gap,
            "checkpoint_interval_seconds": settings.checkpoint_interval,
            "restart_overhead_seconds": settings.restart_overhead,
            "gpus_per_node": report.gpus_per_node,
            "alpha": settings.alpha,
            "causes": list(settings.rules.causes),
            "healthd_prefix": settings.rules.healthd_prefix,
            "shared_window_seconds": settings.shared_window,
            "shared_nodes": settings.shared_nodes,
        },
        "warnings": list(report.warnings),
        "runs": report.runs,
        "failed_runs": report.failed_runs,
        "attributed_failures": [
            {
                "job_id": run.job_id,
                "node": run.node,
                "cause": run.cause,
                "state": run.state,
                "gpus": run.gpus,
                "end": local_iso(run.end),
            }
            for run in report.attributed
        ],
        "mttf": [b.to_dict() for b in report.buckets],
        "node_failure_rate_per_1000_node_days": None if rate is None else round(rate, 4),
        "projection": _points(report.projection),
        "ettr": _points(report.sizes),
        "taxonomy": [
            {
                "cause": total.code,
                "failures": total.failures,
                "gpu_hours_lost": round(total.gpu_hours_lost, 3),
                "incidents": total.incidents,
            }
            for total in report.taxonomy
        ],
        "lemon_nodes": [
            {
                "node": v.node,
                "score": round(v.score, 3),
                "incident_evidence": v.incident_evidence,
                "why": list(v.why),
                "signals": {
                    **v.signals.to_dict(),
                    "p_incidents": v.p_incidents,
                    "p_failures": v.p_failures,
                    "q_value": v.q_value,
                },
            }
            for v in report.lemons
        ],
        "lemon_test": lemon_test(report),
        "baseline": {
            "nodes": report.baseline.nodes,
            "incidents_per_node": round(report.baseline.mean, 4),
            "variance": round(report.baseline.variance, 4),
        },
        "incidents": report.own_incidents,
        "shared_incidents": [
            {"start": local_iso(shared.start), "codes": list(shared.codes), "nodes": list(shared.nodes)}
            for shared in report.shared
        ],
        "other_events": report.other_events,
    }


def lemon_test(report: FleetReport) -> dict[str, Any]:
    """The floors, what kept the test from flagging, and the nodes it held back (docs/fleet.md)."""
    floors = report.settings.floors
    return {
        "floors": {
            "min_nodes": floors.min_nodes,
            "min_days": floors.min_days,
            "min_incidents": floors.min_incidents,
            "min_failures": floors.min_failures,
        },
        "below_floors": list(report.lemon_floor),
        "notes": list(report.lemon_notes),
        "held_back": [
            {"node": h.node, "plain_q_value": h.plain_q, "q_value": h.q_value, "why": list(h.why)}
            for h in report.held_back
        ],
    }


def lemon_lines(report: FleetReport) -> list[str]:
    """For people: why nothing could be flagged, what the test could not see, and the nodes it held back."""
    lines = [f"  {note}: no node is flagged" for note in report.lemon_floor]
    lines.extend(f"  {note}" for note in report.lemon_notes)
    for held in report.held_back[:TABLE_LEMONS]:
        why = "; ".join(held.why) or "the fleet or window is below the floors"
        lines.append(
            f"  not flagged {one_line(held.node, 40)} (flagged without the guards, q {held.plain_q:.2g}): "
            f"{one_line(why, 400)}"
        )
    if len(report.held_back) > TABLE_LEMONS:
        lines.append(f"  ... and {len(report.held_back) - TABLE_LEMONS} more held back (--json lists all)")
    return lines


def _hours(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return f"{value / 24:.1f} d" if value >= 48 else f"{value:.1f} h"


def _bad_lines(summary: Any) -> list[str]:
    if not summary.bad:
        return []
    first = ", ".join(f"line {n} ({one_line(why, 80)})" for n, why in summary.first_bad)
    return [f"  {summary.source}: {summary.bad} bad line(s) skipped; first: {first}"]


def table(report: FleetReport) -> str:
    """The default output: a few short tables."""
    lines: list[str] = []
    settings = report.settings
    lines.append(
        f"healthd fleet report: {report.runs} job runs, {report.failed_runs} failed, "
        f"{len(report.attributed)} attributed to node causes; {report.own_incidents} incidents, "
        f"{len(report.shared)} shared"
    )
    lines.append(f"  window {local_iso(report.start)} .. {local_iso(report.end)} ({report.days:.1f} days)")
    lines.extend(_bad_lines(report.jobs) + _bad_lines(report.events))
    if report.submit_lines is not None:
        lines.extend(_bad_lines(report.submit_lines))
    lines.extend(f"  warning: {one_line(warning, 300)}" for warning in report.warnings)
    for shared in report.shared[:TABLE_CAUSES]:
        lines.append(
            f"  shared incident {local_iso(shared.start)} {one_line(shared.code, 24)} on {len(shared.nodes)} nodes "
            f"({one_line(','.join(shared.nodes[:4]), 60)}{',...' if len(shared.nodes) > 4 else ''}): "
            "counted against none of them"
        )
    if report.runs == 0:
        lines.append("  no finished job runs in the input: nothing to analyse")
        return "\n".join(lines) + "\n"
    rate = per_1000_node_days(report)
    lines.append("")
    lines.append(f"{'GPUs':>7} {'runs':>9} {'job hours':>11} {'failures':>9} {'MTTF':>10} {'E[ETTR]':>8}")
    ettr = {p.gpus: p.ettr for p in report.sizes}
    for b in report.buckets:
        lines.append(
            f"{b.gpus:>7} {b.runs:>9} {b.job_hours:>11.1f} {b.failures:>9} {_hours(b.mttf_hours):>10} "
            f"{ettr.get(b.gpus, 1.0):>8.3f}"
        )
    lines.append("")
    if rate is None:
        lines.append("r_f: no GPU job time to fit")
    else:
        lines.append(
            f"r_f = {rate:.2f} failures per 1000 node-days ({report.gpus_per_node} GPUs per node); "
            f"checkpoint every {settings.checkpoint_interval / 60:g} min, "
            f"restart {settings.restart_overhead / 60:g} min"
        )
        for p in report.projection:
            lines.append(f"  {p.gpus:>7} GPUs: MTTF {_hours(p.mttf_hours):>9}, expected ETTR {p.ettr:.3f}")
    lines.append("")
    lines.append(f"{'cause':<24} {'failures':>9} {'GPU hours lost':>15} {'incidents':>10}")
    for total in report.taxonomy[:TABLE_CAUSES]:
        lines.append(
            f"{one_line(total.code, 24):<24} {total.failures:>9} {total.gpu_hours_lost:>15.1f} {total.incidents:>10}"
        )
    lines.append("")
    lemons = report.lemons
    if not lemons:
        lines.append(f"lemon nodes: none flagged (false discovery rate {settings.alpha:g})")
    else:
        lines.append(
            f"lemon nodes: {len(lemons)} flagged (false discovery rate {settings.alpha:g}), most suspicious first"
        )
        lines.append(
            f"{'node':<16} {'score':>6} {'outs':>5} {'1-node':>7} {'multi':>6} {'fail rate':>9} {'excl':>5}  xids"
        )
        for v in lemons[:TABLE_LEMONS]:
            s = v.signals
            fail_rate = s.single_node_failure_rate
            lines.append(
                f"{one_line(v.node, 16):<16} {v.score:>6.1f} {s.out_count:>5} {s.single_node_failures_caused:>7} "
                f"{s.multi_node_failures_caused:>6} {'-' if fail_rate is None else f'{fail_rate:.3f}':>9} "
                f"{s.excluded_by_jobs:>5}  {','.join(s.xids) or '-'}"
            )
        if len(lemons) > TABLE_LEMONS:
            lines.append(f"  ... and {len(lemons) - TABLE_LEMONS} more (--json lists all)")
    lines.extend(lemon_lines(report))
    return "\n".join(lines) + "\n"
