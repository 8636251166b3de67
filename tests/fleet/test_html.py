"""``healthd fleet report --html``: the page rendered by a real headless Chromium (Debian's chromium).

The assertions read the DOM Chromium produces (``--dump-dom``), parsed with the standard
library, and a screenshot: what an operator's browser shows, not the text healthd wrote.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
import shutil
import struct
import subprocess
import zlib
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable, Optional

import pytest
from healthd_testkit import synth

from healthd.cli.main import main

pytestmark = pytest.mark.slow

PLOTS = ("plot-mttf", "plot-causes", "plot-gpu-hours", "plot-lemons", "plot-timeline")
# The numeric axes of each plot (the timeline's x axis is dates, checked on its own).
NUMERIC_AXES = {
    "plot-mttf": ("x", "y"),
    "plot-causes": ("x",),
    "plot-gpu-hours": ("x",),
    "plot-lemons": ("x", "y"),
}
Cli = Callable[..., tuple[int, str, str]]


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed (tests/run.sh installs Debian's chromium)")
    return found


def _browser(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def _pixels(png: bytes) -> tuple[int, int, list[list[bytes]]]:
    """Width, height and the RGB pixels, row by row, of an 8-bit RGB or RGBA PNG (PNG spec, filters 0-4)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    position, idat, header = 8, b"", b""
    while position < len(png):
        (length,) = struct.unpack(">I", png[position : position + 4])
        kind = png[position + 4 : position + 8]
        data = png[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            header = data
        elif kind == b"IDAT":
            idat += data
        position += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6)
    step = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * step
    rows, previous = [], bytearray(stride)
    for row in range(height):
        kind = raw[row * (stride + 1)]
        line = bytearray(raw[row * (stride + 1) + 1 : (row + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - step] if i >= step else 0
            up = previous[i]
            corner = previous[i - step] if i >= step else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append([bytes(line[i : i + 3]) for i in range(0, stride, step)])
        previous = line
    return width, height, rows


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    parent: Optional[Element]
    children: list[Element] = field(default_factory=list)
    own_text: list[str] = field(default_factory=list)

    def text(self) -> str:
        return "".join(self.own_text) + "".join(child.text() for child in self.children)

    def walk(self) -> list[Element]:
        return [self, *(node for child in self.children for node in child.walk())]

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def find(self, tag: str = "", cls: str = "") -> list[Element]:
        return [e for e in self.walk()[1:] if (not tag or e.tag == tag) and (not cls or cls in e.classes())]


VOID = {"meta", "br", "img", "input", "link", "hr", "col", "wbr"}


class _Tree(HTMLParser):
    """The DOM Chromium dumped, as a tree of elements (its output is well-formed: every tag is closed)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#root", {}, None)
        self.at = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, Optional[str]]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs}, self.at)
        self.at.children.append(element)
        if tag not in VOID:
            self.at = element

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, Optional[str]]]) -> None:
        self.at.children.append(Element(tag, {k: v or "" for k, v in attrs}, self.at))

    def handle_endtag(self, tag: str) -> None:
        node: Optional[Element] = self.at
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.at = node.parent

    def handle_data(self, data: str) -> None:
        self.at.own_text.append(data)


def _rendered(page: Path) -> Element:
    dom = _browser("--dump-dom", page.as_uri()).stdout
    assert "</html>" in dom, "chromium printed no DOM"
    tree = _Tree()
    tree.feed(dom)
    return tree.root


def _plot(root: Element, plot_id: str) -> Element:
    (svg,) = [e for e in root.find("svg", "plot") if e.attrs.get("id") == plot_id]
    return svg


def _ticks(svg: Element, axis: str) -> list[Element]:
    return [t for t in svg.find("text", "tick") if t.attrs.get("data-axis") == axis]


def _round(step: float) -> bool:
    """1, 2 or 5 times a power of ten."""
    mantissa = step / 10 ** math.floor(math.log10(step) + 1e-9)
    return any(abs(mantissa - m) < 1e-6 for m in (1, 2, 5, 10))


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _write_inputs(tmp_path: Path, job_lines: list[str], event_lines: list[str]) -> tuple[Path, Path]:
    jobs, events = tmp_path / "jobs.txt", tmp_path / "events.txt"
    jobs.write_text("\n".join(job_lines) + "\n")
    events.write_text("\n".join(event_lines) + "\n")
    return jobs, events


@pytest.fixture(scope="module")
def fleet_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[synth.Fleet, Path, str]:
    """The synthetic fleet's report, with healthd's PCIE_WIDTH_DEGRADED (19 characters) as the co-occurring cause."""
    directory = tmp_path_factory.mktemp("html")
    fleet = synth.plant(synth.FleetSpec(days=60, runs=20_000, seed=11))
    events = [line.replace(synth.CO_REASON[0], "PCIE_WIDTH_DEGRADED") for line in synth.event_lines(fleet)]
    jobs_file, events_file = _write_inputs(directory, list(synth.job_lines(fleet)), events)
    page = directory / "report.html"
    out = io.StringIO()
    # Through the real CLI, once for the module's tests (the ``cli`` fixture is per test); an
    # offline report reads no configuration.
    with contextlib.redirect_stdout(out):
        code = main(["fleet", "report", "--jobs", str(jobs_file), "--events", str(events_file), "--html", str(page)])
    assert code == 0
    return fleet, page, out.getvalue()


def test_the_page_renders_with_its_plots_in_chromium(fleet_page: tuple[synth.Fleet, Path, str], tmp_path: Path) -> None:
    fleet, page, _ = fleet_page
    text = page.read_text()
    assert "<script" not in text and "http" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")

    root = _rendered(page)
    for plot in PLOTS:
        _plot(root, plot)
    assert len(root.find(cls="observed")) >= 5 and len(root.find(cls="projected")) == 4
    assert root.find(cls="fit")
    assert len(root.find(cls="bar")) >= 10
    assert len(root.find(cls="lemon")) >= len(fleet.incident_lemons) + len(fleet.silent_lemons)
    assert len(root.find(cls="incident")) >= 20

    shot = tmp_path / "report.png"
    _browser(f"--screenshot={shot}", "--window-size=1400,1800", "--hide-scrollbars", page.as_uri())
    width, height, rows = _pixels(shot.read_bytes())
    assert (width, height) == (1400, 1800)
    colours = {pixel for row in rows[::7] for pixel in row[::5]}
    assert len(colours) > 50  # plots, not a blank or one-colour page
    red = {c for c in colours if c[0] > 180 and c[1] < 90 and c[2] < 90}
    assert red  # the observed MTTF points, failure bars and lemons are drawn in red


def test_each_plot_has_a_legend_axis_labels_and_round_ticks(fleet_page: tuple[synth.Fleet, Path, str]) -> None:
    root = _rendered(fleet_page[1])
    for plot_id in PLOTS:
        svg = _plot(root, plot_id)
        (legend,) = svg.find("g", "legend")
        items = legend.find("g", "legend-item")
        assert items and all(item.text().strip() for item in items), plot_id
        labels = {label.attrs["data-axis"]: label.text().strip() for label in svg.find("text", "axis-label")}
        assert labels.keys() == {"x", "y"} and all(labels.values()), (plot_id, labels)
        for axis in NUMERIC_AXES.get(plot_id, ()):
            values = [_number(tick.text()) for tick in _ticks(svg, axis)]
            assert len(values) >= 3, (plot_id, axis, values)
            assert values == sorted(values) and len(set(values)) == len(values)
            if plot_id == "plot-mttf":  # log axes: each tick is 1, 2 or 5 times a power of ten
                assert all(_round(v) for v in values), values
            else:  # linear axes: a round step, ticks on multiples of it
                steps = {round(b - a, 9) for a, b in zip(values, values[1:])}
                assert len(steps) == 1 and _round(steps.pop()), (plot_id, values)
    dates = [tick.text() for tick in _ticks(_plot(root, "plot-timeline"), "x")]
    assert len(dates) >= 3 and all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", d) for d in dates), dates


def test_labels_are_whole_and_bars_sorted(fleet_page: tuple[synth.Fleet, Path, str]) -> None:
    root = _rendered(fleet_page[1])
    for plot_id in ("plot-causes", "plot-gpu-hours"):
        svg = _plot(root, plot_id)
        names = [label.text() for label in svg.find("text", "label") if label.parent is svg]
        assert "PCIE_WIDTH_DEGRADED" in names, names
        bars = sorted(svg.find("rect", "bar"), key=lambda bar: float(bar.attrs["y"]))
        widths = [float(bar.attrs["width"]) for bar in bars]
        assert len(widths) >= 5 and widths == sorted(widths, reverse=True), (plot_id, widths)
        values = [float(bar.attrs["data-value"]) for bar in bars]
        assert values == sorted(values, reverse=True)


def test_the_lemon_table_and_plot_show_one_value(fleet_page: tuple[synth.Fleet, Path, str]) -> None:
    """A silent lemon (no incident, no failure attributed to it) is high on the plot and in the table alike."""
    fleet, page, text = fleet_page
    root = _rendered(page)
    (table,) = [t for t in root.find("table") if t.find("caption")[0].text().startswith("Lemon nodes")]
    header = [th.text() for th in table.find("th")]
    rows = {
        cells[0]: dict(zip(header, cells))
        for cells in ([td.text() for td in tr.find("td")] for tr in table.find("tbody")[0].find("tr"))
    }
    svg = _plot(root, "plot-lemons")
    ticks = [(_number(t.text()), float(t.attrs["y"]) - 4) for t in _ticks(svg, "y")]
    (v0, y0), (v1, y1) = ticks[0], ticks[-1]
    circles = {c.attrs["data-node"]: c for c in svg.find("circle", "lemon")}
    text_rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("gpu")}
    for node in fleet.silent_lemons:
        row, circle = rows[node], circles[node]
        assert row["beyond"] == circle.attrs["data-beyond"] == text_rows[node][6]
        assert row["outs"] == circle.attrs["data-outs"] == text_rows[node][2]
        beyond = float(row["beyond"])
        assert beyond > 10 and row["caused"] == "0+0"  # what the old "1-node 0" column showed
        drawn = v0 + (float(circle.attrs["cy"]) - y0) * (v1 - v0) / (y1 - y0)
        assert abs(drawn - beyond) < 0.1 * (v1 - v0) / 10, (node, drawn, beyond)


def test_each_column_of_each_table_is_explained(fleet_page: tuple[synth.Fleet, Path, str]) -> None:
    root = _rendered(fleet_page[1])
    tables = root.find("table")
    assert len(tables) == 3
    for table in tables:
        columns = [th.text() for th in table.find("th")]
        figure = table.parent
        assert figure is not None and figure.tag == "figure"
        explained = {dt.text(): dd.text() for dt, dd in zip(figure.find("dt"), figure.find("dd"))}
        assert columns == list(explained) and all(len(m) > 10 for m in explained.values()), explained
    assert {"outs", "excl", "score"} <= {th.text() for th in tables[2].find("th")}


def test_a_shared_incident_is_drawn_once_and_hostile_names_stay_text(cli: Cli, tmp_path: Path) -> None:
    header = "JobID|User|State|Start|End|NNodes|NodeList|AllocTRES"
    names = ["<i>n1</i>", "n2&amp;", "n3", "n4", "n5", "n6"]
    jobs = [
        f"{i}|u|COMPLETED|2024-03-01T0{i}:00:00|2024-03-01T0{i}:30:00|1|{name}|gres/gpu=8"
        for i, name in enumerate(names, 1)
    ]
    events = ["Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User"]
    events += [f"c|{name}|2024-03-01T12:00:00|2024-03-01T13:00:00|DOWN|Not responding|root(0)" for name in names]
    events.append("c|n3|2024-03-02T12:00:00|2024-03-02T13:00:00|DRAIN|healthd: XID_79 <b>bus</b>|root(0)")
    jobs_file, events_file = _write_inputs(tmp_path, [header, *jobs], events)
    page = tmp_path / "report.html"
    code, out, _ = cli("fleet", "report", "--jobs", str(jobs_file), "--events", str(events_file), "--html", str(page))
    assert code == 0 and "1 shared" in out
    root = _rendered(page)
    svg = _plot(root, "plot-timeline")
    (shared,) = svg.find("polygon", "shared-incident")
    assert shared.attrs["data-nodes"] == "6"
    incidents = svg.find("rect", "incident")
    assert len(incidents) == 1 and "XID_79" in incidents[0].text()  # n3's own, not the shared one six times
    assert not root.find("i") and not root.find("b")  # the names are text, not markup
    assert "<i>n1</i>" in shared.text() and "n2&amp;" in shared.text()


def test_no_data_says_so_in_the_page(cli: Cli, tmp_path: Path) -> None:
    jobs_file, events_file = _write_inputs(
        tmp_path,
        ["JobID|User|State|Start|End|NNodes|NodeList|AllocTRES"],
        ["Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User"],
    )
    page = tmp_path / "report.html"
    code, out, _ = cli("fleet", "report", "--jobs", str(jobs_file), "--events", str(events_file), "--html", str(page))
    assert code == 0 and "no data: no finished job runs in the input" in out and "None" not in out
    root = _rendered(page)
    (message,) = root.find("p", "no-data")
    assert message.text().startswith("no data: no finished job runs in the input")
    assert "None" not in root.text()


def test_the_timeline_names_every_cause_it_draws_and_ends_with_the_window(
    fleet_page: tuple[synth.Fleet, Path, str],
) -> None:
    """The legend: every code of every mark drawn, most frequent first, counted; the axis: the window, no further."""
    fleet, page, text = fleet_page
    root = _rendered(page)
    svg = _plot(root, "plot-timeline")
    marks = [mark.text().split(" ", 1)[1].rsplit(" ", 1)[0].split(", ") for mark in svg.find("rect", "incident")]
    legend = [item.text() for item in svg.find("g", "legend-item")]
    named = [re.fullmatch(r"([A-Z0-9_]+) \((\d+)\)", entry) for entry in legend]
    counts = [(m[1], int(m[2])) for m in named if m]
    assert counts and [n for _, n in counts] == sorted((n for _, n in counts), reverse=True), legend
    for code, n in counts:
        assert n == sum(1 for codes in marks if codes[0] == code), code
    drawn = {code for codes in marks for code in codes}
    listed = set(re.findall(r"[A-Z][A-Z0-9_]{2,}", " ".join(legend)))
    assert drawn <= listed, drawn - listed
    assert "PCIE_WIDTH_DEGRADED" in drawn  # the co-occurring cause, never an incident's first

    title = svg.find("text", "title")[0].text()
    shown = len({row.text() for row in svg.find("text", "label") if row.parent is svg} - {"shared"})
    assert title == f"Incident timeline: {shown} of {fleet.spec.nodes} nodes", title
    (caption,) = [f.find("figcaption")[0].text() for f in root.find("figure") if _plot_ids(f) == ["plot-timeline"]]
    assert caption.startswith(f"Showing {shown} of {fleet.spec.nodes} nodes")

    end = re.search(r"window \S+ \.\. (\d{4}-\d{2}-\d{2})", text)
    assert end is not None
    assert max(tick.text() for tick in _ticks(svg, "x")) <= end[1]
    axis_right = max(
        float(line.attrs["x2"]) for line in svg.find("line") if line.attrs.get("y1") == line.attrs.get("y2")
    )
    assert all(float(tick.attrs["x"]) <= axis_right for tick in _ticks(svg, "x"))

    steps = [p.text() for p in root.find("p", "next")]
    assert steps and steps[0].startswith("next: `healthd fleet lemons --drain`")
    assert all(node in steps[0] for node in fleet.incident_lemons)
    assert any("--drain-silent" in step and all(n in step for n in fleet.silent_lemons) for step in steps)


def _plot_ids(figure: Element) -> list[str]:
    return [svg.attrs.get("id", "") for svg in figure.find("svg", "plot")]


def test_the_backtest_section_has_its_verdict_and_chart_in_chromium(cli: Cli, tmp_path: Path) -> None:
    fleet = synth.plant(synth.FleetSpec(seed=11))
    jobs_file, events_file = _write_inputs(tmp_path, list(synth.job_lines(fleet)), list(synth.event_lines(fleet)))
    page = tmp_path / "backtest.html"
    inputs = ("--jobs", str(jobs_file), "--events", str(events_file), "--min-gpus", "64")
    code, out, _ = cli("fleet", "backtest", *inputs, "--html", str(page))
    assert code == 0
    root = _rendered(page)
    (verdict,) = root.find("p", "verdict")
    assert verdict.text() == out.splitlines()[0] and verdict.text().startswith("verdict: ")
    svg = _plot(root, "plot-backtest")
    assert [item.text() for item in svg.find("g", "legend-item")] == ["as it was", "with draining"]
    labels = {label.attrs["data-axis"]: label.text() for label in svg.find("text", "axis-label")}
    assert labels["y"] == "failed, % of runs" and labels["x"].startswith("step")
    bars = svg.find("rect", "rate")
    assert bars and len(bars) % 2 == 0
    values = [_number(tick.text()) for tick in _ticks(svg, "y")]
    assert len(values) >= 3 and max(values) >= max(float(bar.attrs["data-rate"]) for bar in bars)
