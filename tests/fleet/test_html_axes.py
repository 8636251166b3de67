"""The axes and labels of ``healthd.fleet.html`` on edge cases, without a browser."""

from __future__ import annotations

import math

import pytest

from healthd.fleet.html import _wrap, linear_axis, log_axis, time_axis


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
