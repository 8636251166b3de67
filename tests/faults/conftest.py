"""Fixtures of the fault-injection suite; the helpers live in ``healthd_testkit.faults``.

With pytest's importlib import mode test modules cannot import each other, so
this conftest loads kit.py once under a fixed module name for them.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from healthd_testkit import faults as kit

from healthd.checks.plugin import BrokenCheck, CheckSpec
from healthd.service.daemon import Daemon


@pytest.fixture
def start_daemon() -> Iterator[Callable[[Daemon], kit.DaemonThread]]:
    started: list[kit.DaemonThread] = []

    def start(daemon: Daemon) -> kit.DaemonThread:
        exit_code: list[int] = []
        thread = threading.Thread(target=lambda: exit_code.append(daemon.run()), name="test-daemon", daemon=True)
        thread.start()
        handle = kit.DaemonThread(daemon, thread, exit_code)
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.daemon.request_stop()
        handle.thread.join(10)


@pytest.fixture(autouse=True)
def _release_stalls(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    kit.STALL_RELEASE.clear()
    yield
    kit.STALL_RELEASE.set()


@pytest.fixture
def harness(tmp_path: Path) -> Callable[..., kit.Harness]:
    def make(*specs: CheckSpec[Any] | BrokenCheck, **kwargs: Any) -> kit.Harness:
        return kit.Harness(root=tmp_path, specs=list(specs), **kwargs)

    return make


@pytest.fixture
def cut_off(harness: Callable[..., kit.Harness], tmp_path: Path, cluster: Any) -> kit.Harness:
    """node1's harness on the test cluster with Slurm's commands missing (an empty ``bin_dir``).

    Clearing ``slurm_extra`` gives the commands back.
    """
    empty = tmp_path / "bin"
    empty.mkdir()
    return harness(kit.FAULT, slurm_conf=cluster.conf, slurm_extra=f'bin_dir = "{empty}"')
