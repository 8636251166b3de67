"""A state directory is one node's: the first pass names the node in ``node.json``; another node is refused (78)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Callable

import pytest
from healthd_testkit.checks import only_checks

import healthd.config.load
from healthd.cli.hook import hook_main
from healthd.config.load import sha256_hex
from healthd.cycle.daemonpass import DaemonClaim, daemon_document
from healthd.exitcodes import EX_CONFIG
from healthd.service.daemon import Daemon

CLI = Callable[..., tuple[int, str, str]]
BODY = '[slurm]\nnode_name = "{node}"\n' + only_checks("services")


@pytest.fixture
def shared(write_config: Callable[..., Path], tmp_path: Path) -> tuple[str, str, Path]:
    """Configs of node1 and node2 with one state directory; node1 has used it."""
    first = write_config(BODY.format(node="node1"))
    second = tmp_path / "node2.toml"
    second.write_text(first.read_text().replace('"node1"', '"node2"'))
    return str(first), str(second), tmp_path / "state"


def _refusal(state: Path) -> str:
    return f"it is node node1's state directory ({state / 'node.json'}), not this node's (node2)"


def test_the_first_pass_names_its_node_and_another_node_is_refused(shared: tuple[str, str, Path], cli: CLI) -> None:
    first, second, state = shared
    assert cli("check", "--once", "--config", first)[0] == 0
    assert json.loads((state / "node.json").read_text()) == {"node": "node1"}
    before = (state / "last-pass.json").read_bytes()
    code, out, err = cli("check", "--once", "--config", second)
    assert code == EX_CONFIG and out == ""
    assert f"refusing {state}: {_refusal(state)}" in err and "nothing was done" in err
    assert (state / "last-pass.json").read_bytes() == before, "nothing of node2's was saved there"
    code, out, err = cli("status", "--config", second)
    assert code == EX_CONFIG and _refusal(state) in err
    code, _, err = cli("ack", "--all", "--config", second)
    assert code == EX_CONFIG and _refusal(state) in err
    assert cli("check", "--once", "--config", first)[0] == 0, "its own node goes on as before"


def test_the_daemon_of_another_node_does_not_start(shared: tuple[str, str, Path], cli: CLI) -> None:
    first, second, state = shared
    assert cli("check", "--once", "--config", first)[0] == 0
    daemon = Daemon(Path(second))
    daemon.request_stop()  # were it to start, it would stop after its first pass: exit 0
    assert daemon.run() == EX_CONFIG
    assert not (state / "daemon.lock").exists()


def test_a_reload_that_renames_the_node_is_rejected_and_the_old_config_kept(
    shared: tuple[str, str, Path], cli: CLI
) -> None:
    """A SIGHUP after [slurm] node_name changed: refused at the reload, not by each later pass (the daemon stopping)."""
    from healthd.config.cache import load_checks
    from healthd.cycle.engine import Engine
    from healthd.store.trust import UntrustedPath

    first, second, state = shared
    assert cli("check", "--once", "--config", first)[0] == 0
    engine = Engine.from_path(Path(first))
    loaded, specs = load_checks(Path(second), specs=engine.specs)
    with pytest.raises(UntrustedPath, match=re.escape(_refusal(state))):
        engine.reconfigure(loaded, specs)
    assert engine.config.slurm.node_name == "node1", "the old config is kept"


def test_the_hook_never_reports_another_nodes_daemon_pass(
    shared: tuple[str, str, Path], cli: CLI, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, second, state = shared
    state.mkdir(mode=0o700)
    claim = DaemonClaim(state)  # node1's daemon, before any pass of it named the directory
    assert claim.acquire(5)
    try:
        document = {"node": "node1", "status": "OK", "exit_code": 0, "action": {"pending": False, "errors": []}}
        sha = sha256_hex(Path(second).read_bytes())  # even with node2's very config bytes
        claim.record(document, fresh_for=600, config_sha256=sha, dry_run=False, now=time.time())
        assert daemon_document(Path(second), dry_run=False) is None
        # The hook then runs a pass of its own, which names node2 as the directory's node.
        monkeypatch.setattr(healthd.config.load, "DEFAULT_CONFIG_PATH", Path(second))
        assert hook_main([]) == 0
        assert capsys.readouterr().out == "healthd: OK on node2\n", "its own pass, not the daemon's"
        assert json.loads((state / "node.json").read_text()) == {"node": "node2"}
    finally:
        claim.release()
