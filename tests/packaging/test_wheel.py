"""The wheel ships every package of the source tree, and every check and command it registers loads from it.

The wheel is built from the files git tracks and installed into a fresh venv. The packages
are found by setuptools (``[tool.setuptools.packages.find]`` in pyproject.toml), never listed
by hand: a package the wheel left out would list as ``BROKEN: ModuleNotFoundError`` from a
wheel or a .deb while an editable install ran it fine, so both halves are checked here, the
files in the wheel and the entry points loaded from it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path, PurePosixPath

import pytest
from healthd_testkit.paths import REPO

from healthd.config.defaults import toml_module

# Slow (builds a wheel and installs it into a fresh venv): left out of the fast tier, `pytest -m "not slow"`.
pytestmark = pytest.mark.slow

SHIPPED = ("healthd", "healthd_checks")
# Where they are in the checkout: the built-in checks live in checks/, installed as healthd_checks.
SOURCE = ("healthd", "checks")
GROUPS = ("healthd.checks", "healthd.commands")

# Run by the venv's own interpreter: every entry point of GROUPS as the installed metadata has it,
# each loaded through healthd's own discovery, with the error of any that fails to load.
LOAD_ALL = """
import json
from healthd.checks.plugin import discover, discover_commands, entry_points_of
loaded = {
    "healthd.checks": {s.name: getattr(s, "error", None) for s in discover()},
    "healthd.commands": {c.name: getattr(c, "error", None) for c in discover_commands()},
}
print(json.dumps({g: {"declared": sorted(entry_points_of(g)), "errors": e} for g, e in loaded.items()}))
"""


def _tracked(*paths: str) -> list[str]:
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", *paths], capture_output=True, text=True, check=True
    ).stdout.split()
    return [name for name in listed if (REPO / name).exists()]


def _tracked_source(dest: Path) -> Path:
    """The files git tracks, as they are in the working tree: a checkout's build/ (setuptools never
    empties build/lib) or an untracked module must not reach the wheel this test judges."""
    for name in _tracked(*SOURCE, "pyproject.toml", "README.md"):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)
    return dest


def _declared(group: str) -> list[str]:
    """The entry points of ``group`` that pyproject.toml declares."""
    project = toml_module().loads((REPO / "pyproject.toml").read_text())["project"]
    return sorted(project["entry-points"][group])


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from the tracked source, without build isolation (the environment's setuptools)."""
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    source = _tracked_source(tmp / "source")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = dist.glob("healthd-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with healthd from the wheel alone; its dependencies are this interpreter's."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    site = subprocess.run(
        [sys.executable, "-c", "import pydantic, os; print(os.path.dirname(os.path.dirname(pydantic.__file__)))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env_site = next((env_dir / "lib").glob("python3*/site-packages"))
    (env_site / "deps.pth").write_text(site + "\n")
    return env_dir


def test_the_wheel_ships_every_package_and_module_of_the_source_tree(wheel: Path) -> None:
    shipped = set(zipfile.ZipFile(wheel).namelist())
    modules = {name.removeprefix("checks/") for name in _tracked(*SOURCE) if name.endswith(".py")}
    packages = {str(PurePosixPath(name).parent) for name in modules}
    assert {name for name in packages if f"{name}/__init__.py" not in modules} == set(), "a folder of code is a package"
    missing = sorted(name for name in modules if name not in shipped)
    assert not missing, f"modules the wheel leaves out (is their package found by setuptools?): {missing}"
    top_levels = {name.split("/", 1)[0] for name in shipped}
    assert "checks" not in top_levels
    # Test support is not shipped; the synthetic fleet is, for `healthd fleet sample`.
    assert not {"tests", "healthd_testkit", "bench"} & top_levels
    assert [name for name in shipped if name.endswith("/synth.py")] == []
    assert "healthd/fleet/sample.py" in shipped
    assert {name.split(".dist-info", 1)[0] for name in top_levels if ".dist-info" in name} == {
        f"healthd-{wheel.name.split('-')[1]}"
    }
    assert {name for name in top_levels if not name.endswith(".dist-info")} == set(SHIPPED)


def test_every_registered_check_and_command_loads_from_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [str(installed / "bin" / "python"), "-c", LOAD_ALL],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    for group in GROUPS:
        assert report[group]["declared"] == _declared(group), f"{group}: the installed entry points are pyproject's"
        errors = {name: error for name, error in report[group]["errors"].items() if error is not None}
        assert errors == {}, f"{group}: entry points that do not load from the wheel"
        assert sorted(report[group]["errors"]) == _declared(group)


def test_the_installed_command_lists_every_check(installed: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [str(installed / "bin" / "healthd"), "list-checks", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode in (0, 3), done.stderr
    assert sorted(row["name"] for row in json.loads(done.stdout)) == _declared("healthd.checks")
