"""The daemon loop: schedule, sd_notify (READY, STATUS, WATCHDOG, STOPPING), reload, state problems."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.faults import DaemonKit

from healthd.cycle.engine import Engine
from healthd.service.daemon import PassOutcome, Schedule, run_one_pass, splay_offset

# Slow (the daemon loop runs passes for seconds): left out of the fast tier, `pytest -m "not slow"`.
pytestmark = pytest.mark.slow

# -- the schedule (pure) ------------------------------------------------------------------------------


def test_splay_offset_is_stable_and_inside_the_interval() -> None:
    assert splay_offset("gpu0001", 300) == splay_offset("gpu0001", 300)
    assert splay_offset("gpu0001", 300) != splay_offset("gpu0002", 300)
    offsets = [splay_offset(f"gpu{i:05d}", 300) for i in range(10_000)]
    assert all(0 <= o < 300 for o in offsets)
    # 10,000 nodes spread over the interval: every 30 s bucket holds about a tenth of them.
    buckets = [0] * 10
    for offset in offsets:
        buckets[int(offset // 30)] += 1
    assert all(850 < count < 1150 for count in buckets), buckets


def test_first_slot_lands_on_the_node_offset_in_wall_time() -> None:
    schedule = Schedule(300, offset=42.5)
    now_wall, now_mono = 1_700_000_123.25, 5000.0
    first = schedule.first_slot(now_wall, now_mono)
    assert now_mono < first <= now_mono + 300
    wall_at_first = now_wall + (first - now_mono)
    assert wall_at_first % 300 == pytest.approx(42.5)


def test_without_splay_the_first_slot_is_one_interval_after_start() -> None:
    assert Schedule(300).first_slot(1_700_000_000.0, 10.0) == 310.0


def test_slots_do_not_drift_over_days_and_missed_slots_are_skipped() -> None:
    schedule = Schedule(300, offset=0.0)
    slot = 1000.0
    now = slot
    for k in range(1, 289 * 7):  # a week of five-minute passes, each taking a varying time
        now = slot + (k % 7) * 3.3
        slot = schedule.next_slot(slot, now)
    assert slot == 1000.0 + 300 * (289 * 7 - 1)
    # A pass that overran two and a half intervals: the next slot is the first one still ahead.
    assert schedule.next_slot(1000.0, 1000.0 + 750.0) == 1900.0
    assert schedule.next_slot(1000.0, 1300.0) == 1600.0


def test_the_first_slot_keeps_half_an_interval_from_the_previous_pass() -> None:
    schedule = Schedule(300, offset=42.5)
    # The node's splay slot comes 1 s after the pass at start: too soon for fail_passes to mean anything.
    now_wall, now_mono = 300 * 5_000_000 + 41.5, 5000.0
    assert schedule.first_slot(now_wall, now_mono) == 5001.0
    assert schedule.first_slot(now_wall, now_mono, previous=4999.0) == 5301.0, "the slot after it, on the offset"
    # A splay slot more than half an interval after the previous pass is taken as it is.
    assert schedule.first_slot(now_wall + 200, now_mono, previous=5000.0 - 200) == 5000.0 + 101
    assert Schedule(300).first_slot(now_wall, now_mono, previous=4999.0) == 5300.0


class _Clock:
    """The daemon's two clocks, under the test's control: time passes only while the loop waits."""

    def __init__(self, wall: float) -> None:
        self.mono = 1000.0
        self.start_wall = wall

    def monotonic(self) -> float:
        return self.mono

    def wall(self) -> float:
        return self.start_wall + self.mono - 1000.0


class _Wake(threading.Event):
    """The loop's wake-up event: a pass that finishes sets it at once; a wait for the next slot takes no real time."""

    def __init__(self, clock: _Clock) -> None:
        super().__init__()
        self.clock = clock

    def wait(self, timeout: float | None = None) -> bool:
        if super().wait(0.2) or timeout is None:
            return True
        self.clock.mono += timeout
        return False


