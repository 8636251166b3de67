"""The sinks a finished pass goes to (log, metrics, systemd), and the one failed-pass path that feeds them."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.faults import DaemonKit

from healthd.cycle.pipeline import PassContext, PassTools, failed_pass, run_pass
from healthd.model import PassResult, Status
from healthd.plan.state import Action
from healthd.service.daemon import failed_report
from healthd.service.metrics import HealthdCollector
from healthd.service.sdnotify import Notifier
from healthd.service.sinks import LogSink, NotifySink, status_line


def test_notify_sink_sends_ready_with_the_first_pass_and_status_after_each(
    make_engine: Callable[..., Any], path_listener: Any
) -> None:
    engine = make_engine("critical")
    report = run_pass(engine)
    sink = NotifySink(Notifier({"NOTIFY_SOCKET": path_listener.address}))
    sink.publish(report, 1)
    sink.publish(report, 2)
    line = status_line(report)
    path_listener.wait_for(f"STATUS={line}")
    assert [text for _, text in path_listener.messages] == [f"READY=1\nSTATUS={line}", f"STATUS={line}"]
    assert line.startswith("CRITICAL at ") and ": flag/FLAG_RAISED flag; action: not sent, [slurm] enabled" in line


def test_log_sink_logs_new_findings_actions_and_problems(
    make_engine: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    report = run_pass(make_engine("critical"))
    report = report._replace(
        action=report.action._replace(errors=("cannot write /x/policy.json: No space left on device",))
    )
    logger = logging.getLogger("healthd.test-sinks")
    caplog.set_level(logging.INFO, logger="healthd.test-sinks")
    LogSink(logger).publish(report, 7)
    records = [r for r in caplog.records if r.name == "healthd.test-sinks"]
    # The records say what changed; the pass's summary line would only repeat them.
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.ERROR, "flag CRITICAL FLAG_RAISED flag: the test flag is raised"),
        # Slurm is off here: the action changed nothing, so it is no warning.
        (logging.INFO, "policy take_out_now disabled on node-test: healthd: FLAG_RAISED flag"),
        (logging.ERROR, "pass problem: cannot write /x/policy.json: No space left on device"),
    ]
    fields = [getattr(r, "healthd_fields", {}) for r in records]
    assert fields[0]["HEALTHD_CODE"] == "FLAG_RAISED"
    assert (fields[1]["HEALTHD_ACTION"], fields[1]["HEALTHD_OUTCOME"]) == ("take_out_now", "disabled")


def test_log_sink_writes_a_problem_as_one_line(
    make_engine: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    report = run_pass(make_engine())
    report = report._replace(
        action=report.action._replace(
            errors=("cannot write /x/a\n<0>healthd: forged\x1b[2J.json: Read-only file system",)
        ),
    )
    logger = logging.getLogger("healthd.test-sinks")
    caplog.set_level(logging.INFO, logger="healthd.test-sinks")
    LogSink(logger).publish(report, 1)
    problems = [r.getMessage() for r in caplog.records if r.getMessage().startswith("pass problem:")]
    assert problems == ["pass problem: cannot write /x/a <0>healthd: forged [2J.json: Read-only file system"]


def test_a_pass_that_raised_in_the_cycle_and_one_that_never_ran_take_the_same_path(
    make_engine: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine()

    def explode(only: Any = None, tier: Any = None) -> PassResult:
        raise OSError("disk gone\n<0>forged line")

    monkeypatch.setattr(engine, "run_checks", explode)
    in_cycle = run_pass(engine)
    saved_in_cycle = json.loads((tmp_path / "state" / "last-pass.json").read_text())
    in_daemon = failed_report(engine, RuntimeError("can't start new thread"), 1_700_000_000.0, dry_run=False)
    saved_in_daemon = json.loads((tmp_path / "state" / "last-pass.json").read_text())

    for report, saved, text in (
        (in_cycle, saved_in_cycle, "pass failed: OSError: disk gone <0>forged line"),
        (in_daemon, saved_in_daemon, "pass failed: RuntimeError: can't start new thread"),
    ):
        (finding,) = report.result.findings
        assert (finding.check, finding.code, finding.status, finding.message) == (
            "healthd",
            "PASS_FAILED",
            Status.UNKNOWN,
            text,
        )
        assert report.actions == () and report.problems == (text,) and report.breaker_open is None
        # What the sinks read and what `healthd status` reads are one document.
        assert saved == report.document
        assert saved["status"] == "UNKNOWN" and saved["action"]["decision"] == "none"
        assert saved["action"]["errors"] == [text]
    assert saved_in_daemon["started_at"] == "2023-11-14T22:13:20Z"


def test_a_failed_pass_exports_no_circuit_breaker_state(make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    collector = HealthdCollector()
    collector.update(run_pass(engine))
    assert {m.name for m in collector.collect()} >= {"healthd_circuit_breaker_open"}
    raw = PassResult("node-test", 0.0, 0.0, ())
    failed = failed_pass(PassContext(engine, tools=PassTools(logger=logging.getLogger("t"))), raw, ValueError("x"))
    collector.update(failed)
    # Nothing was decided: whether the breaker is open is not known, so it is not claimed.
    assert "healthd_circuit_breaker_open" not in {m.name for m in collector.collect()}


def test_the_daemon_logs_and_notifies_one_summary_per_pass(
    daemons: DaemonKit,
    tmp_path: Path,
    path_listener: Any,
    logs: pytest.LogCaptureFixture,
) -> None:
    daemon = daemons.make(path_listener.address)
    handle = daemons.start(daemon)
    path_listener.wait_for("READY=1")
    assert handle.stop() == 0
    (logged,) = [r.getMessage() for r in logs.records if r.getMessage().startswith("pass 1: ")]
    statuses = [a for a in path_listener.assignments() if a.startswith("STATUS=OK at")]
    assert statuses == [f"STATUS={logged[len('pass 1: ') :]}"]
    assert json.loads((tmp_path / "state" / "last-pass.json").read_text())["action"]["decision"] == Action.NONE.value


def test_a_textfile_directory_refused_while_running_skips_the_write_not_the_checks(
    make_engine: Callable[..., Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """node_exporter's account owns the directory's parent on Debian: what it does there must not stop healthd."""
    from healthd.config.models import MetricsSettings
    from healthd.service.sinks import MetricsSink

    directory = tmp_path / "node-exporter"
    directory.mkdir(mode=0o755)
    textfile = directory / "healthd.prom"
    logger = logging.getLogger("healthd.test-sinks")
    caplog.set_level(logging.DEBUG, logger="healthd.test-sinks")
    sink = MetricsSink(logger)
    sink.configure(MetricsSettings(textfile=textfile))
    report = run_pass(make_engine())
    sink.publish(report, 1)
    written = textfile.read_text()
    directory.chmod(0o777)
    for number in (2, 3, 4):
        sink.publish(report, number)  # no UntrustedPath: the daemon goes on checking
    refusals = [r for r in caplog.records if "cannot write textfile" in r.getMessage()]
    assert [r.levelno for r in refusals] == [logging.ERROR, logging.DEBUG, logging.DEBUG]
    assert "which others could have written" in refusals[0].getMessage()
    assert textfile.read_text() == written  # not rewritten into a directory others can write
