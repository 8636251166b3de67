"""The Xid line parser against real-format lines with expected parses, and fuzzed input.

Property tests hold the parser to its two rules whatever the text: a message that
does not begin with a driver prefix never gives an event, and neither does a record
that userspace wrote (where the format tells), unless that is switched on.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from healthd_testkit.paths import FIXTURES as ALL_FIXTURES
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from healthd_checks.xid.parse import (
    DRIVER_PREFIXES,
    Banner,
    GpuIdentity,
    LineKind,
    LogFormat,
    Origin,
    PciAddress,
    XidEvent,
    parse_line,
    parse_message,
    read_continuation,
    read_message,
    scan_lines,
    split_record,
)

FIXTURES = ALL_FIXTURES / "kernlog"
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
    assert event.kind is LineKind(expect["kind"])
    assert event.code == expect["code"]
    assert event.pci is not None
    assert (event.pci.full if event.kind is LineKind.SXID else str(event.pci)) == expect["pci"]
    for name in ("pid", "process", "gpu_instance", "compute_instance", "switch", "fatal", "severity", "detail", "text"):
        if name in expect:
            assert getattr(event, name) == expect[name], name
    if "recovery" in expect:
        assert event.recovery is not None
        assert [event.recovery.before, event.recovery.after] == expect["recovery"]
    if "nvlink" in expect:
        assert event.nvlink is not None
        assert [event.nvlink.link, list(event.nvlink.registers)] == expect["nvlink"]


@given(st.integers(0, 999), st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=16))
def test_xid_74_gives_its_link_and_registers(link: int, registers: list[int]) -> None:
    shown = ", ".join(f"0x{r:x}" for r in registers)
    fault = f"NVLink: fatal error detected on link {link}({shown})"
    message = f"NVRM: Xid (PCI:0000:ca:00): 74, pid=3310, name=python, {fault}"
    event = parse_message(message)
    assert isinstance(event, XidEvent) and event.nvlink is not None
    assert (event.nvlink.link, list(event.nvlink.registers)) == (link, registers)
    other = parse_message(message.replace(": 74, ", ": 31, "))
    assert isinstance(other, XidEvent) and other.nvlink is None  # only Xid 74 carries an NVLink fault


# Digits other than ASCII's: str.isdigit and a Unicode \\d take them ("²", "٣"), int() reads some of them.
NON_ASCII_DIGITS = st.characters(categories=["Nd", "No"]).filter(lambda c: not c.isascii())


@given(st.text(NON_ASCII_DIGITS, min_size=1, max_size=3), st.sampled_from(["", "1", "9"]))
def test_xid_74_with_a_link_number_in_other_digits_decodes_no_link(digits: str, ascii_digit: str) -> None:
    link = ascii_digit + digits
    message = f"NVRM: Xid (PCI:0000:ca:00): 74, pid=3310, name=python, NVLink: fatal error detected on link {link}(0x0)"
    event = parse_message(message)
    assert isinstance(event, XidEvent) and event.code == 74
    assert event.nvlink is None, "the driver prints ASCII digits: anything else is not a link number"


def test_same_line_in_every_envelope_gives_the_same_event() -> None:
    message = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
    lines = [
        message,
        f"4,77,123456,-;{message}",
        f"<4>[  123.456789] {message}",
        f"kern  :warn  : [  123.456789] {message}",
        f"[  123.456789] {message}",
        f"Nov 22 04:51:10 node kernel: {message}",
    ]
    events = {parse_line(line)[1] for line in lines}
    assert len(events) == 1 and None not in events


def test_a_record_that_userspace_wrote_counts_only_when_accepted() -> None:
    message = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
    for line in (f"12,77,123456,-;{message}", f"<12>[  123.456789] {message}", f"user  :warn  : [ 1.0] {message}"):
        assert parse_line(line)[1] is None
        assert list(scan_lines([line])) == []
        event = parse_line(line, accept_userspace=True)[1]
        assert isinstance(event, XidEvent) and event.code == 79
        assert [n for n, _, _ in scan_lines([line], accept_userspace=True)] == [1]


def test_dmesg_r_below_8_does_not_tell_the_facility() -> None:
    """util-linux's dmesg -r before its 2023 fix prints <facility | level>: <5> may be a user record."""
    record = split_record("<5>[  616.685238] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=capture, x")
    assert record.facility is None
    assert split_record("<12>[  616.685238] NVRM: x").facility == 1
    assert split_record("12,1,2,-;NVRM: x").facility == 1 and split_record("5,1,2,-;NVRM: x").facility == 0


def test_kmsg_escapes_are_undone() -> None:
    record = split_record("6,1,2,-;caf\\xc3\\xa9\\x5cx0a\\x0aNVRM: next line")
    assert record.message == "caf\u00e9\\x0a\nNVRM: next line"


def test_pci_addresses_compare_as_integers() -> None:
    driver = PciAddress.parse("PCI:0000:3b:00")
    nvml = PciAddress.parse("00000000:3B:00.0")
    assert driver is not None and nvml is not None
    assert driver.key == nvml.key
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