@pytest.mark.parametrize("reload", [False, True], ids=["after start", "after a reload"])
def test_the_second_pass_comes_at_least_half_an_interval_after_the_first(
    make_daemon: Callable[..., Any], make_engine: Callable[..., Engine], tmp_path: Path, reload: bool
) -> None:
    # The review's reproduction: passes 4 s apart after a restart drained a node with fail_passes = 2.
    report = run_one_pass(make_engine(), False)
    config = tmp_path / "healthd.toml"
    config.write_text(config.read_text().replace("splay = false", "splay = true"))
    interval = 200.0 if reload else 300.0
    # The wall time that puts the node's splay slot (of the schedule in force after the first pass) 1 s ahead.
    clock = _Clock(wall=300 * 5_000_000 + splay_offset("node-test", interval) - 1.0)
    starts: list[float] = []

    def pass_function(engine: Engine, dry_run: bool) -> PassOutcome:
        starts.append(clock.mono)
        if reload and len(starts) == 1:
            config.write_text(config.read_text().replace("interval = 300", "interval = 200"))
            daemon.request_reload()
        if len(starts) == 3:
            daemon.request_stop()
        return report

    daemon = make_daemon(config=config, pass_function=pass_function, monotonic=clock.monotonic, wall=clock.wall)
    daemon._wake = _Wake(clock)
    assert daemon.run() == 0
    assert starts[1] - starts[0] == interval + 1.0, "the splay slot after the one 1 s away"
    assert starts[2] - starts[1] == interval, "then every interval, on the node's offset"


# -- the loop and sd_notify ------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["path_listener", "abstract_listener"])
def test_ready_status_watchdog_stopping(
    daemons: DaemonKit, which: str, request: pytest.FixtureRequest, start_daemon: Callable[..., Any]
) -> None:
    listener = request.getfixturevalue(which)
    daemon = daemons.make(listener.address, watchdog_usec=100_000)
    handle = daemons.start(daemon)
    listener.wait_for("READY=1")
    # READY comes only once the first pass is done and recorded.
    assert daemon.passes == 1
    ready = next(text for _, text in listener.messages if "READY=1" in text)
    assert "STATUS=OK at" in ready
    first_ready = listener.times_of("READY=1")[0]
    time.sleep(0.5)
    pings = [t for t in listener.times_of("WATCHDOG=1") if t > first_ready]
    assert len(pings) >= 4, listener.assignments()
    assert handle.stop() == 0
    listener.wait_for("STOPPING=1")
    status_lines = [a for a in listener.assignments() if a.startswith("STATUS=")]
    assert any(s.startswith("STATUS=OK at") for s in status_lines)


