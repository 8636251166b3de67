"""healthd's .deb and .rpm built from this checkout with packaging/build.py, for the tests
that install them (tests/packaging, the Ansible role)."""

from __future__ import annotations

import importlib.util
import shutil
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from healthd_testkit.paths import REPO

# A package built from this checkout, then the same tree as the next version: an upgrade.
FIRST, NEXT = "0.1.0", "0.1.1"
TOOLS = ("dpkg-deb", "rpmbuild", "rpm", "lintian", "rpmlint")


@dataclass(frozen=True)
class Packages:
    """The .deb of FIRST and of NEXT, and the .rpm of FIRST, all from one staged tree."""

    deb: Path
    next_deb: Path
    rpm: Path


def missing_tool() -> str | None:
    """Why the packages cannot be built here, or None."""
    for tool in TOOLS:
        if shutil.which(tool) is None:
            return f"{tool} is not installed (tests/run.sh installs dpkg and rpm)"
    return None


def build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("healthd_packaging_build", REPO / "packaging" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_packages(out: Path) -> Packages:
    build = build_module()
    stage = out / "stage"
    stage.mkdir()
    build.stage_venv(stage, None)
    build.stage_files(stage)
    return Packages(
        deb=build.build_deb(stage, out, FIRST),
        next_deb=build.build_deb(stage, out, NEXT),
        rpm=build.build_rpm(stage, out, FIRST),
    )


def build_in_background(out: Path) -> Future[Packages]:
    """``build_packages(out)`` in a thread of its own, beside the tests that run meanwhile.

    A build runs one process at a time (pip, the compiler, dpkg-deb's xz, rpmbuild): on two
    cores, a second build beside the tests mostly takes the core that they leave idle.
    """
    future: Future[Packages] = Future()

    def build() -> None:
        try:
            future.set_result(build_packages(out))
        except BaseException as exc:  # handed to whoever waits for the result
            future.set_exception(exc)

    # A daemon: a session that stops early does not wait for a build nobody will read.
    threading.Thread(target=build, name="healthd-packages", daemon=True).start()
    return future
