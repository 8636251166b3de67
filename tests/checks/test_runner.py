from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import pytest

from healthd.checks.plugin import BrokenCheck, CheckContext, CheckSettings, CheckSpec, NotApplicable
from healthd.checks.runner import PreparedCheck, Runner
from healthd.config.models import Paths
from healthd.model import Finding, RunState, Status
from healthd.store.state import StateFile

RELEASE = threading.Event()


def prepared(tmp_path: Path, name: str, run: Callable[[CheckContext[Any]], Iterable[Finding]], timeout: float = 1.0):
    spec: CheckSpec[CheckSettings] = CheckSpec(name, "test", CheckSettings, run)
    ctx = CheckContext(name, CheckSettings(timeout=timeout), Paths(), StateFile(tmp_path, name))
    return PreparedCheck(name, spec, ctx)


def healthy(ctx: CheckContext[Any]) -> list[Finding]:
    return []


def failing(ctx: CheckContext[Any]) -> list[Finding]:
    return [ctx.finding(Status.CRITICAL, "BROKEN", "thing", "it broke")]


def raising(ctx: CheckContext[Any]) -> list[Finding]:
    raise RuntimeError("sensor exploded")


def exiting(ctx: CheckContext[Any]) -> list[Finding]:
    raise SystemExit(0)


def hanging(ctx: CheckContext[Any]) -> list[Finding]:
    RELEASE.wait(30)
    return []


def not_here(ctx: CheckContext[Any]) -> list[Finding]:
    raise NotApplicable("no widgets on this node")


def impostor(ctx: CheckContext[Any]) -> list[Finding]:
    return [Finding("other", Status.OK, "X", "y", "z")]


@pytest.fixture(autouse=True)
def _release_hung_threads() -> Iterable[None]:
    RELEASE.clear()
    yield
    RELEASE.set()


def test_results_keep_check_order_and_grades(tmp_path: Path) -> None:
    checks = [prepared(tmp_path, "a", healthy), prepared(tmp_path, "b", failing)]
    result = Runner().run_checks("n1", checks, 5.0)
    assert [r.check for r in result.results] == ["a", "b"]
    assert result.status is Status.CRITICAL
    assert result.results[1].findings[0].code == "BROKEN"


def test_a_raising_check_is_unknown_alone(tmp_path: Path) -> None:
    result = Runner().run_checks("n1", [prepared(tmp_path, "a", raising), prepared(tmp_path, "b", healthy)], 5.0)
    bad, good = result.results
    assert bad.state is RunState.ERROR and bad.status is Status.UNKNOWN
    assert bad.findings[0].code == "CHECK_ERROR" and "RuntimeError: sensor exploded" in bad.findings[0].message
    assert good.status is Status.OK and good.state is RunState.RAN


def test_a_check_calling_sys_exit_is_unknown_not_ok(tmp_path: Path) -> None:
    (res,) = Runner().run_checks("n1", [prepared(tmp_path, "x", exiting)], 5.0).results
    assert res.state is RunState.ERROR and res.status is Status.UNKNOWN
    assert "SystemExit" in res.findings[0].message


def test_a_hanging_check_times_out_alone_and_is_not_restarted(tmp_path: Path) -> None:
    runner = Runner()
    checks = [prepared(tmp_path, "hang", hanging, timeout=0.3), prepared(tmp_path, "ok", healthy)]
    start = time.monotonic()
    first = runner.run_checks("n1", checks, 5.0)
    assert time.monotonic() - start < 3.0
    assert first.results[0].state is RunState.TIMEOUT and first.results[0].findings[0].code == "CHECK_TIMEOUT"
    assert first.results[1].status is Status.OK
    second = runner.run_checks("n1", checks, 5.0)
    assert second.results[0].state is RunState.STUCK and second.results[0].findings[0].code == "CHECK_STUCK"
    assert runner.stuck() == ["hang"]
    RELEASE.set()
    for _ in range(100):
        if not runner.stuck():
            break
        time.sleep(0.02)
    third = runner.run_checks("n1", checks, 5.0)
    assert third.results[0].state is RunState.RAN and third.status is Status.OK


def test_the_pass_deadline_bounds_every_check(tmp_path: Path) -> None:
    result = Runner().run_checks("n1", [prepared(tmp_path, "hang", hanging, timeout=60)], 0.3)
    assert result.results[0].state is RunState.TIMEOUT
    assert result.duration_seconds < 3.0


def test_not_applicable_is_its_own_outcome(tmp_path: Path) -> None:
    (res,) = Runner().run_checks("n1", [prepared(tmp_path, "w", not_here)], 5.0).results
    assert res.state is RunState.NOT_APPLICABLE and res.reason == "no widgets on this node"
    assert res.status is Status.OK and not res.applicable


def test_findings_must_belong_to_the_check(tmp_path: Path) -> None:
    (res,) = Runner().run_checks("n1", [prepared(tmp_path, "mine", impostor)], 5.0).results
    assert res.status is Status.UNKNOWN and "not its own Findings" in res.findings[0].message


def test_broken_plugin_is_a_visible_unknown() -> None:
    check = PreparedCheck("bad", BrokenCheck("bad", "cannot load x:CHECK: ImportError: boom"), None)
    (res,) = Runner().run_checks("n1", [check], 5.0).results
    assert res.status is Status.UNKNOWN and res.findings[0].code == "PLUGIN_LOAD_FAILED"


def test_disabled_check_does_not_run(tmp_path: Path) -> None:
    check = prepared(tmp_path, "r", raising)
    (res,) = Runner().run_checks("n1", [PreparedCheck("r", check.spec, check.context, enabled=False)], 5.0).results
    assert res.state is RunState.DISABLED and res.status is Status.OK
