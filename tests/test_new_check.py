"""CONTRIBUTING.md's recipe for a new check, followed line for line, and proof that it is all a check needs.

The recipe's code blocks are taken out of CONTRIBUTING.md itself, each naming the file it goes
in, so the page and this test cannot drift apart. They are written into a copy of the
repository (the repository itself is never written), the entry-point line into the copy's
pyproject.toml and the metadata ``pip install -e .`` makes of it. Then:

- the files that differ from the repository are the recipe's, and as many as it says;
- the project's own tests run on the copy and pass with the new check in it: the docs, the
  golden fixture node, layering and code shape, the settings rule, and the check's own tests,
  which run every branch the recipe shows (CRITICAL, OK, an ``Unobserved`` returned for a file
  it cannot parse or read, ``NotApplicable`` raised); ruff and mypy pass on its code;
- the real ``healthd`` lists it and validates its settings like a built-in check's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest
from healthd_testkit.paths import HEALTHD, REPO

from healthd import __version__
from healthd.config.defaults import toml_module

CONTRIBUTING = REPO / "CONTRIBUTING.md"
GROUP = "healthd.checks"
PACKAGE = "checks/healthd_checks/widgets"
ENTRY_POINTS_TABLE = f'[project.entry-points."{GROUP}"]\n'
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
# A block's first line names where it goes: `# path` (Python, TOML) or `<!-- path -->` (Markdown).
BLOCK = re.compile(r"^( *)```(\w+)\n\1(?:# |<!-- )([\w./\-]+)(?:, \S.*?)?(?: -->)?\n(.*?)^\1```$", re.M | re.S)


class Recipe(NamedTuple):
    """What CONTRIBUTING.md's "Adding a check" says: its steps, its count, and the file of each code block."""

    steps: list[str]
    places: int
    other_files: int
    blocks: dict[str, str]


def read_recipe() -> Recipe:
    section = CONTRIBUTING.read_text().split("## Adding a check", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^\d+\. \*\*([^*]+)\*\*", section, re.M)
    count = re.search(r"\*\*(\w+) places, the package and (\w+) files\*\*", section)
    assert count is not None, "the recipe says how many places and files it takes"
    blocks = {}
    for indent, _language, path, body in BLOCK.findall(section):
        blocks[path] = "".join(line[len(indent) :] + "\n" for line in body.rstrip("\n").split("\n"))
    return Recipe(steps, NUMBERS[count.group(1).lower()], NUMBERS[count.group(2)], blocks)


def test_the_recipe_is_three_places_each_with_its_code() -> None:
    recipe = read_recipe()
    assert recipe.steps == ["The package", "The entry point", "Tests"]
    assert recipe.places == len(recipe.steps)
    assert sorted(recipe.blocks) == [
        f"{PACKAGE}/README.md",
        f"{PACKAGE}/check.py",
        f"{PACKAGE}/settings.py",
        "pyproject.toml",
        "tests/checks/widgets/test_widgets.py",
    ]
    assert recipe.blocks["pyproject.toml"] == 'widgets = "healthd_checks.widgets.check:CHECK"\n'


def _copy_repository(dest: Path) -> None:
    """The files git tracks, as they are in the working tree; the captures under fixtures/ are linked, not copied."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True, check=True)
    for name in listed.stdout.split("\n"):
        if not name or name.startswith("fixtures/") or not (REPO / name).is_file():
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)
    (dest / "fixtures").symlink_to(REPO / "fixtures")


def _follow(recipe: Recipe, project: Path) -> None:
    """Each step of the recipe in the copy: the package's files, the entry-point line, the tests."""
    (project / PACKAGE / "__init__.py").parent.mkdir(parents=True)
    (project / PACKAGE / "__init__.py").write_text('"""The ``widgets`` check."""\n')
    for path, text in recipe.blocks.items():
        target = project / path
        if path == "pyproject.toml":
            document = target.read_text()
            assert document.count(ENTRY_POINTS_TABLE) == 1
            target.write_text(document.replace(ENTRY_POINTS_TABLE, ENTRY_POINTS_TABLE + text))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)


def _install_metadata(project: Path) -> None:
    """What ``pip install -e .`` makes of pyproject.toml for healthd to find its plugins: the entry points."""
    entry_points = toml_module().loads((project / "pyproject.toml").read_text())["project"]["entry-points"]
    info = project / f"healthd-{__version__}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: healthd\nVersion: {__version__}\n")
    lines = [
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in table.items()) for group, table in entry_points.items()
    ]
    (info / "entry_points.txt").write_text("\n".join(lines))


