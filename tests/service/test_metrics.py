"""Prometheus exposition: a real HTTP scrape, linted by promtool, values read back."""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import stat
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

import pytest
from healthd_testkit.faults import DaemonKit
from healthd_testkit.net import free_ports
from prometheus_client.parser import text_string_to_metric_families

from healthd.checks.plugin import EventCounter
from healthd.cycle.engine import Engine
from healthd.cycle.outcome import ActionOutcome, ActionSection, PassAction, PassOutcome
from healthd.model import CheckResult, EventTally, Finding, PassResult, RunState, Status
from healthd.plan.ackview import POLICY_CHECK
from healthd.plan.state import Action, Decision, PolicyState
from healthd.service.metrics import HealthdCollector, MetricsServer, event_counts, new_registry, write_textfile
from healthd_checks.xid.check import XID_EVENTS

PROMTOOL = shutil.which("promtool")
NOTHING = Decision(Action.NONE, Action.NONE, "", "all checks pass")


def _xid(gpu: int, xid: int, count: int) -> Finding:
    return Finding("xid", Status.CRITICAL, f"XID_{xid}", f"gpu{gpu}", f"Xid {xid}", {"gpu": gpu, "count": count})


def _xid_result(findings: tuple[Finding, ...], duration: float = 0.0) -> CheckResult:
    """The xid check's result as the runner makes it: its findings tallied by the counter it declares."""
    return CheckResult("xid", RunState.RAN, findings, duration, tallies=(XID_EVENTS.tally(findings),))


def _xid_events(result: PassResult) -> dict[tuple[str, ...], float]:
    return event_counts(result)["healthd_xid_events_total"][1]


def _sample_pass(started_at: float = 1_700_000_000.0) -> PassResult:
    return PassResult(
        node="gpu0001",
        started_at=started_at,
        duration_seconds=1.5,
        results=(
            CheckResult("mounts", RunState.RAN, (), 0.25),
            _xid_result(
                (
                    _xid(0, 79, 1),
                    _xid(3, 48, 2),
                    _xid(3, 48, 1),
                    Finding("xid", Status.WARNING, "XID_PARSE", "kmsg", "odd line"),
                ),
                0.5,
            ),
            CheckResult(
                "gpu", RunState.TIMEOUT, (Finding("gpu", Status.UNKNOWN, "CHECK_TIMEOUT", "gpu", "slow"),), 10.0
            ),
            CheckResult("infiniband", RunState.NOT_APPLICABLE, (), 0.01, "no HCA"),
            CheckResult("pcie", RunState.DISABLED, (), 0.0, "disabled in config"),
        ),
    )


def _scrape_succeeds(port: int) -> bool:
    """A scrape answered 200; until the flood's connections are released one may be dropped."""
    try:
        return _scrape(port)[0] == 200
    except (OSError, http.client.HTTPException):
        return False


def _scrape(port: int, path: str = "/metrics") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def _outcome(result: PassResult, decision: Decision = NOTHING, applied: bool = False) -> PassOutcome:
    """A finished pass of ``result`` whose policy decided ``decision`` (Slurm enabled; no error, no state)."""
    action = ActionSection(
        decision=decision,
        node_state=None,
        node_reason=None,
        applied=applied,
        held=decision.action is Action.HOLD,
        pending=False,
        dry_run=False,
        slurm_enabled=True,
        acknowledged=(),
        errors=(),
    )
    return PassOutcome(result, action, PolicyState(), {})


