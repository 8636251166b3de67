"""Prometheus exposition of the last pass: a collector, an HTTP ``/metrics`` endpoint, a textfile.

The daemon hands each finished pass to ``HealthdCollector.update``, which turns it
into ready-made samples; a scrape only copies those out (no check, no file read,
no Slurm call happens during a scrape). The collector lives in its own
``CollectorRegistry`` so no process or platform metrics of the Python client leak
in. Names follow the Prometheus conventions: ``healthd_`` prefix, base units,
``_total`` counters, ``_seconds`` and ``_timestamp_seconds``; labels stay
low-cardinality (check names, severities, GPU indexes, Xid numbers, action kinds).
prometheus_client is imported only inside functions, never at import time.
"""

from __future__ import annotations

import enum
import re
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

from healthd import __version__
from healthd.model import PassResult, RunState, Status
from healthd.outcome import ActionOutcome

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from healthd.policy import Action

_SEVERITIES = (Status.WARNING, Status.CRITICAL, Status.UNKNOWN)
# The xid check codes GPU Xids XID_<n> and NVSwitch SXids SXID_<n> (checks/xid.py).
_XID_CODE = re.compile(r"^(S?XID)_(\d+)$")
# A scrape is one small GET: a client still silent after this long is dropped.
HANDLER_TIMEOUT_SECONDS = 5.0
# Connections served at once; more are closed at once, so no client can make healthd
# start threads without bound (the unit's TasksMax would then fail the pass's thread).
MAX_CONNECTIONS = 4
# A check "succeeds" when it observed the node (ran to the end, or had nothing to check).
_OBSERVED = (RunState.RAN, RunState.NOT_APPLICABLE)


@dataclass(frozen=True)
class ActionSample:
    """One action the policy decided in a pass: its kind (``drain_after_jobs``, ``resume``...) and outcome."""

    kind: Action
    outcome: ActionOutcome


@dataclass(frozen=True)
class PassSample:
    """What one pass contributes to the metrics."""

    result: PassResult
    actions: tuple[ActionSample, ...] = ()
    breaker_open: Optional[bool] = None


class _Kind(enum.Enum):
    GAUGE = "gauge"
    COUNTER = "counter"


@dataclass(frozen=True)
class _Family:
    kind: _Kind
    name: str
    documentation: str
    labels: tuple[str, ...]
    samples: tuple[tuple[tuple[str, ...], float], ...]


def xid_events(result: PassResult) -> dict[tuple[str, str], float]:
    """Xid events by (gpu, xid) from findings coded ``XID_<n>`` or ``SXID_<n>`` with ``gpu`` and ``count`` details.

    The ``xid`` label is ``<n>`` for a GPU Xid and ``SXID_<n>`` for an NVSwitch SXid
    (whose "gpu" is the switch). Nothing here knows the xid check beyond that contract:
    a missing ``gpu`` falls back to the subject, a missing ``count`` counts 1.
    """
    events: dict[tuple[str, str], float] = {}
    for finding in result.findings:
        match = _XID_CODE.match(finding.code)
        if match is None:
            continue
        gpu = finding.details.get("gpu")
        count = finding.details.get("count", 1)
        xid = match.group(2) if match.group(1) == "XID" else f"SXID_{match.group(2)}"
        key = (str(gpu if gpu is not None else finding.subject), xid)
        amount = float(count) if isinstance(count, (int, float)) and not isinstance(count, bool) else 1.0
        events[key] = events.get(key, 0.0) + amount
    return events


