"""A ``FleetReport`` for people (a table) and programs (the JSON document of docs/fleet-report.schema.json).

Node names, users and job ids come from Slurm's records, which users influence
(job names are not shown at all): every such text is reduced to one printable
line before it is printed.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, NamedTuple, Optional

from healthd import __version__
from healthd.fleet.analyze import FleetReport
from healthd.fleet.lemons import NodeSignals
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
    """The ``--json`` document, version ``SCHEMA_VERSION``: one function per section, in the document's order."""
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
        "settings": _settings_section(report),
        "warnings": list(report.warnings),
        "runs": report.runs,
        "failed_runs": report.failed_runs,
        "attributed_failures": _attributed_section(report),
        "mttf": [b.to_dict() for b in report.buckets],
        "node_failure_rate_per_1000_node_days": None if rate is None else round(rate, 4),
        "projection": _points(report.projection),
        "ettr": _points(report.sizes),
        "taxonomy": _taxonomy_section(report),
        "lemon_nodes": _lemon_section(report),
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


def _settings_section(report: FleetReport) -> dict[str, Any]:
    """What the analysis was told (``FleetSettings``), and the GPUs per node it used."""
    settings = report.settings
    return {
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
    }


def _attributed_section(report: FleetReport) -> list[dict[str, Any]]:
    """Each failed run attributed to a cause; its job name only when ``sacct --json`` gave one."""
    return [
        {
            "job_id": run.job_id,
            "node": run.node,
            "cause": run.cause,
            "state": run.state,
            "gpus": run.gpus,
            "end": local_iso(run.end),
            **({"job_name": report.job_names[run.job_id]} if run.job_id in report.job_names else {}),
        }
        for run in report.attributed
    ]


def _taxonomy_section(report: FleetReport) -> list[dict[str, Any]]:
    """Each cause code, most failures first."""
    return [
        {
            "cause": total.code,
            "failures": total.failures,
            "gpu_hours_lost": round(total.gpu_hours_lost, 3),
            "incidents": total.incidents,
        }
        for total in report.taxonomy
    ]


def _lemon_section(report: FleetReport) -> list[dict[str, Any]]:
    """Each flagged node, most suspicious first, with every signal the test weighed."""
    return [
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
    ]


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
    return [f"{summary.source}: {summary.bad} bad line(s) skipped; first: {first}"]


def beyond_expected(signals: NodeSignals) -> float:
    """The single-node failures the lemon test holds against a node: its count less what its users' rates predict.

    The one value the table's ``beyond`` column and the lemon plot's y axis both show
    (``lemons``, test 2): a silent lemon has no incident and no failure attributed to a
    cause on it, yet this is large.
    """
    return signals.single_node_failures - signals.expected_single_node_failures


def window_text(report: FleetReport) -> Optional[str]:
    """The window the report covers; None without one (no finished run and no --since/--until)."""
    if report.start is None or report.end is None:
        return None
    return f"{local_iso(report.start)} .. {local_iso(report.end)} ({report.days:.1f} days)"


def no_data(report: FleetReport) -> Optional[str]:
    """Why there is nothing to analyse, or None when the window holds finished job runs."""
    if report.runs:
        return None
    if window_text(report) is None:
        return "no data: no finished job runs in the input, so no window to report and nothing to analyse"
    return "no data: no finished job runs in this window, so nothing to analyse"


def summary_lines(report: FleetReport) -> list[str]:
    """What comes before the tables: totals, the window, bad lines, warnings, shared incidents, or why no data."""
    window = window_text(report)
    lines = [
        f"healthd fleet report: {report.runs} job runs, {report.failed_runs} failed, "
        f"{len(report.attributed)} attributed to node causes; {report.own_incidents} incidents, "
        f"{len(report.shared)} shared",
        *([f"window {window}"] if window else []),
    ]
    lines.extend(_bad_lines(report.jobs) + _bad_lines(report.events))
    if report.submit_lines is not None:
        lines.extend(_bad_lines(report.submit_lines))
    lines.extend(f"warning: {one_line(warning, 300)}" for warning in report.warnings)
    for shared in report.shared[:TABLE_CAUSES]:
        lines.append(
            f"shared incident {local_iso(shared.start)} {one_line(shared.code, NAME_LIMIT)} on {len(shared.nodes)} "
            f"nodes ({one_line(','.join(shared.nodes[:4]), 200)}{',...' if len(shared.nodes) > 4 else ''}): "
            "counted against none of them"
        )
    empty = no_data(report)
    return lines + ([empty] if empty else [])