def _changed(project: Path) -> list[str]:
    """The files of the copy that are not the repository's as it is."""
    changed = []
    for path in sorted(project.rglob("*")):
        name = str(path.relative_to(project))
        if path.is_file() and not name.startswith(("fixtures", "healthd-")) and "__pycache__" not in name:
            original = REPO / name
            if not original.is_file() or original.read_bytes() != path.read_bytes():
                changed.append(name)
    return changed


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repository with the recipe followed in it, its metadata installed."""
    project = tmp_path_factory.mktemp("project")
    _copy_repository(project)
    _follow(read_recipe(), project)
    _install_metadata(project)
    return project


def _env(project: Path) -> dict[str, str]:
    """The environment of a healthd that runs from the copy: its code and its metadata come first."""
    env = {key: value for key, value in os.environ.items() if key != "HEALTHD_UPDATE_GOLDEN"}
    # The built-in checks live in checks/ (installed as healthd_checks): both roots come first.
    return {**env, "PYTHONPATH": os.pathsep.join((str(project), str(project / "checks")))}


def test_following_the_recipe_changes_the_package_and_as_many_files_as_it_says(project: Path) -> None:
    recipe = read_recipe()
    changed = _changed(project)
    outside = [name for name in changed if not name.startswith(f"{PACKAGE}/")]
    assert outside == ["pyproject.toml", "tests/checks/widgets/test_widgets.py"]
    assert len(outside) == recipe.other_files
    assert 1 + len(outside) == recipe.places, "the package, then one place a file"


@pytest.mark.slow
def test_the_projects_own_tests_pass_with_the_new_check(project: Path, tmp_path: Path) -> None:
    """Slow: a pytest session of a minute and mypy on the copy."""
    tests = [
        "tests/checks/widgets",
        "tests/test_docs.py",
        "tests/test_golden.py",
        "tests/test_layering.py",
        "tests/test_code_shape.py",
        "tests/checks/test_plugin.py::test_a_setting_checks_share_is_declared_once",
    ]
    inner = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'inner'}"]
    # The linters and mypy run beside the session: each reads the copy's sources, none writes one.
    with ThreadPoolExecutor(1) as pool:
        linted = pool.submit(_lint, project)
        done = subprocess.run(
            [*inner, *tests], capture_output=True, text=True, env=_env(project), cwd=project, timeout=600, check=False
        )
    assert done.returncode == 0, done.stdout[-6000:]
    passed = re.findall(r"^tests/checks/widgets/test_widgets.py::(\S+) PASSED", done.stdout, re.M)
    assert len(passed) == 6, f"the judge's test and the five branches through the CLI: {passed}"
    for tool, ran in linted.result():
        assert ran.returncode == 0, f"{tool}: {ran.stdout}{ran.stderr}"


def _lint(project: Path) -> list[tuple[list[str], subprocess.CompletedProcess[str]]]:
    """ruff and mypy on the new check's files in the copy: each tool, and how it ran."""
    bin_dir = Path(sys.executable).parent
    code = [f"{PACKAGE}/check.py", f"{PACKAGE}/settings.py", "tests/checks/widgets/test_widgets.py"]
    ran = []
    for tool in (["ruff", "check", *code], ["ruff", "format", "--check", *code], ["mypy", PACKAGE]):
        argv = [str(bin_dir / tool[0]), *tool[1:]]
        ran.append((tool, subprocess.run(argv, capture_output=True, text=True, cwd=project, timeout=300, check=False)))
    return ran


def _healthd(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HEALTHD), *args], capture_output=True, text=True, env=_env(project), timeout=120, check=False
    )


def test_healthd_lists_the_new_check_and_validates_its_settings(project: Path, tmp_path: Path) -> None:
    listed = _healthd(project, "list-checks", "--json")
    assert listed.returncode in (0, 3), listed.stderr
    (row,) = [row for row in json.loads(listed.stdout) if row["name"] == "widgets"]
    assert row["loaded"] and row["description"] == "widgets present as expected"
    config = tmp_path / "healthd.toml"
    config.write_text(f'[paths]\nstate_dir = "{tmp_path / "state"}"\n\n[slurm]\nenabled = false\n\n[checks.widgets]\n')
    config.write_text(config.read_text() + "expect_widget = 4\n")
    config.chmod(0o600)
    done = _healthd(project, "config", "validate", "--config", str(config))
    assert done.returncode == 78
    assert "checks.widgets.expect_widget: unknown key; did you mean expect_widgets?" in done.stderr
