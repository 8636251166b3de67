"""Checks that raise, hang in Python or hang in the kernel: the daemon goes on, the node stays in service.

Each test runs the real daemon loop (in a thread) against the real test cluster,
with the faulty check next to a healthy one, and asserts: passes keep coming,
the faulty check alone is UNKNOWN with the right code, the healthy check is
still judged, and the node stays idle with no reason (UNKNOWN only reports).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from healthd_testkit.faults import BOOM, FAULT, KSTAT, STALL, STALL_RELEASE, codes
from healthd_testkit.waiting import wait_for

from healthd.model import RunState, Status


def _assert_untouched(cluster: Any, node: str) -> None:
    assert cluster.state(node) == "idle"
    assert cluster.reason(node) == ""


def test_a_raising_check_is_unknown_every_pass_and_drains_nothing(
    cluster: Any, harness: Callable[..., Any], start_daemon: Callable[..., Any]
) -> None:
    node = harness(BOOM, FAULT, slurm_conf=cluster.conf)
    running = start_daemon(node.daemon())
    reports = node.wait_passes(3)
    for report in reports[:3]:
        assert codes(report)["boom/CHECK_ERROR"] == (Status.UNKNOWN, "boom")
        (boom,) = [r for r in report.result.results if r.check == "boom"]
        assert boom.state is RunState.ERROR and "RuntimeError: injected failure" in boom.reason
        assert report.result.status is Status.UNKNOWN and report.actions == ()
    # The healthy check next to it is still judged: a real fault is acted on.
    node.faults(("CRITICAL", "INJECTED", "gpu0"))
    wait_for(lambda: cluster.state("node1") in ("down", "drained"), 20, "node1 taken out for the real fault")
    assert cluster.reason("node1").startswith("healthd: INJECTED gpu0")
    assert running.thread.is_alive()
    assert running.stop() == 0


def test_a_check_hanging_in_python_is_abandoned_then_stuck_then_recovers(
    cluster: Any, harness: Callable[..., Any], start_daemon: Callable[..., Any]
) -> None:
    node = harness(STALL, FAULT, slurm_conf=cluster.conf, extra="[checks.stall]\ntimeout = 0.5\n")
    running = start_daemon(node.daemon())
    first, second, third = node.wait_passes(3)[:3]
    assert codes(first)["stall/CHECK_TIMEOUT"][0] is Status.UNKNOWN
    # The pass ends at the check's deadline, not when the check does.
    assert first.result.duration_seconds < 2.0
    for later in (second, third):
        assert codes(later)["stall/CHECK_STUCK"][0] is Status.UNKNOWN
        assert [t.name for t in _threads("check-stall")] == ["check-stall"]  # never started twice
    _assert_untouched(cluster, "node1")
    STALL_RELEASE.set()
    count = len(node.reports)
    wait_for(lambda: len(node.reports) > count + 1, 10, "two passes after the release")
    assert node.reports[-1].result.status is Status.OK
    assert running.stop() == 0
    _assert_untouched(cluster, "node1")


def _threads(name: str) -> list[Any]:
    import threading

    return [t for t in threading.enumerate() if t.name == name and t.is_alive()]


def test_a_check_hanging_in_the_kernel_is_abandoned_and_the_daemon_goes_on(
    cluster: Any, harness: Callable[..., Any], start_daemon: Callable[..., Any], hung_mount: str
) -> None:
    extra = f'[checks.kstat]\ntimeout = 0.5\npath = "{hung_mount}"\n'
    node = harness(KSTAT, FAULT, slurm_conf=cluster.conf, extra=extra)
    running = start_daemon(node.daemon())
    first, second, third = node.wait_passes(3)[:3]
    assert codes(first)["kstat/CHECK_TIMEOUT"][0] is Status.UNKNOWN
    assert codes(second)["kstat/CHECK_STUCK"][0] is Status.UNKNOWN
    assert codes(third)["kstat/CHECK_STUCK"][0] is Status.UNKNOWN
    assert len(_threads("check-kstat")) == 1
    _assert_untouched(cluster, "node1")
    # SIGTERM is honoured although a thread is stuck in the kernel.
    started = time.monotonic()
    assert running.stop() == 0
    assert time.monotonic() - started < 5
