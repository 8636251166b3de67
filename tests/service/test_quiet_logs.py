"""The daemon's log says what changed, and reminds hourly of what is still wrong: not every pass.

The passes' own clock (``started_at``) is the controlled clock: a day of passes is 288
reports five minutes apart, run through the real pipeline and the real ``LogSink``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Callable

import pytest

from healthd.cycle.outcome import PassOutcome
from healthd.cycle.pipeline import run_pass
from healthd.model import Finding, PassResult, RunState, Status
from healthd.service.sinks import REMINDER_SECONDS, LogSink

DAY_OF_PASSES = 288  # every 5 minutes, [daemon].interval's default
INTERVAL = 300.0
T0 = 1_700_000_000.0


def _at(report: PassOutcome, when: float, findings: tuple[Finding, ...] = ()) -> PassOutcome:
    """``report`` as a pass that started at ``when``; with ``findings``, carrying those instead."""
    result = report.result
    checks = result.results
    if findings:
        checks = tuple(c._replace(findings=findings) for c in checks[:1])
    return report._replace(result=result._replace(started_at=when, results=checks))


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "healthd.test-quiet"]


@pytest.fixture
def quiet_logger(caplog: pytest.LogCaptureFixture) -> logging.Logger:
    caplog.set_level(logging.DEBUG, logger="healthd.test-quiet")
    return logging.getLogger("healthd.test-quiet")


def test_a_day_with_one_steady_warning_logs_at_most_25_lines(
    make_engine: Callable[..., Any], quiet_logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    report = run_pass(make_engine("warning"))
    assert report.result.status is Status.WARNING and report.actions  # a drain decided every pass
    sink = LogSink(quiet_logger)
    for number in range(1, DAY_OF_PASSES + 1):
        sink.publish(_at(report, T0 + (number - 1) * INTERVAL), number)
    lines = _messages(caplog)
    assert len(lines) <= 25, lines
    assert lines[0] == "flag WARNING FLAG_RAISED flag: the test flag is raised"
    assert lines[1].startswith("policy drain_after_jobs disabled on node-test")
    reminders = lines[2:]
    # One an hour after the last line, each naming what is still wrong.
    assert len(reminders) == int((DAY_OF_PASSES - 1) * INTERVAL // REMINDER_SECONDS)
    assert all(line.endswith("; still: flag WARNING FLAG_RAISED flag") for line in reminders), reminders
    assert reminders[0].startswith("pass 13: WARNING at ")


def test_a_finding_is_logged_when_raised_when_it_changes_and_when_it_clears(
    make_engine: Callable[..., Any], quiet_logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    report = run_pass(make_engine("ok"))
    warn = Finding("flag", Status.WARNING, "FLAG_RAISED", "flag", "count 1")
    sink = LogSink(quiet_logger)
    sink.publish(_at(report, T0), 1)
    sink.publish(_at(report, T0 + 300, (warn,)), 2)
    sink.publish(_at(report, T0 + 600, (replace(warn, message="count 2"),)), 3)  # new text only: no record
    sink.publish(_at(report, T0 + 900, (replace(warn, status=Status.CRITICAL, message="count 3"),)), 4)
    sink.publish(_at(report, T0 + 1200), 5)
    sink.publish(_at(report, T0 + 1200 + 2 * REMINDER_SECONDS), 6)  # all well: no reminder
    lines = _messages(caplog)
    assert lines[0].startswith("pass 1: OK at ")  # the first pass says it ran, even with nothing wrong
    assert lines[1:] == [
        "flag WARNING FLAG_RAISED flag: count 1",
        "flag CRITICAL FLAG_RAISED flag: count 3",
        "flag CLEARED FLAG_RAISED flag (was CRITICAL)",
    ]
    cleared = [r for r in caplog.records if r.getMessage().startswith("flag CLEARED")]
    assert getattr(cleared[0], "healthd_fields", {})["HEALTHD_SEVERITY"] == "OK"


def test_a_status_change_without_a_finding_logs_the_pass_line(
    make_engine: Callable[..., Any], quiet_logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    report = run_pass(make_engine("ok"))
    sink = LogSink(quiet_logger)
    sink.publish(_at(report, T0), 1)
    sink.publish(_at(report, T0 + 300), 2)
    failed = report._replace(
        result=PassResult("node-test", T0 + 600, 0.0, ()), action=report.action._replace(errors=("disk gone",))
    )
    sink.publish(failed, 3)
    sink.publish(failed._replace(result=failed.result._replace(started_at=T0 + 900)), 4)
    # A problem is an error on every pass it happens (docs/service.md, "State problems").
    assert [line.split(" at ")[0] for line in _messages(caplog)] == [
        "pass 1: OK",
        "pass problem: disk gone",
        "pass problem: disk gone",
    ]


def test_a_check_that_timed_out_does_not_clear_what_it_found_before(
    make_engine: Callable[..., Any], quiet_logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    report = run_pass(make_engine("warning"))
    sink = LogSink(quiet_logger)
    sink.publish(_at(report, T0), 1)
    late = Finding("flag", Status.UNKNOWN, "TIMEOUT", "flag", "did not finish in 5s")
    timed_out = _at(report, T0 + 300, (late,))
    checks = tuple(c._replace(state=RunState.TIMEOUT) for c in timed_out.result.results)
    sink.publish(timed_out._replace(result=timed_out.result._replace(results=checks)), 2)
    sink.publish(_at(report, T0 + 600), 3)  # it runs again and still finds the flag: nothing new
    assert _messages(caplog)[2:] == [
        "flag UNKNOWN TIMEOUT flag: did not finish in 5s",
        "flag CLEARED TIMEOUT flag (was UNKNOWN)",
    ]
