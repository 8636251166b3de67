"""Prometheus exposition of the last pass: a collector, an HTTP ``/metrics`` endpoint, a textfile.

The daemon's metrics sink (healthd.service.sinks) hands each finished pass to
``HealthdCollector.update``, which turns it into ready-made samples; a scrape only
copies those out (no check, no file read, no Slurm call happens during a scrape).
The collector lives in its own ``CollectorRegistry`` so no process or platform
metrics of the Python client leak in. Names follow the Prometheus conventions:
``healthd_`` prefix, base units, ``_total`` counters, ``_seconds`` and
``_timestamp_seconds``; labels stay low-cardinality (check names, severities, action
kinds, and the labels a check declares for its event counters). Event counters
(``healthd_<name>_total``) come from the tallies the runner made of each check's
findings with the counters the check declares (``healthd.checks.plugin.EventCounter``):
nothing here knows any check.
prometheus_client is imported only inside functions, never at import time.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import pwd
import selectors
import socket
import threading
import time
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, NamedTuple, Optional, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from healthd import __version__
from healthd.model import CheckResult, EventTally, PassResult, RunState, Status
from healthd.store.atomicfile import write_atomically
from healthd.store.trust import open_trusted_dir, refuse_untrusted
from healthd.text import one_line

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from healthd.config.models import MetricsSettings
    from healthd.cycle.outcome import PassOutcome

log = logging.getLogger(__name__)

_SEVERITIES = (Status.WARNING, Status.CRITICAL, Status.UNKNOWN)
# The state-set's members, in the order of badness (``Status.rank``), lower-case as label values.
_STATES = tuple(sorted(Status, key=lambda status: status.rank))
# The most label sets one pass exports in a family whose labels carry finding codes
# (``healthd_active_findings``, ``healthd_took_out``). Codes are short and stable per check
# (``XID_79``, ``MOUNT_HUNG``), so a node has a few; a check that invents codes (a third
# party's, or many Xids at once) must not make Prometheus store thousands of series per
# node. Beyond the cap, the rest are summed under ``code="OTHER"`` (docs/metrics.md).
MAX_CODE_SERIES = 50
OVERFLOW_CODE = "OTHER"
# A code longer than this is cut: label values are stored in every sample's index entry.
_MAX_CODE_CHARS = 64
# A scrape is one small GET: a client has this long from connecting to have sent its whole
# request and taken the reply, however it paces its bytes; then it is dropped.
REQUEST_DEADLINE_SECONDS = 5.0
# Connections held open at once (one thread serves them all, so this bounds file
# descriptors, not threads); a new connection beyond it drops the oldest.
MAX_CONNECTIONS = 64
# The most a request head (request line and headers) may take; a scrape sends a few hundred bytes.
MAX_REQUEST_BYTES = 16384
# A check "succeeds" when it observed the node (ran to the end, or had nothing to check).
_OBSERVED = (RunState.RAN, RunState.NOT_APPLICABLE)
# A check that passed its deadline: this pass, or an earlier run still not finished.
_LATE = (RunState.TIMEOUT, RunState.STUCK)


class _Kind(enum.Enum):
    GAUGE = "gauge"
    COUNTER = "counter"


class _Family(NamedTuple):
    kind: _Kind
    name: str
    documentation: str
    labels: tuple[str, ...]
    samples: tuple[tuple[tuple[str, ...], float], ...]


def event_counts(result: PassResult) -> dict[str, tuple[EventTally, dict[tuple[str, ...], float]]]:
    """Each event counter's family name -> its first declaration and its counts, summed over the checks' tallies.

    Two checks may feed one counter when they declare the same labels; a tally whose
    labels differ from the first one's is left out (and logged), since one family
    cannot carry two label sets.
    """
    merged: dict[str, tuple[EventTally, dict[tuple[str, ...], float]]] = {}
    for check in result.results:
        for tally in check.tallies:
            name = f"healthd_{tally.name}_total"
            known = merged.setdefault(name, (tally, {}))
            if known[0].labels != tally.labels:
                log.warning(
                    "metrics: %s of check %s has labels %s, not %s: left out",
                    name,
                    check.check,
                    tally.labels,
                    known[0].labels,
                )
                continue
            for labels, value in tally.counts:
                known[1][labels] = known[1].get(labels, 0.0) + value
    return merged


class HealthdCollector:
    """Holds the samples of the last pass (plus running counters) and yields them on scrape."""

    def __init__(self, version: str = __version__) -> None:
        self._lock = threading.Lock()
        self._version = version
        self._families: tuple[_Family, ...] = ()
        self._last_success: dict[str, float] = {}
        self._passes = 0.0
        self._actions: dict[tuple[str, str], float] = {}
        self._timeouts: dict[str, float] = {}

    def update(self, sample: PassOutcome) -> None:
        """Replace the exported samples with those of the pass ``sample`` (called once per pass)."""
        result = sample.result
        finished_at = result.started_at + result.duration_seconds
        checks = [r for r in result.results if r.state is not RunState.DISABLED]
        with self._lock:
            self._count(sample, checks, finished_at)
            families = [
                *_pass_families(result, finished_at, self._passes),
                *_check_families(checks, self._last_success),
                *_finding_families(checks),
                *self._running_families(),
            ]
            families += _event_families(result, families)
            if sample.breaker_open is not None:
                families += _policy_families(sample)
            self._families = tuple(families)

    def _count(self, sample: PassOutcome, checks: Sequence[CheckResult], finished_at: float) -> None:
        """Advance what runs across passes: the gauges above are one pass's, these the daemon's life's."""
        self._passes += 1
        for action in sample.actions:
            key = (action.kind.value, action.outcome.value)
            self._actions[key] = self._actions.get(key, 0.0) + 1
        for check in checks:
            if check.state in _OBSERVED and check.status is Status.OK:
                self._last_success[check.check] = finished_at
            if check.state in _LATE:
                self._timeouts[check.check] = self._timeouts.get(check.check, 0.0) + 1
            else:
                # A check that never timed out still has its series (0), so rate() sees it start.
                self._timeouts.setdefault(check.check, 0.0)

    def _running_families(self) -> list[_Family]:
        """The counters kept since the daemon started: check timeouts and the policy's actions."""
        return [
            _counter(
                "healthd_check_timeouts_total",
                "Check runs that passed their deadline (timed out, or still stuck from an earlier pass) "
                "since the daemon started.",
                ("check",),
                sorted(((name,), n) for name, n in self._timeouts.items()),
            ),
            _counter(
                "healthd_actions_total",
                "Actions decided by the policy since the daemon started, by kind and outcome (taken, held_back).",
                ("action", "outcome"),
                sorted(((kind, outcome), n) for (kind, outcome), n in self._actions.items()),
            ),
        ]

    def describe(self) -> Iterator[Any]:
        # Registering must not call collect(); names are only known once a pass ran.
        return iter(())

    def collect(self) -> Iterator[Any]:
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


