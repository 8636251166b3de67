"""sd_notify over real AF_UNIX datagram sockets, bound to a path and to an abstract name."""

from __future__ import annotations

import os
from typing import Any

import pytest
from healthd_testkit.faults import DaemonKit

from healthd.service.sdnotify import Notifier, watchdog_interval


@pytest.mark.parametrize("which", ["path_listener", "abstract_listener"])
def test_messages_arrive_on_path_and_abstract_sockets(which: str, request: pytest.FixtureRequest) -> None:
    listener = request.getfixturevalue(which)
    notifier = Notifier({"NOTIFY_SOCKET": listener.address})
    assert notifier.enabled
    assert notifier.ready("first pass OK")
    assert notifier.status("CRITICAL: gpu/GPU_MISSING\nsecond line")
    assert notifier.watchdog()
    assert notifier.stopping()
    listener.wait_for("STOPPING=1")
    assert [text for _, text in listener.messages] == [
        "READY=1\nSTATUS=first pass OK",
        "STATUS=CRITICAL: gpu/GPU_MISSING second line",
        "WATCHDOG=1",
        "STOPPING=1\nSTATUS=stopping",
    ]


def test_without_notify_socket_nothing_is_sent() -> None:
    notifier = Notifier({})
    assert not notifier.enabled
    assert notifier.ready("x") is False
    assert notifier.watchdog_seconds is None


def test_a_socket_nobody_listens_on_is_not_an_error(tmp_path: os.PathLike[str]) -> None:
    assert Notifier({"NOTIFY_SOCKET": f"{tmp_path}/absent.sock"}).ready("x") is False


def test_watchdog_interval_is_half_of_watchdog_usec() -> None:
    assert watchdog_interval({"WATCHDOG_USEC": "60000000"}) == 30.0
    assert watchdog_interval({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": str(os.getpid())}) == 30.0
    # sd_watchdog_enabled(3): a watchdog meant for another pid is not ours.
    assert watchdog_interval({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "1"}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "0"}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "garbage"}) is None
    assert watchdog_interval({}) is None


def test_systemd_python_sends_when_installed(path_listener: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("systemd.daemon", reason="systemd-python (the journal extra) is not installed")
    monkeypatch.setenv("NOTIFY_SOCKET", path_listener.address)
    notifier = Notifier()
    assert notifier.enabled and notifier.ready("through libsystemd")
    path_listener.wait_for("READY=1")
    assert [text for _, text in path_listener.messages] == ["READY=1\nSTATUS=through libsystemd"]


def test_a_value_cannot_forge_an_assignment_or_carry_escapes(path_listener: Any, daemons: DaemonKit) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": path_listener.address})
    assert notifier.status("CRITICAL: gpu/X\u2028READY=1\r\nWATCHDOG=1\x1b[2J\x00" + "y" * 5000)
    daemons.wait(lambda: path_listener.messages, what="the datagram")
    (text,) = [message for _, message in path_listener.messages]
    assert text.startswith("STATUS=CRITICAL: gpu/X READY=1 WATCHDOG=1 [2J y")
    assert "\n" not in text and "\x1b" not in text and "\x00" not in text and len(text) == len("STATUS=") + 1000
