"""scan-log's whole-file and new line envelopes: a saved journal (``-o json``, ``-o export``), RFC 5424 syslog,
``dmesg --color=always`` and ``host kernel:`` lines without a time; and an Xid 144-150 line cut before its registers.

Each fixture (fixtures/xid-corpus, README there) holds the kernel's records and what a user can put
beside them in that envelope (``logger``, a service's stdout, a /dev/kmsg write, a segfault report):
only the kernel's give events.
"""

from __future__ import annotations

import io
import json
import os
import struct
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.paths import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from healthd.cli.main import main
from healthd_checks.xid.parse import parse_line
from healthd_checks.xid.scan import scan_stream

CORPUS = FIXTURES / "xid-corpus"

# Per file: (line, code, PCI address, grade) of every event; every other line gives none.
EXPECTED: dict[str, list[tuple[int, str, str, str]]] = {
    "journal-k.json": [
        (1, "XID_119", "0002:00:00", "CRITICAL"),
        (2, "XID_145", "0001:00:00", "CRITICAL"),
        (3, "XID_74", "0000:c1:00", "CRITICAL"),  # MESSAGE not UTF-8: an array of its bytes
        (4, "XID_79", "0000:18:00", "CRITICAL"),  # the banner, one record with its newlines
    ],
    "journal-k.export": [
        (1, "XID_119", "0002:00:00", "CRITICAL"),
        (14, "XID_145", "0001:00:00", "CRITICAL"),
        (27, "XID_74", "0000:c1:00", "CRITICAL"),  # a binary field
        (41, "XID_79", "0000:18:00", "CRITICAL"),  # a binary field holding newlines
    ],
    "rfc5424.log": [
        (1, "XID_119", "0002:00:00", "CRITICAL"),
        (2, "XID_145", "0001:00:00", "CRITICAL"),  # after structured data
        (3, "SXID_24007", "0000:c3:00.0", "CRITICAL"),
        (4, "XID_74", "0003:00:00", "CRITICAL"),
        (5, "XID_145", "0000:5f:00", "WARNING"),
    ],
    "dmesg-color.log": [
        (2, "XID_31", "0000:2b:00", "OK"),
        (3, "XID_119", "0000:9b:00", "CRITICAL"),
        (4, "SXID_24007", "0000:c3:00.0", "CRITICAL"),
        (5, "XID_74", "0000:c1:00", "CRITICAL"),
    ],
    "host-kernel.log": [
        (1, "XID_119", "0002:00:00", "CRITICAL"),
        (2, "XID_145", "0001:00:00", "CRITICAL"),
        (3, "SXID_24007", "0000:c3:00.0", "CRITICAL"),
        (4, "XID_145", "0000:5f:00", "WARNING"),
    ],
}


