"""The Xid line parser against real-format lines with expected parses, and fuzzed input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from healthd_checks.xid_parse import (
    GpuIdentity,
    Kind,
    LogFormat,
    PciAddress,
    XidEvent,
    parse_line,
    parse_message,
    scan_lines,
    split_record,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kernlog"
CASES = [json.loads(line) for line in (FIXTURES / "lines.jsonl").read_text().splitlines() if line.strip()]


def test_fixture_has_enough_distinct_lines() -> None:
    assert len({c["line"] for c in CASES}) >= 40
    assert sum(1 for c in CASES if c["expect"]) >= 40


@pytest.mark.parametrize("case", CASES, ids=[c["line"][:60] for c in CASES])
def test_line_parses_as_expected(case: dict[str, Any]) -> None:
    expect = case["expect"]
    record, event = parse_line(case["line"])
    if expect is None:
        assert event is None
        return
    assert event is not None
    if "format" in expect:
        assert record.format is LogFormat(expect["format"])
    if "seq" in expect:
        assert record.seq == expect["seq"]
    if expect["kind"] == "gpu_identity":
        assert isinstance(event, GpuIdentity)
        assert str(event.pci) == expect["pci"]
        assert event.uuid == expect["uuid"]
        return
    assert isinstance(event, XidEvent)
    assert event.kind is Kind(expect["kind"])
    assert event.code == expect["code"]
    assert event.pci is not None
    assert (event.pci.full if event.kind is Kind.SXID else str(event.pci)) == expect["pci"]
    for name in ("pid", "process", "gpu_instance", "compute_instance", "switch", "fatal", "severity", "detail", "text"):
        if name in expect:
            assert getattr(event, name) == expect[name], name
    if "recovery" in expect:
        assert event.recovery is not None
        assert [event.recovery.before, event.recovery.after] == expect["recovery"]


def test_same_line_in_every_envelope_gives_the_same_event() -> None:
    message = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
    lines = [
        message,
        f"4,77,123456,-;{message}",
        f"<4>[  123.456789] {message}",
        f"[  123.456789] {message}",
        f"Nov 22 04:51:10 node kernel: {message}",
        "Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
    ]
    events = {parse_line(line)[1] for line in lines}
    assert len(events) == 1


def test_pci_addresses_compare_as_integers() -> None:
    driver = PciAddress.parse("PCI:0000:3b:00")
    nvml = PciAddress.parse("00000000:3B:00.0")
    assert driver is not None and nvml is not None
    assert driver.same_device(nvml)
    assert str(nvml) == "0000:3b:00" and nvml.full == "0000:3b:00.0"
    assert PciAddress.parse("3b:00.0") is None


def test_scan_lines_numbers_lines_and_skips_kmsg_continuations() -> None:
    lines = [
        "6,1,1,-;NVRM: GPU at PCI:0000:3b:00: GPU-8f3c1a2b-5d6e-7f80-91a2-b3c4d5e6f708\n",
        " SUBSYSTEM=pci Xid (PCI:0000:3b:00): 79\n",
        "hello\n",
        "4,2,2,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n",
    ]
    found = [(n, type(e).__name__) for n, _, e in scan_lines(lines)]
    assert found == [(1, "GpuIdentity"), (4, "XidEvent")]


def test_split_record_keeps_unknown_shapes_whole() -> None:
    record = split_record("something else entirely")
    assert record.format is LogFormat.PLAIN and record.message == "something else entirely"


NEAR_MISSES = st.sampled_from(
    [
        "Xid (",
        "SXid (",
        "Xid (PCI:",
        "): ",
        "pid=",
        ", name=",
        "GPU at PCI:",
        "has fallen off",
        "recovery action changed from 0x",
        " to 0x",
        "nvidia-nvswitch9: ",
        "Fatal",
        "Severity 99999999999",
        "0000:3b:00",
        "GPU-I:",
        "<4>",
        "4,1,2,-;",
        "[ 1.0] ",
        "Nov 22 04:51:10 h kernel: ",
        "9" * 40,
        "\x00",
        "\u2028",
        ";",
        ",",
    ]
)
TEXT = st.one_of(st.text(), st.lists(st.one_of(NEAR_MISSES, st.text(max_size=5)), max_size=12).map("".join))


@settings(max_examples=400, deadline=None)
@given(TEXT)
def test_no_text_makes_a_parser_raise(text: str) -> None:
    split_record(text)
    parse_message(text)
    _record, event = parse_line(text)
    list(scan_lines([text, text + "\n"]))
    PciAddress.parse(text)
    if isinstance(event, XidEvent):
        assert "\n" not in event.text and event.code >= 0


@settings(max_examples=200, deadline=None)
@given(st.binary())
def test_no_bytes_make_a_parser_raise(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    parse_line(text)
    list(scan_lines(text.splitlines(keepends=True)))