def _pass_families(result: PassResult, finished_at: float, passes: float) -> list[_Family]:
    """The pass as a whole: its status, when it finished and how long it took, and how many ran."""
    return [
        _gauge(
            "healthd_pass_state",
            "1 for the status of the last pass, 0 for the others (a state set).",
            ("status",),
            _state_set((), result.status),
        ),
        _gauge(
            "healthd_pass_status",
            "DEPRECATED (removed in the next release; use healthd_pass_state): "
            "Nagios code of the last pass (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN).",
            (),
            [((), float(int(result.status)))],
        ),
        _gauge("healthd_pass_duration_seconds", "Wall time of the last pass.", (), [((), result.duration_seconds)]),
        _gauge(
            "healthd_last_pass_timestamp_seconds",
            "When the last pass finished, epoch seconds.",
            (),
            [((), finished_at)],
        ),
        _counter("healthd_passes_total", "Passes run since the daemon started.", (), [((), passes)]),
    ]


def _check_families(checks: Sequence[CheckResult], last_success: Mapping[str, float]) -> list[_Family]:
    """Each check of the pass: its status, whether it observed the node, its time, its last success."""
    return [
        _gauge(
            "healthd_check_state",
            "1 for the status of each check in the last pass, 0 for the others (a state set).",
            ("check", "status"),
            [sample for c in checks for sample in _state_set((c.check,), c.status)],
        ),
        _gauge(
            "healthd_check_status",
            "DEPRECATED (removed in the next release; use healthd_check_state): "
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
            sorted(((name,), ts) for name, ts in last_success.items()),
        ),
    ]


