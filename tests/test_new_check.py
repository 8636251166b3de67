"""CONTRIBUTING.md's recipe for a new check, followed to the letter with a dummy check.

The recipe's five places are made in a private tree (the repository is never written): the
package with its ``settings.py`` and ``check.py``, the one entry-point line (in a
``.dist-info``, which is what ``pip install -e .`` turns pyproject's line into), a fixture,
and the check's table in a config. The real ``healthd`` then finds the check, validates its
settings, runs it, and reports its findings.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from healthd_testkit.paths import HEALTHD, REPO

SETTINGS = '''"""``[checks.dummy]``: the dummy check's settings model."""

from typing import Optional

from pydantic import Field

from healthd.checks.settings import CheckSettings


class DummySettings(CheckSettings):
    expect_widgets: Optional[int] = Field(default=None, ge=0, description="widgets this node must have")
'''

CHECK = '''"""The dummy check: the node has the widgets it should (a file under [paths].sysfs)."""

from dataclasses import dataclass

from healthd.checks.plugin import CheckSpec, NotApplicable, Staged, Unobserved, Verdict
from healthd.model import Status


@dataclass(frozen=True)
class Widgets:
    count: int


def gather(ctx):
    path = ctx.paths.sysfs / "class" / "widget" / "count"
    if not path.parent.exists():
        raise NotApplicable("no widgets on this node")
    try:
        return Widgets(int(path.read_text()))
    except (OSError, ValueError) as exc:
        raise Unobserved("WIDGETS_UNREADABLE", "widgets", str(exc)) from None


def judge(widgets, jc):
    expected = jc.settings.expect_widgets
    if expected is not None and widgets.count < expected:
        return Verdict((jc.finding(Status.CRITICAL, "WIDGETS_MISSING", "widgets", f"{widgets.count} of {expected}"),))
    return Verdict(())


CHECK = CheckSpec(
    name="dummy",
    description="widgets present as expected",
    settings="scaffold_checks.dummy.settings:DummySettings",
    run=Staged(gather, judge),
    hardware=frozenset({"WIDGETS_MISSING"}),
)
'''


def _recipe_steps() -> list[str]:
    text = (REPO / "CONTRIBUTING.md").read_text()
    section = text.split("## Adding a check", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\d+\. \*\*([^*]+)\*\*", section, re.M)


def test_the_recipe_names_at_most_five_places() -> None:
    steps = _recipe_steps()
    assert steps[:2] == ["The package", "The entry point"]
    assert 1 < len(steps) <= 5


@pytest.fixture
def scaffold(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The five places, made in a private tree; the environment of a healthd that has the check installed."""
    site = tmp_path / "site"
    package = site / "scaffold_checks" / "dummy"
    package.mkdir(parents=True)
    (site / "scaffold_checks" / "__init__.py").write_text('"""Checks of a scaffold."""\n')
    (package / "__init__.py").write_text('"""The dummy check."""\n')
    (package / "settings.py").write_text(SETTINGS)
    (package / "check.py").write_text(CHECK)
    info = site / "scaffold_checks-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: scaffold-checks\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[healthd.checks]\ndummy = scaffold_checks.dummy.check:CHECK\n")
    sysfs = tmp_path / "fixtures" / "sysfs"
    (sysfs / "class" / "widget").mkdir(parents=True)
    (sysfs / "class" / "widget" / "count").write_text("3\n")
    config = tmp_path / "healthd.toml"
    config.write_text(
        f'[paths]\nsysfs = "{sysfs}"\nstate_dir = "{tmp_path / "state"}"\n\n[slurm]\nenabled = false\n\n'
        "[checks.dummy]\nexpect_widgets = 4\n"
    )
    config.chmod(0o600)
    return {**os.environ, "PYTHONPATH": str(site)}, config


def _healthd(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(HEALTHD), *args], capture_output=True, text=True, env=env, timeout=120, check=False)


def test_a_check_made_by_the_recipe_runs_end_to_end(scaffold: tuple[dict[str, str], Path]) -> None:
    env, config = scaffold
    listed = _healthd(env, "list-checks", "--json")
    assert listed.returncode == 0, listed.stderr
    assert "dummy" in {c["name"] for c in json.loads(listed.stdout)}
    done = _healthd(env, "check", "--once", "--json", "--only", "dummy", "--config", str(config))
    document = json.loads(done.stdout)
    (check,) = document["checks"]
    assert check["name"] == "dummy" and check["status"] == "CRITICAL"
    assert [(f["code"], f["message"]) for f in check["findings"]] == [("WIDGETS_MISSING", "3 of 4")]
    assert done.returncode == 2


def test_its_settings_are_validated_like_a_built_in_checks(scaffold: tuple[dict[str, str], Path]) -> None:
    env, config = scaffold
    config.write_text(config.read_text().replace("expect_widgets = 4", "expect_widget = 4"))
    done = _healthd(env, "config", "validate", "--config", str(config))
    assert done.returncode == 78
    assert "checks.dummy.expect_widget: unknown key; did you mean expect_widgets?" in done.stderr
