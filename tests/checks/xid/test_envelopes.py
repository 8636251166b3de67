"""Log envelopes: ``dmesg -x`` with ISO times, a bare ``kernel:`` tag, the printk caller id, Talos.

A corpus of real driver lines in each envelope (fixtures/xid-corpus, sources in its README)
is scanned whole; a property checks that wrapping any accepted driver line in any supported
envelope changes nothing, and that the trust rules (the driver prefix right after the
envelope, kernel facility only where the envelope carries one) hold in every envelope.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.paths import FIXTURES
from healthd_testkit.xid import Node, by_code
from hypothesis import given, settings
from hypothesis import strategies as st

from healthd.cli.main import main
from healthd_checks.kernlog.source import read_kmsg
from healthd_checks.xid.parse import DRIVER_PREFIXES, LogFormat, parse_line, split_record

CORPUS = FIXTURES / "xid-corpus"
EXPECTED: dict[str, list[list[Any]]] = {
    name: rows for name, rows in json.loads((CORPUS / "expected.json").read_text()).items() if name.endswith(".txt")
}


def scan(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, dict[str, Any]]:
    code = main(["scan-log", "--json", str(path)])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_every_event_found_and_graded_and_nothing_else(capsys: pytest.CaptureFixture[str], name: str) -> None:
    code, document = scan(capsys, CORPUS / name)
    found = [[e["line"], e["code"], e["pci"], e["grade"]] for e in document["events"]]
    expected = EXPECTED[name]
    # Xids 144-150: number and address only (their grade comes from the NVLink5 decoding).
    assert [row[:3] for row in found] == [row[:3] for row in expected]
    assert [f[3] for f, e in zip(found, expected) if e[3] is not None] == [e[3] for e in expected if e[3] is not None]
    assert code == document["exit_code"] == 2  # each file holds a CRITICAL event


def test_the_four_critical_kinds_are_found_in_every_envelope(capsys: pytest.CaptureFixture[str]) -> None:
    # The four: a GSP timeout (119), a fatal RLW_REMAP (145), a fatal NVSwitch SXid (24007), a fatal Xid 74.
    wanted = {"XID_119", "XID_145", "SXID_24007", "XID_74"}
    for name in ("dmesg-x-iso.txt", "kernel-tag.txt", "caller-id.txt", "talos.txt"):
        _, document = scan(capsys, CORPUS / name)
        assert {e["code"] for e in document["events"]} >= wanted, name


def test_kmsg_reader_keeps_the_message_after_a_caller_field() -> None:
    # Kernels with CONFIG_PRINTK_CALLER add ",caller=T1946" to the header fields before ";".
    result = read_kmsg(CORPUS / "kmsg-caller.txt", None)
    assert [(line.record_id, line.facility) for line in result.lines] == [
        ("1930", 0),
        ("1931", 0),
        ("1932", 0),
        ("1933", 1),
    ]
    assert all(line.message.startswith(DRIVER_PREFIXES) for line in result.lines)
    assert result.lines[0].usec == 130456250


def test_xid_check_reads_kmsg_records_with_a_caller_field(node: Node) -> None:
    # The check itself, reading the records as its /dev/kmsg: the kernel's three give findings,
    # the process's (PRI 12) none.
    node.append((CORPUS / "kmsg-caller.txt").read_text())
    found = by_code(node.run())
    assert {key: f.status.name for key, f in found.items() if key.startswith(("XID", "SXID"))} == {
        "XID_31@0000:2b:00": "OK",
        "XID_119@0000:9b:00": "CRITICAL",
        "SXID_24007@nvswitch0": "CRITICAL",
    }


def test_a_bare_kernel_tag_is_read_like_a_bare_driver_line() -> None:
    line = "NVRM: Xid (PCI:0000:c1:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 1"
    assert parse_line(f"kernel: {line}")[1] == parse_line(line)[1] is not None
    assert split_record(f"kernel: {line}").format is LogFormat.SYSLOG


# Driver messages the parser accepts (fixtures/xid-corpus's, and the other shapes of lines.jsonl).
DRIVER = [
    "NVRM: Xid (PCI:0002:00:00): 119, pid=1582259, name=nvc:[driver], Timeout after 6s of waiting for RPC response",
    "NVRM: Xid (PCI:0001:00:00): 145, RLW_REMAP Fatal XC1 i0 Link 10 (0x00000082 0x00000040 0x00000000 0x00000000)",
    "nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 30 sourcetrack timeout error",
    "NVRM: Xid (PCI:0003:00:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 14(0x0)",
    "NVRM: Xid (PCI:0000:38:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Global Exception on (GPC 8, TPC 5)",
    "NVRM: Xid (PCI:0000:9b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
    "NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:00): 43, pid=1234, name=python, Ch 00000008",
    "NVRM: GPU 0000:5e:00.0: GPU has fallen off the bus.",
    "NVRM: GPU at PCI:0000:3b:00: GPU-8f3c1a2b-5d6e-7f80-91a2-b3c4d5e6f708",
]
Envelope = Callable[[int, int], str]  # (facility, a number for its times and ids) -> the text before the message
_LEVEL_X = ["emerg", "alert", "crit", "err", "warn", "notice", "info", "debug"]
_LEVEL_TALOS = ["emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"]
_FACILITY_X = ["kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv"]


def _time(n: int) -> str:
    return f"[{n % 100000:5d}.{n % 1000000:06d}]"


def _iso(n: int) -> str:
    return f"2025-01-{1 + n % 28:02d}T04:{n % 60:02d}:{n % 59:02d},{n % 1000000:06d}+00:00"


def _caller(n: int) -> str:
    return f"[{('T' if n % 2 else 'C') + str(n % 100000):>6}]"


# Envelopes that carry the facility: a record of a user facility must give nothing.
WITH_FACILITY: list[Envelope] = [
    lambda f, n: f"{f * 8 + n % 8},{n},{n * 10},-;",
    lambda f, n: f"{f * 8 + n % 8},{n},{n * 10},-,caller={_caller(n).strip('[] ')};",
    lambda f, n: f"{_FACILITY_X[f]:<6}:{_LEVEL_X[n % 8]:<6}: {_time(n)} ",
    lambda f, n: f"{_FACILITY_X[f]:<6}:{_LEVEL_X[n % 8]:<6}: {_iso(n)} ",
    lambda f, n: f"{_FACILITY_X[f]:<6}:{_LEVEL_X[n % 8]:<6}: {_time(n)} {_caller(n)} ",
    lambda f, n: f"{_FACILITY_X[f]}: {_LEVEL_TALOS[n % 8]:>7}: [{_iso(n)[:19]}.{n:09d}Z]: ",
    lambda f, n: f"10.1.{n % 256}.{n % 7}: {_FACILITY_X[f]}: {_LEVEL_TALOS[n % 8]:>7}: [{_iso(n)[:19]}Z]: ",
]
# Envelopes that do not: only the driver-prefix rule applies.
WITHOUT_FACILITY: list[Envelope] = [
    lambda f, n: "",
    lambda f, n: f"{_time(n)} ",
    lambda f, n: f"{_time(n)} {_caller(n)} ",
    lambda f, n: f"{_time(n)}{_caller(n)} ",
    lambda f, n: f"<{n % 8}>{_time(n)} {_caller(n)} ",
    lambda f, n: f"{_iso(n)} ",
    lambda f, n: "kernel: ",
    lambda f, n: f"kernel: {_time(n)} ",
    lambda f, n: f"kernel: {_time(n)} {_caller(n)} ",
    lambda f, n: f"Jan {1 + n % 28:2d} 04:41:{n % 60:02d} node{n % 10} kernel: ",
    lambda f, n: f"Jan {1 + n % 28:2d} 04:41:{n % 60:02d}.{n % 1000000:06d} kernel: {_time(n)} ",
    lambda f, n: f"{_iso(n)} node{n % 10} kernel: ",
]
NUMBER = st.integers(min_value=0, max_value=10**9)
# Text a user may put before driver text (a task name, a file name): it holds nothing that ends an envelope.
LEADING = st.text(st.characters(blacklist_characters=":;,[<", blacklist_categories=("Cs",)), min_size=1, max_size=16)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([*WITH_FACILITY, *WITHOUT_FACILITY]), st.sampled_from(DRIVER), NUMBER)
def test_any_envelope_around_an_accepted_line_gives_the_same_event(wrap: Envelope, driver: str, n: int) -> None:
    bare = parse_line(driver)[1]
    assert bare is not None
    assert parse_line(wrap(0, n) + driver)[1] == bare


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(WITH_FACILITY), st.sampled_from(DRIVER), st.integers(min_value=1, max_value=10), NUMBER)
def test_a_user_facility_gives_nothing_in_any_envelope(wrap: Envelope, driver: str, facility: int, n: int) -> None:
    line = wrap(facility, n) + driver
    assert split_record(line).facility == facility
    assert parse_line(line)[1] is None
    # The facility alone kept it out: the switch that counts userspace records brings it back.
    assert parse_line(line, accept_userspace=True)[1] == parse_line(driver)[1]


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([*WITH_FACILITY, *WITHOUT_FACILITY]), LEADING, st.sampled_from(DRIVER), NUMBER)
def test_text_before_the_driver_prefix_gives_nothing_in_any_envelope(
    wrap: Envelope, leading: str, driver: str, n: int
) -> None:
    line = wrap(0, n) + leading + driver
    assert parse_line(line)[1] is None
    assert parse_line(line, accept_userspace=True)[1] is None
