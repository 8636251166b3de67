"""The wheel installs `healthd` and `healthd_checks` (never a top-level `checks`) and works from a fresh venv."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from healthd_testkit.paths import REPO

# Slow (builds a wheel and installs it into a fresh venv): left out of the fast tier, `pytest -m "not slow"`.
pytestmark = pytest.mark.slow


def _tracked_source(dest: Path) -> Path:
    """The files git tracks, as they are in the working tree: a checkout's build/ (setuptools never
    empties build/lib) or an untracked module must not reach the wheel this test judges."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "healthd", "healthd_checks", "pyproject.toml", "README.md"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in listed:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)
    return dest


def test_wheel_installs_into_a_fresh_venv_and_lists_checks(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    source = _tracked_source(tmp_path / "source")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = dist.glob("healthd-*.whl")
    shipped = zipfile.ZipFile(wheel).namelist()
    top_levels = {name.split("/", 1)[0] for name in shipped}
    assert "checks" not in top_levels
    # Test support is not shipped: the synthetic fleet lives in tests/healthd_testkit/.
    assert not {"tests", "healthd_testkit"} & top_levels
    assert [name for name in shipped if name.endswith("/synth.py")] == []
    assert {"healthd", "healthd_checks"} <= top_levels

    # The fresh venv sees this interpreter's packages for the dependencies, but healthd only from the wheel.
    env_dir = tmp_path / "venv"
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
    done = subprocess.run(
        [str(env_dir / "bin" / "healthd"), "list-checks", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode in (0, 3), done.stderr
    names = {row["name"] for row in json.loads(done.stdout)}
    assert {"mounts", "services", "xid", "gpu", "infiniband", "pcie"} <= names
    loaded = {row["name"] for row in json.loads(done.stdout) if row["loaded"]}
    assert {"mounts", "services"} <= loaded
