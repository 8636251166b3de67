"""``--html FILE``: one self-contained page whose plots are inline SVG drawn here, with no library.

Plain SVG keeps the page readable offline and in any browser, and keeps plotting
libraries out of the ``fleet`` extra. Every text that came from Slurm's records
(node names, reasons, codes) is escaped. Each plot is a ``<svg class="plot" id=...>``
with a ``<g class="legend">``, its axis labels (``class="axis-label"``) and its
ticks (``class="tick"``, ``data-axis``), so a test can read them in the rendered DOM.

Labels are never cut: names and codes are drawn in the monospace font, whose advance
is known (DejaVu Sans Mono, Debian's default, is 0.602 em), so the margin is made as
wide as the longest label, and a label longer than ``WRAP`` characters wraps.
The tables are the text output's own (``render.Table``), so a number on the page is
the number in the text.
"""

from __future__ import annotations

import datetime as _dt
import html
import math
from typing import NamedTuple, Optional, Sequence

from healthd.fleet.analyze import FleetReport
from healthd.fleet.causes import Incident, SharedIncident
from healthd.fleet.reliability import model_mttf
from healthd.fleet.render import (
    NAME_LIMIT,
    TABLE_LEMONS,
    Table,
    beyond_expected,
    bucket_table,
    cause_table,
    lemon_table,
    local_iso,
    next_lines,
    no_data,
    per_1000_node_days,
    rate_lines,
    summary_lines,
)
from healthd.text import one_line

PLOT_W, PLOT_H = 300, 240  # the data area
TOP, BOTTOM, PAD = 34, 46, 10  # title above, ticks and x label below
Y_LABEL = 24  # the rotated y axis label's column
LEGEND_GAP = 44  # from the data area to the legend: room for half of the last x tick's text (a date)
FONT = 11
MONO = 0.62 * FONT  # px per character of monospace text (0.602 em, rounded up)
DIGIT = 0.66 * FONT  # px per character of tick text (DejaVu Sans digits are 0.636 em)
LINE = 13  # px between the lines of a wrapped label
WRAP = 30  # characters per line of a name or code
KEY_WRAP = 18  # characters per line of a legend entry
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
LEMON, NODE, OTHER = PALETTE[1], "#999999", "#7f7f7f"
TIMELINE_NODES = 20
PLACE_TRIES = 12  # lines up and down a lemon's label may move to stay clear of the others
TOP_BARS = 12
HOUR = 3600.0
# Time ticks: the shortest step (hours) that gives at most TIME_TICKS ticks over the window; a
# date is 10 characters (73 px), so seven fit the timeline's 600 px apart.
TIME_STEPS = (1, 2, 3, 6, 12, 24, 48, 96, 168, 336, 672, 1344, 2184, 4368, 8736)
TIME_TICKS = 7


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _wrap(text: str, width: int = WRAP, marks: str = "_-., ") -> list[str]:
    """``text`` as lines of at most ``width`` characters, broken after one of ``marks`` where there is one."""
    rest = one_line(text, NAME_LIMIT)
    lines = []
    while len(rest) > width:
        cut = max(rest.rfind(mark, 1, width) for mark in marks)
        cut = cut + 1 if cut > 0 else width
        lines.append(rest[:cut])
        rest = rest[cut:]
    return [*lines, rest]


def _text_width(lines: Sequence[str]) -> float:
    return max((len(line) for line in lines), default=0) * MONO


def _label(x: float, y: float, lines: Sequence[str], anchor: str = "end", attrs: str = "") -> str:
    """A monospace label centred on ``y``, one ``tspan`` per line."""
    first = -(len(lines) - 1) * LINE / 2
    spans = "".join(
        f'<tspan x="{x:.1f}" dy="{first if i == 0 else LINE:.1f}">{_esc(line)}</tspan>' for i, line in enumerate(lines)
    )
    return (
        f'<text class="label" x="{x:.1f}" y="{y + 4:.1f}" text-anchor="{anchor}" font-family="monospace" '
        f'font-size="{FONT}"{attrs}>{spans}</text>'
    )


class Key(NamedTuple):
    """One legend entry: a mark (dot, ring, dash, bar, diamond, name) in a colour, and what it means."""

    mark: str
    color: str
    text: str


