"""``--html FILE``: one self-contained page whose four plots are inline SVG drawn here, with no library.

Plain SVG keeps the page readable offline and in any browser, and keeps plotting
libraries out of the ``fleet`` extra. Every text that came from Slurm's records
is escaped. Each plot is a ``<svg class="plot" id=...>`` so a test can find it
in the rendered DOM.
"""

from __future__ import annotations

import html
import math
from typing import Callable, Optional, Sequence

from healthd.fleet.analyze import FleetReport
from healthd.fleet.render import local_iso, per_1000_node_days

WIDTH, HEIGHT = 640, 360
LEFT, RIGHT, TOP, BOTTOM = 70, 30, 30, 50
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
TIMELINE_NODES = 20


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _scale(low: float, high: float, start: float, end: float, log: bool) -> Callable[[float], float]:
    if log:
        low, high = math.log10(low), math.log10(high)
    span = (high - low) or 1.0

    def to_pixel(value: float) -> float:
        v = math.log10(value) if log else value
        return start + (v - low) / span * (end - start)

    return to_pixel


def _frame(plot_id: str, title: str, x_label: str, y_label: str, body: list[str]) -> str:
    return (
        f'<svg class="plot" id="{plot_id}" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{_esc(title)}">'
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="white"/>'
        f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-weight="bold">{_esc(title)}</text>'
        f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}" stroke="black"/>'
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}" stroke="black"/>'
        f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 10}" text-anchor="middle">{_esc(x_label)}</text>'
        f'<text transform="translate(16 {(TOP + HEIGHT - BOTTOM) / 2}) rotate(-90)" text-anchor="middle">'
        f"{_esc(y_label)}</text>" + "".join(body) + "</svg>"
    )


def _log_ticks(low: float, high: float) -> list[float]:
    return [10.0**e for e in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)]


