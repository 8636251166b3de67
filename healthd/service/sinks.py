"""Where a finished pass goes: the log, the metrics, systemd's ``STATUS=`` line.

The daemon (healthd.service.daemon) runs a pass and hands its ``PassOutcome``
(healthd.cycle.outcome) to each sink in turn. A sink has one
job, never acts on the node, and never raises for its own trouble (a busy port, an
unwritable or refused textfile are logged); only ``MetricsSink.configure`` raises
``UntrustedPath``, for a textfile directory refused at start or reload.

Saving the pass is not a sink's job: the pipeline's settle step writes the policy
state and the ``last-pass`` document (healthd.cycle.pipeline), because ``healthd check
--once`` and the hook, which have no sinks, must leave them behind too.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Optional, Protocol

from healthd.cycle.render import pass_summary
from healthd.model import RunState, Status
from healthd.service.logs import log_action, log_cleared, log_finding, log_reminder
from healthd.service.metrics import (
    HealthdCollector,
    MetricsServer,
    new_registry,
    parse_listen,
    refuse_untrusted_textfile,
    write_textfile,
)
from healthd.store.trust import UntrustedPath
from healthd.text import one_line

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from healthd.config.models import MetricsSettings
    from healthd.cycle.outcome import PassOutcome
    from healthd.model import Finding
    from healthd.service.sdnotify import Notifier


class Sink(Protocol):
    """Takes each finished pass; ``number`` counts the passes since the daemon started (1 for the first)."""

    def publish(self, report: PassOutcome, number: int) -> None: ...


def status_line(report: PassOutcome) -> str:
    """The daemon's one line for a pass, for ``STATUS=`` and the log: ``CRITICAL at 12:05:00 (0.4s): ...``."""
    result = report.result
    when = time.strftime("%H:%M:%S", time.localtime(result.started_at))
    head = f"{result.status.name} at {when} ({result.duration_seconds:.1f}s)"
    # "next try in Ns" counts from the end of the pass, so the line says the same whenever it is made.
    return pass_summary(report.document, result.started_at + result.duration_seconds, head=head)


# How often the log repeats, in one line, what is still wrong (docs/service.md, "Logs").
REMINDER_SECONDS = 3600.0


class LogSink:
    """Logs what changed (a finding raised, changed or cleared, a new action) and each pass's problems.

    A finding that stays as it was is not logged again each pass: one steady WARNING
    on 1,000 nodes every 5 minutes would be 288,000 records a day saying nothing new.
    Instead, while something is wrong, one line every ``reminder_seconds`` (of the
    passes' own clock) repeats the pass's summary and what is still wrong. A pass whose
    status changed without any record saying why (the first, or one that failed) logs
    its summary line. A finding "changes" when its status does; its text may change
    every pass (a count, a temperature) and is not a change. Findings and actions carry
    the ``HEALTHD_*`` journal fields (healthd.service.logs).
    """

    def __init__(self, logger: logging.Logger, reminder_seconds: float = REMINDER_SECONDS) -> None:
        self._log = logger
        self._reminder = reminder_seconds
        self._findings: dict[str, Finding] = {}
        self._actions: frozenset[tuple[str, str]] = frozenset()
        self._status: Optional[Status] = None
        self._last_line: Optional[float] = None

    def publish(self, report: PassOutcome, number: int) -> None:
        result = report.result
        now = result.started_at + result.duration_seconds
        logged = self._log_changes(report)
        changed = result.status is not self._status
        self._status = result.status
        if changed and not logged:
            self._log.info("pass %d: %s", number, status_line(report))
        elif not logged:
            if not self._wrong(report) or self._last_line is None or now - self._last_line < self._reminder:
                return
            line = f"pass {number}: {status_line(report)}"
            log_reminder(self._log, line, result.status, list(self._findings.values()))
        self._last_line = now

    def _wrong(self, report: PassOutcome) -> bool:
        return bool(self._findings) or report.result.status is not Status.OK

    def _log_changes(self, report: PassOutcome) -> int:
        """Log each finding raised, changed or cleared, each action not decided last pass, and each problem."""
        result = report.result
        findings = {f.key: f for f in result.findings if f.status is not Status.OK}
        records = 0
        for key, finding in findings.items():
            before = self._findings.get(key)
            if before is None or before.status is not finding.status:
                log_finding(self._log, finding)
                records += 1
        # A check that crashed or timed out did not look: what it found before is not gone.
        blind = {c.check for c in result.results if c.state in (RunState.ERROR, RunState.TIMEOUT, RunState.STUCK)}
        for key, before in self._findings.items():
            if key in findings:
                continue
            if before.check in blind:
                findings[key] = before
            else:
                log_cleared(self._log, before)
                records += 1
        self._findings = findings
        actions = frozenset((a.kind.value, a.outcome.value) for a in report.actions)
        for action in report.actions:
            if (action.kind.value, action.outcome.value) not in self._actions:
                log_action(self._log, action.kind, action.outcome, result.node, action.detail, result.status)
                records += 1
        self._actions = actions
        for problem in report.problems:
            # Every pass, not once: a state file that cannot be written is an error each time it
            # fails (docs/service.md, "State problems"). It may quote a path or an error's text:
            # it must not start a forged log line.
            self._log.error("pass problem: %s", one_line(problem))
            records += 1
        return records