# -- the driver-prefix rule, whatever the text --------------------------------------------------------

DRIVER_LINES = [
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
    "nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Fatal, Link 28 LTSSM Fault Up",
    "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
    "NVRM: GPU 3b:00.0: GPU has fallen off the bus.",
    "NVRM: GPU at PCI:0000:3b:00: GPU-8f3c1a2b-5d6e-7f80-91a2-b3c4d5e6f708",
    "NVRM: The NVIDIA GPU 0000:3b:00.0 installed in this system has fallen off the bus and is not responding to"
    " commands.",
    "NVRM: fallen off the bus and is not responding to commands.",
    "NVRM: (PCI ID: 10de:2330) installed in this system has",
]
# Whatever may come first in a message the kernel writes for a task: its name, then "[pid]".
BODY_PIECES = st.one_of(
    st.sampled_from(DRIVER_LINES),
    NEAR_MISSES,
    st.sampled_from(["[3739]: segfault at 0 ip 00007f0000000000 error 6 in ", "\n", "\\x0a", " ", "NVRM:", "NVRM"]),
    st.text(max_size=8),
)
BODY = st.lists(BODY_PIECES, min_size=1, max_size=8).map("".join).filter(lambda b: not b.startswith(DRIVER_PREFIXES))
ENVELOPES = ["4,77,123456,-;", "6,1,2,-;", "<3>[  1.000000] ", "kern  :err   : [  1.0] ", "[  12.345678] ", ""]
ENVELOPES += ["Nov 22 04:51:10 node kernel: "]
PENDING = Banner("The NVIDIA GPU 0000:3b:00.0 (PCI ID: 10de:2330) installed in this system has")


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(ENVELOPES), BODY)
def test_no_line_without_the_driver_prefix_gives_an_event(envelope: str, body: str) -> None:
    line = envelope + body
    record = split_record(line)
    # An empty envelope lets the body be read as one (a body "[ 1.0] NVRM: ..." is a dmesg line).
    assume(not record.message.startswith(DRIVER_PREFIXES))
    assert parse_line(line)[1] is None
    assert parse_line(line, accept_userspace=True)[1] is None
    assert parse_message(record.message) is None
    # Not even a banner that waits for its last line is completed by it, or by its later lines.
    for origin in Origin:
        step = read_message(record.message, PENDING, origin)
        assert step.event is None and step.banner == PENDING
    # A line that starts with white space continues the record above it, whatever it holds.
    assume(not line[:1].isspace())
    continued = [line, *(f"  {driver}" for driver in DRIVER_LINES)]
    assert list(scan_lines(continued, accept_userspace=True)) == []
    interrupted = [
        "[ 1.0] NVRM: The NVIDIA GPU 0000:3b:00.0 (PCI ID: 10de:2330) installed in this system has",
        line,
        "  NVRM: fallen off the bus and is not responding to commands.",
    ]
    assert list(scan_lines(interrupted)) == []


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=1, max_value=255),
    st.integers(min_value=0, max_value=7),
    st.sampled_from([*DRIVER_LINES, "NVRM: The NVIDIA GPU 0000:3b:00.0\\x0aNVRM: fallen off the bus"]),
)
def test_no_userspace_kmsg_record_gives_an_event(facility: int, level: int, message: str) -> None:
    line = f"{facility * 8 + level},5,6,-;{message}"
    assert parse_line(line)[1] is None
    assert list(scan_lines(["3,4,5,-;NVRM: The NVIDIA GPU 0000:3b:00.0", line])) == []


def test_banner_lines_continue_only_the_banner_of_their_origin() -> None:
    start = read_message("NVRM: The NVIDIA GPU 0000:3b:00.0", None, Origin.KERNEL)
    assert start.banner is not None and start.event is None
    forged = read_continuation("NVRM: (PCI ID: 10de:2330) installed in this system has", start.banner, Origin.USERSPACE)
    assert forged.banner == start.banner and not forged.engaged
    middle = read_message("NVRM: (PCI ID: 10de:2330) installed in this system has", start.banner)
    last = read_message("NVRM: fallen off the bus and is not responding to commands.", middle.banner)
    assert isinstance(last.event, XidEvent) and last.event.kind is LineKind.FALLEN_OFF_BUS and last.banner is None
    assert str(last.event.pci) == "0000:3b:00"


def test_a_stalled_banner_is_dropped_after_other_driver_lines() -> None:
    step = read_message("NVRM: The NVIDIA GPU 0000:3b:00.0 (PCI ID: 10de:2330) installed in this system has")
    banner = step.banner
    for _ in range(8):
        banner = read_message("NVRM: loading NVIDIA UNIX x86_64 Kernel Module", banner).banner
        assert banner is not None
        banner = read_message("eth0: link up", banner).banner  # other messages do not count
    assert read_message("NVRM: GPU at PCI:0000:5e:00: GPU-1d2e3f40-5162-7384-95a6-b7c8d9eaf0b1", banner).banner is None
