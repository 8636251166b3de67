"""Where the repository, its real captures and the installed ``healthd`` are, for every test under tests/."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Union

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
# Each source package by the folder its dotted names start from: the built-in checks live in checks/
# (docs/architecture.md, "Where the checks live").
PACKAGE_ROOTS = {"healthd": REPO, "healthd_checks": REPO / "checks"}
# The same packages' own folders.
PACKAGE_DIRS = tuple(root / name for name, root in PACKAGE_ROOTS.items())
# The console script of the environment running the tests (the package installed with -e).
HEALTHD = Path(sys.executable).with_name("healthd")


class Below:
    """A path below the instance's ``root``, as a class attribute: ``state_dir = Below("state")``."""

    def __init__(self, *parts: str) -> None:
        self.parts = parts

    def __get__(self, instance: object, owner: type | None = None) -> Path:
        root: Path = getattr(instance, "root")  # noqa: B009 (any class with a root)
        return root.joinpath(*self.parts)


def fixture_node_config(directory: Path) -> Path:
    """fixtures/h100-node.toml written into ``directory``, with its state directory there too."""
    text = (FIXTURES / "h100-node.toml").read_text()
    text = text.replace("[paths]\n", f'[paths]\nstate_dir = "{directory / "state"}"\n', 1)
    # Programs are named by absolute path only: the fixture paths are made absolute here.
    text = text.replace('"fixtures/', f'"{FIXTURES}/')
    path = directory / "h100-node.toml"
    path.write_text(text)
    return path


def run_healthd(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``healthd ARGS`` in a child process, its output captured as text, whatever its exit code."""
    return subprocess.run([str(HEALTHD), *args], capture_output=True, text=True, timeout=timeout, check=False)


@contextlib.contextmanager
def file_holding(data: Union[bytes, str], name: str) -> Iterator[Path]:
    """A file ``name`` in a fresh temporary directory, holding ``data``, for the block.

    For property tests, whose many examples cannot share pytest's one ``tmp_path``.
    """
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / name
        if isinstance(data, str):
            path.write_text(data, encoding="utf-8")
        else:
            path.write_bytes(data)
        yield path


def fill(directory: Path) -> Path:
    """Write ``directory/filler`` until its filesystem is full (ENOSPC); returns the file, to remove to free it."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass  # ENOSPC: the filesystem is full
    finally:
        os.close(fd)
    return filler
