"""Logging: structured journal fields, stderr with or without journald's priority prefix."""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from healthd.logs import JournalHandler, journal_fields, log_action, log_finding, setup_logging
from healthd.model import Finding, Status


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
    log_action(healthd_logger, "take_out_now", "taken", "gpu0001", "healthd: XID_79 gpu3", Status.CRITICAL)
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


def test_warning_and_unknown_findings_log_at_warning_priority() -> None:
    for status in (Status.WARNING, Status.UNKNOWN):
        record = logging.LogRecord("healthd", logging.WARNING, __file__, 1, "m", (), None)
        record.healthd_fields = {"HEALTHD_SEVERITY": status.name}
        assert journal_fields(record)["PRIORITY"] == "4"


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
