"""``[policy] fail_passes`` with a state directory that cannot keep the count: a CRITICAL node is still taken out.

The daemon keeps the state it could not save and counts on from it; a one-shot pass
(the hook, ``check --once``) that finds the directory unwritable, or marked by an
earlier pass whose save failed, acts on a CRITICAL finding at once (healthd.cycle.policymemory).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Callable

import pytest
from healthd_testkit.checks import only_checks
from healthd_testkit.namespace import in_mount_namespace
from healthd_testkit.paths import fill

from healthd.cycle.engine import Engine
from healthd.cycle.pipeline import run_pass
from healthd.cycle.policymemory import UNSAVED, PolicyMemory, reach_critical
from healthd.model import CheckResult, Finding, PassResult, RunState, Status
from healthd.plan.state import PolicyState

MISSING = '[checks.mounts]\nexpect = [{ path = "/definitely-not-mounted" }]\n'
TWICE = f'[slurm]\nnode_name = "n1"\n[policy]\nfail_passes = 2\n{MISSING}{only_checks("mounts")}'


def _result(*findings: Finding) -> PassResult:
    return PassResult("n1", 0.0, 0.0, (CheckResult("mounts", RunState.RAN, findings, 0.0),))


def test_reach_critical_counts_a_critical_check_one_pass_short_and_leaves_the_rest() -> None:
    critical = Finding("mounts", Status.CRITICAL, "MOUNT_MISSING", "/x", "missing")
    warning = Finding("disks", Status.WARNING, "DISK_FULL", "/y", "full")
    own = Finding("healthd", Status.CRITICAL, "X", "", "")
    state = PolicyState(fail_streaks={"disks": 1})
    reached = reach_critical(state, _result(critical, warning, own), 3)
    assert reached.fail_streaks == {"mounts": 2, "disks": 1}
    assert reach_critical(PolicyState(fail_streaks={"mounts": 5}), _result(critical), 3).fail_streaks == {"mounts": 5}
    assert reach_critical(state, _result(warning), 3) is state


def test_memory_is_used_only_while_the_file_is_as_the_failed_pass_read_it() -> None:
    memory = PolicyMemory()
    kept = PolicyState(fail_streaks={"mounts": 1})
    assert memory.newer({}) is None
    memory.saved(kept, {}, ok=False)
    assert memory.newer({}) == kept, "nobody saved since: the kept state is newer"
    # Another process (the hook, healthd ack) saved the file since: the file is the newer one.
    assert memory.newer({"fail_streaks": {"mounts": 4}}) is None
    assert memory.newer({}) is None, "once dropped, it stays dropped"
    memory.saved(kept, {}, ok=False)
    memory.saved(kept, {}, ok=True)
    assert memory.newer({}) is None, "a pass that saved leaves nothing to keep"


def test_a_one_shot_pass_on_an_unusable_state_dir_takes_a_critical_node_out(
    write_config: Callable[..., Path], tmp_path: Path
) -> None:
    config = write_config(TWICE)
    (tmp_path / "state").write_text("a file where the state directory should be\n")
    outcome = run_pass(Engine.from_path(config))
    assert outcome.action.decision.action.value == "take_out_now", outcome.action.decision
    assert any("is not current (the state directory cannot be written)" in e for e in outcome.action.errors)


def test_a_writable_state_dir_still_waits_for_fail_passes(write_config: Callable[..., Path]) -> None:
    config = write_config(TWICE)
    first = run_pass(Engine.from_path(config))
    assert first.action.decision.action.value == "hold"
    assert "1 of 2 consecutive passes" in first.action.decision.explanation
    assert run_pass(Engine.from_path(config)).action.decision.action.value == "take_out_now"


def test_an_acknowledged_critical_is_not_counted_as_reached(write_config: Callable[..., Path], tmp_path: Path) -> None:
    """With the state marked unsaved, only what still counts after the acknowledgements may act at once."""
    from healthd.cli.main import main

    config = write_config(TWICE.replace("fail_passes = 2", "fail_passes = 3"))
    assert run_pass(Engine.from_path(config)).action.decision.action.value == "hold"
    assert main(["ack", "--all", "--config", str(config)]) == 0
    (tmp_path / "state" / UNSAVED).touch()
    outcome = run_pass(Engine.from_path(config))
    assert outcome.action.decision.action.value == "none", outcome.action.decision
    assert not any("is not current" in e for e in outcome.action.errors), outcome.action.errors
    assert json.loads((tmp_path / "state" / "policy.json").read_text())["fail_streaks"].get("mounts", 0) == 0


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare(1)")
def test_check_once_on_a_read_only_state_dir_takes_a_critical_node_out(
    write_config: Callable[..., Path], tmp_path: Path
) -> None:
    # The state directory bind-mounted read-only in a private mount namespace: root cannot write it either.
    config = write_config(TWICE)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "cycle.lock").touch(mode=0o600)
    check = f'{sys.executable} -m healthd check --once --json --config "{config}"'
    script = f'mount --bind "{state}" "{state}" && mount -o remount,bind,ro "{state}" && exec {check}'
    done = in_mount_namespace(script, expected=2)
    document = json.loads(done.stdout)
    errors = document["action"]["errors"]
    assert any("Read-only file system" in e and "policy.json" in e for e in errors), errors
    assert document["action"]["decision"] == "take_out_now", document["action"]
    assert not (state / "policy.json").exists()


def test_a_full_state_dir_still_counts_fail_passes_and_takes_the_node_out(
    write_config: Callable[..., Path], tmpfs: Callable[[str, str], Path]
) -> None:
    state = tmpfs("state", "size=64k,mode=0700")  # where write_config puts the state directory
    config = write_config(TWICE)
    daemon = Engine.from_path(config)
    (state / "cycle.lock").touch(mode=0o600)  # left by the passes before the filesystem filled up
    filler = fill(state)

    # The daemon: one process, one engine, pass after pass.
    first = run_pass(daemon)
    assert any("No space left on device" in e and "policy.json" in e for e in first.action.errors)
    assert first.action.decision.action.value == "hold", "the first pass waits as always"
    assert run_pass(daemon).action.decision.action.value == "take_out_now", "it counted on in memory"

    # A one-shot pass (the hook) in a process of its own: the first pass's failed save left the mark.
    assert (state / UNSAVED).exists()
    hook = run_pass(Engine.from_path(config))
    assert hook.action.decision.action.value == "take_out_now"
    assert any("an earlier pass could not save it" in e for e in hook.action.errors), hook.action.errors

    # Space again: the count is saved and the mark goes.
    filler.unlink()
    run_pass(Engine.from_path(config))
    assert not (state / UNSAVED).exists()
    assert json.loads((state / "policy.json").read_text())["fail_streaks"] == {"mounts": 2}
