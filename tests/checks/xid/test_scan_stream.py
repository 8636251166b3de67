"""The streaming scanner (``read_candidates``, ``scan_stream``) finds exactly what the line-by-line one finds."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from healthd_checks.xid.parse import read_candidates, scan_candidates, scan_lines
from healthd_checks.xid.scan import scan, scan_stream

KERNLOG = Path(__file__).resolve().parents[3] / "fixtures" / "kernlog"
LOGS = sorted(p for p in KERNLOG.glob("*.txt") if "NVRM" in p.read_text(errors="replace"))
# Banners over several lines, continuation lines, lines between them that do or do not
# end a record, a UUID line after the event that needs it, an empty line, no final newline.
MIXED = (
    "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
    "[ 1.1] NVRM: The NVIDIA GPU 0000:5e:00.0\n"
    "        NVRM: (PCI ID: 10de:2330) installed in this system has\n"
    "        not a driver line\n"
    "        NVRM: fallen off the bus and is not responding to commands.\n"
    "[ 1.2] NVRM: The NVIDIA GPU 0000:86:00.0\n"
    "[ 1.3] e1000e: eth0 up\n"
    "        NVRM: installed in this system has fallen off the bus and is not responding to commands.\n"
    "\n"
    "[ 1.4] NVRM: GPU 0000:af:00.0: RmInitAdapter failed! (0x22:0x56:742)\n"
    "[ 1.5] nvidia-nvswitch2: SXid (PCI:0000:c1:00.0): 20034, Fatal, Link 28 LTSSM Fault Up\n"
    "[ 1.6] NVRM: GPU at PCI:0000:3b:00: GPU-12345678-1234-1234-1234-123456789abc\n"
    "[ 1.7] NVRM: Xid (PCI:0000:3b:00): 48, pid=2, name=y, An uncorrectable double bit error"
)


def _texts() -> list[tuple[str, str]]:
    return [(p.name, p.read_text(errors="replace")) for p in LOGS] + [
        ("mixed", MIXED),
        ("mixed-crlf", MIXED.replace("\n", "\r\n")),
    ]


@pytest.mark.parametrize(("name", "text"), _texts(), ids=[n for n, _ in _texts()])
@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_chunked_candidates_find_the_same_events_as_each_line(name: str, text: str, chunk: int) -> None:
    for accept_userspace in (False, True):
        lines = io.StringIO(text).readlines()
        expected = list(scan_lines(lines, accept_userspace))
        found = list(scan_candidates(read_candidates(io.StringIO(text).read, chunk), accept_userspace))
        assert found == expected
    assert expected or name != "mixed"


@pytest.mark.parametrize(("name", "text"), _texts(), ids=[n for n, _ in _texts()])
def test_stream_lists_the_same_entries_as_scan(name: str, text: str) -> None:
    expected = [e.to_dict() for e in scan(io.StringIO(text).readlines())]
    assert [e.to_dict() for e in scan_stream(io.StringIO(text))] == expected
    if name == "mixed":  # the UUID named after its Xid 79 line still reaches it
        assert expected[0]["uuid"] == "GPU-12345678-1234-1234-1234-123456789abc"


def test_scan_log_json_is_compact_and_pretty_on_request(tmp_path: Path) -> None:
    log = tmp_path / "dmesg.txt"
    log.write_text(MIXED)
    healthd = [sys.executable, "-m", "healthd", "scan-log", "--json", str(log)]
    compact = subprocess.run(healthd, capture_output=True, text=True, check=False, timeout=60)
    pretty = subprocess.run([*healthd, "--pretty"], capture_output=True, text=True, check=False, timeout=60)
    assert compact.returncode == pretty.returncode == 2
    assert compact.stdout.count("\n") == 1 and ", " not in compact.stdout.split('"events"')[0]
    assert pretty.stdout.count("\n") > 20
    assert json.loads(compact.stdout) == json.loads(pretty.stdout)
    document = json.loads(compact.stdout)
    assert document["status"] == "CRITICAL" and document["exit_code"] == 2
    assert [e["code"] for e in document["events"]] == ["XID_79", "XID_79", "SXID_20034", "XID_48"]
    # The UUID line comes after the Xid 79 of its GPU: the file's first pass (read as bytes) found it.
    assert document["events"][0]["uuid"] == "GPU-12345678-1234-1234-1234-123456789abc"


# Bytes that the text layer changes on the way: CRLF and lone CR line ends (a lone CR splits a
# line), a CR at a read's end before its LF, bytes that are not UTF-8, characters of several
# bytes that a read may cut, and a final CR with no LF.
AWKWARD = [
    MIXED.encode().replace(b"\n", b"\r\n"),
    MIXED.encode().replace(b"\n", b"\r"),
    MIXED.encode().replace(b"[ 1.3] e1000e: eth0 up\n", b"[ 1.3] caf\xc3\xa9 \xff\xfe \xe2\x9c\x93 up\r[ 1.31] x\n"),
    b"[ 0.9] \xe2\x9c\x93\xe2\x9c\x93 NVRM: x\n" + MIXED.encode() + b"\r",
    b"[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=\xc3\xa9\xff, GPU has fallen off the bus.\r\r\n\xe2\x9c",
]


@pytest.mark.parametrize("data", AWKWARD, ids=range(len(AWKWARD)))
@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 64, 1 << 20])
def test_a_file_read_from_its_bytes_lists_what_its_text_lines_give(tmp_path: Path, data: bytes, chunk: int) -> None:
    log = tmp_path / "dmesg.txt"
    log.write_bytes(data)
    with log.open(encoding="utf-8", errors="replace") as handle:
        expected = [e.to_dict() for e in scan(handle.readlines())]
    with log.open(encoding="utf-8", errors="replace") as handle:
        assert [e.to_dict() for e in scan_stream(handle, chunk=chunk)] == expected
    assert expected


# The UUID lines of a log of several driver loads: the same lines again (their times differ), a
# GPU given another UUID and then its first one again, and lines that only look alike.
_UUID_A = "NVRM: GPU at PCI:0000:3b:00: GPU-aaaaaaaa-1234-1234-1234-123456789abc"
_UUID_B = "NVRM: GPU at PCI:0000:3b:00: GPU-bbbbbbbb-1234-1234-1234-123456789abc"
_XID_3B = "[ 9.9] NVRM: Xid (PCI:0000:3b:00): 48, pid=2, name=y, An uncorrectable double bit error\n"
# Envelopes: dmesg, /dev/kmsg (kernel facility, then user facility), dmesg -r, syslog, a bare message.
_ENVELOPES = ["[ {n}.0] ", "6,{n},{n}0,-;", "14,{n},{n}0,-;", "<6>[ {n}.0] ", "Nov 22 04:51:{n:02d} node1 kernel: ", ""]


def _uuid_of_3b(text: str) -> list[Optional[str]]:
    """The UUID that ``scan_stream`` gives the Xid at the end of ``text``, and the one ``scan`` gives it."""
    streamed = [e.uuid for e in scan_stream(io.StringIO(text))]
    return [*streamed, *[e.uuid for e in scan(io.StringIO(text).readlines())]]


def test_the_last_uuid_line_that_counts_wins_however_often_lines_repeat() -> None:
    lines = [f"[ {n}.0] {uuid}\n" for n, uuid in enumerate([_UUID_A, _UUID_A, _UUID_B, _UUID_A, _UUID_B])]
    assert _uuid_of_3b("".join(lines) + _XID_3B) == ["GPU-bbbbbbbb-1234-1234-1234-123456789abc"] * 2
    assert _uuid_of_3b("".join(lines[:4]) + _XID_3B) == ["GPU-aaaaaaaa-1234-1234-1234-123456789abc"] * 2
    # A repeated line of a user facility, after another UUID, changes nothing.
    text = f"6,1,10,-;{_UUID_A}\n6,2,20,-;{_UUID_B}\n14,3,30,-;{_UUID_A}\n" + _XID_3B
    assert _uuid_of_3b(text) == ["GPU-bbbbbbbb-1234-1234-1234-123456789abc"] * 2


def test_a_repeated_uuid_text_is_parsed_again_where_its_envelope_may_read_it_otherwise() -> None:
    # /dev/kmsg undoes \xHH escapes, plain dmesg does not: the same text names two UUIDs.
    escaped = "NVRM: GPU at PCI:0000:3b:00: GPU-aaaaaaaa\\x2d99"
    text = f"6,1,10,-;{escaped}\n[ 2.0] {escaped}\n" + _XID_3B
    assert _uuid_of_3b(text) == ["GPU-aaaaaaaa"] * 2
    text = f"[ 1.0] {escaped}\n6,2,20,-;{escaped}\n" + _XID_3B
    assert _uuid_of_3b(text) == ["GPU-aaaaaaaa-99"] * 2
    # The prefix twice in a line: a dmesg time in brackets holding it, then a bare line of the same text.
    twice = f"{_UUID_A[:40]}] {_UUID_B}"
    text = f"[x] {twice}\n[{twice}\n" + _XID_3B
    assert _uuid_of_3b(text) == ["GPU-bbbbbbbb-1234-1234-1234-123456789abc"] * 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_ENVELOPES), st.sampled_from([_UUID_A, _UUID_B])), max_size=12))
def test_uuid_lines_in_any_envelopes_and_order_give_what_scan_gives(lines: list[tuple[str, str]]) -> None:
    text = "".join(f"{envelope.format(n=n)}{uuid}\n" for n, (envelope, uuid) in enumerate(lines, 1)) + _XID_3B
    streamed, scanned = _uuid_of_3b(text)
    assert streamed == scanned
