"""The axes and labels of ``healthd.fleet.html`` on edge cases, without a browser."""

from __future__ import annotations

import itertools
import math
import xml.etree.ElementTree as ET

import pytest

from healthd.fleet import sample
from healthd.fleet.backtest import BacktestSettings, backtest
from healthd.fleet.backtest_render import rate_chart
from healthd.fleet.html import (
    DIGIT,
    FONT,
    MONO,
    _wrap,
    cause_plots,
    lemon_plot,
    linear_axis,
    log_axis,
    mttf_plot,
    time_axis,
    timeline_plot,
)


@pytest.mark.parametrize(
    ("low", "high", "integer"),
    [
        (0, 1, True),
        (0, 0, True),
        (0, 24, True),
        (-3.7, 44.3, False),
        (0, 2843.6, False),
        (5, 5, False),
        (0, 0.03, False),
    ],
)
def test_a_linear_axis_has_three_or_more_round_ticks_covering_the_data(low: float, high: float, integer: bool) -> None:
    axis = linear_axis(low, high, integer)
    values = [value for value, _ in axis.ticks]
    assert len(values) >= 3 and values[0] <= low and values[-1] >= high
    step = values[1] - values[0]
    mantissa = step / 10 ** math.floor(math.log10(step) + 1e-9)
    assert any(abs(mantissa - m) < 1e-6 for m in (1, 2, 5))
    assert all(abs((b - a) - step) < 1e-9 for a, b in zip(values, values[1:]))
    assert not integer or all(float(v).is_integer() for v in values)


def test_a_log_axis_of_one_decade_gets_its_twos_and_fives() -> None:
    assert [text for _, text in log_axis(12, 80).ticks] == ["10", "20", "50", "100"]
    assert [text for _, text in log_axis(0.9, 1.5e5).ticks][-1] == "1,000,000"


@pytest.mark.parametrize(
    "span_hours", [0, 1, 5, 30, 72, 24 * 14, 24 * 20, 24 * 30.5, 24 * 60, 24 * 100, 24 * 330, 24 * 730]
)
def test_a_time_axis_has_three_to_seven_ticks_and_ends_at_the_window_end(span_hours: float) -> None:
    """The axis is the window (three hours at least), not the window rounded out to a tick weeks later."""
    start = 1_704_067_200.0 + 1234
    end = start + max(span_hours, 3) * 3600
    axis = time_axis(start, start + span_hours * 3600)
    assert (axis.low, axis.high) == (start, end)
    assert 3 <= len(axis.ticks) <= 7, axis.ticks
    assert all(start <= value <= end for value, _ in axis.ticks)


def test_wrapping_keeps_every_character() -> None:
    for text in ("PCIE_WIDTH_DEGRADED", "x" * 95, "gpu-rack12-node0042.cluster.example.org", "a_b" * 20):
        lines = _wrap(text)
        assert "".join(lines) == text and all(len(line) <= 30 for line in lines)


SVG = "{http://www.w3.org/2000/svg}"


def _boxes(svg: ET.Element) -> list[tuple[float, float, float, float, str]]:
    """The box of each line of each label, tick and value text, from the metrics the renderer assumes.

    Monospace text is ``MONO`` px a character, tick and value text ``DIGIT``; a line is ``FONT``
    high, 0.8 of it above the baseline (DejaVu's ascent is 0.76 em, its descent 0.24 em).
    """
    found = []
    for text in svg.iter(f"{SVG}text"):
        if text.get("class") not in ("label", "tick", "value"):
            continue
        per = MONO if text.get("font-family") == "monospace" else DIGIT
        anchor = text.get("text-anchor", "start")
        spans = [(float(s.get("x", "0")), s.text or "", float(s.get("dy", "0"))) for s in text.iter(f"{SVG}tspan")]
        baseline = float(text.get("y", "0"))
        for x, line, dy in spans or [(float(text.get("x", "0")), text.text or "", 0.0)]:
            baseline += dy
            width = len(line) * per
            left = x - width if anchor == "end" else x - width / 2 if anchor == "middle" else x
            found.append((left, baseline - 0.8 * FONT, left + width, baseline + 0.2 * FONT, line))
    return found


def _overlapping(svg: ET.Element) -> list[tuple[str, str]]:
    return [
        (a[4], b[4])
        for a, b in itertools.combinations(_boxes(svg), 2)
        if a[0] < b[2] - 0.5 and b[0] < a[2] - 0.5 and a[1] < b[3] - 0.5 and b[1] < a[3] - 0.5
    ]


# The test suite's fleet, a larger one with many lemons, and a small one whose lemons crowd together.
CROWDS = [
    sample.FleetSpec(),
    sample.FleetSpec(nodes=256, days=60, runs=40_000, incident_lemons=12, silent_lemons=6, seed=5),
    sample.FleetSpec(nodes=60, days=20, runs=4_000, incident_lemons=8, lemon_factor=30, seed=2),
]


@pytest.mark.parametrize("spec", CROWDS)
def test_no_two_texts_of_a_plot_overlap(spec: sample.FleetSpec) -> None:
    """Label, tick and value boxes of each plot (the lemons' names above all) are apart."""
    fleet = sample.plant(spec)
    replay = backtest(sample.job_lines(fleet), sample.event_lines(fleet), None, BacktestSettings(min_gpus=64))
    report = replay.report
    plots = [mttf_plot(report), *cause_plots(report), lemon_plot(report), timeline_plot(report), rate_chart(replay)]
    for svg in map(ET.fromstring, plots):
        labels = [line for *_, line in _boxes(svg)]
        assert labels, svg.get("id")
        assert _overlapping(svg) == [], svg.get("id")