class HealthdCollector:
    """Holds the samples of the last pass (plus running counters) and yields them on scrape."""

    def __init__(self, version: str = __version__) -> None:
        self._lock = threading.Lock()
        self._version = version
        self._families: tuple[_Family, ...] = ()
        self._last_success: dict[str, float] = {}
        self._passes = 0.0
        self._actions: dict[tuple[str, str], float] = {}

    def update(self, sample: PassSample) -> None:
        """Replace the exported samples with those of ``sample`` (called once per pass)."""
        result = sample.result
        finished_at = result.started_at + result.duration_seconds
        with self._lock:
            self._passes += 1
            for action in sample.actions:
                key = (action.kind.value, action.outcome.value)
                self._actions[key] = self._actions.get(key, 0.0) + 1
            checks = [r for r in result.results if r.state is not RunState.DISABLED]
            for check in checks:
                if check.state in _OBSERVED and check.status is Status.OK:
                    self._last_success[check.check] = finished_at
            families = [
                _gauge(
                    "healthd_pass_status",
                    "Nagios code of the last pass (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN).",
                    (),
                    [((), float(int(result.status)))],
                ),
                _gauge(
                    "healthd_pass_duration_seconds", "Wall time of the last pass.", (), [((), result.duration_seconds)]
                ),
                _gauge(
                    "healthd_last_pass_timestamp_seconds",
                    "When the last pass finished, epoch seconds.",
                    (),
                    [((), finished_at)],
                ),
                _counter("healthd_passes_total", "Passes run since the daemon started.", (), [((), self._passes)]),
                _gauge(
                    "healthd_check_status",
                    "Nagios code of each check in the last pass.",
                    ("check",),
                    [((c.check,), float(int(c.status))) for c in checks],
                ),
                _gauge(
                    "healthd_check_up",
                    "1 when the check observed the node in the last pass, 0 when it "
                    "crashed, timed out, was stuck or failed to load.",
                    ("check",),
                    [((c.check,), 1.0 if c.state in _OBSERVED else 0.0) for c in checks],
                ),
                _gauge(
                    "healthd_check_applicable",
                    "1 when the check found something to examine on this node.",
                    ("check",),
                    [((c.check,), 1.0 if c.applicable else 0.0) for c in checks],
                ),
                _gauge(
                    "healthd_check_duration_seconds",
                    "Wall time of each check in the last pass.",
                    ("check",),
                    [((c.check,), c.duration_seconds) for c in checks],
                ),
                _gauge(
                    "healthd_check_last_success_timestamp_seconds",
                    "When each check last finished with status OK, epoch seconds (since the daemon started).",
                    ("check",),
                    sorted(((name,), ts) for name, ts in self._last_success.items()),
                ),
                _gauge(
                    "healthd_findings",
                    "Findings of the last pass by check and severity.",
                    ("check", "severity"),
                    [
                        ((c.check, s.name.lower()), float(sum(1 for f in c.findings if f.status is s)))
                        for c in checks
                        for s in _SEVERITIES
                    ],
                ),
                # The xid check reports one finding per GPU and Xid seen this boot, its count
                # detail growing until a reboot: a counter whose resets rate() understands.
                _counter(
                    "healthd_xid_events_total",
                    "Xid and SXid lines the kernel logged this boot, by GPU (or NVSwitch) and Xid "
                    "(SXID_<n> for an SXid).",
                    ("gpu", "xid"),
                    sorted(((gpu, xid), n) for (gpu, xid), n in xid_events(result).items()),
                ),
                _counter(
                    "healthd_actions_total",
                    "Actions decided by the policy since the daemon started, by kind and outcome (taken, held_back).",
                    ("action", "outcome"),
                    sorted(((kind, outcome), n) for (kind, outcome), n in self._actions.items()),
                ),
            ]
            if sample.breaker_open is not None:
                families.append(
                    _gauge(
                        "healthd_circuit_breaker_open",
                        "1 while the circuit breaker holds actions back.",
                        (),
                        [((), 1.0 if sample.breaker_open else 0.0)],
                    )
                )
            self._families = tuple(families)

    def describe(self) -> Iterator[Any]:
        # Registering must not call collect(); names are only known once a pass ran.
        return iter(())

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self._lock:
            families = self._families
        info = GaugeMetricFamily("healthd_build_info", "The running healthd version (always 1).", labels=["version"])
        info.add_metric([self._version], 1.0)
        yield info
        for family in families:
            counter = family.kind is _Kind.COUNTER
            cls = CounterMetricFamily if counter else GaugeMetricFamily
            # The client appends _total to a counter family's samples itself.
            name = family.name[: -len("_total")] if counter else family.name
            metric = cls(name, family.documentation, labels=list(family.labels))
            for labels, value in family.samples:
                metric.add_metric(list(labels), value)
            yield metric


def _gauge(name: str, doc: str, labels: tuple[str, ...], samples: Sequence[tuple[tuple[str, ...], float]]) -> _Family:
    return _Family(_Kind.GAUGE, name, doc, labels, tuple(samples))