class NotifySink:
    """Tells systemd how the last pass went: ``READY=1`` with the first pass's line, ``STATUS=`` after each.

    ``READY=1`` waits for the first pass, so ``systemctl start`` returns once a first
    result exists (docs/service.md). The watchdog is the loop's, not a sink's: it
    must stop when the loop hangs, not when passes stop arriving.
    """

    def __init__(self, notifier: Notifier) -> None:
        self._notifier = notifier
        self._ready = False

    def publish(self, report: PassOutcome, number: int) -> None:
        line = status_line(report)
        if self._ready:
            self._notifier.status(line)
        else:
            self._notifier.ready(line)
            self._ready = True


class MetricsSink:
    """Exports the last pass: the collector, the ``[metrics].listen`` endpoint, the ``[metrics].textfile``.

    ``configure`` takes the ``[metrics]`` table at start and on each reload that
    changes it. A listener that cannot open (a busy port) is retried every pass.
    """

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger
        self.collector = HealthdCollector()
        self.registry: Optional[CollectorRegistry] = None
        self.server: Optional[MetricsServer] = None
        self._settings: Optional[MetricsSettings] = None
        self._listen_failures = 0
        self._textfile_failures = 0

    def configure(self, settings: MetricsSettings) -> None:
        """Take new ``[metrics]`` settings; raises ``UntrustedPath`` for a textfile directory others can write."""
        refuse_untrusted_textfile(settings)
        self.close()
        self._settings = settings
        self._listen_failures = 0
        self._textfile_failures = 0
        if settings.listen is None and settings.textfile is None:
            self.registry = None
            return
        if self.registry is None:
            self.registry = new_registry(self.collector)
        self._ensure_listening()

    def publish(self, report: PassOutcome, number: int) -> None:
        self._ensure_listening()
        self.collector.update(report)
        settings = self._settings
        if settings is None or settings.textfile is None or self.registry is None:
            return
        try:
            write_textfile(settings.textfile, self.registry, settings.textfile_owner)
        except (OSError, UntrustedPath) as exc:
            # The checks go on without their textfile: a directory node_exporter's account
            # turned into something refused (a link of its own) must not stop the health
            # checks. Logged loudly once, then quietly, like a busy port; the metrics'
            # staleness alert (deploy/prometheus) tells the rest.
            self._textfile_failures += 1
            level = logging.ERROR if self._textfile_failures == 1 else logging.DEBUG
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            self._log.log(level, "metrics: cannot write textfile %s: %s", settings.textfile, why)
        else:
            self._textfile_failures = 0

    def close(self) -> None:
        """Stop serving ``/metrics`` (a later ``configure`` may open it again)."""
        if self.server is not None:
            self.server.close()
            self.server = None

    def _ensure_listening(self) -> None:
        """Open the listener if configured and not open yet."""
        listen = self._settings.listen if self._settings is not None else None
        if listen is None or self.server is not None or self.registry is None:
            return
        host, port = parse_listen(listen)
        try:
            self.server = MetricsServer(self.registry, host, port)
        except (OSError, RuntimeError) as exc:
            self._listen_failures += 1
            # Logged loudly once, then quietly: the port may stay busy for days.
            level = logging.ERROR if self._listen_failures == 1 else logging.DEBUG
            self._log.log(level, "metrics: cannot listen on %s: %s; checks go on, retrying every pass", listen, exc)
        else:
            self._log.info("metrics: serving http://%s/metrics", listen)
