"""The state directory unwritable, full, holding corrupt files, or writable by another user.

The daemon must keep checking, report the problem every pass, recover once the
directory is usable again, and never take a healthy node out because its own
bookkeeping failed (the node is checked against the real test cluster). A state
directory another user could have written is different: nothing in it can be
believed, so every entry point refuses with exit 78 and no pass acts on Slurm.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.checks import only_checks
from healthd_testkit.faults import FAULT, Harness
from healthd_testkit.paths import fill, run_healthd
from healthd_testkit.waiting import wait_for

from healthd.cli.main import main
from healthd.cycle.pipeline import run_pass
from healthd.model import Status
from healthd.store.trust import UntrustedPath


def _untouched(cluster: Any) -> None:
    assert cluster.state("node1") == "idle" and cluster.reason("node1") == ""


def _passes_with_problems(node: Harness, start_daemon: Callable[..., Any], what: str) -> Any:
    running = start_daemon(node.daemon())
    reports = node.wait_passes(3)
    for report in reports[:3]:
        assert any(what in p and "policy.json" in p for p in report.problems), report.problems
        assert any(what in p and "last-pass.json" in p for p in report.problems), report.problems
        assert report.actions == ()
    return running


def test_state_dir_that_is_a_file_is_reported_every_pass_and_recovers(
    cluster: Any, harness: Callable[..., Harness], start_daemon: Callable[..., Any]
) -> None:
    node = harness(FAULT, slurm_conf=cluster.conf)
    node.state_dir.write_text("not a directory\n")
    running = _passes_with_problems(node, start_daemon, "cannot write")
    _untouched(cluster)
    node.state_dir.unlink()
    wait_for(lambda: (node.state_dir / "last-pass.json").exists(), 10, "last-pass.json written")
    count = len(node.reports)
    node.wait_passes(count + 1)
    assert node.reports[-1].problems == ()
    assert running.stop() == 0
    _untouched(cluster)


def test_full_state_dir_is_reported_every_pass_and_recovers(
    cluster: Any, harness: Callable[..., Harness], start_daemon: Callable[..., Any], tmpfs: Callable[[str, str], Path]
) -> None:
    tiny_tmpfs = tmpfs("state", "size=64k,mode=0700")
    node = harness(FAULT, slurm_conf=cluster.conf)
    filler = fill(tiny_tmpfs)
    running = _passes_with_problems(node, start_daemon, "No space left on device")
    assert not [p for p in tiny_tmpfs.iterdir() if p.name.endswith(".tmp")]  # no half-written files left
    _untouched(cluster)
    filler.unlink()
    wait_for(lambda: (tiny_tmpfs / "last-pass.json").exists(), 10, "last-pass.json written")
    count = len(node.reports)
    node.wait_passes(count + 1)
    assert node.reports[-1].problems == ()
    assert running.stop() == 0


def test_corrupt_state_files_are_set_aside_and_drain_nothing(cluster: Any, harness: Callable[..., Harness]) -> None:
    node = harness(FAULT, slurm_conf=cluster.conf)
    node.state_dir.mkdir()
    for name in ("policy", "check-fault", "last-pass"):
        (node.state_dir / f"{name}.json").write_bytes(b'{"truncated": \xff')
    outcome = run_pass(node.engine())
    assert codes_of(outcome)["healthd/STATE_PROBLEM"][0] is Status.WARNING
    assert "fault/CHECK_ERROR" not in codes_of(outcome)
    assert any("policy.json" in e and "corrupt" in e for e in outcome.action.errors), outcome.action.errors
    aside = sorted(p.name.split(".json")[0] for p in node.state_dir.glob("*.json.corrupt-*"))
    assert aside == ["check-fault", "policy"]
    assert json.loads((node.state_dir / "last-pass.json").read_text())["schema_version"] == 1
    assert not outcome.action.applied and outcome.action.decision.action.value in ("none", "resume")
    _untouched(cluster)
    # The next pass is clean: nothing left to report.
    assert run_pass(node.engine()).exit_code == 0


def test_policy_state_of_the_wrong_shape_is_reported_not_fatal(cluster: Any, harness: Callable[..., Harness]) -> None:
    node = harness(FAULT, slurm_conf=cluster.conf)
    node.state_dir.mkdir()
    (node.state_dir / "policy.json").write_text(json.dumps({"fail_streak": "many", "pending": {"action": "explode"}}))
    outcome = run_pass(node.engine())
    assert outcome.exit_code == 0
    assert any("bad policy state" in e for e in outcome.action.errors), outcome.action.errors
    _untouched(cluster)


def test_status_with_a_corrupt_last_pass_says_so(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "last-pass.json").write_text('{"schema_version": 1, "checks": [')
    config = tmp_path / "healthd.toml"
    config.write_text(f'[paths]\nstate_dir = "{state}"\n[slurm]\nenabled = false\n')
    proc = run_healthd("status", "--json", "--config", str(config), timeout=30)
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr
    assert "last-pass.json" in proc.stdout + proc.stderr


def _plant(node: Harness, intruder: tuple[int, int]) -> None:
    """What a user who can write the state dir does: acknowledge the fault, and point cycle.lock at a victim."""
    node.state_dir.mkdir(exist_ok=True)
    node.state_dir.chmod(0o777)
    acks = node.state_dir / "acks.json"
    acks.write_text(json.dumps({"acks": [{"key": "fault/INJECTED/gpu0", "event": None, "at": 0, "by": "cli"}]}))
    os.chown(acks, *intruder)
    with contextlib.suppress(FileNotFoundError):
        (node.state_dir / "cycle.lock").unlink()
    (node.state_dir / "cycle.lock").symlink_to(node.root / "victim")
    os.lchown(node.state_dir / "cycle.lock", *intruder)


def test_an_untrusted_state_dir_never_acts_on_slurm(
    cluster: Any,
    harness: Callable[..., Harness],
    intruder: tuple[int, int],
    start_daemon: Callable[..., Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    node = harness(FAULT, slurm_conf=cluster.conf)
    node.faults(("CRITICAL", "INJECTED", "gpu0"))
    _plant(node, intruder)
    # The command line, with a real CRITICAL finding of a built-in check (a missing mount).
    config = node.root / "cli.toml"
    config.write_text(
        f'[paths]\nstate_dir = "{node.state_dir}"\n[slurm]\nconf = "{cluster.conf}"\nnode_name = "node1"\n'
        '[checks.mounts]\nexpect = [{ path = "/no/such/mount" }]\n' + only_checks("mounts")
    )
    for command in (["check", "--once"], ["check", "--once", "--json"], ["ack", "--all"]):
        assert main([*command, "--config", str(config)]) == 78
        assert f"refusing {node.state_dir}, which others could have written" in capsys.readouterr().err
    with pytest.raises(UntrustedPath):
        node.engine()
    running = start_daemon(node.daemon())
    running.thread.join(30)
    assert running.exit_code == [78] and node.reports == []
    _untouched(cluster)
    assert not (node.root / "victim").exists()
    # The control: the same fault in a trusted state dir takes node1 out, so a pass that acted would show.
    for entry in node.state_dir.iterdir():
        entry.unlink()
    node.state_dir.chmod(0o700)
    outcome = run_pass(node.engine())
    assert outcome.action.applied and cluster.state("node1") in ("down", "drained")


def test_a_state_dir_made_untrusted_under_a_running_daemon_stops_it_before_acting(
    cluster: Any, harness: Callable[..., Harness], intruder: tuple[int, int], start_daemon: Callable[..., Any]
) -> None:
    node = harness(FAULT, slurm_conf=cluster.conf)
    running = start_daemon(node.daemon())
    node.wait_passes(1)
    _plant(node, intruder)
    node.faults(("CRITICAL", "INJECTED", "gpu0"))
    running.thread.join(30)
    assert running.exit_code == [78]
    assert all(report.actions == () for report in node.reports)
    _untouched(cluster)
    assert not (node.root / "victim").exists()


def codes_of(outcome: Any) -> dict[str, tuple[Status, str]]:
    return {f"{f.check}/{f.code}": (f.status, f.subject) for f in outcome.result.findings}