def _counter(name: str, doc: str, labels: tuple[str, ...], samples: Sequence[tuple[tuple[str, ...], float]]) -> _Family:
    return _Family(_Kind.COUNTER, name, doc, labels, tuple(samples))


def new_registry(collector: HealthdCollector) -> CollectorRegistry:
    """A dedicated registry holding only ``collector`` (no process/platform collectors)."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # type: ignore[arg-type]
    return registry


def refuse_untrusted_textfile(path: Optional[Path]) -> None:
    """Raise ``UntrustedPath`` when the directory of ``[metrics].textfile`` fails ``healthd.trust``'s rule.

    Root writes there after every pass: a directory another user can write would let
    them plant the name as a link, or swap the directory, and choose where root writes.
    A directory that does not exist is not refused: each write reports it.
    """
    from healthd.trust import refuse_untrusted

    if path is not None:
        refuse_untrusted(path.parent)


def write_textfile(path: Path, registry: CollectorRegistry) -> None:
    """Write the exposition for node_exporter's textfile collector atomically, readable by all.

    The directory must pass the trust rule (``UntrustedPath`` otherwise); the new file
    is created ``O_EXCL`` next to ``path`` and renamed over it, so no link planted at
    either name is followed (``healthd.state.write_atomically``). node_exporter runs as
    its own user and the unit's ``UMask=0077`` would leave a new file 0600, so the mode
    is set explicitly (0644: the metrics are no secret). The temp file's name does not
    end in ``.prom``, so the collector never reads it half-written.
    """
    import os

    from prometheus_client import generate_latest

    from healthd.state import write_atomically
    from healthd.trust import open_trusted_dir

    body = generate_latest(registry)
    dir_fd = open_trusted_dir(path.parent)
    try:
        write_atomically(dir_fd, path.name, body, 0o644)
    finally:
        os.close(dir_fd)


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); ``[::1]:9101`` for IPv6.

    An empty host (``:9101``) binds all IPv4 addresses; ``[::]:9101`` binds all IPv6
    addresses and, unless ``net.ipv6.bindv6only`` is set, all IPv4 ones too.
    """
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


class _Handler(BaseHTTPRequestHandler):
    registry: CollectorRegistry
    # StreamRequestHandler puts this timeout on the socket: a half-sent request ends here.
    timeout = HANDLER_TIMEOUT_SECONDS

    def do_GET(self) -> None:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        if self.path.split("?", 1)[0] != "/metrics":
            self._reply(404, "text/plain; charset=utf-8", b"not found; metrics are at /metrics\n")
            return
        self._reply(200, CONTENT_TYPE_LATEST, generate_latest(self.registry))

    def _reply(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        # Scrapes every 15-60 s would drown the journal; errors surface as failed scrapes.
        return


class _BoundedHTTPServer(ThreadingHTTPServer):
    """One thread per connection, at most ``max_connections`` at once; the rest are closed unserved."""

    daemon_threads = True
    # listen(2) backlog: a burst of connections waits for accept() instead of SYN retries.
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], handler: type[_Handler], max_connections: int) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except RuntimeError:  # no thread could be started (the unit's TasksMax): drop this one
            self._slots.release()
            self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The default prints a traceback to stderr for every client that hangs up mid-reply.
        import logging

        logging.getLogger("healthd.metrics").debug("metrics: request from %s failed", client_address, exc_info=True)


class MetricsServer:
    """``GET /metrics`` on ``host:port`` from a background thread; every other path is 404.

    A client that connects and sends nothing (or half a request) holds one of
    ``max_connections`` slots for at most ``timeout`` seconds; connections beyond the
    slots are closed at once. So a flood of idle connections can delay scrapes but
    never costs more than ``max_connections`` + 1 threads, and never touches the passes.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        *,
        timeout: float = HANDLER_TIMEOUT_SECONDS,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        handler = type("MetricsHandler", (_Handler,), {"registry": registry, "timeout": timeout})
        self._server = _BoundedHTTPServer((host, port), handler, max_connections)
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-http", daemon=True)
        try:
            self._thread.start()
        except RuntimeError:
            self._server.server_close()
            raise

    @property
    def port(self) -> int:
        return int(self._server.socket.getsockname()[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