def test_a_hung_pass_stops_the_watchdog_pings(
    daemons: DaemonKit,
    path_listener: Any,
    tmp_path: Path,
    logs: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()
    hang_started: list[float] = []

    def pass_function(engine: Engine, dry_run: bool) -> PassOutcome:
        report = run_one_pass(engine, dry_run)
        if daemon.passes >= 1:  # the second pass hangs until the test ends
            hang_started.append(time.monotonic())
            release.wait()
        return report

    config = daemons.config(tmp_path / "healthd.toml", tmp_path / "state", interval=1)
    text = config.read_text().replace("pass_timeout = 2", "pass_timeout = 0.5")
    config.write_text(text.replace('node_name = "node-test"', 'node_name = "node-test"\nlock_timeout = 0.01'))
    daemon = daemons.make(
        path_listener.address,
        watchdog_usec=100_000,
        config=config,
        pass_function=pass_function,
        pass_grace=0.5,
        stop_grace=0.2,
    )
    handle = daemons.start(daemon)
    try:
        path_listener.wait_for("READY=1")
        deadline = time.monotonic() + 5
        while not hang_started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert hang_started, "second pass never started"
        # Within the pass budget (0.5 s checks + 0.01 s lock + 0.5 s grace) the loop still pings...
        time.sleep(1.6)
        pings = path_listener.times_of("WATCHDOG=1")
        assert any(hang_started[0] < t < hang_started[0] + 1.0 for t in pings)
        # ...after it, silence: systemd would now kill and restart the daemon.
        last_ping = max(pings)
        assert last_ping < hang_started[0] + 1.0 + 0.5
        time.sleep(0.8)
        assert max(path_listener.times_of("WATCHDOG=1")) == last_ping
        assert any("pass has not finished" in r.getMessage() for r in logs.records)
        # A stop request still ends the daemon promptly, abandoning the hung pass.
        started = time.monotonic()
        assert handle.stop() == 0
        assert time.monotonic() - started < 3
        path_listener.wait_for("STOPPING=1")
    finally:
        release.set()


def test_sighup_reload_keeps_the_old_config_when_the_new_one_is_invalid(
    daemons: DaemonKit,
    path_listener: Any,
    tmp_path: Path,
    logs: pytest.LogCaptureFixture,
) -> None:
    state = tmp_path / "state"
    config = daemons.config(tmp_path / "healthd.toml", state, interval=1)
    daemon = daemons.make(path_listener.address, config=config)
    handle = daemons.start(daemon)
    path_listener.wait_for("READY=1")

    config.write_text(config.read_text().replace("interval = 1", "interval = -5"))
    daemon.request_reload()
    daemons.wait(lambda: any("new configuration rejected" in r.getMessage() for r in logs.records), what="reject")
    rejected = next(r.getMessage() for r in logs.records if "new configuration rejected" in r.getMessage())
    assert "daemon.interval" in rejected and str(config) in rejected
    assert "RELOADING=1" in path_listener.assignments()
    # The old config (interval 1, flag OK) goes on being used.
    passes = daemon.passes
    daemons.wait(lambda: daemon.passes >= passes + 2, what="passes after a rejected reload")
    assert json.loads((state / "last-pass.json").read_text())["status"] == "OK"

    daemons.config(config, state, interval=1, report="critical")
    daemon.request_reload()
    daemons.wait(lambda: any("reloaded configuration" in r.getMessage() for r in logs.records), what="reload")
    daemons.wait(lambda: json.loads((state / "last-pass.json").read_text())["status"] == "CRITICAL", what="critical")
    document = json.loads((state / "last-pass.json").read_text())
    assert document["checks"][0]["findings"][0]["code"] == "FLAG_RAISED"

    def flagged() -> list[logging.LogRecord]:
        # The pass is saved before its findings are logged: wait for the log record too.
        return [r for r in logs.records if getattr(r, "healthd_fields", {}).get("HEALTHD_CODE") == "FLAG_RAISED"]

    daemons.wait(lambda: bool(flagged()), what="the finding logged")
    assert flagged()[0].levelno == logging.ERROR
    assert flagged()[0].healthd_fields["HEALTHD_SEVERITY"] == "CRITICAL"  # type: ignore[attr-defined]
    assert handle.stop() == 0


def test_unwritable_state_dir_is_reported_every_pass_and_checking_goes_on(
    daemons: DaemonKit,
    tmp_path: Path,
    logs: pytest.LogCaptureFixture,
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the state directory should be")
    config = daemons.config(tmp_path / "healthd.toml", blocker / "state", interval=1)
    daemon = daemons.make(config=config)
    handle = daemons.start(daemon)
    daemons.wait(lambda: daemon.passes >= 3, what="three passes")
    assert handle.stop() == 0
    errors = [r.getMessage() for r in logs.records if r.getMessage().startswith("pass problem: cannot write")]
    assert len(errors) >= 3
    assert sum(str(blocker / "state" / "last-pass.json") in e for e in errors) >= 3


def test_corrupt_state_file_is_set_aside_and_reported(
    daemons: DaemonKit,
    tmp_path: Path,
    logs: pytest.LogCaptureFixture,
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "check-flag.json").write_text("{not json")
    daemon = daemons.make()
    handle = daemons.start(daemon)
    daemons.wait(lambda: daemon.passes >= 1, what="first pass")
    assert handle.stop() == 0
    assert any("corrupt state file" in r.getMessage() and "check-flag.json" in r.getMessage() for r in logs.records)
    assert list(state.glob("check-flag.json.corrupt-*"))
    # A corrupt file of one check is reported, never a reason to act on the node.
    document = json.loads((state / "last-pass.json").read_text())
    assert document["action"]["decision"] == "none"


def test_a_pass_that_raised_is_recorded_as_unknown(
    daemons: DaemonKit,
    path_listener: Any,
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    calls: list[int] = []

    def pass_function(engine: Engine, dry_run: bool) -> PassOutcome:
        calls.append(1)
        if len(calls) >= 2:
            raise RuntimeError("policy state exploded")
        return run_one_pass(engine, dry_run)

    config = daemons.config(tmp_path / "healthd.toml", state, interval=1)
    daemon = daemons.make(path_listener.address, config=config, pass_function=pass_function)
    handle = daemons.start(daemon)
    path_listener.wait_for("READY=1")
    assert json.loads((state / "last-pass.json").read_text())["status"] == "OK"
    daemons.wait(lambda: daemon.passes >= 2, what="the failing pass")
    assert handle.stop() == 0
    # `healthd status` must not go on showing the last pass that went well.
    document = json.loads((state / "last-pass.json").read_text())
    assert document["status"] == "UNKNOWN" and document["exit_code"] == 3
    finding = document["checks"][0]["findings"][0]
    assert (finding["code"], finding["status"]) == ("PASS_FAILED", "UNKNOWN")
    assert "policy state exploded" in finding["message"]
    daemons.wait(
        lambda: any(a.startswith("STATUS=UNKNOWN at") for a in path_listener.assignments()), what="STATUS=UNKNOWN"
    )


def test_no_thread_for_the_pass_is_a_failed_pass_not_a_dead_daemon(
    daemons: DaemonKit,
    path_listener: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        if self.name == "healthd-pass":  # what TasksMax= does to thread creation
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    daemon = daemons.make(path_listener.address)
    handle = daemons.start(daemon)
    path_listener.wait_for("READY=1")
    assert daemon.passes == 1 and handle.thread.is_alive()
    document = json.loads((tmp_path / "state" / "last-pass.json").read_text())
    assert document["status"] == "UNKNOWN"
    assert "can't start new thread" in document["checks"][0]["findings"][0]["message"]
    assert handle.stop() == 0


def test_start_timeout_is_extended_by_the_first_pass_budget(
    daemons: DaemonKit, path_listener: Any, start_daemon: Callable[..., Any]
) -> None:
    daemon = daemons.make(path_listener.address)
    handle = daemons.start(daemon)
    path_listener.wait_for("READY=1")
    assert handle.stop() == 0
    assignments = path_listener.assignments()
    extend = [a for a in assignments if a.startswith("EXTEND_TIMEOUT_USEC=")]
    # pass_timeout 2 s + lock_timeout 3 s (Slurm off: no Slurm budget) + the 10 s pass grace
    # + the 15 s start margin, before READY=1.
    assert extend == ["EXTEND_TIMEOUT_USEC=30000000"]
    assert assignments.index(extend[0]) < assignments.index("READY=1")


def test_invalid_config_at_start_exits_78_naming_the_key(
    daemons: DaemonKit,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = daemons.config(tmp_path / "healthd.toml", tmp_path / "state", extra='[metrics]\nlisten = "nope"')
    assert daemons.make(config=config).run() == 78
    assert any("metrics.listen" in r.getMessage() for r in caplog.records)
