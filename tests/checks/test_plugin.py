"""The plugin interface as a third party uses it: a check with its own settings and counter, and a command.

The third-party package is real: a module and a ``.dist-info`` with entry points in
a private directory put on ``PYTHONPATH``, found by ``importlib.metadata`` exactly as
an installed package is, and run through the real ``healthd`` executable.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.paths import HEALTHD as INSTALLED

from healthd.checks.plugin import (
    CheckContext,
    CheckSettings,
    CheckSpec,
    EventCounter,
    JudgeContext,
    NotApplicable,
    Staged,
    Verdict,
    discover,
)
from healthd.checks.runner import PreparedCheck, Runner
from healthd.config.models import Paths
from healthd.model import Finding, RunState, Status
from healthd.store.state import StateFile

HEALTHD = str(INSTALLED)

# A check as a third party writes it: only its module and its entry points.
WIDGETS = '''
"""Widgets: the node must have ``expect`` of them; each fault is an event."""

from dataclasses import dataclass
from typing import Optional

from pydantic import Field

from healthd.model import Finding, Status
from healthd.checks.plugin import CheckSettings, CheckSpec, CommandSpec, EventCounter, Staged, Verdict


class WidgetSettings(CheckSettings):
    expect: Optional[int] = Field(default=None, ge=0, description="widgets this node must have")


@dataclass(frozen=True)
class Widgets:
    lines: tuple[str, ...]
    previous: dict


def gather(ctx):
    text = (ctx.paths.sysfs / "widgets").read_text()
    return Widgets(tuple(text.split()), ctx.state.load())


def judge(widgets, jc):
    bad = [w for w in widgets.lines if w.endswith("!")]
    findings = [jc.finding(Status.WARNING, "WIDGET_FAULT", w, "faulty", count=2) for w in bad]
    expected = jc.settings.expect
    if expected is not None and len(widgets.lines) < expected:
        findings.append(jc.finding(Status.CRITICAL, "WIDGET_MISSING", "widgets", f"{len(widgets.lines)} of {expected}"))
    passes = widgets.previous.get("passes", 0) + 1
    return Verdict(tuple(findings), {"passes": passes})


def faults(finding: Finding):
    return (finding.subject,) if finding.code == "WIDGET_FAULT" else None


CHECK = CheckSpec(
    name="widgets",
    description="widgets present and sound",
    settings=WidgetSettings,
    run=Staged(gather, judge, keeps="widget passes"),
    events=(EventCounter("widget_faults", "Faults of each widget.", ("widget",), faults),),
)


def add_arguments(parser):
    parser.add_argument("word")


def count(args):
    print(f"widgets say {args.word}")
    return 5


COMMAND = CommandSpec(name="widget-say", help="say a word", add_arguments=add_arguments, run=count)
'''

ENTRY_POINTS = """[healthd.checks]
widgets = widgets_plugin:CHECK