def scan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["scan-log", "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


def events(document: dict[str, Any]) -> list[tuple[int, str, str, str]]:
    return [(e["line"], e["code"], e["pci"], e["grade"]) for e in document["events"]]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_envelope_gives_the_kernels_events_and_no_users(capsys: pytest.CaptureFixture[str], name: str) -> None:
    code, document = scan(capsys, str(CORPUS / name))
    assert events(document) == EXPECTED[name]
    assert code == document["exit_code"] == 2


def test_journal_counts_a_kmsg_write_only_with_the_switch_and_never_logger_or_stdout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "healthd.toml"
    config.write_text("[checks.xid]\naccept_userspace_kmsg = true\n")
    for name, line in (("journal-k.json", 6), ("journal-k.export", 70)):
        _, document = scan(capsys, "--config", str(config), str(CORPUS / name))
        # The /dev/kmsg write (facility 1, NVRM split off into SYSLOG_IDENTIFIER by journald) now counts,
        # marked as userspace; the logger, stdout and sd_journal_send records never do.
        assert events(document) == [*EXPECTED[name], (line, "XID_79", "0000:9b:00", "CRITICAL")], name
        assert [e["origin"] for e in document["events"]] == ["kernel"] * 4 + ["userspace"]
        assert {e["format"] for e in document["events"]} == {"journal"}


def test_rfc5424_needs_app_name_kernel_and_the_kernels_facility(capsys: pytest.CaptureFixture[str]) -> None:
    message = "NVRM: Xid (PCI:0000:9b:00): 79, GPU has fallen off the bus."
    head = "1 2025-02-23T16:30:13.000000+00:00 node01"
    assert parse_line(f"<4>{head} kernel - - - {message}")[1] == parse_line(message)[1] is not None
    assert parse_line(f"<13>{head} logger 42 - - {message}")[1] is None
    assert parse_line(f"<13>{head} kernel 42 - - {message}")[1] is None  # logger -t kernel: facility user
    assert parse_line(f"<4>{head} kernelx - - - {message}")[1] is None


def test_export_from_a_pipe(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # stdin that cannot seek: sniffed by peeking at its buffer, then read once.
    read_end, write_end = os.pipe()
    os.write(write_end, (CORPUS / "journal-k.export").read_bytes())
    os.close(write_end)
    with open(read_end, encoding="utf-8", errors="replace") as pipe:
        monkeypatch.setattr("sys.stdin", pipe)
        _, document = scan(capsys, "-")
    assert events(document) == EXPECTED["journal-k.export"]


def test_nvlink5_line_without_registers_is_graded_by_the_drivers_word(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Pasted lines cut before the registers: Nonfatal is WARNING, Fatal stays CRITICAL until reset.
    texts = {
        "145, RLW_REMAP Nonfatal XC0 i0 Link 02": "WARNING",
        "149, NETIR_LINK_EVT Nonfatal XC0 i0 Link -1 (0x0": "WARNING",
        "145, RLW_REMAP Fatal XC0 i0 Link 02": "CRITICAL",
    }
    log = tmp_path / "pasted.txt"
    log.write_bytes("".join(f"NVRM: Xid (PCI:0000:5f:00): {text}\n" for text in texts).encode())
    _, document = scan(capsys, str(log))
    assert [(e["grade"], e["bucket"]) for e in document["events"]] == [(grade, "nvlink") for grade in texts.values()]
    assert [e["sticky"] for e in document["events"]] == ["no", "no", "until_reset"]


DRIVER = [
    "NVRM: Xid (PCI:0002:00:00): 119, pid=1582259, name=nvc:[driver], Timeout after 6s of waiting for RPC response",
    "NVRM: Xid (PCI:0001:00:00): 145, RLW_REMAP Fatal XC1 i0 Link 10 (0x00000082 0x00000040 0x00000000 0x00000000)",
    "nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 30 sourcetrack timeout error",
    "NVRM: Xid (PCI:0000:9b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
    "NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:00): 43, pid=1234, name=python, Ch 00000008",
    "NVRM: GPU 0000:5e:00.0: GPU has fallen off the bus.",
]


def _journal(message: str, n: int) -> dict[str, Any]:
    return {"_TRANSPORT": "kernel", "SYSLOG_FACILITY": "0", "SYSLOG_IDENTIFIER": "kernel", "PRIORITY": str(n % 8),
            "_SOURCE_MONOTONIC_TIMESTAMP": str(n), "MESSAGE": message}  # fmt: skip


def _export(entry: dict[str, Any]) -> bytes:
    out = b""
    for key, value in entry.items():
        data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else bytes(value)
        if b"\n" in data or any(byte < 0x20 for byte in data):
            out += key.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
        else:
            out += key.encode() + b"=" + data + b"\n"
    return out + b"\n"


ESC = "\x1b"
RESET = ": \x1b[0m\x1b[1m"  # dmesg --color=always: the subsystem prefix's colour ends, the level's begins
# (message, a number for its times) -> the bytes of a one-record file in a new envelope.
WRAPS: list[Callable[[str, int], bytes]] = [
    lambda m, n: json.dumps(_journal(m, n)).encode() + b"\n",
    lambda m, n: json.dumps({**_journal("", n), "MESSAGE": list(m.encode())}).encode() + b"\n",
    lambda m, n: json.dumps(_journal(m, n), separators=(", ", " : ")).encode() + b"\n",  # systemd before 246
    lambda m, n: _export(_journal(m, n)),
    lambda m, n: f"<{n % 8}>1 2025-02-23T16:30:{n % 60:02d}.{n:06d}+00:00 node{n % 9} kernel - - - {m}\n".encode(),
    lambda m, n: f'<{n % 8}>1 2025-02-23T16:30:13Z n{n} kernel - - [a b="]\\"{n}"] {m}\n'.encode(),
    lambda m, n: f"{ESC}[32m[{n % 99999:5d}.{n % 999999:06d}] {ESC}[0m{ESC}[33m{m.replace(': ', RESET, 1)}\n".encode(),
    lambda m, n: f"node{n % 10}.example kernel: {m}\n".encode(),
]


def _scan_bytes(data: bytes) -> list[Any]:
    handle = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace")
    return [entry.event for entry in scan_stream(handle)]


def test_export_line_numbers_count_the_newlines_inside_binary_fields(tmp_path: Path) -> None:
    # A binary MESSAGE may hold an empty line, which is not the end of its record.
    plain = _journal("usb 1-1: new high-speed USB device number 5 using xhci_hcd", 1)
    held = _journal("a message\n\nwith an empty line in it", 2)
    data = _export(plain) + _export(held) + _export(plain)
    start = len(data)
    data += _export(_journal(DRIVER[0], 3)) + _export({**held, "_TRANSPORT": "syslog", "MESSAGE": DRIVER[1]})
    log = tmp_path / "k.export"
    log.write_bytes(data)
    with open(log, encoding="utf-8") as handle:
        found = [(entry.line, entry.code) for entry in scan_stream(handle)]
    assert found == [(data[:start].count(b"\n") + 1, "XID_119")]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(DRIVER),
    st.integers(min_value=0, max_value=10**6),
    st.integers(min_value=0, max_value=len(WRAPS) - 1),
    st.binary(max_size=64),
    st.integers(min_value=0, max_value=400),
)
def test_any_envelope_line_reads_like_the_bare_line_and_garbage_never_raises(
    message: str, n: int, wrap: int, junk: bytes, cut: int
) -> None:
    wrapped = WRAPS[wrap](message, n)
    bare = _scan_bytes(f"{message}\n".encode())
    assert bare and _scan_bytes(wrapped) == bare
    # Cut short, or with arbitrary bytes in it: no event invented from nothing, and no exception.
    broken = wrapped[:cut] + junk + wrapped[cut:]
    _scan_bytes(broken)
    _scan_bytes(wrapped[:cut])
    parse_line(broken.decode("utf-8", "replace"))
