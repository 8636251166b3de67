"""Logging for the daemon: journald with structured fields under systemd, plain stderr otherwise.

Every non-OK finding and every action is one log record carrying
``HEALTHD_CHECK``, ``HEALTHD_CODE``, ``HEALTHD_SEVERITY`` (and ``HEALTHD_SUBJECT``)
so ``journalctl HEALTHD_CODE=XID_79`` finds them. Records go through
``systemd.journal.send`` when systemd-python is importable and our stderr is
connected to journald (``$JOURNAL_STREAM``, see systemd.exec(5)) or the host is
booted with systemd. Otherwise they go to stderr; when stderr is the journal
stream anyway, each line starts with the ``<N>`` priority prefix of
sd-daemon(3) so journald still records the right PRIORITY.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Callable, Mapping, Optional, TextIO

from healthd.model import Finding, Status

LOGGER_NAME = "healthd"
FIELDS_ATTR = "healthd_fields"

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


class JournalHandler(logging.Handler):
    """Sends each record to journald with its structured fields."""

    def __init__(self, send: Callable[..., Any]) -> None:
        super().__init__()
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields = journal_fields(record)
            message = fields.pop("MESSAGE")
            self._send(message, **fields)
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
        return "\n".join(f"<{priority}>{line}" for line in text.splitlines())


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


def _journal_sender(environ: Mapping[str, str]) -> Optional[Callable[..., Any]]:
    try:
        from systemd import daemon, journal
    except ImportError:
        return None
    if environ.get("JOURNAL_STREAM") or daemon.booted():
        send: Callable[..., Any] = journal.send
        return send
    return None


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
    sender = _journal_sender(env) if use_journal else None
    handler: logging.Handler
    if sender is not None:
        handler = JournalHandler(sender)
    else:
        handler = logging.StreamHandler(out)
        handler.setFormatter(_StderrFormatter(priority_prefix=_stderr_is_journal(out, env)))
    logger = logging.getLogger(LOGGER_NAME)
    for old in list(logger.handlers):
        logger.removeHandler(old)
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    return handler


def log_finding(logger: logging.Logger, finding: Finding) -> None:
    """One record for one finding, at a level that follows its severity."""
    logger.log(
        _FINDING_LEVEL[finding.status],
        "%s %s %s %s: %s",
        finding.check,
        finding.status.name,
        finding.code,
        finding.subject,
        finding.message,
        extra={
            FIELDS_ATTR: {
                "HEALTHD_CHECK": finding.check,
                "HEALTHD_CODE": finding.code,
                "HEALTHD_SEVERITY": finding.status.name,
                "HEALTHD_SUBJECT": finding.subject,
            }
        },
    )


def log_action(logger: logging.Logger, action: str, outcome: str, node: str, detail: str, severity: Status) -> None:
    """One record for one action on the node (``severity`` is the pass's status).

    ``outcome`` is taken, held_back, pending, dry_run or disabled.
    """
    logger.log(
        logging.WARNING if outcome in ("taken", "held_back", "pending") else logging.INFO,
        "policy %s %s on %s: %s",
        action,
        outcome,
        node,
        detail,
        extra={
            FIELDS_ATTR: {
                "HEALTHD_CHECK": "policy",
                "HEALTHD_CODE": action.upper(),
                "HEALTHD_SEVERITY": severity.name,
                "HEALTHD_ACTION": action,
                "HEALTHD_OUTCOME": outcome,
                "HEALTHD_NODE": node,
            }
        },
    )