def _empty(plot_id: str, title: str, why: str) -> str:
    body = [f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" fill="#555">{_esc(why)}</text>']
    return _frame(plot_id, title, "", "", body)


def mttf_plot(report: FleetReport) -> str:
    """MTTF against job size, log-log: observed buckets, the series-model fit, the projection."""
    title = "MTTF by job size (log-log)"
    observed = [(b.gpus, b.mttf_hours) for b in report.buckets if b.mttf_hours]
    projected = [(p.gpus, p.mttf_hours) for p in report.projection if p.mttf_hours]
    points = [(g, m) for g, m in observed + projected if m is not None]
    if not points:
        return _empty("plot-mttf", title, "no attributed failures: no MTTF to plot")
    xs = [g for g, _ in points] + [1.0]
    ys = [m for _, m in points]
    sizes = sorted({1, report.gpus_per_node, *[g for g, _ in points]})
    fit = [(float(g), m) for g, m in ((g, _model(report, g)) for g in sizes) if m]
    ys += [m for _, m in fit]
    x_lo, x_hi = 10 ** math.floor(math.log10(min(xs))), 10 ** math.ceil(math.log10(max(xs)))
    y_lo, y_hi = 10 ** math.floor(math.log10(min(ys))), 10 ** math.ceil(math.log10(max(ys)))
    x = _scale(x_lo, x_hi, LEFT, WIDTH - RIGHT, True)
    y = _scale(y_lo, y_hi, HEIGHT - BOTTOM, TOP, True)
    body = []
    for tick in _log_ticks(x_lo, x_hi):
        body.append(f'<text x="{x(tick):.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{tick:g}</text>')
    for tick in _log_ticks(y_lo, y_hi):
        body.append(f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>')
    if fit:
        # A polyline, not a line: one node is the least a job takes, so the model is flat below a node's GPUs.
        path = " ".join(f"{x(g):.1f},{y(m):.1f}" for g, m in sorted(set(fit)))
        body.append(f'<polyline class="fit" points="{path}" fill="none" stroke="{PALETTE[0]}" stroke-dasharray="6 4"/>')
    for g, m in observed:
        if m is not None:
            body.append(f'<circle class="observed" cx="{x(g):.1f}" cy="{y(m):.1f}" r="5" fill="{PALETTE[1]}"/>')
    for g, m in projected:
        if m is not None:
            body.append(
                f'<circle class="projected" cx="{x(g):.1f}" cy="{y(m):.1f}" r="5" fill="none" '
                f'stroke="{PALETTE[2]}" stroke-width="2"/>'
            )
    rate = per_1000_node_days(report)
    legend = f"observed (red), fit r_f = {rate:.2f} / 1000 node-days (dashed), projection (green)" if rate else ""
    body.append(f'<text x="{LEFT + 8}" y="{TOP + 12}" font-size="11">{_esc(legend)}</text>')
    return _frame("plot-mttf", title, "GPUs per job", "MTTF (hours)", body)


def _model(report: FleetReport, gpus: float) -> Optional[float]:
    from healthd.fleet.reliability import model_mttf

    rate = report.rate_per_node_hour
    return model_mttf(gpus, report.gpus_per_node, rate) if rate else None


def _bars(plot_id: str, title: str, x_label: str, rows: Sequence[tuple[str, float]], color: str) -> str:
    if not rows or max(v for _, v in rows) <= 0:
        return _empty(plot_id, title, "nothing to plot")
    top = max(v for _, v in rows)
    band = (HEIGHT - TOP - BOTTOM) / len(rows)
    x = _scale(0, top, LEFT + 60, WIDTH - RIGHT - 40, False)
    body = []
    for index, (label, value) in enumerate(rows):
        y0 = TOP + index * band
        body.append(
            f'<rect class="bar" x="{LEFT + 60}" y="{y0 + 2:.1f}" width="{x(value) - LEFT - 60:.1f}" '
            f'height="{max(band - 4, 1):.1f}" fill="{color}"/>'
            f'<text x="{LEFT + 56}" y="{y0 + band / 2 + 4:.1f}" text-anchor="end" font-size="11">'
            f"{_esc(label[:18])}</text>"
            f'<text x="{x(value) + 4:.1f}" y="{y0 + band / 2 + 4:.1f}" font-size="11">{value:,.0f}</text>'
        )
    return _frame(plot_id, title, x_label, "", body)


def cause_plots(report: FleetReport) -> str:
    """Failures and GPU-hours lost per cause code, side by side."""
    causes = report.taxonomy[:12]
    failures = _bars(
        "plot-causes", "Failures by cause", "failed runs", [(c.code, c.failures) for c in causes], PALETTE[1]
    )
    lost = _bars(
        "plot-gpu-hours",
        "GPU-hours lost by cause",
        "GPU-hours",
        [(c.code, c.gpu_hours_lost) for c in causes],
        PALETTE[3],
    )
    return failures + lost


def lemon_plot(report: FleetReport) -> str:
    """Every node: incidents against single-node failures beyond its users' own rates; lemons in red."""
    title = "Lemon-node signals"
    verdicts = report.verdicts
    if not verdicts:
        return _empty("plot-lemons", title, "no nodes")
    excess = [v.signals.single_node_failures - v.signals.expected_single_node_failures for v in verdicts]
    outs = [v.signals.out_count for v in verdicts]
    x = _scale(0, max(max(outs), 1) * 1.05, LEFT, WIDTH - RIGHT, False)
    y_lo, y_hi = min(min(excess), 0.0), max(max(excess), 1.0) * 1.05
    y = _scale(y_lo, y_hi, HEIGHT - BOTTOM, TOP, False)
    body = [
        f'<line x1="{LEFT}" y1="{y(0):.1f}" x2="{WIDTH - RIGHT}" y2="{y(0):.1f}" stroke="#bbb"/>',
        f'<text x="{LEFT}" y="{HEIGHT - BOTTOM + 16}">0</text>',
        f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - BOTTOM + 16}" text-anchor="end">{max(outs)}</text>',
        f'<text x="{LEFT - 6}" y="{y(y_hi / 1.05) + 4:.1f}" text-anchor="end">{y_hi / 1.05:.0f}</text>',
    ]
    for v, e, o in sorted(zip(verdicts, excess, outs), key=lambda t: t[0].flagged):
        color = PALETTE[1] if v.flagged else "#999"
        cls = "lemon" if v.flagged else "node"
        body.append(
            f'<circle class="{cls}" cx="{x(o):.1f}" cy="{y(e):.1f}" r="{5 if v.flagged else 3}" fill="{color}">'
            f"<title>{_esc(v.node)}: score {v.score:.1f}</title></circle>"
        )
        if v.flagged:
            body.append(f'<text x="{x(o) + 6:.1f}" y="{y(e) - 6:.1f}" font-size="10">{_esc(v.node[:16])}</text>')
    return _frame("plot-lemons", title, "incidents (out_count)", "single-node failures beyond expected", body)


def timeline_plot(report: FleetReport) -> str:
    """Incidents in time, one row per node: the flagged nodes first, then the nodes with the most incidents."""
    title = "Incident timeline"
    if not report.incidents or report.start is None or report.end is None:
        return _empty("plot-timeline", title, "no incidents")
    counts: dict[str, int] = {}
    for incident in report.incidents:
        counts[incident.node] = counts.get(incident.node, 0) + 1
    rows = [v.node for v in report.lemons]
    rows += [n for n, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if n not in rows]
    rows = rows[:TIMELINE_NODES]
    lemons = {v.node for v in report.lemons}
    start = min(report.start, min(i.start for i in report.incidents))
    end = max(report.end, max(i.start for i in report.incidents))
    x = _scale(start, end, LEFT + 60, WIDTH - RIGHT, False)
    band = (HEIGHT - TOP - BOTTOM) / max(len(rows), 1)
    codes = sorted({i.code for i in report.incidents})
    color = {code: PALETTE[i % len(PALETTE)] for i, code in enumerate(codes)}
    body = [
        f'<text x="{LEFT + 60}" y="{HEIGHT - BOTTOM + 16}">{_esc((local_iso(start) or "")[:10])}</text>',
        f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - BOTTOM + 16}" text-anchor="end">'
        f"{_esc((local_iso(end) or '')[:10])}</text>",
    ]
    position = {node: i for i, node in enumerate(rows)}
    for i, node in enumerate(rows):
        weight = ' font-weight="bold" fill="#d62728"' if node in lemons else ""
        body.append(
            f'<text x="{LEFT + 56}" y="{TOP + (i + 0.5) * band + 4:.1f}" text-anchor="end" font-size="10"{weight}>'
            f"{_esc(node[:16])}</text>"
        )
    for incident in report.incidents:
        row = position.get(incident.node)
        if row is None:
            continue
        body.append(
            f'<rect class="incident" x="{x(incident.start) - 1:.1f}" y="{TOP + row * band + 2:.1f}" width="3" '
            f'height="{max(band - 4, 1):.1f}" fill="{color[incident.code]}"><title>{_esc(incident.node)} '
            f"{_esc(', '.join(incident.codes))} {_esc(local_iso(incident.start))}</title></rect>"
        )
    return _frame("plot-timeline", title, "time", "", body)


def page(report: FleetReport) -> str:
    """The whole HTML page."""
    from healthd.fleet.render import table

    plots = mttf_plot(report) + cause_plots(report) + lemon_plot(report) + timeline_plot(report)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>healthd fleet report</title>"
        "<style>body{font-family:sans-serif;margin:16px}svg.plot{border:1px solid #ddd;margin:6px}"
        "pre{font-size:12px;background:#f6f6f6;padding:8px}</style></head><body>"
        f"<h1>healthd fleet report</h1><p>{_esc(local_iso(report.start))} to {_esc(local_iso(report.end))}</p>"
        f"<div>{plots}</div><pre>{_esc(table(report))}</pre></body></html>\n"
    )