def test_xid_events_are_derived_from_findings() -> None:
    unknown = ("unknown", "unknown")  # no uuid or pci detail: said so, never ""
    assert _xid_events(_sample_pass()) == {("0", *unknown, "79"): 1.0, ("3", *unknown, "48"): 3.0}


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) is not installed")
def test_http_scrape_passes_promtool_and_carries_the_last_pass() -> None:
    collector = HealthdCollector(version="9.9.9")
    drained = _outcome(_sample_pass(), Decision(Action.DRAIN_AFTER_JOBS, Action.DRAIN_AFTER_JOBS, "r", "e"), True)
    assert drained.actions == (PassAction(Action.DRAIN_AFTER_JOBS, ActionOutcome.TAKEN, "r"),)
    collector.update(drained)
    later = _sample_pass(1_700_000_300.0)
    held = Finding(POLICY_CHECK, Status.CRITICAL, "DRAIN_HELD", "n1", "circuit breaker")
    later = later._replace(results=(*later.results, CheckResult(POLICY_CHECK, RunState.RAN, (held,), 0.0)))
    waiting = _outcome(later, Decision(Action.HOLD, Action.DRAIN_AFTER_JOBS, "r", "partition full"))
    assert waiting.actions == (PassAction(Action.DRAIN_AFTER_JOBS, ActionOutcome.HELD_BACK, "partition full"),)
    assert (drained.breaker_open, waiting.breaker_open) == (False, True)
    collector.update(waiting)
    server = MetricsServer(new_registry(collector), "127.0.0.1", 0)
    try:
        code, body = _scrape(server.port)
        assert code == 200
        lint = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True, text=True, check=False)
        assert lint.returncode == 0, lint.stdout + lint.stderr
        assert lint.stdout.strip() == "" and lint.stderr.strip() == "", lint.stdout + lint.stderr

        values = _values(body)
        assert values[("healthd_build_info", (("version", "9.9.9"),))] == 1
        assert values[("healthd_pass_status", ())] == 2  # CRITICAL outranks the gpu check's UNKNOWN
        assert values[("healthd_pass_duration_seconds", ())] == 1.5
        assert values[("healthd_last_pass_timestamp_seconds", ())] == 1_700_000_301.5
        assert values[("healthd_passes_total", ())] == 2
        assert values[("healthd_check_status", (("check", "gpu"),))] == 3
        assert values[("healthd_check_status", (("check", "mounts"),))] == 0
        assert values[("healthd_check_up", (("check", "gpu"),))] == 0
        assert values[("healthd_check_up", (("check", "infiniband"),))] == 1
        assert values[("healthd_check_applicable", (("check", "infiniband"),))] == 0
        assert values[("healthd_check_duration_seconds", (("check", "gpu"),))] == 10.0
        assert values[("healthd_check_last_success_timestamp_seconds", (("check", "mounts"),))] == 1_700_000_301.5
        assert ("healthd_check_last_success_timestamp_seconds", (("check", "gpu"),)) not in values
        assert not any(labels == (("check", "pcie"),) for _, labels in values)  # disabled: not exported
        assert values[("healthd_findings", (("check", "xid"), ("severity", "critical")))] == 3
        assert values[("healthd_findings", (("check", "xid"), ("severity", "warning")))] == 1
        assert values[("healthd_findings", (("check", "mounts"), ("severity", "critical")))] == 0
        xid_48 = (("UUID", "unknown"), ("gpu", "3"), ("pci_bus_id", "unknown"), ("xid", "48"))
        assert values[("healthd_xid_events_total", xid_48)] == 3
        assert values[("healthd_actions_total", (("action", "drain_after_jobs"), ("outcome", "taken")))] == 1
        assert values[("healthd_actions_total", (("action", "drain_after_jobs"), ("outcome", "held_back")))] == 1
        assert values[("healthd_circuit_breaker_open", ())] == 1

        # A scrape only copies the stored samples: scraping again changes nothing.
        assert _scrape(server.port)[1] == body
        assert _scrape(server.port, "/")[0] == 404
        assert _scrape(server.port, "/metrics/extra")[0] == 404
    finally:
        server.close()


def test_before_the_first_pass_only_build_info_is_exported() -> None:
    server = MetricsServer(new_registry(HealthdCollector(version="1.2.3")), "127.0.0.1", 0)
    try:
        code, body = _scrape(server.port)
    finally:
        server.close()
    assert code == 200
    assert list(_values(body)) == [("healthd_build_info", (("version", "1.2.3"),))]


