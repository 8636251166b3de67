"""Fixtures of the fault-injection suite; the helpers live in ``healthd_testkit.faults``.

With pytest's importlib import mode test modules cannot import each other, so
this conftest loads kit.py once under a fixed module name for them.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from healthd_testkit import faults as kit

from healthd.daemon import Daemon
from healthd.plugin import BrokenCheck, CheckSpec


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


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory, host_guard: Any) -> Iterator[Any]:
    why = kit.cluster_module.missing_prerequisite()
    if why:
        print(f"skipping the Slurm fault tests: {why}")
        pytest.skip(why)
    cluster = kit.cluster_module.Cluster(
        root=tmp_path_factory.mktemp("faults-slurm"), healthd_bin=Path(sys.executable).with_name("healthd")
    )
    host_guard.allow_slurm_conf(cluster.conf)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.shutdown()


@pytest.fixture
def cluster(slurm_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The cluster with slurmctld running, no jobs and every node idle."""
    if "slurmctld" not in slurm_cluster.procs or slurm_cluster.procs["slurmctld"].poll() is not None:
        slurm_cluster.start_ctld()
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    slurm_cluster.reset()
    return slurm_cluster
