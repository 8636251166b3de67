"""Runs the enabled checks of one pass concurrently, each under its own deadline.

Each check runs in a daemon thread. A check that raises becomes UNKNOWN
``CHECK_ERROR``; one that overruns its deadline (or the pass's) is abandoned and
becomes UNKNOWN ``CHECK_TIMEOUT``; one whose thread from an earlier pass is still
alive is not started again and becomes UNKNOWN ``CHECK_STUCK``. Nothing a check
does can stop the other checks or the pass from finishing on time.
"""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional, Sequence

from healthd.checks.plugin import AnyCheck, BrokenCheck, CheckContext, CheckSpec, NotApplicable
from healthd.model import CheckResult, Device, EventTally, Finding, PassResult, RunState, Status


class PreparedCheck(NamedTuple):
    """A check ready to run: its plugin (or why it failed to load) and its context."""

    name: str
    spec: AnyCheck
    context: Optional[CheckContext[Any]]
    enabled: bool = True


@dataclass
class _Slot:
    done: threading.Event = field(default_factory=threading.Event)
    findings: tuple[Finding, ...] = ()
    tallies: tuple[EventTally, ...] = ()
    devices: tuple[Device, ...] = ()
    state: RunState = RunState.RAN
    reason: str = ""
    finished_at: float = 0.0


def _unknown(check: str, code: str, message: str, **details: Any) -> Finding:
    return Finding(check=check, status=Status.UNKNOWN, code=code, subject=check, message=message, details=details)


def _execute(check: PreparedCheck, slot: _Slot, monotonic: Callable[[], float]) -> None:
    assert isinstance(check.spec, CheckSpec) and check.context is not None
    try:
        findings = tuple(check.spec.run(check.context))
        bad = [f for f in findings if not isinstance(f, Finding) or f.check != check.name]
        if bad:
            raise TypeError(f"check returned {len(bad)} value(s) that are not its own Findings: {bad[0]!r}")
        # The check's own code decides what is an event: a crash in it is the check's, like any other.
        slot.tallies = tuple(counter.tally(findings) for counter in check.spec.events)
        slot.findings = findings
        slot.devices = tuple(check.context.devices)
    except NotApplicable as exc:
        slot.state = RunState.NOT_APPLICABLE
        slot.reason = str(exc)
    except BaseException as exc:  # a crashing (even sys.exit()-ing) check is UNKNOWN for that check alone
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        origin = f" at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}" if where else ""
        slot.state = RunState.ERROR
        slot.reason = f"{type(exc).__name__}: {exc}{origin}"
        slot.findings = (_unknown(check.name, "CHECK_ERROR", f"check raised {slot.reason}"),)
    finally:
        slot.finished_at = monotonic()
        slot.done.set()


class Runner:
    """Keeps track of check threads across passes so a stuck one is never doubled."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._inflight: dict[str, threading.Thread] = {}

    def stuck(self) -> list[str]:
        return sorted(name for name, thread in self._inflight.items() if thread.is_alive())

    def run_checks(self, node: str, checks: Sequence[PreparedCheck], pass_timeout: float) -> PassResult:
        started_wall = time.time()
        started = self._monotonic()
        pass_deadline = started + pass_timeout
        immediate: dict[str, CheckResult] = {}
        running: dict[str, tuple[_Slot, float]] = {}
        for check in checks:
            immediate_result = self._start(check, started, pass_deadline, running)
            if immediate_result is not None:
                immediate[check.name] = immediate_result
        results: list[CheckResult] = []
        for check in checks:
            if check.name in immediate:
                results.append(immediate[check.name])
                continue
            slot, deadline = running[check.name]
            slot.done.wait(max(0.0, deadline - self._monotonic()))
            if slot.done.is_set():
                self._inflight.pop(check.name, None)
                duration = slot.finished_at - started
                results.append(
                    CheckResult(
                        check.name, slot.state, slot.findings, duration, slot.reason, slot.tallies, slot.devices
                    )
                )
            else:
                limit = deadline - started
                results.append(
                    CheckResult(
                        check.name,
                        RunState.TIMEOUT,
                        (_unknown(check.name, "CHECK_TIMEOUT", f"check did not finish within {limit:.1f}s"),),
                        self._monotonic() - started,
                        f"abandoned after {limit:.1f}s",
                    )
                )
        return PassResult(node, started_wall, self._monotonic() - started, tuple(results))

    def _start(
        self, check: PreparedCheck, started: float, pass_deadline: float, running: dict[str, tuple[_Slot, float]]
    ) -> Optional[CheckResult]:
        if not check.enabled:
            return CheckResult(check.name, RunState.DISABLED, (), 0.0, "disabled in config")
        if not isinstance(check.spec, CheckSpec):
            error = check.spec.error if isinstance(check.spec, BrokenCheck) else "enabled but never loaded"
            finding = _unknown(check.name, "PLUGIN_LOAD_FAILED", error)
            return CheckResult(check.name, RunState.ERROR, (finding,), 0.0, error)
        previous = self._inflight.get(check.name)
        if previous is not None and previous.is_alive():
            message = "an earlier run of this check is still running; not started again"
            return CheckResult(
                check.name, RunState.STUCK, (_unknown(check.name, "CHECK_STUCK", message),), 0.0, message
            )
        assert check.context is not None
        slot = _Slot()
        deadline = min(started + check.context.settings.timeout, pass_deadline)
        thread = threading.Thread(
            target=_execute, args=(check, slot, self._monotonic), name=f"check-{check.name}", daemon=True
        )
        self._inflight[check.name] = thread
        thread.start()
        running[check.name] = (slot, deadline)
        return None