def test_daemon_serves_metrics_and_writes_the_textfile(
    daemons: DaemonKit,
    tmp_path: Path,
) -> None:
    port = free_ports(1)[0]
    textfile = tmp_path / "textfile" / "healthd.prom"
    textfile.parent.mkdir()
    config = daemons.config(
        tmp_path / "healthd.toml",
        tmp_path / "state",
        report="warning",
        extra=f'[metrics]\nlisten = "127.0.0.1:{port}"\ntextfile = "{textfile}"',
    )
    daemon = daemons.make(config=config)
    handle = daemons.start(daemon)
    try:
        daemons.wait(lambda: textfile.exists(), what="textfile")
        code, body = _scrape(port)
        assert code == 200
        values = _values(body)
        assert values[("healthd_check_status", (("check", "flag"),))] == 1
        assert values[("healthd_findings", (("check", "flag"), ("severity", "warning")))] == 1
        assert _values(textfile.read_text())[("healthd_check_status", (("check", "flag"),))] == 1
        # Written through a temp file and a rename: nothing else is ever left in the directory.
        assert [p.name for p in textfile.parent.iterdir()] == ["healthd.prom"]
    finally:
        assert handle.stop() == 0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_textfile_is_readable_by_node_exporter_whatever_the_umask(tmp_path: Path) -> None:
    collector = HealthdCollector(version="1.0")
    collector.update(_outcome(_sample_pass()))
    textfile = tmp_path / "healthd.prom"
    old = os.umask(0o077)  # the unit's UMask=
    try:
        write_textfile(textfile, new_registry(collector))
        write_textfile(textfile, new_registry(collector))  # replacing keeps the mode too
    finally:
        os.umask(old)
    assert stat.S_IMODE(textfile.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["healthd.prom"]
    assert _values(textfile.read_text())[("healthd_pass_status", ())] == 2


def test_sxid_events_are_counted_with_their_own_label() -> None:
    details = {"gpu": "nvswitch0", "pci": "0000:c1:00.0", "count": 4}
    sxid = Finding("xid", Status.CRITICAL, "SXID_20034", "nvswitch0", "SXid", details)
    result = PassResult("n", 0.0, 0.0, (_xid_result((sxid, _xid(1, 79, 2))),))
    assert _xid_events(result) == {
        ("nvswitch0", "unknown", "00000000:C1:00.0", "SXID_20034"): 4.0,
        ("1", "unknown", "unknown", "79"): 2.0,
    }


def _closed_by_server(sock: socket.socket) -> bool:
    """True once the server has closed ``sock`` (a read sees EOF or a reset)."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_idle_connections_cost_no_thread_and_cannot_block_scrapes(daemons: DaemonKit) -> None:
    server = MetricsServer(new_registry(HealthdCollector(version="1")), "127.0.0.1", 0, max_connections=16)
    threads_before = threading.active_count()
    idle = []
    try:
        for _ in range(200):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            sock.sendall(b"GET /metr")  # half a request, never finished
            idle.append(sock)
        # The idle sockets stay open on this side; the server keeps at most 16 of them.
        code, body = _scrape(server.port)
        assert code == 200 and "healthd_build_info" in body
        assert threading.active_count() == threads_before  # one thread serves every connection
        daemons.wait(lambda: sum(not _closed_by_server(s) for s in idle) <= 16, what="the oldest dropped")
    finally:
        for sock in idle:
            sock.close()
        server.close()


class _Slowloris(threading.Thread):
    """Keeps a connection open by sending one more header line every ``pace`` seconds, reconnecting when dropped.

    Records how long each connection lived until the server closed it.
    """

    def __init__(self, port: int, pace: float) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.pace = pace
        self.stop = threading.Event()
        self.lifetimes: list[float] = []
        self.lines_sent = 0
        self.connections = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            except OSError:
                continue
            self.connections += 1
            opened = time.monotonic()
            try:
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: node\r\n")
                while not self.stop.wait(self.pace):
                    if _closed_by_server(sock):
                        self.lifetimes.append(time.monotonic() - opened)
                        break
                    sock.setblocking(True)
                    sock.sendall(b"X-Slow: %d\r\n" % self.lines_sent)
                    self.lines_sent += 1
            except OSError:  # reset by the server while sending: dropped too
                self.lifetimes.append(time.monotonic() - opened)
            finally:
                sock.close()


@pytest.mark.slow
@pytest.mark.parametrize("max_connections", [64, 4])
def test_slowloris_clients_are_dropped_at_the_deadline_and_never_hold_off_a_scrape(
    daemons: DaemonKit, max_connections: int
) -> None:
    collector = HealthdCollector(version="1")
    collector.update(_outcome(_sample_pass()))
    deadline = 3.0
    server = MetricsServer(new_registry(collector), "127.0.0.1", 0, deadline=deadline, max_connections=max_connections)
    # Twice as many slow clients as the smaller cap, each sending a header line every 1 s,
    # well inside any per-read timeout: they would hold every slot of a thread-per-slot server.
    clients = [_Slowloris(server.port, pace=1.0) for _ in range(8)]
    try:
        for client in clients:
            client.start()
        daemons.wait(lambda: sum(c.connections for c in clients) >= len(clients), what="slow clients connected")
        if max_connections >= len(clients):
            # Every client holds a slot, so each sends steadily. Under a smaller cap each new
            # connection drops the oldest, and a busy machine can keep every one from living to
            # its first header line: the slots are held all the same.
            daemons.wait(lambda: sum(c.lines_sent for c in clients) >= len(clients), what="slow clients sending")
        started = time.monotonic()
        code, body = _scrape(server.port)
        elapsed = time.monotonic() - started
        assert code == 200
        assert _values(body)[("healthd_pass_status", ())] == 2
        assert elapsed < deadline + 3, elapsed
        # The slow clients' connections end at the deadline (or earlier, for a newer one):
        # none outlives it, however steadily it sends.
        daemons.wait(lambda: sum(len(c.lifetimes) for c in clients) >= len(clients), what="slow clients dropped")
        lifetimes = [t for c in clients for t in c.lifetimes]
        assert max(lifetimes) < deadline + 3, lifetimes
    finally:
        for client in clients:
            client.stop.set()
        for client in clients:
            client.join(timeout=10)
        server.close()


def test_a_reader_too_slow_for_a_large_reply_delays_no_other_scrape() -> None:
    # 3000 Xid series make a reply far larger than the slow reader's receive window, so the
    # server must send it in pieces while it serves others.
    findings = tuple(_xid(gpu, xid, 1) for gpu in range(100) for xid in range(30))
    collector = HealthdCollector(version="1")
    collector.update(_outcome(PassResult("n", 0.0, 0.0, (_xid_result(findings),))))
    server = MetricsServer(new_registry(collector), "127.0.0.1", 0)
    # Loopback buffers grow to megabytes; small ones (inherited by accepted sockets) make the
    # reply outgrow them, as it would towards a client that stopped reading.
    server._listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
    slow = socket.socket()
    try:
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.settimeout(5)
        slow.connect(("127.0.0.1", server.port))
        slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        code, body = _scrape(server.port)  # while the slow reader has read nothing
        assert code == 200
        assert len(body) > 100_000
        reply = b""
        while chunk := slow.recv(65536):
            reply += chunk
        head, _, slow_body = reply.partition(b"\r\n\r\n")
        assert f"Content-Length: {len(slow_body)}".encode() in head
        assert slow_body.decode() == body
    finally:
        slow.close()
        server.close()


def test_requests_other_than_a_get_of_metrics_are_refused() -> None:
    server = MetricsServer(new_registry(HealthdCollector(version="1")), "127.0.0.1", 0)
    try:
        for request, status in (
            (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", b"405"),
            (b"GET /metrics\r\n\r\n", b"400"),
            (b"GET /metrics HTTP/1.0\n\n", b"200"),  # bare LF line ends are accepted (RFC 9112 2.2)
        ):
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
                sock.sendall(request)
                reply = b""
                while chunk := sock.recv(65536):
                    reply += chunk
            assert reply.split(b" ", 2)[1] == status, reply
        # A head larger than any scrape's is dropped without a reply.
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 20000 + b"\r\n")
            assert sock.recv(65536) == b""
    finally:
        server.close()


@pytest.mark.slow
def test_daemon_keeps_passing_and_serving_under_a_flood_of_half_open_connections(
    daemons: DaemonKit,
    tmp_path: Path,
) -> None:
    port = free_ports(1)[0]
    config = daemons.config(
        tmp_path / "healthd.toml", tmp_path / "state", interval=1, extra=f'[metrics]\nlisten = "127.0.0.1:{port}"'
    )
    daemon = daemons.make(config=config)
    handle = daemons.start(daemon)
    idle = []
    try:
        daemons.wait(lambda: daemon.passes >= 1, what="first pass")
        threads_before = threading.active_count()
        for _ in range(300):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x")  # headers never finished
            except OSError:  # the server closed a connection beyond its slots: that is the point
                continue
            idle.append(sock)
        passes = daemon.passes
        daemons.wait(lambda: daemon.passes >= passes + 3, what="passes during the flood")
        # One thread per held slot at most; a pass thread may come and go.
        assert threading.active_count() <= threads_before + 5
        assert handle.thread.is_alive()
        for sock in idle:
            sock.close()
        idle.clear()
        daemons.wait(lambda: _scrape_succeeds(port), what="a scrape after the flood")
    finally:
        for sock in idle:
            sock.close()
        assert handle.stop() == 0


@pytest.mark.slow
def test_a_port_in_use_is_logged_and_checks_go_on(
    daemons: DaemonKit,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = daemons.config(
            tmp_path / "healthd.toml", tmp_path / "state", interval=1, extra=f'[metrics]\nlisten = "127.0.0.1:{port}"'
        )
        daemon = daemons.make(config=config)
        handle = daemons.start(daemon)
        daemons.wait(lambda: daemon.passes >= 3, what="passes")
    try:
        # Logged once, not every pass; once the port is free, the next pass opens it.
        assert sum(f"cannot listen on 127.0.0.1:{port}" in r.getMessage() for r in caplog.records) == 1
        daemons.wait(lambda: daemon.metrics.server is not None, what="the listener after the port was freed")
        assert _scrape(port)[0] == 200
    finally:
        assert handle.stop() == 0


def _counted(name: str, labels: tuple[str, ...], *counts: tuple[tuple[str, ...], float]) -> EventTally:
    return EventTally(name, f"{name} of a test check.", labels, counts)


def test_event_counters_know_no_check_and_sum_over_checks() -> None:
    # Any check may declare counters; two checks feeding one counter with the same labels add up.
    a = CheckResult("a", RunState.RAN, (), 0.0, tallies=(_counted("link_flaps", ("port",), (("p1",), 2.0)),))
    b = CheckResult("b", RunState.RAN, (), 0.0, tallies=(_counted("link_flaps", ("port",), (("p1",), 1.0)),))
    collector = HealthdCollector(version="1")
    collector.update(_outcome(PassResult("n", 0.0, 0.0, (a, b))))
    values = _values(_exposition(collector))
    assert values[("healthd_link_flaps_total", (("port", "p1"),))] == 3.0


def test_an_event_counter_cannot_take_a_core_name_or_change_labels() -> None:
    core = CheckResult("a", RunState.RAN, (), 0.0, tallies=(_counted("passes", ("x",), (("1",), 5.0)),))
    first = CheckResult("b", RunState.RAN, (), 0.0, tallies=(_counted("flaps", ("port",), (("p1",), 1.0)),))
    other = CheckResult("c", RunState.RAN, (), 0.0, tallies=(_counted("flaps", ("gpu",), (("0",), 7.0)),))
    collector = HealthdCollector(version="1")
    collector.update(_outcome(PassResult("n", 0.0, 0.0, (core, first, other))))
    values = _values(_exposition(collector))
    assert values[("healthd_passes_total", ())] == 1.0  # healthd's own, not the check's
    assert values[("healthd_flaps_total", (("port", "p1"),))] == 1.0
    assert not [key for key in values if key[0] == "healthd_flaps_total" and key[1] != (("port", "p1"),)]


def test_event_counter_names_and_labels_are_checked_when_declared() -> None:
    with pytest.raises(ValueError, match="no _total"):
        EventCounter("xid_total", "doc", ("gpu",), lambda f: None)
    with pytest.raises(ValueError, match="labels"):
        EventCounter("xid", "doc", ("gpu", "gpu"), lambda f: None)
    with pytest.raises(ValueError, match="labels"):
        EventCounter("xid", "doc", ("__name__",), lambda f: None)
    # dcgm-exporter's UUID is the one upper-case name allowed, so on(UUID) joins work.
    assert EventCounter("xid", "doc", ("gpu", "UUID"), lambda f: None).labels == ("gpu", "UUID")
    for name in ("Uuid", "GPU"):
        with pytest.raises(ValueError, match="labels"):
            EventCounter("xid", "doc", (name,), lambda f: None)


def _exposition(collector: HealthdCollector) -> str:
    from prometheus_client import generate_latest

    return generate_latest(new_registry(collector)).decode()


def _collected(report: PassOutcome) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client import generate_latest

    collector = HealthdCollector(version="1.0")
    collector.update(report)
    return _values(generate_latest(new_registry(collector)).decode())


def test_statuses_are_state_sets_so_critical_is_not_ranked_below_unknown() -> None:
    result = PassResult(
        "gpu0001",
        1_700_000_000.0,
        1.0,
        (
            CheckResult("mounts", RunState.RAN, (Finding("mounts", Status.CRITICAL, "MOUNT_HUNG", "/s", "hung"),), 0.1),
            CheckResult(
                "nvlink", RunState.TIMEOUT, (Finding("nvlink", Status.UNKNOWN, "TIMEOUT", "nvlink", "late"),), 0.1
            ),
        ),
    )
    values = _collected(_outcome(result))
    state = {
        (labels[0][1], labels[1][1]): value for (name, labels), value in values.items() if name == "healthd_check_state"
    }
    assert {key for key, value in state.items() if value == 1} == {("mounts", "critical"), ("nvlink", "unknown")}
    assert len(state) == 8  # four statuses per check, exactly one of them 1
    assert values[("healthd_pass_state", (("status", "critical"),))] == 1
    assert values[("healthd_pass_state", (("status", "unknown"),))] == 0
    # The deprecated numbers stay for one release; their max() is the UNKNOWN check's 3, not CRITICAL.
    assert max(v for (name, _), v in values.items() if name == "healthd_check_status") == 3
    assert values[("healthd_check_timeouts_total", (("check", "nvlink"),))] == 1
    assert values[("healthd_check_timeouts_total", (("check", "mounts"),))] == 0


def test_each_active_finding_code_is_a_series_and_their_number_is_capped() -> None:
    from healthd.service.metrics import MAX_CODE_SERIES, OVERFLOW_CODE

    invented = tuple(Finding("plugin", Status.WARNING, f"CODE_{i:03d}", f"s{i}", "x") for i in range(80))
    hung = (
        Finding("mounts", Status.CRITICAL, "MOUNT_HUNG", "/a", "x"),
        Finding("mounts", Status.CRITICAL, "MOUNT_HUNG", "/b", "x"),
    )
    result = PassResult(
        "gpu0001",
        1_700_000_000.0,
        1.0,
        (CheckResult("plugin", RunState.RAN, invented, 0.1), CheckResult("mounts", RunState.RAN, hung, 0.1)),
    )
    found = {
        dict(labels)["code"]: (dict(labels), value)
        for (name, labels), value in _collected(_outcome(result)).items()
        if name == "healthd_active_findings"
    }
    assert len(found) == MAX_CODE_SERIES
    assert found["MOUNT_HUNG"] == ({"check": "mounts", "code": "MOUNT_HUNG", "severity": "critical"}, 2)
    # What did not fit is summed, so the total still counts every finding.
    assert found[OVERFLOW_CODE][0] == {"check": "plugin", "code": OVERFLOW_CODE, "severity": "warning"}
    assert sum(value for _, value in found.values()) == 82


def test_why_the_node_is_out_and_its_repair_are_exported(make_engine: Callable[..., Engine]) -> None:

    from healthd.cycle.pipeline import run_pass
    from healthd.plan.acks import FindingRef
    from healthd.plan.state import Repair

    outcome = run_pass(make_engine("critical"))
    clean = _collected(outcome)
    assert clean[("healthd_node_out", ())] == 0
    assert not [key for key in clean if key[0] in ("healthd_took_out", "healthd_node_in_repair")]
    repair = Repair("XID_79", "gpu3", "GPU-5a1c", 3, "CRITICAL", 1_700_000_000.0)
    state = outcome.state._replace(took_out=(FindingRef("flag/FLAG_RAISED/flag"),), repair=repair)
    out = _collected(outcome._replace(state=state))
    assert out[("healthd_node_out", ())] == 1
    assert out[("healthd_took_out", (("check", "flag"), ("code", "FLAG_RAISED")))] == 1
    assert out[("healthd_node_in_repair", (("code", "XID_79"), ("unit", "GPU-5a1c")))] == 1