def _finding_families(checks: Sequence[CheckResult]) -> list[_Family]:
    """The pass's findings: counted by check and severity, and by code with the series capped."""
    return [
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
        _gauge(
            "healthd_active_findings",
            "Findings of the last pass by check, code and severity (one series per code; "
            f"beyond {MAX_CODE_SERIES} the rest are summed under code={OVERFLOW_CODE}).",
            ("check", "code", "severity"),
            capped_code_counts(
                (f.check, f.code, f.status.name.lower())
                for c in checks
                for f in c.findings
                if f.status is not Status.OK
            ),
        ),
    ]


def _state_set(labels: tuple[str, ...], status: Status) -> list[tuple[tuple[str, ...], float]]:
    """One sample per status, 1 for ``status`` and 0 for the others (kube-state-metrics' habit).

    A label per status, not one number: ``max()`` over Nagios codes ranks UNKNOWN (3)
    above CRITICAL (2), and a selector ``{status="critical"}`` reads as what it means.
    """
    return [((*labels, state.name.lower()), 1.0 if state is status else 0.0) for state in _STATES]


def capped_code_counts(keys: Iterable[tuple[str, str, str]]) -> list[tuple[tuple[str, ...], float]]:
    """``(check, code, severity)`` label sets with their counts, at most ``MAX_CODE_SERIES`` of them.

    The codes are cut to ``_MAX_CODE_CHARS`` one-line characters. The label sets with the
    most findings are kept (then the first by name); the rest are summed per check and
    severity under ``code="OTHER"``, so the total still counts every finding.
    """
    counts: dict[tuple[str, str, str], float] = {}
    for check, code, severity in keys:
        key = (check, one_line(code, _MAX_CODE_CHARS), severity)
        counts[key] = counts.get(key, 0.0) + 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    kept = dict(ranked[: MAX_CODE_SERIES - 1] if len(ranked) > MAX_CODE_SERIES else ranked)
    for (check, _code, severity), n in ranked[len(kept) :]:
        other = (check, OVERFLOW_CODE, severity)
        kept[other] = kept.get(other, 0.0) + n
    return sorted(kept.items())


def _policy_families(sample: PassOutcome) -> list[_Family]:
    """What the policy decided about the node: the breaker, why healthd holds it out, a repair."""
    repair = sample.repair
    took_out = capped_code_counts((check, code, "") for check, code in sample.took_out)
    return [
        _gauge(
            "healthd_circuit_breaker_open",
            "1 while the circuit breaker holds actions back.",
            (),
            [((), 1.0 if sample.breaker_open else 0.0)],
        ),
        _gauge(
            "healthd_node_out",
            "1 while healthd holds the node out of the scheduler (taken out by its findings, or for repair).",
            (),
            [((), 1.0 if took_out or repair is not None else 0.0)],
        ),
        _gauge(
            "healthd_took_out",
            "The findings that took the node out, by check and code (1 per finding).",
            ("check", "code"),
            [((check, code), n) for (check, code, _), n in took_out],
        ),
        _gauge(
            "healthd_node_in_repair",
            "1 while the node is out for repair: a finding code repeated on one unit (docs/history.md).",
            ("code", "unit"),
            [] if repair is None else [((one_line(repair.code, _MAX_CODE_CHARS), one_line(repair.unit, 200)), 1.0)],
        ),
    ]


def _event_families(result: PassResult, core: Sequence[_Family]) -> list[_Family]:
    """The checks' event counters; one whose name healthd's own metrics use is left out (and logged)."""
    taken = {family.name.removesuffix("_total") for family in core} | {"healthd_build_info"}
    families = []
    for name, (tally, counts) in sorted(event_counts(result).items()):
        if name.removesuffix("_total") in taken:
            log.warning("metrics: event counter %s would replace one of healthd's own metrics: left out", name)
            continue
        families.append(_counter(name, tally.documentation, tally.labels, sorted(counts.items())))
    return families


def _gauge(name: str, doc: str, labels: tuple[str, ...], samples: Sequence[tuple[tuple[str, ...], float]]) -> _Family:
    return _Family(_Kind.GAUGE, name, doc, labels, tuple(samples))


def _counter(name: str, doc: str, labels: tuple[str, ...], samples: Sequence[tuple[tuple[str, ...], float]]) -> _Family:
    return _Family(_Kind.COUNTER, name, doc, labels, tuple(samples))


