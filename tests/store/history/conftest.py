"""Builders for the history tests: passes of real model values, and a store in the test's own state directory."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional

import pytest

from healthd.model import CheckResult, DetailValue, Finding, PassResult, RunState, Status
from healthd.store.history import History

CHECKS = ("mounts", "services", "xid", "gpu", "infiniband", "pcie", "extra1", "extra2")


def _finding(
    check: str, code: str, subject: str, status: Status = Status.CRITICAL, message: str = "", **details: DetailValue
) -> Finding:
    return Finding(check, status, code, subject, message or f"{code} on {subject}", details)


def _make_pass(
    *findings: Finding, states: Optional[Mapping[str, RunState]] = None, checks: tuple[str, ...] = CHECKS
) -> PassResult:
    """A pass of ``checks``; each check ran (or is in the state ``states`` gives) and reports its findings."""
    given = states or {}
    results = tuple(
        CheckResult(name, given.get(name, RunState.RAN), tuple(f for f in findings if f.check == name), 0.01)
        for name in checks
    )
    return PassResult("node0001", 0.0, 0.1, results)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def store(state_dir: Path) -> Iterator[History]:
    with History.open(state_dir) as history:
        assert history.usable, history.problems
        yield history


@pytest.fixture
def finding() -> Callable[..., Finding]:
    """``finding(check, code, subject, status=CRITICAL, message="", **details)``."""
    return _finding


@pytest.fixture
def make_pass() -> Callable[..., PassResult]:
    """``make_pass(*findings, states={check: RunState}, checks=CHECKS)``."""
    return _make_pass
