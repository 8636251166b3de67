"""Fixtures shared by the tests of the built-in checks."""

from __future__ import annotations

import json
import pwd
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from healthd_testkit.paths import REPO
from healthd_testkit.processes import Start, sleeping_copies, unprivileged_user

from healthd.cli.main import main


@pytest.fixture
def check_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], write_config: Callable[..., Path]
) -> Callable[[str, str], dict[str, Any]]:
    """``healthd check --once --json --only NAME`` under a config of the given body: that check's JSON."""
    monkeypatch.chdir(REPO)

    def run(name: str, body: str) -> dict[str, Any]:
        main(["check", "--once", "--json", "--only", name, "--config", str(write_config(body))])
        (check,) = [c for c in json.loads(capsys.readouterr().out)["checks"] if c["name"] == name]
        assert isinstance(check, dict)
        return check

    return run


@pytest.fixture
def check_outcome(check_once: Callable[[str, str], dict[str, Any]]) -> Callable[[str, str], tuple[str, set[str]]]:
    """As ``check_once``: the check's status and the codes of its findings."""

    def run(name: str, body: str) -> tuple[str, set[str]]:
        check = check_once(name, body)
        return check["status"], {f["code"] for f in check["findings"]}

    return run


@pytest.fixture(scope="session")
def user() -> pwd.struct_passwd:
    """A real unprivileged account (``healthd_testkit.processes``)."""
    return unprivileged_user()


@pytest.fixture
def start_process() -> Iterator[Start]:
    """Copies of sleep named like daemons, killed afterwards (``healthd_testkit.processes.sleeping_copies``)."""
    with sleeping_copies() as start:
        yield start
