"""``healthd run``: the long-running loop that runs a pass on a fixed, splayed schedule.

One pass at start, then one every ``[daemon].interval`` seconds. Slots are laid on
the monotonic clock (next = previous slot + interval, missed slots skipped), so
the schedule does not drift over days. With ``[daemon].splay`` each node's slots
sit at a stable offset inside the interval, derived from a hash of its node name
and aligned to wall-clock multiples of the interval, so a whole cluster does not
query slurmctld in the same second even when every node restarts together.

The pass runs in a worker thread while this loop waits on one event that a
finished pass, SIGTERM/SIGINT and SIGHUP all set, so a stop request is honoured
within seconds even in the middle of a pass. The loop (and only the loop) pings
the systemd watchdog; it keeps pinging while a pass is within its time budget
and stops once a pass overruns it, so systemd restarts a daemon whose pass hangs.

Each finished pass goes to the sinks (healthd.service.sinks) in order: the log, the
metrics, systemd's ``STATUS=``. A pass that raised, or could not start, is
reported like any other through the pipeline's one failed-pass path.
"""

from __future__ import annotations

import hashlib
import logging
import math
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Callable, NamedTuple, Optional

from healthd.checks.bounded import kill_waited
from healthd.config.cache import load_checks
from healthd.config.load import ConfigError
from healthd.cycle.activerun import after_pass, daemon_budget
from healthd.cycle.daemonpass import DaemonClaim
from healthd.cycle.engine import Engine, node_name
from healthd.cycle.outcome import PassOutcome
from healthd.cycle.pipeline import (
    PASS_GRACE_SECONDS,
    PassContext,
    PassRequest,
    PassTools,
    failed_pass,
    pass_budget,
    run_pass,
)
from healthd.exitcodes import EX_CONFIG, EX_OK
from healthd.model import PassResult
from healthd.service.logs import LOGGER_NAME
from healthd.service.metrics import refuse_untrusted_textfile
from healthd.service.sdnotify import Notifier
from healthd.service.sinks import LogSink, MetricsSink, NotifySink, Sink
from healthd.store.state import StateError
from healthd.store.trust import UntrustedPath
from healthd.text import one_line

if TYPE_CHECKING:
    from healthd.config.models import Config
    from healthd.cycle.daemonpass import DaemonClaim
    from healthd.cycle.engine import Engine

# How long a stop request waits for a pass in progress before abandoning it.
STOP_GRACE_SECONDS = 3.0
# Start-up time asked of systemd on top of the first pass's budget (plugins, metrics listener).
START_MARGIN_SECONDS = 15.0

log = logging.getLogger(f"{LOGGER_NAME}.daemon")