class Box(NamedTuple):
    """Where a plot's data area lies in its SVG, and how wide its legend column is."""

    left: float
    height: float
    legend: float
    top: float = TOP
    width: float = PLOT_W

    @property
    def right(self) -> float:
        return self.left + self.width

    @property
    def bottom(self) -> float:
        return self.top + self.height


def _swatch(key: Key, x: float, y: float) -> str:
    c = key.color
    line = f'x1="{x}" y1="{y}" x2="{x + 14}" y2="{y}"'
    marks = {
        "dot": f'<circle cx="{x + 7}" cy="{y}" r="5" fill="{c}"/>',
        "ring": f'<circle cx="{x + 7}" cy="{y}" r="5" fill="none" stroke="{c}" stroke-width="2"/>',
        "dash": f'<line {line} stroke="{c}" stroke-width="2" stroke-dasharray="4 3"/>',
        "bar": f'<rect x="{x}" y="{y - 6}" width="14" height="12" fill="{c}"/>',
        "diamond": f'<polygon points="{x + 7},{y - 7} {x + 14},{y} {x + 7},{y + 7} {x},{y}" fill="{c}" '
        'stroke="black"/>',
        "name": f'<text x="{x}" y="{y + 4}" font-size="{FONT}" font-weight="bold" fill="{c}">Ab</text>',
        "none": "",
    }
    return marks[key.mark]


def _key_lines(key: Key) -> list[str]:
    return _wrap(key.text, KEY_WRAP, " _-")


def _legend_width(keys: Sequence[Key]) -> float:
    return 22 + max((_text_width(_key_lines(k)) for k in keys), default=0)


def _legend(box: Box, keys: Sequence[Key]) -> tuple[str, float]:
    """The legend column right of the data area, and its bottom."""
    x, y = box.right + LEGEND_GAP, box.top + 8
    parts = ['<g class="legend">']
    for key in keys:
        lines = _key_lines(key)
        parts.append(
            f'<g class="legend-item">{_swatch(key, x, y)}'
            f"{_label(x + 20, y + (len(lines) - 1) * LINE / 2, lines, 'start')}</g>"
        )
        y += len(lines) * LINE + 6
    return "".join(parts) + "</g>", y


def _frame(plot_id: str, title: str, box: Box, labels: tuple[str, str], body: list[str], keys: Sequence[Key]) -> str:
    """The SVG: title, axes and their labels, the body, the legend."""
    legend, legend_bottom = _legend(box, keys)
    width = box.right + (LEGEND_GAP + PAD + box.legend if keys else PAD)
    height = max(box.bottom + BOTTOM, legend_bottom + PAD)
    x_label, y_label = labels
    middle = (box.top + box.bottom) / 2
    return (
        f'<svg class="plot" id="{plot_id}" xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
        f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{_esc(title)}" '
        f'font-family="sans-serif" font-size="{FONT}">'
        f'<rect x="0" y="0" width="{width:.0f}" height="{height:.0f}" fill="white"/>'
        f'<text class="title" x="{width / 2:.1f}" y="20" text-anchor="middle" font-weight="bold" font-size="14">'
        f"{_esc(title)}</text>"
        + "".join(body)
        + f'<line x1="{box.left}" y1="{box.bottom}" x2="{box.right}" y2="{box.bottom}" stroke="black"/>'
        f'<line x1="{box.left}" y1="{box.top}" x2="{box.left}" y2="{box.bottom}" stroke="black"/>'
        f'<text class="axis-label" data-axis="x" x="{(box.left + box.right) / 2:.1f}" y="{box.bottom + 38:.1f}" '
        f'text-anchor="middle" font-size="12">{_esc(x_label)}</text>'
        f'<text class="axis-label" data-axis="y" transform="translate(14 {middle:.1f}) rotate(-90)" '
        f'text-anchor="middle" font-size="12">{_esc(y_label)}</text>' + legend + "</svg>"
    )


def _empty(plot_id: str, title: str, why: str) -> str:
    box = Box(Y_LABEL + 30, PLOT_H, 0)
    body = [
        f'<text class="empty" x="{(box.left + box.right) / 2:.1f}" y="{box.top + PLOT_H / 2:.1f}" '
        f'text-anchor="middle" fill="#555">{_esc(why)}</text>'
    ]
    return _frame(plot_id, title, box, ("", ""), body, ())