class Column(NamedTuple):
    """One column of a report table: its header, what it means (the HTML caption, the text key), its alignment."""

    name: str
    meaning: str
    left: bool = False


class Table(NamedTuple):
    """A report table as text cells, for the text output and the HTML page alike: one value, one place."""

    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[str, ...], ...]
    more: str = ""  # a line after the rows when some were left out


BUCKET_COLUMNS = (
    Column("GPUs", "job size bucket: the largest power of two at or below the run's GPUs"),
    Column("runs", "finished job runs in the bucket (requeued runs count each)"),
    Column("job hours", "wall-clock hours of those runs"),
    Column("failures", "runs that ended FAILED or NODE_FAIL with a node-health cause in the window around their end"),
    Column("MTTF", "mean time to failure: job hours / failures (h: hours, d: days)"),
    Column("E[ETTR]", "expected effective training time ratio at that size from the fitted rate (1.0 is no loss)"),
)
CAUSE_COLUMNS = (
    Column("cause", "the cause code: healthd's finding code, or the configured reason prefix it matched", left=True),
    Column("failures", "failed runs attributed to this cause"),
    Column("GPU hours lost", "GPUs x wall-clock hours of those runs"),
    Column("incidents", "times a node went bad with this cause; a shared incident counts once"),
)
LEMON_COLUMNS = (
    Column("node", "the node's name", left=True),
    Column("score", "-log10 of the node's adjusted p-value (Benjamini-Hochberg q); 1.3 is q = 0.05, higher is worse"),
    Column("outs", "incidents: times a cause of its own took the node out (shared incidents not counted)"),
    Column("runs", "its single-node job runs"),
    Column("failed", "those of them that failed, any cause (the user's own included)"),
    Column("expected", "failures its users' own failure rates predict for those runs"),
    Column("beyond", "failed - expected: the failures held against the node (the lemon plot's y axis)"),
    Column("caused", "failed runs attributed to a cause event on this node: single-node + multi-node"),
    Column("excl", "runs of jobs whose submit line excluded this node (-x, --exclude); 0 without --submit-lines"),
    Column("xids", "distinct Xid codes among its own incidents", left=True),
)
# Names and codes are shown whole up to this many characters (Slurm node names and healthd
# codes are far shorter); only longer, hostile text is cut, with an ellipsis.
NAME_LIMIT = 200


def bucket_table(report: FleetReport) -> Table:
    ettr = {p.gpus: p.ettr for p in report.sizes}
    rows = tuple(
        (str(b.gpus), str(b.runs), f"{b.job_hours:.1f}", str(b.failures), _hours(b.mttf_hours),
         f"{ettr.get(b.gpus, 1.0):.3f}")
        for b in report.buckets
    )  # fmt: skip
    return Table("MTTF and expected ETTR by job size", BUCKET_COLUMNS, rows)


def cause_table(report: FleetReport) -> Table:
    rows = tuple(
        (one_line(t.code, NAME_LIMIT), str(t.failures), f"{t.gpu_hours_lost:.1f}", str(t.incidents))
        for t in report.taxonomy[:TABLE_CAUSES]
    )
    more = _more(len(report.taxonomy), TABLE_CAUSES, "causes")
    return Table("Causes, most failures first", CAUSE_COLUMNS, rows, more)


