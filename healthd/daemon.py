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
"""

from __future__ import annotations

import hashlib
import logging
import math
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Callable, Optional

from healthd.exitcodes import EX_CONFIG, EX_OK
from healthd.logs import LOGGER_NAME, log_action, log_finding
from healthd.metrics import ActionSample, HealthdCollector, MetricsServer, PassSample, new_registry, parse_listen
from healthd.model import CheckResult, Finding, PassResult, RunState, Status
from healthd.outcome import ActionOutcome
from healthd.sdnotify import Notifier
from healthd.text import one_line
from healthd.trust import UntrustedPath

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from healthd.config import Config
    from healthd.cycle import CycleOutcome
    from healthd.engine import Engine
    from healthd.policy import Action

# How long a stop request waits for a pass in progress before abandoning it.
STOP_GRACE_SECONDS = 3.0
# Slack on top of a pass's own deadlines before the loop declares it hung.
PASS_GRACE_SECONDS = 10.0
# Start-up time asked of systemd on top of the first pass's budget (plugins, metrics listener).
START_MARGIN_SECONDS = 15.0

log = logging.getLogger(f"{LOGGER_NAME}.daemon")


def splay_offset(node: str, interval: float) -> float:
    """A stable offset in ``[0, interval)`` from a hash of ``node`` (the same on every start)."""
    digest = hashlib.sha256(node.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * interval


@dataclass(frozen=True)
class Schedule:
    """Pass slots ``interval`` seconds apart; ``offset`` places them inside wall-clock intervals."""

    interval: float
    offset: Optional[float] = None

    def first_slot(self, now_wall: float, now_mono: float) -> float:
        """The first slot (monotonic time) strictly after now."""
        if self.offset is None:
            return now_mono + self.interval
        # The next wall time t > now with t = offset (mod interval), carried over to the monotonic clock.
        phase = (now_wall - self.offset) % self.interval
        return now_mono + (self.interval - phase)

    def next_slot(self, previous: float, now_mono: float) -> float:
        """``previous + interval``, skipping any slot already past (an overlong pass does not pile up)."""
        nxt = previous + self.interval
        if nxt <= now_mono:
            nxt += math.floor((now_mono - nxt) / self.interval + 1) * self.interval
        return nxt


def schedule_for(config: Config, node: str) -> Schedule:
    interval = config.daemon.interval
    return Schedule(interval, splay_offset(node, interval) if config.daemon.splay else None)


def pass_budget(config: Config, grace: float = PASS_GRACE_SECONDS) -> float:
    """How long a pass may take before the loop calls it hung.

    The checks' deadline (``[runner].pass_timeout``), the wait for the state
    directory's lock (``[slurm].lock_timeout``), and all scontrol calls of the pass
    together (``[slurm].budget``, when Slurm is enabled), plus ``grace``.
    """
    slurm = config.slurm.budget if config.slurm.enabled else 0.0
    return config.runner.pass_timeout + config.slurm.lock_timeout + slurm + grace


@dataclass(frozen=True)
class ActionLine:
    """One action decided in a pass, for the log: what, with which outcome, and why."""

    kind: Action
    outcome: ActionOutcome
    detail: str


@dataclass(frozen=True)
class PassReport:
    """What the loop needs from one pass: the results, the actions decided, and problems to report."""

    result: PassResult
    actions: tuple[ActionLine, ...] = ()
    breaker_open: Optional[bool] = None
    problems: tuple[str, ...] = ()


def report_from_outcome(outcome: CycleOutcome) -> PassReport:
    """Condense a cycle into what is logged and exported.

    An acting decision was ``taken`` (Slurm accepted it), is ``pending`` (Slurm failed;
    retried later), or was only a ``dry_run``/``disabled`` (Slurm actions off). A HOLD of
    an acting decision is ``held_back`` (hysteresis streak not reached, or the circuit
    breaker); the breaker is open when the cycle added its DRAIN_HELD finding.
    """
    from healthd.acks import POLICY_CHECK
    from healthd.policy import ACTING, Action

    report = outcome.action
    decision = report.decision
    detail = decision.reason or decision.explanation
    actions: tuple[ActionLine, ...] = ()
    if decision.action in ACTING:
        if report.applied:
            outcome_kind = ActionOutcome.TAKEN
        elif report.dry_run:
            outcome_kind = ActionOutcome.DRY_RUN
        elif not report.slurm_enabled:
            outcome_kind = ActionOutcome.DISABLED
        else:
            outcome_kind = ActionOutcome.PENDING
        actions = (ActionLine(decision.action, outcome_kind, detail),)
    elif decision.action is Action.HOLD and decision.intended in ACTING:
        actions = (ActionLine(decision.intended, ActionOutcome.HELD_BACK, decision.explanation),)
    breaker = any(f.check == POLICY_CHECK and f.code == "DRAIN_HELD" for f in outcome.result.findings)
    return PassReport(result=outcome.result, actions=actions, breaker_open=breaker, problems=report.errors)


def run_one_pass(engine: Engine, dry_run: bool) -> PassReport:
    """One cycle (healthd.cycle): run the checks, decide, act through Slurm, save ``last-pass``."""
    from healthd.cycle import run_cycle

    return report_from_outcome(run_cycle(engine, dry_run=dry_run))


def failed_pass(engine: Engine, exc: BaseException, started_at: float) -> PassReport:
    """A pass whose code raised: one UNKNOWN ``PASS_FAILED`` finding, so it is seen like any other fault.

    It is also saved as the ``last-pass`` document, so ``healthd status`` (and a hook
    reading it) shows UNKNOWN instead of the last pass that went well.
    """
    from healthd.cycle import LAST_PASS
    from healthd.engine import node_name
    from healthd.report import pass_to_dict
    from healthd.state import StateError

    message = one_line(f"pass raised {type(exc).__name__}: {exc}")
    log.error("%s", message, exc_info=exc)
    finding = Finding("healthd", Status.UNKNOWN, "PASS_FAILED", "healthd", message)
    check = CheckResult("healthd", RunState.ERROR, (finding,), 0.0, message)
    result = PassResult(node_name(engine.config), started_at, 0.0, (check,))
    problems: tuple[str, ...] = ()
    try:
        engine.state.file(LAST_PASS).save(pass_to_dict(result, {"action": None}))
    except StateError as state_exc:
        problems = (str(state_exc),)
    return PassReport(result=result, problems=problems)


def summary(report: PassReport) -> str:
    """One line for systemd's STATUS= and the log: status, the first few non-OK codes, duration."""
    result = report.result
    bad = [f for f in result.findings if f.status is not Status.OK]
    codes = ", ".join(f"{f.check}/{f.code}" for f in bad[:3]) + (", ..." if len(bad) > 3 else "")
    when = time.strftime("%H:%M:%S", time.localtime(result.started_at))
    text = f"{result.status.name} at {when} ({result.duration_seconds:.1f}s)"
    if bad:
        text += f": {len(bad)} finding(s): {codes}"
    if report.problems:
        text += f"; {len(report.problems)} state problem(s)"
    return text


