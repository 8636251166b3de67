"""Logging: structured journal fields, stderr with or without journald's priority prefix."""

from __future__ import annotations

import io
import logging
import os
import socket
import struct
from pathlib import Path
from typing import Any, Iterator

import pytest

from healthd.cycle.outcome import ActionOutcome
from healthd.model import Finding, Status
from healthd.plan.state import Action
from healthd.service.logs import JournalHandler, JournalSocket, log_action, log_finding, setup_logging


@pytest.fixture
def healthd_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger("healthd")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield logger
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


FINDING = Finding("xid", Status.CRITICAL, "XID_79", "gpu3", "GPU has fallen off the bus", {"gpu": 3})


def test_journal_handler_sends_structured_fields(healthd_logger: logging.Logger) -> None:
    sent: list[tuple[str, dict[str, Any]]] = []
    healthd_logger.handlers[:] = [JournalHandler(lambda message, **fields: sent.append((message, fields)))]
    healthd_logger.propagate = False
    healthd_logger.setLevel(logging.INFO)
    log_finding(healthd_logger.getChild("daemon"), FINDING)
    log_action(
        healthd_logger, Action.TAKE_OUT_NOW, ActionOutcome.TAKEN, "gpu0001", "healthd: XID_79 gpu3", Status.CRITICAL
    )
    log_action(healthd_logger, Action.RESUME, ActionOutcome.DRY_RUN, "gpu0001", "healthy again", Status.OK)
    message, fields = sent[0]
    assert message == "xid CRITICAL XID_79 gpu3: GPU has fallen off the bus"
    assert fields["PRIORITY"] == "3"  # err
    assert fields["HEALTHD_CHECK"] == "xid"
    assert fields["HEALTHD_CODE"] == "XID_79"
    assert fields["HEALTHD_SEVERITY"] == "CRITICAL"
    assert fields["HEALTHD_SUBJECT"] == "gpu3"
    assert fields["SYSLOG_IDENTIFIER"] == "healthd"
    message, fields = sent[1]
    assert message == "policy take_out_now taken on gpu0001: healthd: XID_79 gpu3"
    assert fields["PRIORITY"] == "4"
    assert fields["HEALTHD_CHECK"] == "policy" and fields["HEALTHD_CODE"] == "TAKE_OUT_NOW"
    assert fields["HEALTHD_SEVERITY"] == "CRITICAL" and fields["HEALTHD_OUTCOME"] == "taken"
    message, fields = sent[2]
    assert message == "policy resume dry_run on gpu0001: healthy again"
    assert fields["PRIORITY"] == "6" and fields["HEALTHD_CODE"] == "RESUME"


def test_each_severity_logs_at_its_level_and_priority(healthd_logger: logging.Logger) -> None:
    sent: list[tuple[str, dict[str, Any]]] = []
    handler = JournalHandler(lambda message, **fields: sent.append((message, fields)))
    records: list[logging.LogRecord] = []
    collector = logging.Handler()
    collector.emit = records.append  # type: ignore[method-assign]
    healthd_logger.handlers[:] = [handler, collector]
    healthd_logger.propagate = False
    healthd_logger.setLevel(logging.DEBUG)
    for status in (Status.UNKNOWN, Status.WARNING, Status.CRITICAL):
        log_finding(healthd_logger, Finding("gpu", status, "CODE", "gpu0", "m"))
    assert [r.levelno for r in records] == [logging.WARNING, logging.WARNING, logging.ERROR]
    assert [fields["PRIORITY"] for _, fields in sent] == ["4", "4", "3"]
    assert [fields["HEALTHD_SEVERITY"] for _, fields in sent] == ["UNKNOWN", "WARNING", "CRITICAL"]


def test_forged_text_in_a_finding_stays_on_one_line(healthd_logger: logging.Logger) -> None:
    # A mount source is user-controlled: \012 in mountinfo decodes to a newline.
    forged = Finding(
        "mounts",
        Status.CRITICAL,
        "MOUNT_MISSING",
        "/data\n<0>healthd: all nodes OK\x1b[2J\x00",
        "source evil\r\nxid CRITICAL XID_79 gpu0: forged",
    )
    stream = io.StringIO()
    setup_logging(stream=stream, environ={}, use_journal=False)
    log_finding(healthd_logger, forged)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].endswith(
        "ERROR mounts CRITICAL MOUNT_MISSING /data <0>healthd: all nodes OK [2J: "
        "source evil xid CRITICAL XID_79 gpu0: forged"
    )
    assert "\x1b" not in lines[0] and "\x00" not in lines[0]
    sent: list[tuple[str, dict[str, Any]]] = []
    healthd_logger.handlers[:] = [JournalHandler(lambda message, **fields: sent.append((message, fields)))]
    log_finding(healthd_logger, forged)
    assert sent[0][1]["HEALTHD_SUBJECT"] == "/data <0>healthd: all nodes OK [2J"
    assert "\n" not in sent[0][0]


def _journal_datagram(data: bytes) -> dict[str, str]:
    """Decode systemd's native journal protocol (both the text and the binary field form)."""
    fields: dict[str, str] = {}
    while data:
        line, sep, rest = data.partition(b"\n")
        assert sep, "every field ends with a newline"
        if b"=" in line:
            key, _, value = line.partition(b"=")
            data = rest
        else:
            key, size = line, struct.unpack("<Q", rest[:8])[0]
            value, data = rest[8 : 8 + size], rest[8 + size :]
            assert data[:1] == b"\n"
            data = data[1:]
        fields[key.decode()] = value.decode()
    return fields


