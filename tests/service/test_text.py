"""``one_line``: untrusted text cannot forge lines, escapes or NULs in a table, a log or ``status``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from healthd.cli.main import main
from healthd.cycle.render import render_table
from healthd.model import CheckResult, Finding, PassResult, RunState, Status
from healthd.text import one_line

FORGED_SUBJECT = "/data\n<0>healthd: all nodes OK\x1b[2J\x00"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain text", "plain text"),
        ("two\nlines", "two lines"),
        ("cr\r\nlf", "cr lf"),
        ("esc\x1b[31mred", "esc [31mred"),
        ("nul\x00byte", "nul byte"),
        ("tab\tand  spaces   here", "tab and spaces here"),
        ("  edges  ", "edges"),
        ("line\u2028separator\u2029para", "line separator para"),
        ("bidi\u202eoverride", "bidi override"),
        ("non-breaking\xa0space", "non-breaking space"),
        ("Xid 79 ün GPU", "Xid 79 ün GPU"),
        (42, "42"),
        (None, "None"),
    ],
)
def test_one_line_keeps_printable_text_only(text: object, expected: str) -> None:
    assert one_line(text) == expected


def test_one_line_bounds_the_length() -> None:
    assert one_line("x" * 1000, 20) == "x" * 17 + "..."
    assert len(one_line("y " * 1000)) == 300
    assert one_line("abcdef", 2) == "ab"
    assert one_line("short", 20) == "short"


def test_table_rows_cannot_be_forged() -> None:
    finding = Finding("mounts", Status.CRITICAL, "MOUNT_MISSING", FORGED_SUBJECT, "gone\nmounts OK")
    result = PassResult(
        "node\x1b]0;title\x07",
        0.0,
        0.1,
        (CheckResult("mounts", RunState.RAN, (finding,), 0.1), CheckResult("gpu", RunState.ERROR, (), 0.0, "a\nb")),
    )
    lines = render_table(result).splitlines()
    assert len(lines) == 5
    assert lines[3] == "  CRITICAL MOUNT_MISSING /data <0>healthd: all nodes OK [2J: gone mounts OK"
    assert all(char.isprintable() for line in lines for char in line)
    assert lines[4] == "node ]0;title: CRITICAL (0.10s)"


def test_status_renders_a_forged_or_odd_document_safely(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import time

    state = tmp_path / "state"
    state.mkdir()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 5))
    document = {
        "node": "gpu\n0001",
        "status": "CRITICAL",
        "started_at": started,
        "duration_seconds": 0.5,
        # Not every field is a string in a document someone else may have written.
        "checks": [{"name": None, "status": 2, "findings": [{"status": None, "code": 79, "subject": FORGED_SUBJECT}]}],
    }
    (state / "last-pass.json").write_text(json.dumps(document))
    config = tmp_path / "healthd.toml"
    config.write_text(f'[paths]\nstate_dir = "{state}"\n[slurm]\nenabled = false\n')
    assert main(["status", "--config", str(config)]) == 2
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("gpu 0001: CRITICAL (last pass ")
    assert lines[1].split() == ["?", "2"]
    assert lines[2] == "    ?        79 /data <0>healthd: all nodes OK [2J: "
    assert len(lines) == 3
