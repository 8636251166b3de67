"""Fixtures shared by every test area: repository paths and running the CLI in-process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from healthd.cli import main

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[[str], Path]:
    """Write a TOML config whose state_dir is private to the test; returns its path."""

    def write(body: str) -> Path:
        path = tmp_path / "healthd.toml"
        if "[paths]" not in body:
            body = f'[paths]\nstate_dir = "{tmp_path / "state"}"\n' + body
        path.write_text(body)
        return path

    return write


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """Run ``healthd ARGS`` in-process; returns (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def cli_json(cli: Callable[..., tuple[int, str, str]]) -> Callable[..., tuple[int, dict[str, Any]]]:
    def run(*args: str) -> tuple[int, dict[str, Any]]:
        code, out, err = cli(*args)
        assert out, f"no output; stderr: {err}"
        return code, json.loads(out)

    return run