class Axis(NamedTuple):
    """A numeric axis: its domain, linear or log, and its ticks (value, text)."""

    low: float
    high: float
    ticks: tuple[tuple[float, str], ...]
    log: bool = False

    def at(self, value: float, start: float, end: float) -> float:
        """The pixel of ``value`` on an axis drawn from ``start`` (low) to ``end`` (high)."""
        if self.log:
            low, high, v = math.log10(self.low), math.log10(self.high), math.log10(value)
        else:
            low, high, v = self.low, self.high, value
        return start + (v - low) / ((high - low) or 1.0) * (end - start)


def _nice(value: float, rounded: bool) -> float:
    """A "nice" number, 1, 2, 5 or 10 times a power of ten, near ``value``.

    P. S. Heckbert, "Nice numbers for graph labels", Graphics Gems (1990): a tick step of
    one of these keeps every tick a round number.
    """
    exponent = math.floor(math.log10(value))
    fraction = value / 10**exponent
    if rounded:
        nice = 1 if fraction < 1.5 else 2 if fraction < 3 else 5 if fraction < 7 else 10
    else:
        nice = 1 if fraction <= 1 else 2 if fraction <= 2 else 5 if fraction <= 5 else 10
    return float(nice * 10**exponent)


def linear_axis(low: float, high: float, integer: bool = False, count: int = 5) -> Axis:
    """About ``count`` round ticks covering [low, high], never fewer than three; whole numbers if ``integer``."""
    if high <= low:
        high = low + (abs(low) or 1.0)
    step = _nice(_nice(high - low, False) / (count - 1), True)
    step = max(step, 1.0) if integer else step
    first, last = math.floor(low / step), math.ceil(high / step)
    last = max(last, first + 2)
    decimals = max(0, -math.floor(math.log10(step)))
    ticks = tuple(
        (round(i * step, decimals), f"{round(i * step, decimals) + 0.0:,.{decimals}f}") for i in range(first, last + 1)
    )
    return Axis(ticks[0][0], ticks[-1][0], ticks)


def _power_text(value: float) -> str:
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