def lemon_table(report: FleetReport) -> Table:
    lemons = report.lemons
    rows = []
    for v in lemons[:TABLE_LEMONS]:
        s = v.signals
        rows.append(
            (
                one_line(v.node, NAME_LIMIT), f"{v.score:.1f}", str(s.out_count), str(s.single_node_runs),
                str(s.single_node_failures), f"{s.expected_single_node_failures:.1f}", f"{beyond_expected(s):.1f}",
                f"{s.single_node_failures_caused}+{s.multi_node_failures_caused}", str(s.excluded_by_jobs),
                ",".join(one_line(x, NAME_LIMIT) for x in s.xids) or "-",
            )
        )  # fmt: skip
    title = (
        f"Lemon nodes: {len(lemons)} flagged (false discovery rate {report.settings.alpha:g}), most suspicious first"
        if lemons
        else f"Lemon nodes: none flagged (false discovery rate {report.settings.alpha:g})"
    )
    return Table(title, LEMON_COLUMNS, tuple(rows), _more(len(lemons), TABLE_LEMONS, "lemon nodes"))


def _more(count: int, shown: int, what: str) -> str:
    return f"... and {count - shown} more {what} (--json lists all)" if count > shown else ""


def table_text(table: Table, key: bool = False) -> list[str]:
    """The table as aligned text lines, each column as wide as its widest cell; ``key`` adds what each column means."""
    if not table.rows:
        return [table.title]
    widths = [max(len(c.name), *(len(row[i]) for row in table.rows)) for i, c in enumerate(table.columns)]

    def line(cells: tuple[str, ...]) -> str:
        parts = (
            cell.ljust(w) if column.left else cell.rjust(w) for cell, w, column in zip(cells, widths, table.columns)
        )
        return "  ".join(parts).rstrip()

    lines = [table.title, line(tuple(c.name for c in table.columns))]
    lines.extend(line(row) for row in table.rows)
    lines.extend([f"  {table.more}"] if table.more else [])
    if key:
        lines.extend(f"  {c.name:<{max(len(c.name) for c in table.columns)}}  {c.meaning}" for c in table.columns)
    return lines


def rate_lines(report: FleetReport) -> list[str]:
    """r_f, the model's settings, and its projection to larger jobs."""
    rate = per_1000_node_days(report)
    if rate is None:
        return ["r_f: no GPU job time to fit"]
    settings = report.settings
    lines = [
        f"r_f = {rate:.2f} failures per 1000 node-days ({report.gpus_per_node} GPUs per node); "
        f"checkpoint every {settings.checkpoint_interval / 60:g} min, restart {settings.restart_overhead / 60:g} min"
    ]
    for p in report.projection:
        lines.append(f"  {p.gpus:>7} GPUs: MTTF {_hours(p.mttf_hours):>9}, expected ETTR {p.ettr:.3f}")
    return lines


def next_lines(report: FleetReport) -> list[str]:
    """What to do next with the flagged nodes: the command that drains them, and what it leaves alone."""
    if report.runs == 0:
        return []
    loud = [one_line(v.node, NAME_LIMIT) for v in report.lemons if v.incident_evidence]
    silent = [one_line(v.node, NAME_LIMIT) for v in report.lemons if not v.incident_evidence]
    if not report.lemons:
        return ["next: no node to drain; run the report again over a longer window as the accounting grows"]
    lines = []
    if loud:
        lines.append(
            f"next: `healthd fleet lemons --drain` (the same inputs) says how it would drain {', '.join(loud)}; "
            "`healthd fleet backtest` first shows what draining would have changed for large jobs; "
            "--apply drains"
        )
    if silent:
        lines.append(
            f"next: {', '.join(silent)} failed jobs without an incident (silent): look at them, or add "
            "--drain-silent to drain them too"
        )
    return lines


def table(report: FleetReport) -> str:
    """The default output: a few short tables."""
    summary = summary_lines(report)
    lines = [summary[0], *(f"  {line}" for line in summary[1:])]
    if report.runs == 0:
        return "\n".join(lines) + "\n"
    lines += ["", *table_text(bucket_table(report)), "", *rate_lines(report), "", *table_text(cause_table(report))]
    lines += ["", *table_text(lemon_table(report), key=True)]
    lines.extend(lemon_lines(report))
    lines += ["", *next_lines(report)]
    return "\n".join(lines) + "\n"