[healthd.commands]
widget-say = widgets_plugin:COMMAND
widget-broken = widgets_missing_module:COMMAND
"""


@pytest.fixture
def third_party(tmp_path: Path) -> dict[str, str]:
    """The environment of a healthd with the widgets package installed next to the built-in checks."""
    site = tmp_path / "site"
    (site / "widgets_plugin-1.0.dist-info").mkdir(parents=True)
    (site / "widgets_plugin.py").write_text(WIDGETS)
    info = site / "widgets_plugin-1.0.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: widgets-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return {**os.environ, "PYTHONPATH": str(site)}


def _healthd(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HEALTHD, *args], capture_output=True, text=True, env=env, timeout=120, check=False)


def test_a_third_party_check_declares_its_own_expectation_and_counter(
    third_party: dict[str, str], tmp_path: Path, write_config: Callable[[str], Path]
) -> None:
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    (sysfs / "widgets").write_text("w1 w2! w3\n")
    config = write_config(f'[paths]\nsysfs = "{sysfs}"\n[checks.widgets]\nexpect = 4\n')
    done = _healthd(third_party, "check", "--once", "--json", "--dry-run", "--only", "widgets", "--config", str(config))
    assert done.returncode == 2, done.stderr
    (widgets,) = json.loads(done.stdout)["checks"]
    found = [(f["status"], f["code"], f["subject"]) for f in widgets["findings"]]
    assert found == [("WARNING", "WIDGET_FAULT", "w2!"), ("CRITICAL", "WIDGET_MISSING", "widgets")]
    assert json.loads((tmp_path / "state" / "check-widgets.json").read_text()) == {"passes": 1}
    bad = write_config("[checks.widgets]\nexpect = -1\n")
    done = _healthd(third_party, "config", "validate", "--config", str(bad))
    assert done.returncode == 78 and f"{bad}: checks.widgets.expect: Input should be greater than or equal to 0" in (
        done.stderr
    )


def test_a_third_party_command_runs_and_a_broken_one_says_why(third_party: dict[str, str]) -> None:
    done = _healthd(third_party, "widget-say", "hello")
    assert (done.returncode, done.stdout) == (5, "widgets say hello\n")
    assert "widget-say" in _healthd(third_party, "--help").stdout
    broken = _healthd(third_party, "widget-broken")
    assert broken.returncode == 70
    assert "the widget-broken command cannot be used: cannot load widgets_missing_module:COMMAND" in broken.stderr
    assert "Traceback" not in broken.stderr


def test_built_in_commands_come_through_the_same_entry_points() -> None:
    from healthd.checks.plugin import CommandSpec, discover_commands

    names = {c.name for c in discover_commands() if isinstance(c, CommandSpec)}
    assert {"scan-log", "record-gpus"} <= names


# --- Staged: gather, judge, and the state between them --------------------------------------------------------


class _Settings(CheckSettings):
    limit: int = 2


def _context(tmp_path: Path, name: str = "counting", state_dir: Path | None = None) -> CheckContext[_Settings]:
    return CheckContext(name, _Settings(), Paths(), StateFile(state_dir or tmp_path, name), clock=lambda: 1000.0)


def _gather(ctx: CheckContext[_Settings]) -> dict[str, Any]:
    return {"value": 5, "previous": ctx.state.load()}


def _judge(observed: dict[str, Any], jc: JudgeContext[_Settings]) -> Verdict:
    before = observed["previous"].get("value")
    findings = ()
    if before is not None and observed["value"] - before > jc.settings.limit:
        findings = (jc.finding(Status.WARNING, "ROSE", "thing", "rose"),)
    return Verdict(findings, {"value": observed["value"], "at": jc.now})


def test_staged_saves_what_the_judge_keeps_and_reports_a_failure_to(tmp_path: Path) -> None:
    run = Staged(_gather, _judge, keeps="values")
    assert run(_context(tmp_path)) == []
    assert StateFile(tmp_path, "counting").load() == {"value": 5, "at": 1000.0}
    StateFile(tmp_path, "counting").save({"value": 1})
    (rose,) = run(_context(tmp_path))
    assert (rose.check, rose.code) == ("counting", "ROSE")
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the state directory should be")
    (lost,) = run(_context(tmp_path, state_dir=blocker / "state"))
    assert (lost.status, lost.code) == (Status.UNKNOWN, "STATE_UNWRITABLE") and lost.message.startswith(
        "values not kept"
    )


def test_a_peek_judges_as_a_pass_would_and_saves_nothing(tmp_path: Path) -> None:
    # The prolog beside the daemon judges the xid check this way: the daemon's next pass must read the same records.
    run = Staged(_gather, _judge, keeps="values")
    StateFile(tmp_path, "counting").save({"value": 1})
    verdict = run.peek(_context(tmp_path))
    assert [(f.check, f.code) for f in verdict.findings] == [("counting", "ROSE")]
    assert verdict.state == {"value": 5, "at": 1000.0}
    assert StateFile(tmp_path, "counting").load() == {"value": 1}


def test_a_check_that_does_not_apply_keeps_the_state_it_gives(tmp_path: Path) -> None:
    def judge(observed: Any, jc: JudgeContext[_Settings]) -> Verdict:
        raise NotApplicable("nothing here", {"cursor": "41"})

    run = Staged(lambda ctx: None, judge, keeps="the cursor")
    with pytest.raises(NotApplicable, match=r"^nothing here$"):
        run(_context(tmp_path))
    assert StateFile(tmp_path, "counting").load() == {"cursor": "41"}
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the state directory should be")
    # Still not applicable, and the reason says what was not kept.
    with pytest.raises(NotApplicable, match=r"^nothing here; the cursor not kept: "):
        run(_context(tmp_path, state_dir=blocker / "state"))


def test_a_judge_that_keeps_nothing_leaves_the_state_alone(tmp_path: Path) -> None:
    run = Staged(lambda ctx: None, lambda observed, jc: Verdict())
    assert run(_context(tmp_path)) == []
    assert not (tmp_path / "counting.json").exists()


# --- event counters: tallied by the runner from the check's own findings ------------------------------------------


def _faults(finding: Finding) -> tuple[str, ...] | None:
    return (str(finding.details["gpu"]),) if finding.code == "FAULT" else None


def _faulty(ctx: CheckContext[Any]) -> list[Finding]:
    return [ctx.finding(Status.WARNING, "FAULT", "gpu1", "x", gpu=1, count=3), ctx.finding(Status.OK, "NOTE", "n", "y")]


def _spec(counter: EventCounter) -> CheckSpec[CheckSettings]:
    return CheckSpec("faulty", "test", CheckSettings, _faulty, events=(counter,))


def test_the_runner_tallies_a_checks_findings_with_its_counters(tmp_path: Path) -> None:
    counter = EventCounter("faults", "Faults.", ("gpu",), _faults)
    ctx = CheckContext("faulty", CheckSettings(), Paths(), StateFile(tmp_path, "faulty"))
    (result,) = Runner().run_checks("n1", [PreparedCheck("faulty", _spec(counter), ctx)], 5.0).results
    (tally,) = result.tallies
    assert (tally.name, tally.labels, tally.counts) == ("faults", ("gpu",), ((("1",), 3.0),))


def test_a_counter_that_raises_is_the_checks_error_alone(tmp_path: Path) -> None:
    def explode(finding: Finding) -> tuple[str, ...] | None:
        raise KeyError("gpu")

    ctx = CheckContext("faulty", CheckSettings(), Paths(), StateFile(tmp_path, "faulty"))
    spec = _spec(EventCounter("faults", "Faults.", ("gpu",), explode))
    (result,) = Runner().run_checks("n1", [PreparedCheck("faulty", spec, ctx)], 5.0).results
    assert result.state is RunState.ERROR and result.tallies == ()
    assert [f.code for f in result.findings] == ["CHECK_ERROR"]


def test_a_setting_checks_share_is_declared_once() -> None:
    """The same setting (name, description, default) declared in two settings models is one copied: it belongs
    in a base they share (``KernelLogSettings``, ``NvmlSettings``). A model may give a base's setting a default
    of its own (``timeout``)."""
    from pydantic import BaseModel

    models = {
        cls
        for spec in discover()
        if isinstance(spec, CheckSpec)
        for cls in spec.settings_model().__mro__
        if isinstance(cls, type) and issubclass(cls, BaseModel) and cls is not BaseModel
    }
    declared: dict[tuple[str, str], list[str]] = {}
    for model in models:
        for name in set(vars(model).get("__annotations__", {})) & set(model.model_fields):
            field = model.model_fields[name]
            key = (name, f"{field.description}, default {field.default!r}")
            declared.setdefault(key, []).append(model.__name__)
    assert {key: sorted(owners) for key, owners in declared.items() if len(owners) > 1} == {}