class Daemon:
    """The loop. ``run()`` returns an exit code; ``request_stop``/``request_reload`` may come from any thread."""

    def __init__(
        self,
        config_path: Optional[Path],
        *,
        dry_run: bool = False,
        notifier: Optional[Notifier] = None,
        pass_function: Callable[[Engine, bool], PassReport] = run_one_pass,
        engine_factory: Optional[Callable[[Optional[Path]], Engine]] = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        stop_grace: float = STOP_GRACE_SECONDS,
        pass_grace: float = PASS_GRACE_SECONDS,
    ) -> None:
        self.config_path = config_path
        self.dry_run = dry_run
        self.notifier = notifier if notifier is not None else Notifier()
        self.pass_function = pass_function
        self.engine_factory = engine_factory
        self.monotonic = monotonic
        self.wall = wall
        self.stop_grace = stop_grace
        self.pass_grace = pass_grace
        self.collector = HealthdCollector()
        self.registry: Optional[CollectorRegistry] = None
        self.server: Optional[MetricsServer] = None
        self._listen_failures = 0
        self.passes = 0
        self._wake = threading.Event()
        self._stop = False
        self._reload = False
        self._next_ping = 0.0

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
        from healthd.config import ConfigError
        from healthd.engine import Engine, node_name

        factory = self.engine_factory or Engine.from_path
        try:
            engine = factory(self.config_path)
            self._apply_metrics_config(engine.config)
        except ConfigError as exc:
            log.error("configuration error, not starting:\n%s", exc)
            return EX_CONFIG
        except UntrustedPath as exc:
            log.error("%s; not starting", exc)
            return EX_CONFIG
        log.info("started: config %s, every %.0fs", engine.loaded.source, engine.config.daemon.interval)
        try:
            # READY=1 waits for the first pass, whose budget depends on the config: ask systemd
            # for that long (sd_notify(3) EXTEND_TIMEOUT_USEC) rather than trust TimeoutStartSec=.
            self.notifier.extend_timeout(pass_budget(engine.config, self.pass_grace) + START_MARGIN_SECONDS)
            report = self._pass(engine)
            if report is None:
                return EX_OK
            self.notifier.ready(summary(report))
            schedule = schedule_for(engine.config, node_name(engine.config))
            slot = schedule.first_slot(self.wall(), self.monotonic())
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
            # The state or textfile directory became writable by others while running:
            # nothing it holds can be believed any more, so stop as at start (docs/service.md).
            log.error("%s; stopping", exc)
            return EX_CONFIG
        finally:
            self.notifier.stopping()
            log.info("stopping")
            if self.server is not None:
                self.server.close()

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

    def _pass(self, engine: Engine) -> Optional[PassReport]:
        """Run one pass in a worker and wait for it; None when a stop request abandoned it."""
        done = threading.Event()
        box: list[PassReport] = []
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
        started = self.monotonic()
        budget = pass_budget(engine.config, self.pass_grace)
        try:
            worker.start()
        except RuntimeError as exc:  # no thread to be had (TasksMax, memory): report it, try next slot
            self.passes += 1
            report = failed_pass(engine, exc, self.wall())
            self._publish(report, engine)
            return report
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
        self.passes += 1
        report = box[0] if box else failed_pass(engine, failure[0], self.wall() - (self.monotonic() - started))
        self._publish(report, engine)
        return report

    def _publish(self, report: PassReport, engine: Engine) -> None:
        self._ensure_listening(engine.config)
        for finding in report.result.findings:
            if finding.status is not Status.OK:
                log_finding(log, finding)
        for action in report.actions:
            log_action(log, action.kind, action.outcome, report.result.node, action.detail, report.result.status)
        for problem in report.problems:
            log.error("pass problem: %s", problem)
        samples = tuple(ActionSample(a.kind, a.outcome) for a in report.actions)
        self.collector.update(PassSample(report.result, samples, report.breaker_open))
        textfile = engine.config.metrics.textfile
        if textfile is not None and self.registry is not None:
            from healthd.metrics import write_textfile

            try:
                write_textfile(textfile, self.registry)
            except OSError as exc:
                log.error("metrics: cannot write textfile %s: %s", textfile, exc.strerror or exc)
        line = summary(report)
        log.info("pass %d: %s", self.passes, line)
        self.notifier.status(line)

    def _do_reload(self, engine: Engine, schedule: Schedule, slot: float) -> tuple[Engine, Schedule, float]:
        from healthd.config import ConfigError, load_config
        from healthd.engine import node_name, settings_models
        from healthd.metrics import refuse_untrusted_textfile

        self._reload = False
        self.notifier.reloading()
        old_metrics = engine.config.metrics
        try:
            loaded = load_config(self.config_path, settings_models(engine.specs))
            refuse_untrusted_textfile(loaded.config.metrics.textfile)
            engine.reconfigure(loaded)
        except ConfigError as exc:
            log.error("reload: new configuration rejected, keeping the old one:\n%s", exc)
            self.notifier.notify(ready="1", status=f"reload rejected ({len(exc.problems)} problem(s)); old config kept")
            return engine, schedule, slot
        except UntrustedPath as exc:
            log.error("reload: new configuration rejected, keeping the old one: %s", exc)
            self.notifier.notify(ready="1", status="reload rejected (untrusted path); old config kept")
            return engine, schedule, slot
        if loaded.config.metrics != old_metrics:
            self._apply_metrics_config(loaded.config)
        new_schedule = schedule_for(loaded.config, node_name(loaded.config))
        if new_schedule != schedule:
            slot = new_schedule.first_slot(self.wall(), self.monotonic())
        log.info("reloaded configuration from %s", loaded.source)
        self.notifier.notify(ready="1", status=f"configuration reloaded from {loaded.source}")
        return engine, new_schedule, slot

    def _apply_metrics_config(self, config: Config) -> None:
        from healthd.metrics import refuse_untrusted_textfile

        refuse_untrusted_textfile(config.metrics.textfile)
        if self.server is not None:
            self.server.close()
            self.server = None
        self._listen_failures = 0
        settings = config.metrics
        if settings.listen is None and settings.textfile is None:
            self.registry = None
            return
        if self.registry is None:
            self.registry = new_registry(self.collector)
        self._ensure_listening(config)

    def _ensure_listening(self, config: Config) -> None:
        """Open the metrics listener if configured and not open yet (a busy port is retried every pass)."""
        listen = config.metrics.listen
        if listen is None or self.server is not None or self.registry is None:
            return
        host, port = parse_listen(listen)
        try:
            self.server = MetricsServer(self.registry, host, port)
        except (OSError, RuntimeError) as exc:
            self._listen_failures += 1
            # Logged loudly once, then quietly: the port may stay busy for days.
            level = logging.ERROR if self._listen_failures == 1 else logging.DEBUG
            log.log(level, "metrics: cannot listen on %s: %s; checks go on, retrying every pass", listen, exc)
        else:
            log.info("metrics: serving http://%s/metrics", listen)