def new_registry(collector: HealthdCollector) -> CollectorRegistry:
    """A dedicated registry holding only ``collector`` (no process/platform collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # type: ignore[arg-type]
    return registry


def textfile_owner_uid(name: Optional[str]) -> Optional[int]:
    """The uid of ``[metrics].textfile_owner``, or None when unset or no such account exists here."""
    if not name:
        return None
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


def refuse_untrusted_textfile(settings: MetricsSettings) -> None:
    """Raise ``UntrustedPath`` when the directory of ``[metrics].textfile`` fails ``healthd.store.trust``'s rule.

    The one check ``healthd run`` (at start and on reload) and ``healthd config validate``
    make, so both refuse the same directories with the same message. Root writes there
    after every pass: a directory a user could write would let them choose where root's
    write lands, if root followed a name in it. The exception is the account node_exporter
    runs as (``textfile_owner``, ``prometheus`` by default: Debian's package and the common
    RPMs make the textfile directory theirs): its directories are trusted for this write
    only. The file is created ``O_EXCL`` under a fresh name and renamed into place
    relative to the directory's descriptor, and healthd never reads it back, so that
    account can at most delete or replace the metrics it serves anyway. A link it owns is
    still refused, since a link could point root's write into a directory of root's.
    A directory that does not exist is not refused: each write reports it.
    """
    if settings.textfile is not None:
        refuse_untrusted(settings.textfile.parent, dir_owner=textfile_owner_uid(settings.textfile_owner))


def write_textfile(path: Path, registry: CollectorRegistry, owner: Optional[str] = None) -> None:
    """Write the exposition for node_exporter's textfile collector atomically, readable by all.

    The directory must pass the trust rule, with directories of ``owner`` (the
    ``[metrics].textfile_owner`` account) trusted too (``UntrustedPath`` otherwise); the
    new file is created ``O_EXCL`` next to ``path`` and renamed over it, so no link
    planted at either name is followed (``healthd.store.atomicfile``). node_exporter runs as
    its own user and the unit's ``UMask=0077`` would leave a new file 0600, so the mode
    is set explicitly (0644: the metrics are no secret). The temp file's name does not
    end in ``.prom``, so the collector never reads it half-written.
    """
    body = generate_latest(registry)
    dir_fd = open_trusted_dir(path.parent, dir_owner=textfile_owner_uid(owner))
    try:
        write_atomically(dir_fd, path.name, body, 0o644)
    finally:
        os.close(dir_fd)


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); ``[::1]:4584`` for IPv6.

    An empty host (``:4584``) binds all IPv4 addresses; ``[::]:4584`` binds all IPv6
    addresses and, unless ``net.ipv6.bindv6only`` is set, all IPv4 ones too.
    """
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


class _Connection:
    """One client of the metrics endpoint: what it sent so far and the reply still to send."""

    __slots__ = ("deadline", "received", "reply", "sock")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.received = bytearray()
        self.reply: Optional[memoryview] = None


def _end_of_head(received: bytearray) -> bool:
    # RFC 9112 section 2.2: a line ends in CRLF, and a recipient may accept a bare LF.
    return b"\r\n\r\n" in received or b"\n\n" in received