def log_axis(low: float, high: float) -> Axis:
    """Decades covering [low, high]; with fewer than three, the 2s and 5s between them too."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    last = max(last, first + 1)
    values = [10.0**e for e in range(first, last + 1)]
    if len(values) < 3:
        values = sorted(values + [m * 10.0**e for e in range(first, last) for m in (2, 5)])
    return Axis(values[0], values[-1], tuple((v, _power_text(v)) for v in values), log=True)


def _local(epoch: float) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(epoch).astimezone()


def _time_ticks(start: float, end: float, hours: int) -> list[tuple[float, str]]:
    """The round local times every ``hours`` within [start, end], as (epoch, text)."""
    begin = _local(start)
    if hours < 24:
        moment = begin.replace(minute=0, second=0, microsecond=0, hour=begin.hour - begin.hour % hours)
    else:
        moment = begin.replace(hour=0, minute=0, second=0, microsecond=0)
    ticks: list[tuple[float, str]] = []
    while moment.timestamp() <= end:
        if moment.timestamp() >= start:
            ticks.append((moment.timestamp(), moment.strftime("%Y-%m-%d" if hours >= 24 else "%m-%d %H:%M")))
        # Days are stepped on the calendar, so a tick stays at local midnight across a DST change.
        step = _dt.timedelta(days=hours // 24) if hours >= 24 else _dt.timedelta(hours=hours)
        moment = (moment.replace(tzinfo=None) + step).astimezone()
    return ticks


def time_axis(start: float, end: float) -> Axis:
    """From ``start`` to ``end`` exactly (at least three hours), with local dates or hours at a round step.

    The step is the shortest that gives at most ``TIME_TICKS`` ticks within the window; the steps
    are at most twice each other, so that step still gives three or more.
    """
    end = max(end, start + 3 * HOUR)
    ticks: list[tuple[float, str]] = []
    for hours in TIME_STEPS:
        if (end - start) / (hours * HOUR) <= TIME_TICKS:
            ticks = _time_ticks(start, end, hours)
            if len(ticks) <= TIME_TICKS:
                break
    return Axis(start, end, tuple(ticks))


def _x_ticks(box: Box, axis: Axis, right: Optional[float] = None) -> list[str]:
    parts = []
    for value, text in axis.ticks:
        x = axis.at(value, box.left, box.right if right is None else right)
        parts.append(
            f'<line x1="{x:.1f}" y1="{box.top}" x2="{x:.1f}" y2="{box.bottom}" stroke="#e4e4e4"/>'
            f'<text class="tick" data-axis="x" x="{x:.1f}" y="{box.bottom + 16}" text-anchor="middle">'
            f"{_esc(text)}</text>"
        )
    return parts


def _y_ticks(box: Box, axis: Axis) -> list[str]:
    parts = []
    for value, text in axis.ticks:
        y = axis.at(value, box.bottom, box.top)
        parts.append(
            f'<line x1="{box.left}" y1="{y:.1f}" x2="{box.right}" y2="{y:.1f}" stroke="#e4e4e4"/>'
            f'<text class="tick" data-axis="y" x="{box.left - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{_esc(text)}</text>"
        )
    return parts


def _y_margin(axis: Axis) -> float:
    return Y_LABEL + max(len(text) for _, text in axis.ticks) * DIGIT + 12


def mttf_plot(report: FleetReport) -> str:
    """MTTF against job size, log-log: observed buckets, the series-model fit, the projection."""
    title = "MTTF by job size"
    observed = [(float(b.gpus), b.mttf_hours) for b in report.buckets if b.mttf_hours]
    projected = [(float(p.gpus), p.mttf_hours) for p in report.projection if p.mttf_hours]
    points = [(g, m) for g, m in observed + projected if m is not None]
    if not points:
        return _empty("plot-mttf", title, "no attributed failures: no MTTF to plot")
    sizes = sorted({1, report.gpus_per_node, *[g for g, _ in points]})
    fit = sorted({(float(g), m) for g, m in ((g, _model(report, g)) for g in sizes) if m})
    ys = [m for _, m in points + fit]
    x_axis = log_axis(min(g for g, _ in [*points, (1.0, 0)]), max(g for g, _ in points))
    y_axis = log_axis(min(ys), max(ys))
    rate = per_1000_node_days(report)
    keys = [Key("dot", PALETTE[1], "observed: job hours / failures of a size bucket")]
    if fit:
        keys.append(Key("dash", PALETTE[0], f"nodes-in-series fit, r_f = {rate or 0:.2f} per 1000 node-days"))
    keys.append(Key("ring", PALETTE[2], "projection to larger jobs"))
    box = Box(_y_margin(y_axis), PLOT_H, _legend_width(keys))
    body = _x_ticks(box, x_axis) + _y_ticks(box, y_axis)

    def at(g: float, m: float) -> str:
        return f'cx="{x_axis.at(g, box.left, box.right):.1f}" cy="{y_axis.at(m, box.bottom, box.top):.1f}"'

    if fit:
        # A polyline, not a line: one node is the least a job takes, so the model is flat below a node's GPUs.
        path = " ".join(
            f"{x_axis.at(g, box.left, box.right):.1f},{y_axis.at(m, box.bottom, box.top):.1f}" for g, m in fit
        )
        body.append(f'<polyline class="fit" points="{path}" fill="none" stroke="{PALETTE[0]}" stroke-dasharray="6 4"/>')
    body.extend(f'<circle class="observed" {at(g, m)} r="5" fill="{PALETTE[1]}"/>' for g, m in observed if m)
    body.extend(
        f'<circle class="projected" {at(g, m)} r="5" fill="none" stroke="{PALETTE[2]}" stroke-width="2"/>'
        for g, m in projected
        if m
    )
    return _frame("plot-mttf", title, box, ("GPUs per job (log scale)", "MTTF, hours (log scale)"), body, keys)


def _model(report: FleetReport, gpus: float) -> Optional[float]:
    rate = report.rate_per_node_hour
    return model_mttf(gpus, report.gpus_per_node, rate) if rate else None


def _bands(labels: Sequence[Sequence[str]], least: float) -> list[float]:
    """Each row's height: room for its label's lines."""
    return [max(least, len(lines) * LINE + 6) for lines in labels]


def _middles(top: float, bands: Sequence[float]) -> list[float]:
    """The centre of each row, rows stacked from ``top``."""
    return [top + sum(bands[:i]) + band / 2 for i, band in enumerate(bands)]


def _bars(plot_id: str, title: str, x_label: str, rows: Sequence[tuple[str, float]], key: Key) -> str:
    """Horizontal bars, the ``TOP_BARS`` largest, largest first, each with its whole label and its value."""
    rows = sorted(rows, key=lambda row: (-row[1], row[0]))[:TOP_BARS]
    if not rows or rows[0][1] <= 0:
        return _empty(plot_id, title, "nothing to plot")
    labels = [_wrap(label) for label, _ in rows]
    bands = _bands(labels, 20.0)
    axis = linear_axis(0.0, rows[0][1])
    value_room = len(f"{rows[0][1]:,.0f}") * DIGIT + 8  # the largest bar's value, right of it
    left = Y_LABEL + max(_text_width(lines) for lines in labels) + 12
    box = Box(left, sum(bands), _legend_width([key]), width=PLOT_W + value_room)
    plot_right = box.right - value_room
    body = _x_ticks(box, axis, plot_right)
    for (label, value), lines, band, middle in zip(rows, labels, bands, _middles(box.top, bands)):
        end = axis.at(value, box.left, plot_right)
        body.append(
            f'<rect class="bar" data-label="{_esc(label)}" data-value="{value:.3f}" x="{box.left}" '
            f'y="{middle - band / 2 + 3:.1f}" width="{end - box.left:.1f}" height="{band - 6:.1f}" fill="{key.color}"/>'
            + _label(box.left - 6, middle, lines)
            + f'<text class="value" x="{end + 4:.1f}" y="{middle + 4:.1f}">{value:,.0f}</text>'
        )
    return _frame(plot_id, title, box, (x_label, "cause"), body, [key])


def cause_plots(report: FleetReport) -> tuple[str, str]:
    """Failures and GPU-hours lost per cause code, each chart sorted by its own value."""
    failure_key = Key("bar", PALETTE[1], "failed runs attributed to the cause")
    lost_key = Key("bar", PALETTE[3], "GPUs x hours of the failed runs")
    failures = [(c.code, float(c.failures)) for c in report.taxonomy]
    lost = [(c.code, c.gpu_hours_lost) for c in report.taxonomy]
    return (
        _bars("plot-causes", "Failures by cause", "failed runs", failures, failure_key),
        _bars("plot-gpu-hours", "GPU-hours lost by cause", "GPU-hours", lost, lost_key),
    )


def _place(spots: list[tuple[float, float, float, float]], x: float, y: float, width: float, lines: int) -> float:
    """A y for a label of ``lines`` lines centred at ``y``, at ``x``, that overlaps none placed before.

    Greedy: the nearest free row up or down, a line at a time. The boxes are the ones the
    renderer assumes (``MONO`` per character, ``LINE`` per line), as tests/fleet/test_html_axes.py checks.
    """
    height = lines * LINE
    for step in range(2 * PLACE_TRIES + 1):
        top = y + (step + 1) // 2 * LINE * (1 if step % 2 else -1)
        if all(
            abs(top - other_y) >= (height + other_h) / 2 or x + width <= ox or ox + ow <= x
            for ox, other_y, ow, other_h in spots
        ):
            spots.append((x, top, width, height))
            return top
    spots.append((x, y, width, height))
    return y


def lemon_plot(report: FleetReport) -> str:
    """Every node: its incidents against its single-node failures beyond its users' own rates; lemons in red."""
    title = "Lemon-node signals"
    verdicts = report.verdicts
    if not verdicts:
        return _empty("plot-lemons", title, "no nodes")
    beyond = [beyond_expected(v.signals) for v in verdicts]
    outs = [v.signals.out_count for v in verdicts]
    x_axis = linear_axis(0.0, float(max(outs)), integer=True)
    y_axis = linear_axis(min(0.0, min(beyond)), max(1.0, max(beyond)))
    keys = [
        Key("dot", LEMON, "lemon: flagged by the test (named)"),
        Key("dot", NODE, "node not flagged"),
        Key("dash", "#555555", "0: as many failures as its users' own rates predict"),
    ]
    box = Box(_y_margin(y_axis), PLOT_H, _legend_width(keys))
    zero = y_axis.at(0.0, box.bottom, box.top)
    body = _x_ticks(box, x_axis) + _y_ticks(box, y_axis)
    body.append(
        f'<line x1="{box.left}" y1="{zero:.1f}" x2="{box.right}" y2="{zero:.1f}" stroke="#555" stroke-dasharray="4 3"/>'
    )
    spots: list[tuple[float, float, float, float]] = []
    labels: list[str] = []
    for v, b, o in sorted(zip(verdicts, beyond, outs), key=lambda t: t[0].flagged):
        x, y = x_axis.at(o, box.left, box.right), y_axis.at(b, box.bottom, box.top)
        cls, color, radius = ("lemon", LEMON, 5) if v.flagged else ("node", NODE, 3)
        body.append(
            f'<circle class="{cls}" data-node="{_esc(v.node)}" data-outs="{o}" data-beyond="{b:.1f}" cx="{x:.1f}" '
            f'cy="{y:.1f}" r="{radius}" fill="{color}"><title>{_esc(one_line(v.node, NAME_LIMIT))}: {o} incidents, '
            f"{v.signals.single_node_failures} failed, {b:.1f} beyond expected, score {v.score:.1f}</title></circle>"
        )
        if v.flagged and len(labels) < TABLE_LEMONS:
            lines = _wrap(v.node)
            width = _text_width(lines)
            # Right of the dot, else left of it, never out of the picture (a long name covers the axis instead).
            left = x + 7 if x + 7 + width <= box.right + LEGEND_GAP - 4 else max(2.0, x - 7 - width)
            half = (len(lines) - 1) * LINE / 2
            middle = min(max(y - 8, box.top - 8 + half), box.bottom - 8 - half)
            labels.append(
                _label(left, _place(spots, left, middle, width, len(lines)), lines, "start", f' fill="{LEMON}"')
            )
    axes = ("incidents (outs)", "single-node failures beyond expected")
    return _frame("plot-lemons", title, box, axes, body + labels, keys)