def splay_offset(node: str, interval: float) -> float:
    """A stable offset in ``[0, interval)`` from a hash of ``node`` (the same on every start)."""
    digest = hashlib.sha256(node.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * interval


class Schedule(NamedTuple):
    """Pass slots ``interval`` seconds apart; ``offset`` places them inside wall-clock intervals."""

    interval: float
    offset: Optional[float] = None

    def first_slot(self, now_wall: float, now_mono: float, previous: Optional[float] = None) -> float:
        """The first slot (monotonic time) strictly after now, and at least half an interval after ``previous``.

        ``previous`` is when the last pass started (the pass at start, or the last one
        before a reload). The spacing matters to the policy: ``[policy] fail_passes`` and
        ``unknown_passes`` count passes on the understanding that they are about an
        interval apart, so a splay slot a second after the pass at start would turn one
        fault seen twice in a second into a drain. Half an interval keeps every gap
        between 0.5 and 1.5 intervals: never much shorter than the counts assume, and
        the node's splay slot (which spreads a fleet's calls to slurmctld) is still
        reached within the next interval. A whole interval would delay the second look at
        a fault found at start by up to two.
        """
        if self.offset is None:
            return now_mono + self.interval
        # The next wall time t > now with t = offset (mod interval), carried over to the monotonic clock.
        phase = (now_wall - self.offset) % self.interval
        slot = now_mono + (self.interval - phase)
        earliest = None if previous is None else previous + self.interval / 2
        if earliest is not None and slot < earliest:
            slot += math.ceil((earliest - slot) / self.interval) * self.interval
        return slot

    def next_slot(self, previous: float, now_mono: float) -> float:
        """``previous + interval``, skipping any slot already past (an overlong pass does not pile up)."""
        nxt = previous + self.interval
        if nxt <= now_mono:
            nxt += math.floor((now_mono - nxt) / self.interval + 1) * self.interval
        return nxt


def schedule_for(config: Config, node: str) -> Schedule:
    interval = config.daemon.interval
    return Schedule(interval, splay_offset(node, interval) if config.daemon.splay else None)


def run_one_pass(engine: Engine, dry_run: bool) -> PassOutcome:
    """One pass (healthd.cycle.pipeline): run the checks, decide, act through Slurm, save ``last-pass``.

    With ``[active] when_drained``, a pass that finds the node idle and drained by
    healthd is followed by one with the active checks too (``healthd.cycle.activerun``).
    """
    return after_pass(engine, run_pass(engine, PassRequest(dry_run=dry_run)), dry_run, log)


def daemon_pass_budget(engine: Engine, grace: float = PASS_GRACE_SECONDS) -> float:
    """How long one of the daemon's passes may take before the loop calls it hung (active checks included)."""
    return pass_budget(engine.config, grace) + daemon_budget(engine)


def fresh_for(engine: Engine, grace: float = PASS_GRACE_SECONDS) -> float:
    """How long the hook may report the daemon's last pass (healthd.cycle.daemonpass): until the next one is due.

    The next pass ends at most an interval and a whole daemon pass later, a diagnostic
    included (``[active] when_drained``): a shorter window would have the hook run passes
    of its own while the diagnostic runs (docs/active.md).
    """
    return engine.config.daemon.interval + daemon_pass_budget(engine, grace)


def failed_report(engine: Engine, exc: BaseException, started_at: float, dry_run: bool) -> PassOutcome:
    """A pass that raised outside the pipeline, or never started: ``healthd.cycle.pipeline.failed_pass``,
    with no results."""
    raw = PassResult(node_name(engine.config), started_at, 0.0, ())
    context = PassContext(engine, PassRequest(dry_run=dry_run), PassTools(logger=log))
    return failed_pass(context, raw, exc)


class DaemonHooks(NamedTuple):
    """What the loop calls out to, each replaceable in tests: one pass (``pass_function``), the
    engine for a config path (``engine_factory``; ``Engine.from_path`` when None), the two
    clocks, and how long a stop and a pass may overrun before the loop gives up on them."""

    pass_function: Callable[[Engine, bool], PassOutcome] = run_one_pass
    engine_factory: Optional[Callable[[Optional[Path]], Engine]] = None
    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    stop_grace: float = STOP_GRACE_SECONDS
    pass_grace: float = PASS_GRACE_SECONDS


class Daemon:
    """The loop. ``run()`` returns an exit code; ``request_stop``/``request_reload`` may come from any thread."""

    def __init__(
        self,
        config_path: Optional[Path],
        *,
        dry_run: bool = False,
        notifier: Optional[Notifier] = None,
        hooks: DaemonHooks = DaemonHooks(),
    ) -> None:
        self.config_path = config_path
        self.dry_run = dry_run
        self.notifier = notifier if notifier is not None else Notifier()
        self.pass_function = hooks.pass_function
        self.engine_factory = hooks.engine_factory
        self.monotonic = hooks.monotonic
        self.wall = hooks.wall
        self.stop_grace = hooks.stop_grace
        self.pass_grace = hooks.pass_grace
        self.metrics = MetricsSink(log)
        # In order: the log first, so a sink that raises (UntrustedPath) leaves the pass logged.
        self.sinks: tuple[Sink, ...] = (LogSink(log), self.metrics, NotifySink(self.notifier))
        self.passes = 0
        # When the last pass started (monotonic): the first slot after a start or a reload keeps its distance.
        self.last_start: Optional[float] = None
        self._wake = threading.Event()
        self._stop = False
        self._reload = False
        self._next_ping = 0.0
        self.claim: Optional[DaemonClaim] = None

    # -- requests from signal handlers or other threads -------------------------------------------

    def request_stop(self) -> None:
        self._stop = True
        self._wake.set()

    def request_reload(self) -> None:
        self._reload = True
        self._wake.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop, SIGHUP reloads (main thread only, as Python requires)."""

        def stop(signum: int, frame: Optional[FrameType]) -> None:
            self.request_stop()

        def reload(signum: int, frame: Optional[FrameType]) -> None:
            self.request_reload()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGHUP, reload)

    # -- the loop -----------------------------------------------------------------------------------

    def run(self) -> int:
        factory = self.engine_factory or Engine.from_path
        try:
            engine = factory(self.config_path)
            self.metrics.configure(engine.config.metrics)
        except ConfigError as exc:
            log.error("configuration error, not starting:\n%s", exc)
            return EX_CONFIG
        except UntrustedPath as exc:
            log.error("%s; not starting", exc)
            return EX_CONFIG
        log.info("started: config %s, every %.0fs", engine.loaded.source, engine.config.daemon.interval)
        self._claim(engine)
        try:
            # READY=1 waits for the first pass, whose budget depends on the config: ask systemd
            # for that long (sd_notify(3) EXTEND_TIMEOUT_USEC) rather than trust TimeoutStartSec=.
            self.notifier.extend_timeout(daemon_pass_budget(engine, self.pass_grace) + START_MARGIN_SECONDS)
            if self._pass(engine) is None:
                return EX_OK
            schedule = schedule_for(engine.config, node_name(engine.config))
            slot = schedule.first_slot(self.wall(), self.monotonic(), self.last_start)
            while not self._stop:
                if self._reload:
                    engine, schedule, slot = self._do_reload(engine, schedule, slot)
                    continue
                if not self._wait(until=slot, stop_on_reload=True):
                    continue
                if self._pass(engine) is None:
                    break
                slot = schedule.next_slot(slot, self.monotonic())
            return EX_OK
        except UntrustedPath as exc:
            # The state directory became writable by others while running:
            # nothing it holds can be believed any more, so stop as at start (docs/service.md).
            log.error("%s; stopping", exc)
            return EX_CONFIG
        finally:
            kill_waited()  # a pass abandoned on the way out must not leave its programs (on_repair) behind
            self.notifier.stopping()
            log.info("stopping")
            self.metrics.close()
            if self.claim is not None:
                self.claim.release()

    def _claim(self, engine: Engine) -> None:
        """Hold ``daemon.lock`` so the hook may report this daemon's passes (healthd.cycle.daemonpass)."""
        claim = DaemonClaim(engine.config.paths.state_dir)
        try:
            if claim.acquire(timeout=engine.config.slurm.lock_timeout):
                self.claim = claim
            else:
                log.warning("another healthd daemon holds %s: the hook will not use this one's passes", claim.state_dir)
        except (OSError, UntrustedPath) as exc:  # the passes report the state directory's trouble themselves
            log.warning("cannot hold the daemon lock in %s: %s", claim.state_dir, exc)

    def _record(self, engine: Engine, report: PassOutcome) -> None:
        """Keep the pass for the hook; a pass that cannot be kept must not leave an older one standing."""
        if self.claim is None:
            return
        if self.claim.state_dir != engine.config.paths.state_dir:  # a reload moved the state: claim it there
            self.claim.release()
            self.claim = None
            self._claim(engine)
            if self.claim is None:
                return
        try:
            self.claim.record(
                report.document,
                fresh_for=fresh_for(engine, self.pass_grace),
                config_sha256=engine.loaded.sha256,
                dry_run=self.dry_run or engine.config.policy.dry_run,
                now=self.wall(),
            )
        except (StateError, UntrustedPath) as exc:
            log.warning("the hook cannot use this pass: %s", exc)
            self.claim.release()  # the hook then runs its own passes rather than trust an older record
            self.claim = None

    def _wait(self, until: float, stop_on_reload: bool, done: Optional[threading.Event] = None) -> bool:
        """Sleep until ``until`` (monotonic), pinging the watchdog; False when woken by a request first."""
        interval = self.notifier.watchdog_seconds
        while True:
            if self._stop or (stop_on_reload and self._reload) or (done is not None and done.is_set()):
                return False
            now = self.monotonic()
            if now >= until:
                return True
            if interval is not None and now >= self._next_ping:
                self.notifier.watchdog()
                self._next_ping = now + interval
            timeout = until - now
            if interval is not None:
                timeout = min(timeout, max(0.0, self._next_ping - now))
            self._wake.wait(timeout)
            self._wake.clear()

    def _pass(self, engine: Engine) -> Optional[PassOutcome]:
        """Run one pass in a worker and wait for it; None when a stop request abandoned it."""
        done = threading.Event()
        box: list[PassOutcome] = []
        failure: list[BaseException] = []

        def work() -> None:
            try:
                box.append(self.pass_function(engine, self.dry_run))
            except BaseException as exc:  # reported by the loop, which must outlive any pass
                failure.append(exc)
            finally:
                done.set()
                self._wake.set()

        worker = threading.Thread(target=work, name="healthd-pass", daemon=True)
        started = self.last_start = self.monotonic()
        budget = daemon_pass_budget(engine, self.pass_grace)
        try:
            worker.start()
        except RuntimeError as exc:  # no thread to be had (TasksMax, memory): report it, try next slot
            return self._publish(failed_report(engine, exc, self.wall(), self.dry_run), engine)
        # Ping while the pass is within its budget; after that, silence tells systemd we hang.
        if self._wait(until=started + budget, stop_on_reload=False, done=done) and not done.is_set():
            log.error("pass has not finished after %.0fs; no more watchdog pings until it does", budget)
            while not done.is_set() and not self._stop:
                self._wake.wait()
                self._wake.clear()
        if self._stop and not done.wait(self.stop_grace):
            log.warning("stop requested; abandoning the pass in progress")
            return None
        if failure and isinstance(failure[0], UntrustedPath):
            raise failure[0]
        if box:
            return self._publish(box[0], engine)
        started_at = self.wall() - (self.monotonic() - started)
        return self._publish(failed_report(engine, failure[0], started_at, self.dry_run), engine)

    def _publish(self, report: PassOutcome, engine: Engine) -> PassOutcome:
        """Record a finished pass for the hook, then hand it to each sink in turn."""
        self._record(engine, report)
        self.passes += 1
        for sink in self.sinks:
            sink.publish(report, self.passes)
        return report

    def _do_reload(self, engine: Engine, schedule: Schedule, slot: float) -> tuple[Engine, Schedule, float]:
        self._reload = False
        self.notifier.reloading()
        old_metrics = engine.config.metrics
        try:
            loaded, specs = load_checks(self.config_path, specs=engine.specs)
            refuse_untrusted_textfile(loaded.config.metrics)
            engine.reconfigure(loaded, specs)
        except ConfigError as exc:
            # One line: syslog and the journal's short output split a message at each newline,
            # which would leave the problems apart from the line that says what they are.
            problems = "; ".join(f"{exc.source}: {p}" for p in exc.problems)
            log.error("reload: new configuration rejected, keeping the old one: %s", one_line(problems, 4000))
            self.notifier.notify(ready="1", status=f"reload rejected ({len(exc.problems)} problem(s)); old config kept")
            return engine, schedule, slot
        except UntrustedPath as exc:
            log.error("reload: new configuration rejected, keeping the old one: %s", one_line(exc, 4000))
            self.notifier.notify(ready="1", status="reload rejected (untrusted path); old config kept")
            return engine, schedule, slot
        if loaded.config.metrics != old_metrics:
            self.metrics.configure(loaded.config.metrics)
        new_schedule = schedule_for(loaded.config, node_name(loaded.config))
        if new_schedule != schedule:
            slot = new_schedule.first_slot(self.wall(), self.monotonic(), self.last_start)
        log.info("reloaded configuration from %s", loaded.source)
        self.notifier.notify(ready="1", status=f"configuration reloaded from {loaded.source}")
        return engine, new_schedule, slot