def test_native_journal_protocol_reaches_a_real_socket(healthd_logger: logging.Logger, tmp_path: Path) -> None:
    address = str(tmp_path / "journal.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as journal:
        journal.bind(address)
        journal.settimeout(5)
        healthd_logger.handlers[:] = [JournalHandler(JournalSocket(address))]
        healthd_logger.propagate = False
        healthd_logger.setLevel(logging.INFO)
        log_finding(healthd_logger.getChild("daemon"), FINDING)
        try:
            raise ValueError("boom")
        except ValueError:
            healthd_logger.exception("pass raised")
        first, second = journal.recv(65536), journal.recv(65536)
    assert _journal_datagram(first) == {
        "MESSAGE": "xid CRITICAL XID_79 gpu3: GPU has fallen off the bus",
        "PRIORITY": "3",
        "SYSLOG_IDENTIFIER": "healthd",
        "LOGGER": "healthd.daemon",
        "HEALTHD_CHECK": "xid",
        "HEALTHD_CODE": "XID_79",
        "HEALTHD_SEVERITY": "CRITICAL",
        "HEALTHD_SUBJECT": "gpu3",
    }
    assert b"MESSAGE\n" in second  # a traceback has newlines: the length-prefixed binary form
    fields = _journal_datagram(second)
    assert fields["MESSAGE"].startswith("pass raised\nTraceback")
    assert fields["MESSAGE"].endswith("ValueError: boom")
    assert fields["PRIORITY"] == "3"


def test_journal_refusing_a_record_falls_back_to_stderr(healthd_logger: logging.Logger, tmp_path: Path) -> None:
    stream = io.StringIO()
    fallback = logging.StreamHandler(stream)
    healthd_logger.handlers[:] = [JournalHandler(JournalSocket(str(tmp_path / "absent.sock")), fallback=fallback)]
    healthd_logger.propagate = False
    healthd_logger.setLevel(logging.INFO)
    log_finding(healthd_logger, FINDING)
    assert stream.getvalue() == "xid CRITICAL XID_79 gpu3: GPU has fallen off the bus\n"


def test_journal_is_used_only_when_stderr_is_the_journal_stream(healthd_logger: logging.Logger, tmp_path: Path) -> None:
    with open(tmp_path / "stream", "w+", encoding="utf-8") as stream:
        st = os.fstat(stream.fileno())
        matching = {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
        assert isinstance(setup_logging(stream=stream, environ=matching), JournalHandler)
        # Run by hand on a host booted with systemd: stderr is a terminal or a file, not the journal.
        assert not isinstance(setup_logging(stream=stream, environ={"JOURNAL_STREAM": "1:2"}), JournalHandler)
        assert not isinstance(setup_logging(stream=stream, environ={}), JournalHandler)


def test_stderr_plain_when_not_connected_to_journald(healthd_logger: logging.Logger) -> None:
    stream = io.StringIO()
    setup_logging(stream=stream, environ={}, use_journal=False)
    log_finding(healthd_logger, FINDING)
    line = stream.getvalue().strip()
    assert line.endswith("ERROR xid CRITICAL XID_79 gpu3: GPU has fallen off the bus")
    assert not line.startswith("<")


def test_stderr_gets_priority_prefixes_when_it_is_the_journal_stream(
    healthd_logger: logging.Logger, tmp_path: Path
) -> None:
    with open(tmp_path / "stream", "w+", encoding="utf-8") as stream:
        st = os.fstat(stream.fileno())
        setup_logging(stream=stream, environ={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}, use_journal=False)
        log_finding(healthd_logger, FINDING)
        healthd_logger.info("pass 1: OK")
        stream.flush()
        stream.seek(0)
        lines = stream.read().splitlines()
    # sd-daemon(3): "<3>" is err, "<6>" info; journald strips the prefix and sets PRIORITY.
    assert lines == ["<3>xid CRITICAL XID_79 gpu3: GPU has fallen off the bus", "<6>pass 1: OK"]


def test_a_journal_stream_of_another_file_is_ignored(healthd_logger: logging.Logger) -> None:
    stream = io.StringIO()
    setup_logging(stream=stream, environ={"JOURNAL_STREAM": "1:2"}, use_journal=False)
    healthd_logger.warning("hello")
    assert "WARNING hello" in stream.getvalue()


def test_every_line_journald_will_see_gets_the_prefix(healthd_logger: logging.Logger, tmp_path: Path) -> None:
    # journald's stream ends a line at "\n" or NUL only (journald-stream.c): "\r" stays inside one,
    # and no text after a NUL or a newline can set its own priority.
    with open(tmp_path / "stream", "w+", encoding="utf-8", newline="") as stream:
        st = os.fstat(stream.fileno())
        setup_logging(stream=stream, environ={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}, use_journal=False)
        healthd_logger.info("a\r<0>b\x00<0>c\n<0>d")
        stream.flush()
        stream.seek(0)
        text = stream.read()
    assert text == "<6>a\r<0>b\n<6><0>c\n<6><0>d\n"