def _timeline_rows(report: FleetReport, own: Sequence[Incident]) -> list[str]:
    """The lemons first, then the nodes with the most incidents of their own."""
    counts: dict[str, int] = {}
    for incident in own:
        counts[incident.node] = counts.get(incident.node, 0) + 1
    rows = [v.node for v in report.lemons]
    rows += [n for n, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if n not in rows]
    return rows[:TIMELINE_NODES]


def _code_colors(codes: Sequence[str]) -> dict[str, str]:
    """The most frequent codes get a colour each, most frequent first; the rest share grey ("other")."""
    frequency = _frequency(codes)
    return {code: PALETTE[i] if i < len(PALETTE) - 1 else OTHER for i, code in enumerate(frequency)}


def _frequency(codes: Sequence[str]) -> dict[str, int]:
    """How often each code occurs, most frequent first (then by name)."""
    counts: dict[str, int] = {}
    for code in codes:
        counts[code] = counts.get(code, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _shared_mark(shared: SharedIncident, x: float, y: float, color: str) -> str:
    names = ", ".join(one_line(n, NAME_LIMIT) for n in shared.nodes[:20])
    more = f" and {len(shared.nodes) - 20} more" if len(shared.nodes) > 20 else ""
    return (
        f'<polygon class="shared-incident" data-nodes="{len(shared.nodes)}" '
        f'points="{x:.1f},{y - 7:.1f} {x + 6:.1f},{y:.1f} {x:.1f},{y + 7:.1f} {x - 6:.1f},{y:.1f}" fill="{color}" '
        f'stroke="black"><title>shared incident {_esc(local_iso(shared.start))} '
        f"{_esc(', '.join(shared.codes))} on {len(shared.nodes)} nodes: {_esc(names)}{more}</title></polygon>"
    )


def _timeline_keys(report: FleetReport, marks: Sequence[tuple[str, ...]], colors: dict[str, str]) -> list[Key]:
    """Every cause on the plot, most frequent first: each colour's, grey's, then those after another cause."""
    named = _frequency([codes[0] for codes in marks])
    keys = [Key("bar", colors[code], f"{code} ({n})") for code, n in named.items() if colors[code] != OTHER]
    others = [f"{code} ({n})" for code, n in named.items() if colors[code] == OTHER]
    keys += [Key("bar", OTHER, "other: " + ", ".join(others))] if others else []
    later = _frequency([code for codes in marks for code in codes[1:] if code not in named])
    if later:
        # An incident is coloured by its first cause; one that only ever came second is named here.
        keys.append(Key("none", "", "after another cause: " + ", ".join(f"{c} ({n})" for c, n in later.items())))
    if report.shared:
        keys.append(Key("diamond", "white", "shared incident: one cause on many nodes at once, drawn once"))
    return keys + ([Key("name", LEMON, "lemon node")] if report.lemons else [])


def _incident_mark(incident: Incident, x: float, middle: float, band: float, color: str) -> str:
    return (
        f'<rect class="incident" x="{x - 1.5:.1f}" y="{middle - band / 2 + 2:.1f}" width="3" '
        f'height="{band - 4:.1f}" fill="{color}"><title>{_esc(one_line(incident.node, NAME_LIMIT))} '
        f"{_esc(', '.join(incident.codes))} {_esc(local_iso(incident.start))}</title></rect>"
    )


def timeline_plot(report: FleetReport) -> str:
    """Incidents in time: a row for the shared incidents (each drawn once), then one row per node."""
    title = "Incident timeline"
    own = [i for i in report.incidents if not i.shared]
    if not (own or report.shared) or report.start is None or report.end is None:
        return _empty("plot-timeline", title, "no incidents")
    nodes = _timeline_rows(report, own)
    shown = [i for i in own if i.node in set(nodes)]
    marks = [i.codes for i in shown] + [s.codes for s in report.shared]
    colors = _code_colors([codes[0] for codes in marks])
    top_row = [["shared"]] if report.shared else []
    row_labels = top_row + [_wrap(n) for n in nodes]
    bands = _bands(row_labels, 14.0)
    times = [i.start for i in shown] + [s.start for s in report.shared]
    axis = time_axis(min(report.start, *times), max(report.end, *times))
    keys = _timeline_keys(report, marks, colors)
    left = Y_LABEL + max(_text_width(lines) for lines in row_labels) + 12
    # Twice as wide as the other plots: dates take room, and incidents close in time stay apart.
    box = Box(left, sum(bands), _legend_width(keys), width=2 * PLOT_W)
    middles = _middles(box.top, bands)
    body = _x_ticks(box, axis)
    lemons = {v.node for v in report.lemons}
    if report.shared:
        body.append(_label(box.left - 6, middles[0], ["shared"], attrs=' font-style="italic"'))
    for shared in report.shared:
        body.append(_shared_mark(shared, axis.at(shared.start, box.left, box.right), middles[0], colors[shared.code]))
    row = {node: i + len(top_row) for i, node in enumerate(nodes)}
    for node in nodes:
        attrs = f' font-weight="bold" fill="{LEMON}"' if node in lemons else ""
        body.append(_label(box.left - 6, middles[row[node]], row_labels[row[node]], attrs=attrs))
    for incident in shown:
        x = axis.at(incident.start, box.left, box.right)
        body.append(
            _incident_mark(incident, x, middles[row[incident.node]], bands[row[incident.node]], colors[incident.code])
        )
    zone = _local(axis.low).strftime("%z")
    title = f"{title}: {len(nodes)} of {len(report.verdicts)} nodes"
    return _frame("plot-timeline", title, box, (f"local time (UTC{zone})", "node"), body, keys)


def timeline_caption(report: FleetReport) -> str:
    """The timeline's caption: how many nodes it shows of how many, and which, then how to read it."""
    own = {i.node for i in report.incidents if not i.shared}
    shown = len(_timeline_rows(report, [i for i in report.incidents if not i.shared]))
    return (
        f"Showing {shown} of {len(report.verdicts)} nodes: the {len(report.lemons)} flagged, then those with the most "
        f"incidents of their own ({len(own)} nodes had any; at most {TIMELINE_NODES} are drawn). "
        + CAPTIONS["timeline"]
    )


def _html_table(table: Table) -> str:
    """A report table with a caption that says what each column means."""
    if not table.rows:
        return f"<p>{_esc(table.title)}</p>"
    meanings = "".join(f"<dt>{_esc(c.name)}</dt><dd>{_esc(c.meaning)}</dd>" for c in table.columns)
    head = "".join(f'<th scope="col">{_esc(c.name)}</th>' for c in table.columns)
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td{'' if column.left else ' class=num'}>{_esc(cell)}</td>" for cell, column in zip(row, table.columns)
        )
        + "</tr>"
        for row in table.rows
    )
    more = f'<tfoot><tr><td colspan="{len(table.columns)}">{_esc(table.more)}</td></tr></tfoot>' if table.more else ""
    return (
        f'<figure class="table"><table><caption>{_esc(table.title)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody>{more}</table>"
        f"<figcaption><dl>{meanings}</dl></figcaption></figure>"
    )


