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
from typing import Any, Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from healthd.metrics import (
    ActionSample,
    HealthdCollector,
    MetricsServer,
    PassSample,
    new_registry,
    write_textfile,
    xid_events,
)
from healthd.model import CheckResult, Finding, PassResult, RunState, Status
from healthd.outcome import ActionOutcome
from healthd.policy import Action

PROMTOOL = shutil.which("promtool")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _xid(gpu: int, xid: int, count: int) -> Finding:
    return Finding("xid", Status.CRITICAL, f"XID_{xid}", f"gpu{gpu}", f"Xid {xid}", {"gpu": gpu, "count": count})


def _sample_pass(started_at: float = 1_700_000_000.0) -> PassResult:
    return PassResult(
        node="gpu0001",
        started_at=started_at,
        duration_seconds=1.5,
        results=(
            CheckResult("mounts", RunState.RAN, (), 0.25),
            CheckResult(
                "xid",
                RunState.RAN,
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


def test_xid_events_are_derived_from_findings() -> None:
    assert xid_events(_sample_pass()) == {("0", "79"): 1.0, ("3", "48"): 3.0}


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) is not installed")
def test_http_scrape_passes_promtool_and_carries_the_last_pass() -> None:
    collector = HealthdCollector(version="9.9.9")
    collector.update(
        PassSample(
            _sample_pass(),
            actions=(
                ActionSample(Action.DRAIN_AFTER_JOBS, ActionOutcome.TAKEN),
                ActionSample(Action.RESUME, ActionOutcome.HELD_BACK),
            ),
            breaker_open=False,
        )
    )
    collector.update(
        PassSample(
            _sample_pass(1_700_000_300.0),
            actions=(ActionSample(Action.DRAIN_AFTER_JOBS, ActionOutcome.TAKEN),),
            breaker_open=True,
        )
    )
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
        assert values[("healthd_xid_events_total", (("gpu", "3"), ("xid", "48")))] == 3
        assert values[("healthd_actions_total", (("action", "drain_after_jobs"), ("outcome", "taken")))] == 2
        assert values[("healthd_actions_total", (("action", "resume"), ("outcome", "held_back")))] == 1
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
    make_daemon: Callable[..., Any],
    start_daemon: Callable[..., Any],
    tmp_path: Path,
    config_writer: Callable[..., Path],
    wait_until: Callable[..., None],
) -> None:
    port = _free_port()
    textfile = tmp_path / "textfile" / "healthd.prom"
    textfile.parent.mkdir()
    config = config_writer(
        tmp_path / "healthd.toml",
        tmp_path / "state",
        report="warning",
        extra=f'[metrics]\nlisten = "127.0.0.1:{port}"\ntextfile = "{textfile}"',
    )
    daemon = make_daemon(config=config)
    handle = start_daemon(daemon)
    try:
        wait_until(lambda: textfile.exists(), what="textfile")
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
    collector.update(PassSample(_sample_pass()))
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
    sxid = Finding("xid", Status.CRITICAL, "SXID_20034", "nvswitch0", "SXid", {"gpu": "nvswitch0", "count": 4})
    result = PassResult("n", 0.0, 0.0, (CheckResult("xid", RunState.RAN, (sxid, _xid(1, 79, 2)), 0.0),))
    assert xid_events(result) == {("nvswitch0", "SXID_20034"): 4.0, ("1", "79"): 2.0}


def test_idle_connections_cannot_exhaust_threads_or_block_scrapes_for_long() -> None:
    server = MetricsServer(new_registry(HealthdCollector(version="1")), "127.0.0.1", 0, timeout=0.5)
    threads_before = threading.active_count()
    idle = []
    try:
        for _ in range(200):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            sock.sendall(b"GET /metr")  # half a request, never finished
            idle.append(sock)
        assert threading.active_count() <= threads_before + 4
        # Once the held slots time out, a real scrape is served again although the idle sockets stay open.
        deadline = time.monotonic() + 10
        code = 0
        while code != 200 and time.monotonic() < deadline:
            try:
                code = _scrape(server.port)[0]
            except OSError:
                time.sleep(0.1)
        assert code == 200
    finally:
        for sock in idle:
            sock.close()
        server.close()


def test_daemon_keeps_passing_and_serving_under_a_flood_of_half_open_connections(
    make_daemon: Callable[..., Any],
    start_daemon: Callable[..., Any],
    tmp_path: Path,
    config_writer: Callable[..., Path],
    wait_until: Callable[..., None],
) -> None:
    port = _free_port()
    config = config_writer(
        tmp_path / "healthd.toml", tmp_path / "state", interval=1, extra=f'[metrics]\nlisten = "127.0.0.1:{port}"'
    )
    daemon = make_daemon(config=config)
    handle = start_daemon(daemon)
    idle = []
    try:
        wait_until(lambda: daemon.passes >= 1, what="first pass")
        threads_before = threading.active_count()
        for _ in range(300):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x")  # headers never finished
            except OSError:  # the server closed a connection beyond its slots: that is the point
                continue
            idle.append(sock)
        passes = daemon.passes
        wait_until(lambda: daemon.passes >= passes + 3, what="passes during the flood")
        # One thread per held slot at most; a pass thread may come and go.
        assert threading.active_count() <= threads_before + 5
        assert handle.thread.is_alive()
        for sock in idle:
            sock.close()
        idle.clear()
        wait_until(lambda: _scrape_succeeds(port), what="a scrape after the flood")
    finally:
        for sock in idle:
            sock.close()
        assert handle.stop() == 0


def test_a_port_in_use_is_logged_and_checks_go_on(
    make_daemon: Callable[..., Any],
    start_daemon: Callable[..., Any],
    tmp_path: Path,
    config_writer: Callable[..., Path],
    wait_until: Callable[..., None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = config_writer(
            tmp_path / "healthd.toml", tmp_path / "state", interval=1, extra=f'[metrics]\nlisten = "127.0.0.1:{port}"'
        )
        daemon = make_daemon(config=config)
        handle = start_daemon(daemon)
        wait_until(lambda: daemon.passes >= 3, what="passes")
    try:
        # Logged once, not every pass; once the port is free, the next pass opens it.
        assert sum(f"cannot listen on 127.0.0.1:{port}" in r.getMessage() for r in caplog.records) == 1
        wait_until(lambda: daemon.server is not None, what="the listener after the port was freed")
        assert _scrape(port)[0] == 200
    finally:
        assert handle.stop() == 0