def _response(code: int, content_type: str, body: bytes, extra: str = "") -> bytes:
    head = (
        f"HTTP/1.0 {code} {HTTPStatus(code).phrase}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _reply_to(head: bytes, registry: CollectorRegistry) -> bytes:
    """The whole reply to a request whose head (request line and headers) is ``head``."""
    text = "text/plain; charset=utf-8"
    parts = head.split(b"\n", 1)[0].split()
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        return _response(400, text, b"bad request\n")
    method, target, _ = parts
    if method != b"GET":
        return _response(405, text, b"only GET is served\n", "Allow: GET\r\n")
    if target.split(b"?", 1)[0] != b"/metrics":
        return _response(404, text, b"not found; metrics are at /metrics\n")
    return _response(200, CONTENT_TYPE_LATEST, generate_latest(registry))


class MetricsServer:
    """``GET /metrics`` on ``host:port``, every other path 404; one background thread serves all clients.

    The thread multiplexes its connections (``selectors``), so a slow client costs a
    file descriptor, never a thread, and never delays another client's reply. Each
    connection has ``deadline`` seconds from accept to receive the whole request head
    and take the whole reply; a client that trickles header lines (slowloris) is
    dropped at that deadline however steady its pace. At most ``max_connections`` are
    held open: a new one drops the oldest, so clients that keep connections open cannot
    keep a scraper out, whose request arrives in one piece and is answered at once.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        *,
        deadline: float = REQUEST_DEADLINE_SECONDS,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self._registry = registry
        self._deadline = deadline
        self._max_connections = max_connections
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        # Wakes the serving thread for close(); AF_UNIX is among the unit's RestrictAddressFamilies.
        self._wake_reader, self._wake_writer = socket.socketpair()
        try:
            # As http.server does: a restarted daemon can bind again while old connections linger
            # in TIME_WAIT. It does not let two listeners share the port (Linux needs both to set it,
            # and neither may be listening).
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((host, port))
            # listen(2) backlog: a burst of connections waits for accept() instead of SYN retries.
            self._listener.listen(64)
            self._listener.setblocking(False)
            self._wake_reader.setblocking(False)
            self._thread = threading.Thread(target=self._serve, name="metrics-http", daemon=True)
            self._thread.start()
        except BaseException:
            self._close_sockets()
            raise

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_writer.send(b"x")
        self._thread.join(timeout=5)
        self._close_sockets()

    def _close_sockets(self) -> None:
        for sock in (self._listener, self._wake_reader, self._wake_writer):
            sock.close()

    def _serve(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ)
        selector.register(self._wake_reader, selectors.EVENT_READ)
        # Insertion order is accept order: the first entry is the oldest connection.
        connections: dict[socket.socket, _Connection] = {}

        def drop(conn: _Connection) -> None:
            del connections[conn.sock]
            selector.unregister(conn.sock)
            conn.sock.close()

        try:
            while True:
                soonest = min((c.deadline for c in connections.values()), default=None)
                wait = None if soonest is None else max(0.0, soonest - time.monotonic())
                ready = {key.fileobj: key.data for key, _ in selector.select(wait)}
                if self._wake_reader in ready:
                    return
                # Connections first, new ones after: a burst of connects cannot drop a scrape
                # whose request is already here.
                for conn in ready.values():
                    if not isinstance(conn, _Connection) or connections.get(conn.sock) is not conn:
                        continue  # the listener, or a connection dropped earlier in this round
                    try:
                        done = self._progress(conn)
                    except Exception:
                        # A client that hangs up mid-request, or a reply that could not be built:
                        # this connection ends, the others and the daemon go on.
                        log.debug("metrics: a request failed", exc_info=True)
                        done = True
                    if done:
                        drop(conn)
                    elif conn.reply is not None:
                        selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
                if self._listener in ready:
                    for sock in self._accept():
                        if len(connections) >= self._max_connections:
                            drop(next(iter(connections.values())))
                        connections[sock] = _Connection(sock, time.monotonic() + self._deadline)
                        selector.register(sock, selectors.EVENT_READ, connections[sock])
                now = time.monotonic()
                for late in [c for c in connections.values() if c.deadline <= now]:
                    drop(late)
        finally:
            for left in list(connections.values()):
                drop(left)
            selector.close()

    def _accept(self) -> list[socket.socket]:
        accepted: list[socket.socket] = []
        while True:
            try:
                sock, _ = self._listener.accept()
            except BlockingIOError:
                return accepted
            except OSError:
                # ECONNABORTED (the client gave up first), or no file descriptor left: the
                # listener stays registered, and the next readiness tries again.
                log.debug("metrics: accept failed", exc_info=True)
                return accepted
            sock.setblocking(False)
            accepted.append(sock)

    def _progress(self, conn: _Connection) -> bool:
        """Read or write what the socket allows now; True when the connection is finished."""
        try:
            return self._step(conn)
        except BlockingIOError:  # a readiness that went away (select(2) may report one spuriously)
            return False

    def _step(self, conn: _Connection) -> bool:
        if conn.reply is None:
            data = conn.sock.recv(4096)
            if not data:
                return True
            conn.received += data
            if not _end_of_head(conn.received):
                # A scrape's head is a line and a few headers; a longer one is no scrape.
                return len(conn.received) > MAX_REQUEST_BYTES
            conn.reply = memoryview(_reply_to(bytes(conn.received), self._registry))
        sent = conn.sock.send(conn.reply)
        conn.reply = conn.reply[sent:]
        if conn.reply:
            return False
        # Half-close first (as http.server does), so the reply is not cut off by a reset.
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_WR)
        return True