# How to read each plot, under it.
CAPTIONS = {
    "mttf": "Mean time to failure of job runs by size. A fleet whose nodes fail independently behaves like "
    "nodes in series: MTTF falls as 1/nodes, the dashed line; the rings project it to larger jobs.",
    "causes": "Failed runs attributed to each cause, largest first.",
    "hours": "GPU-hours of work lost in those runs, largest first: a cause of few failures can cost the most.",
    "lemons": "One dot per node. Right: taken out more often than the fleet; up: its jobs fail more than its "
    "users' jobs fail elsewhere. Red nodes are flagged; the table below gives their numbers.",
    "timeline": "Incidents over the window, one mark each, coloured by its first cause. A shared "
    "incident (one cause on many nodes at once) is one diamond on the top row, counted against no node.",
}

STYLE = (
    "body{font-family:sans-serif;margin:16px;color:#222}"
    ".plots{display:flex;flex-wrap:wrap;align-items:flex-start}"
    "figure{margin:6px;border:1px solid #ddd;max-width:100%}figure svg{display:block;max-width:100%;height:auto}"
    "figcaption{font-size:13px;padding:4px 8px 8px;max-width:640px}"
    ".no-data{font-size:18px;font-weight:bold;background:#fff3cd;border:1px solid #e0c060;padding:12px}"
    "table{border-collapse:collapse;margin:12px 0;font-size:13px}th,td{border:1px solid #ccc;padding:2px 8px}"
    "td.num{text-align:right;font-variant-numeric:tabular-nums}td{font-family:monospace}"
    "figure.table{border:none}caption{text-align:left;padding:4px 0;font-weight:bold}"
    "dl{display:grid;grid-template-columns:max-content auto;gap:1px 12px;margin:4px 0;max-width:900px}"
    "dt{font-family:monospace;font-weight:bold}dd{margin:0}"
    "ul{font-size:14px}.next{font-size:15px;background:#e8f4ea;border:1px solid #8fc79a;padding:8px 12px}"
)


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{_esc(caption)}</figcaption></figure>"


