"""Fixtures for the service tests: real notify sockets, a small engine, a daemon in a thread."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest
from healthd_testkit.faults import DaemonKit, DaemonThread
from healthd_testkit.waiting import wait_for

from healthd.checks.plugin import CheckContext, CheckSettings, CheckSpec
from healthd.config.cache import load_checks
from healthd.cycle.engine import Engine
from healthd.model import Finding, Status
from healthd.service.daemon import Daemon, DaemonHooks
from healthd.service.sdnotify import Notifier


class FlagSettings(CheckSettings):
    """Settings of the test check: the status it reports (ok -> no finding)."""

    report: str = "ok"


def _flag_run(ctx: CheckContext[FlagSettings]) -> list[Finding]:
    ctx.state.load()  # so a corrupt state file of this check is noticed and reported
    if ctx.settings.report == "ok":
        return []
    return [ctx.finding(Status.parse(ctx.settings.report), "FLAG_RAISED", "flag", "the test flag is raised")]


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """pytest's ``caplog``, capturing healthd's own records from INFO up (what the journal gets)."""
    caplog.set_level(logging.INFO, logger="healthd")
    return caplog


FLAG = CheckSpec(name="flag", description="reports what its settings say", settings=FlagSettings, run=_flag_run)


def engine_factory(path: Optional[Path]) -> Engine:
    return Engine(*load_checks(path, specs=[FLAG], store=False))


def write_config(path: Path, state_dir: Path, *, interval: float = 300, extra: str = "", report: str = "ok") -> Path:
    path.write_text(
        f"""
[paths]
state_dir = "{state_dir}"
[slurm]
enabled = false
node_name = "node-test"
[runner]
pass_timeout = 2
[daemon]
interval = {interval}
splay = false
[checks.flag]
report = "{report}"
{extra}
""",
        encoding="utf-8",
    )
    return path


@dataclass
class NotifyListener:
    """A real AF_UNIX datagram socket that collects sd_notify messages."""

    address: str
    sock: socket.socket
    messages: list[tuple[float, str]] = field(default_factory=list)
    _thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self.sock.settimeout(0.1)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while self.sock.fileno() >= 0:
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            self.messages.append((time.monotonic(), data.decode()))

    def assignments(self) -> list[str]:
        return [line for _, text in self.messages for line in text.splitlines()]

    def times_of(self, line: str) -> list[float]:
        return [when for when, text in self.messages if line in text.splitlines()]

    def wait_for(self, line: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if line in self.assignments():
                return
            time.sleep(0.02)
        raise AssertionError(f"{line!r} never arrived; got {self.assignments()}")

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def path_listener(tmp_path: Path) -> Iterator[NotifyListener]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    address = str(tmp_path / "notify.sock")
    sock.bind(address)
    listener = NotifyListener(address, sock)
    listener.start()
    yield listener
    listener.close()


@pytest.fixture
def abstract_listener() -> Iterator[NotifyListener]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    name = f"healthd-test-{uuid.uuid4().hex}"
    sock.bind("\0" + name)
    listener = NotifyListener("@" + name, sock)
    listener.start()
    yield listener
    listener.close()


@pytest.fixture
def start_daemon() -> Iterator[Callable[..., DaemonThread]]:
    running: list[DaemonThread] = []

    def start(daemon: Daemon) -> DaemonThread:
        codes: list[int] = []
        thread = threading.Thread(target=lambda: codes.append(daemon.run()), daemon=True)
        thread.start()
        handle = DaemonThread(daemon, thread, codes)
        running.append(handle)
        return handle

    yield start
    for handle in running:
        if handle.thread.is_alive():
            handle.daemon.request_stop()
            handle.thread.join(10)


def notify_env(address: str, watchdog_usec: Optional[int] = None) -> dict[str, str]:
    env = {"NOTIFY_SOCKET": address}
    if watchdog_usec is not None:
        env["WATCHDOG_USEC"] = str(watchdog_usec)
        env["WATCHDOG_PID"] = str(os.getpid())
    return env


@pytest.fixture
def make_daemon(tmp_path: Path) -> Callable[..., Daemon]:
    """A Daemon over the ``flag`` test check, its config in tmp_path, its notifier on ``address``."""

    def make(
        address: Optional[str] = None,
        *,
        watchdog_usec: Optional[int] = None,
        config: Optional[Path] = None,
        **kwargs: Any,
    ) -> Daemon:
        config_path = config or write_config(tmp_path / "healthd.toml", tmp_path / "state")
        env = notify_env(address, watchdog_usec) if address else {}
        hooks = DaemonHooks(**{"engine_factory": engine_factory, **kwargs})
        return Daemon(config_path, notifier=Notifier(env), hooks=hooks)

    return make


@pytest.fixture
def daemons(make_daemon: Callable[..., Daemon], start_daemon: Callable[[Daemon], DaemonThread]) -> DaemonKit:
    return DaemonKit(make_daemon, start_daemon, write_config, wait_for)


@pytest.fixture
def make_engine(tmp_path: Path) -> Callable[..., Engine]:
    """An Engine over the ``flag`` test check reporting ``report``, its config and state in tmp_path."""

    def make(report: str = "ok") -> Engine:
        return engine_factory(write_config(tmp_path / "healthd.toml", tmp_path / "state", report=report))

    return make
