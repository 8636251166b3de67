"""A pass that does not stand for the node (``--only``, a config other than the daemon's) never replaces the
node's last whole pass: ``healthd status`` shows the whole pass, the other one is kept as ``other-pass.json``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from healthd_testkit.checks import only_checks

from healthd.config.load import sha256_hex
from healthd.cycle.daemonpass import DaemonClaim

CLI = Callable[..., tuple[int, str, str]]
MISSING = '[checks.mounts]\nexpect = [{ path = "/definitely-not-mounted" }]\n'
# mounts fails; services has nothing to expect and passes.
BODY = f'[slurm]\nnode_name = "n1"\n{MISSING}{only_checks("mounts", "services")}'


def _saved(state: Path, name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((state / f"{name}.json").read_text())
    return document


def test_a_partial_pass_leaves_status_on_the_last_whole_pass(
    write_config: Callable[..., Path], cli: CLI, tmp_path: Path
) -> None:
    config = str(write_config(BODY))
    state = tmp_path / "state"
    assert cli("check", "--once", "--config", config)[0] == 2
    assert cli("check", "--once", "--dry-run", "--only", "services", "--config", config)[0] == 0
    assert cli("status", "--config", config)[0] == 2, "status still shows the whole pass: CRITICAL from mounts"
    assert {"mounts", "services"} < {c["name"] for c in _saved(state, "last-pass")["checks"]}
    aside = _saved(state, "other-pass")
    assert aside["status"] == "OK" and [c["name"] for c in aside["checks"]] == ["services"]


def test_a_whole_dry_run_pass_is_what_status_shows_marked_as_a_dry_run(
    write_config: Callable[..., Path], cli: CLI
) -> None:
    config = str(write_config(BODY))
    assert cli("check", "--once", "--config", config)[0] == 2
    write_config(BODY.replace(MISSING, ""))  # the mount is no longer expected: the node is healthy
    assert cli("check", "--once", "--dry-run", "--config", config)[0] == 0
    code, out, _ = cli("status", "--config", config)
    assert code == 0 and "dry run" in out.splitlines()[-1], out


def test_a_pass_with_another_config_than_the_running_daemons_is_set_aside(
    write_config: Callable[..., Path], cli: CLI, tmp_path: Path
) -> None:
    config = write_config(BODY)
    state = tmp_path / "state"
    assert cli("check", "--once", "--config", str(config))[0] == 2
    whole = _saved(state, "last-pass")
    claim = DaemonClaim(state)  # what `healthd run` holds, with its last pass recorded
    assert claim.acquire(5)
    try:
        claim.record(
            whole, fresh_for=600, config_sha256=sha256_hex(config.read_bytes()), dry_run=False, now=time.time()
        )
        other = tmp_path / "experiment.toml"
        other.write_text(config.read_text().replace(MISSING, ""))
        assert cli("check", "--once", "--config", str(other))[0] == 0
        assert _saved(state, "last-pass") == whole, "the daemon's config is the node's"
        assert _saved(state, "other-pass")["status"] == "OK"
        # The daemon's own config is the node's: its pass replaces the last one.
        before = (state / "last-pass.json").stat().st_ino
        assert cli("check", "--once", "--config", str(config))[0] == 2
        assert (state / "last-pass.json").stat().st_ino != before
        assert _saved(state, "other-pass")["status"] == "OK"
    finally:
        claim.release()


def test_ack_takes_the_findings_of_the_latest_pass_partial_or_not(write_config: Callable[..., Path], cli: CLI) -> None:
    config = str(write_config(BODY))
    assert cli("check", "--once", "--only", "services", "--config", config)[0] == 0
    assert cli("check", "--once", "--only", "mounts", "--config", config)[0] == 2
    code, out, err = cli("ack", "MOUNT_MISSING", "--config", config)
    assert code == 0 and out == "acknowledged CRITICAL mounts MOUNT_MISSING /definitely-not-mounted\n", err
