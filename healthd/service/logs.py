"""Logging for the daemon: journald with structured fields under systemd, plain stderr otherwise.

A finding is logged when it is raised, changes status or clears, and an action when it
is first decided (healthd.service.sinks.LogSink); each is one log record carrying
``HEALTHD_CHECK``, ``HEALTHD_CODE``, ``HEALTHD_SEVERITY`` (and ``HEALTHD_SUBJECT``)
so ``journalctl HEALTHD_CODE=XID_79`` finds them. Records go to journald with
those fields when our stderr is the stream systemd connected to journald
(``$JOURNAL_STREAM`` names its device and inode, systemd.exec(5)): through
``systemd.journal.send`` when systemd-python is importable, else through the
built-in sender of journald's native protocol (``JournalSocket``). Otherwise they
go to stderr. If the journal socket refuses a record, that record goes to stderr
with the ``<N>`` priority prefix of sd-daemon(3), which journald also understands.

Text from findings (kernel log lines, sysfs values, mount sources) passes through
``healthd.text.one_line`` first, so it can neither start a forged log line nor
carry terminal escapes.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import sys
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence, TextIO

from healthd.model import Finding, Status
from healthd.text import one_line, records

if TYPE_CHECKING:
    from healthd.cycle.outcome import ActionOutcome
    from healthd.plan.state import Action

LOGGER_NAME = "healthd"
FIELDS_ATTR = "healthd_fields"
# systemd's "Native Journal Protocol": datagrams of fields to this socket.
JOURNAL_SOCKET = "/run/systemd/journal/socket"
# A datagram must fit the socket's send buffer (about 200 KiB by default); larger
# entries would need a sealed memfd. A record's text is cut to stay well below.
_MAX_MESSAGE_BYTES = 48 * 1024

# syslog(3) priorities, as journald's PRIORITY field expects them.
_PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}

_FINDING_LEVEL = {
    Status.OK: logging.INFO,
    Status.WARNING: logging.WARNING,
    Status.UNKNOWN: logging.WARNING,
    Status.CRITICAL: logging.ERROR,
}


def syslog_priority(levelno: int) -> int:
    """The syslog priority for a ``logging`` level (levels between named ones round down)."""
    for level in sorted(_PRIORITY, reverse=True):
        if levelno >= level:
            return _PRIORITY[level]
    return 7


def journal_fields(record: logging.LogRecord) -> dict[str, str]:
    """The journal fields of ``record``: MESSAGE, PRIORITY, the HEALTHD_* extras, the logger."""
    fields = {
        "MESSAGE": record.getMessage(),
        "PRIORITY": str(syslog_priority(record.levelno)),
        "SYSLOG_IDENTIFIER": "healthd",
        "LOGGER": record.name,
    }
    if record.exc_info:
        fields["MESSAGE"] += "\n" + logging.Formatter().formatException(record.exc_info)
    extra: Mapping[str, Any] = getattr(record, FIELDS_ATTR, None) or {}
    for key, value in extra.items():
        fields[key.upper()] = str(value)
    return fields


def encode_journal_fields(fields: Mapping[str, str]) -> bytes:
    """One native-protocol datagram: ``KEY=value`` lines, or the binary form for values with a newline.

    The binary form (systemd's "Native Journal Protocol") is the key, a newline, the
    value's length as a 64-bit little-endian integer, the value, and a newline.
    """
    parts: list[bytes] = []
    for key, value in fields.items():
        data = value.encode("utf-8", "replace")
        if b"\n" in data:
            parts.append(key.encode("ascii") + b"\n" + struct.pack("<Q", len(data)) + data + b"\n")
        else:
            parts.append(key.encode("ascii") + b"=" + data + b"\n")
    return b"".join(parts)


class JournalSocket:
    """Sends journal entries to journald without systemd-python (no compiler needed to install)."""

    def __init__(self, address: str = JOURNAL_SOCKET) -> None:
        self.address = address

    def __call__(self, message: str, **fields: str) -> None:
        data = message.encode("utf-8", "replace")
        if len(data) > _MAX_MESSAGE_BYTES:
            message = data[:_MAX_MESSAGE_BYTES].decode("utf-8", "ignore") + "\n[truncated]"
        payload = encode_journal_fields({"MESSAGE": message, **fields})
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(payload, self.address)


class JournalHandler(logging.Handler):
    """Sends each record to journald with its structured fields; ``fallback`` takes what journald refuses."""

    def __init__(self, send: Callable[..., Any], fallback: Optional[logging.Handler] = None) -> None:
        super().__init__()
        self._send = send
        self._fallback = fallback

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields = journal_fields(record)
            message = fields.pop("MESSAGE")
            self._send(message, **fields)
        except OSError:
            if self._fallback is None:
                self.handleError(record)
            else:
                self._fallback.handle(record)
        except Exception:
            self.handleError(record)


class _StderrFormatter(logging.Formatter):
    def __init__(self, priority_prefix: bool) -> None:
        # journald stamps its own time; a terminal or a file wants one.
        super().__init__("%(message)s" if priority_prefix else "%(asctime)s %(levelname)s %(message)s")
        self._prefix = priority_prefix

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if not self._prefix:
            return text
        priority = syslog_priority(record.levelno)
        # journald's stream reader ends a line at "\n" or NUL, nowhere else (systemd
        # src/journal/journald-stream.c, stdout_stream_scan), and reads a "<N>" prefix at the start
        # of each: every one of those lines gets ours, so no text in the message can choose its own.
        return "\n".join(f"<{priority}>{line}" for line in records(text.replace("\0", "\n")))


def _stderr_is_journal(stream: TextIO, environ: Mapping[str, str]) -> bool:
    # systemd.exec(5): JOURNAL_STREAM is "DEVICE:INODE" of the stream connected to journald.
    value = environ.get("JOURNAL_STREAM", "")
    device, _, inode = value.partition(":")
    if not device.isdigit() or not inode.isdigit():
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return st.st_dev == int(device) and st.st_ino == int(inode)


def _journal_sender() -> Callable[..., Any]:
    try:
        from systemd import journal
    except ImportError:
        return JournalSocket()
    send: Callable[..., Any] = journal.send
    return send


def setup_logging(
    level: int = logging.INFO,
    *,
    stream: Optional[TextIO] = None,
    environ: Optional[Mapping[str, str]] = None,
    use_journal: bool = True,
) -> logging.Handler:
    """Route the ``healthd`` logger to journald or stderr; returns the handler installed."""
    env = os.environ if environ is None else environ
    out = sys.stderr if stream is None else stream
    stderr_is_journal = _stderr_is_journal(out, env)
    stderr_handler = logging.StreamHandler(out)
    stderr_handler.setFormatter(_StderrFormatter(priority_prefix=stderr_is_journal))
    # Only where journald already holds our stderr: run by hand or under another
    # supervisor, the operator reads stderr, even on a host booted with systemd.
    handler: logging.Handler = stderr_handler
    if use_journal and stderr_is_journal:
        handler = JournalHandler(_journal_sender(), fallback=stderr_handler)
    logger = logging.getLogger(LOGGER_NAME)
    for old in list(logger.handlers):
        logger.removeHandler(old)
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    return handler


def log_finding(logger: logging.Logger, finding: Finding) -> None:
    """One record for one finding, at a level that follows its severity (text made one safe line)."""
    check, code, subject = _finding_names(finding)
    logger.log(
        _FINDING_LEVEL[finding.status],
        "%s %s %s %s: %s",
        check,
        finding.status.name,
        code,
        subject,
        one_line(finding.message),
        extra={FIELDS_ATTR: _finding_fields(finding, finding.status)},
    )


def log_cleared(logger: logging.Logger, finding: Finding) -> None:
    """One record saying that ``finding`` (as last seen) is gone: its check no longer raises it."""
    check, code, subject = _finding_names(finding)
    logger.info(
        "%s CLEARED %s %s (was %s)",
        check,
        code,
        subject,
        finding.status.name,
        extra={FIELDS_ATTR: _finding_fields(finding, Status.OK)},
    )


def log_reminder(logger: logging.Logger, line: str, status: Status, findings: Sequence[Finding]) -> None:
    """The periodic one line of what is still wrong: the pass's line, then each finding, at most 10."""
    named = []
    for finding in findings[:10]:
        check, code, subject = _finding_names(finding)
        named.append(f"{check} {finding.status.name} {code} {subject}")
    more = f" and {len(findings) - 10} more" if len(findings) > 10 else ""
    logger.log(
        _FINDING_LEVEL[status],
        "%s; still: %s%s",
        line,
        ", ".join(named) or "no finding",
        more,
        extra={FIELDS_ATTR: {"HEALTHD_CHECK": "reminder", "HEALTHD_SEVERITY": status.name}},
    )


def _finding_names(finding: Finding) -> tuple[str, str, str]:
    return one_line(finding.check, 64), one_line(finding.code, 64), one_line(finding.subject, 200)


def _finding_fields(finding: Finding, severity: Status) -> dict[str, str]:
    check, code, subject = _finding_names(finding)
    return {"HEALTHD_CHECK": check, "HEALTHD_CODE": code, "HEALTHD_SEVERITY": severity.name, "HEALTHD_SUBJECT": subject}


def log_action(
    logger: logging.Logger, action: Action, outcome: ActionOutcome, node: str, detail: str, severity: Status
) -> None:
    """One record for one action on the node (``severity`` is the pass's status)."""
    node = one_line(node, 200)
    logger.log(
        logging.WARNING if outcome.changes_or_should_change_the_node else logging.INFO,
        "policy %s %s on %s: %s",
        action.value,
        outcome.value,
        node,
        one_line(detail),
        extra={
            FIELDS_ATTR: {
                "HEALTHD_CHECK": "policy",
                "HEALTHD_CODE": action.value.upper(),
                "HEALTHD_SEVERITY": severity.name,
                "HEALTHD_ACTION": action.value,
                "HEALTHD_OUTCOME": outcome.value,
                "HEALTHD_NODE": node,
            }
        },
    )
