"""``healthd fleet report --html``: the page rendered by a real headless Chromium (Debian's chromium)."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Callable

import pytest

from healthd.fleet import synth

pytestmark = pytest.mark.slow

PLOTS = ("plot-mttf", "plot-causes", "plot-gpu-hours", "plot-lemons", "plot-timeline")


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


def test_the_page_renders_with_its_four_plots_in_chromium(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    fleet = synth.plant(synth.FleetSpec(days=60, runs=20_000, seed=11))
    jobs, events, page = tmp_path / "jobs.txt", tmp_path / "events.txt", tmp_path / "report.html"
    jobs.write_text("\n".join(synth.job_lines(fleet)) + "\n")
    events.write_text("\n".join(synth.event_lines(fleet)) + "\n")
    code, _, err = cli("fleet", "report", "--jobs", str(jobs), "--events", str(events), "--html", str(page))
    assert (code, err) == (0, "")
    text = page.read_text()
    assert "<script" not in text and "http" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")

    dom = _browser("--dump-dom", page.as_uri()).stdout
    for plot in PLOTS:
        assert f'id="{plot}"' in dom
    assert dom.count('class="observed"') >= 5 and dom.count('class="projected"') == 4
    assert 'class="fit"' in dom
    assert dom.count('class="bar"') >= 10
    assert dom.count('class="lemon"') >= len(fleet.incident_lemons) + len(fleet.silent_lemons)
    assert dom.count('class="incident"') >= 20

    shot = tmp_path / "report.png"
    _browser(f"--screenshot={shot}", "--window-size=1400,1800", "--hide-scrollbars", page.as_uri())
    width, height, rows = _pixels(shot.read_bytes())
    assert (width, height) == (1400, 1800)
    colours = {pixel for row in rows[::7] for pixel in row[::5]}
    assert len(colours) > 50  # plots, not a blank or one-colour page
    red = {c for c in colours if c[0] > 180 and c[1] < 90 and c[2] < 90}
    assert red  # the observed MTTF points, failure bars and lemons are drawn in red
