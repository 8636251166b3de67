"""``healthd-hook`` beside a running daemon: it reports the daemon's fresh pass, and otherwise checks for itself."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from healthd_testkit.checks import only_checks
from healthd_testkit.paths import REPO

import healthd.config.load
from healthd.cli.hook import hook_main
from healthd.config.load import sha256_hex
from healthd.cycle.daemonpass import FORMAT, DaemonClaim, usable

SHA = "ab" * 32
NOW = 1_800_000_000.0
NODE = "node1"


def _record(**changes: Any) -> dict[str, Any]:
    document = {
        "status": "OK",
        "exit_code": 0,
        "node": NODE,
        "checks": [],
        "action": {"pending": False, "errors": [], "decision": "none"},
    }
    record = {
        "format": FORMAT,
        "token": "t" * 32,
        "finished_at": NOW - 10,
        "fresh_for": 340.0,
        "config_sha256": SHA,
        "dry_run": False,
        "document": document,
    }
    record.update(changes)
    return record


def test_a_fresh_settled_pass_of_the_running_daemon_is_used() -> None:
    assert usable(_record(), "t" * 32, SHA, node=NODE, dry_run=False, now=NOW) is None
    # A dry-run hook may report a dry-run daemon's pass; a hook that acts may not.
    assert usable(_record(dry_run=True), "t" * 32, SHA, node=NODE, dry_run=True, now=NOW) is None


@pytest.mark.parametrize(
    ("record", "token", "dry_run", "why"),
    [
        (_record(), None, False, "no daemon is running"),
        (_record(), "u" * 32, False, "not the running daemon's"),
        (_record(finished_at=NOW - 341), "t" * 32, False, "341s old"),
        (_record(finished_at=NOW + 60), "t" * 32, False, "-60s old"),
        (_record(config_sha256="cd" * 32), "t" * 32, False, "another config"),
        (_record(dry_run=True), "t" * 32, False, "dry run"),
        (_record(format=FORMAT + 1), "t" * 32, False, "not a daemon pass record"),
        (_record(finished_at="yesterday"), "t" * 32, False, "no time"),
        # A state directory shared with another node: its daemon's pass is not this node's (docs/service.md).
        (_record(document={**_record()["document"], "node": "node2"}), "t" * 32, False, "not a pass of this node"),
    ],
)
def test_anything_else_means_a_full_pass(record: dict[str, Any], token: Any, dry_run: bool, why: str) -> None:
    reason = usable(record, token, SHA, node=NODE, dry_run=dry_run, now=NOW)
    assert reason is not None and why in reason


@pytest.mark.parametrize(
    "document",
    [
        {"node": NODE, "status": "OK", "exit_code": 0, "action": {"pending": True, "errors": []}},
        {"node": NODE, "status": "OK", "exit_code": 0, "action": {"pending": False, "errors": ["scontrol timed out"]}},
        {"node": NODE, "status": "OK", "exit_code": 0},
        {"node": NODE, "status": "OK", "exit_code": 2, "action": {"pending": False, "errors": []}},
        {"node": NODE, "status": "FINE", "exit_code": 0, "action": {"pending": False, "errors": []}},
        ["not", "a", "document"],
    ],
)
def test_an_unsettled_or_malformed_daemon_pass_is_not_used(document: Any) -> None:
    assert usable(_record(document=document), "t" * 32, SHA, node=NODE, dry_run=False, now=NOW) is not None


# The hook with the default config path pointed at the test's config; prints its code and what it imported.
_HOOK_IMPORTS = """
import pathlib, sys
import healthd.config.load
healthd.config.load.DEFAULT_CONFIG_PATH = pathlib.Path(sys.argv[1])
from healthd.cli.hook import hook_main
code = hook_main([])
heavy = ("argparse", "pydantic", "healthd.config.models", "healthd.cycle.engine", "healthd.cycle.pipeline",
         "healthd_checks", "logging", "dataclasses", "socket", *sys.argv[2:])
print(code, sorted(m for m in heavy if m in sys.modules))
"""


def test_hook_from_the_daemons_pass_imports_nothing_of_the_pass_machinery(write_config: Callable[..., Path]) -> None:
    """This process holds the daemon's lock and records a fresh pass, as ``healthd run`` does after each pass."""
    config = write_config('[slurm]\nnode_name = "node1"\n')
    claim = DaemonClaim(config.parent / "state")
    assert claim.acquire(5)
    try:
        document = _record()["document"]
        claim.record(
            document, fresh_for=600, config_sha256=sha256_hex(config.read_bytes()), dry_run=False, now=time.time()
        )
        # Without site (-S), whose editable-install finder imports importlib in every process. (The config's
        # TOML reader, tomllib, brings typing, datetime and contextlib: docs/configuration.md says why it is kept.)
        probe = subprocess.run(
            [sys.executable, "-S", "-c", _HOOK_IMPORTS, str(config), "importlib"],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        claim.release()
    assert probe.stdout.splitlines() == ["healthd: OK on node1 (daemon's pass)", "0 []"], probe.stderr


@pytest.fixture
def fake_service(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A root process named ``hdtestsvc``: the service the config expects, until the test kills it."""
    binary = tmp_path / "hdtestsvc"
    shutil.copy2("/bin/sleep", binary)
    process = subprocess.Popen([str(binary), "600"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)


def test_hook_reports_the_daemons_pass_without_checking_then_checks_once_the_daemon_stops(
    cluster: Any,
    write_config: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    fake_service: subprocess.Popen[bytes],
) -> None:
    body = (
        '[slurm]\nnode_name = "node1"\n[daemon]\ninterval = 600\nsplay = false\n'
        '[checks.services]\nmanager = "process"\nexpect = ["hdtest"]\nprocess_names = { hdtest = ["hdtestsvc"] }\n'
        + only_checks("services")
    )
    config = write_config(body, slurm_cluster=cluster.conf)
    monkeypatch.setattr(healthd.config.load, "DEFAULT_CONFIG_PATH", config)  # slurmd's hook reads the default
    record = config.parent / "state" / "daemon-pass.json"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "healthd", "run", "--config", str(config)],
        env={**os.environ, "SLURM_CONF": str(cluster.conf)},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait(record.exists, 60, "the daemon's first pass")
        assert cluster.state("node1") == "idle"
        fake_service.kill()  # from now on the services check, if it ran, would take node1 out

        assert hook_main([]) == 0
        assert capsys.readouterr().out == "healthd: OK on node1 (daemon's pass)\n"
        assert cluster.state("node1") == "idle"
        # As slurmd runs it, in a process of its own: nothing of the pass machinery is imported.
        probe = subprocess.run(
            [sys.executable, "-c", _HOOK_IMPORTS, str(config)], capture_output=True, text=True, timeout=60, check=False
        )
        assert probe.stdout.splitlines() == ["healthd: OK on node1 (daemon's pass)", "0 []"], probe.stderr

        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0
        # The record is still fresh, but its daemon is gone: the hook checks for itself and acts.
        assert hook_main([]) == 2
        assert "CRITICAL on node1: services/SERVICE_INACTIVE hdtest" in capsys.readouterr().out
        cluster.wait_state("node1", lambda state: "DRAIN" in state, 30, "drained by the hook")
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