def page(report: FleetReport, extra: str = "") -> str:
    """The whole HTML page: the summary, then the plots and tables, or the no-data message; ``extra`` last.

    ``extra`` is HTML of another section (``fleet backtest``'s), built with ``_esc``.
    """
    summary = "".join(f"<li>{_esc(line)}</li>" for line in summary_lines(report))
    steps = "".join(f'<p class="next">{_esc(line)}</p>' for line in next_lines(report))
    empty = no_data(report)
    if empty:
        content = f'<p class="no-data">{_esc(empty)}</p>'
    else:
        failures, lost = cause_plots(report)
        plots = (
            _figure(mttf_plot(report), CAPTIONS["mttf"])
            + _figure(failures, CAPTIONS["causes"])
            + _figure(lost, CAPTIONS["hours"])
            + _figure(lemon_plot(report), CAPTIONS["lemons"])
            + _figure(timeline_plot(report), timeline_caption(report))
        )
        rates = "".join(f"<li>{_esc(line.strip())}</li>" for line in rate_lines(report))
        content = (
            f'<div class="plots">{plots}</div>{_html_table(bucket_table(report))}<ul class="rate">{rates}</ul>'
            f"{_html_table(cause_table(report))}{_html_table(lemon_table(report))}"
        )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>healthd fleet report</title><style>{STYLE}</style></head><body>"
        f'<h1>healthd fleet report</h1><ul class="summary">{summary}</ul>{steps}{content}{extra}</body></html>\n'
    )
