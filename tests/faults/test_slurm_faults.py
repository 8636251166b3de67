"""Slurm unreachable in every way: scontrol missing, failing, hanging, slurmctld down and back.

All against the real test cluster and the real scontrol. In each case a real
fault (an injected CRITICAL finding) calls for taking node1 out while Slurm
cannot be told; the action must be kept pending in the ``policy`` state file,
nothing may crash, and the action must be applied once Slurm answers again.
A pending action whose fault has cleared in the meantime must never be applied.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable

from healthd_testkit.faults import FAULT, Harness
from healthd_testkit.waiting import wait_for

from healthd.cycle.outcome import ActionOutcome
from healthd.cycle.pipeline import PassTools, run_pass
from healthd.plan.state import Action


def _pending(node: Harness) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((node.state_dir / "policy.json").read_text())
    pending: dict[str, Any] = document["pending"]
    return pending


def _cycle(node: Harness, now: float) -> Any:
    return run_pass(node.engine(), tools=PassTools(clock=lambda: now))


def _fails_then_applies(node: Harness, cluster: Any, expected_error: str, heal: Callable[[], None]) -> None:
    now = time.time()
    node.faults(("CRITICAL", "INJECTED", "gpu0"))
    first = _cycle(node, now)
    assert first.exit_code == 2
    assert first.action.pending and not first.action.applied
    assert any(expected_error in e for e in first.action.errors), first.action.errors
    assert _pending(node)["action"] == Action.TAKE_OUT_NOW.value
    # Inside the backoff nothing is tried and nothing is forgotten.
    second = _cycle(node, now + 1)
    assert second.action.pending and _pending(node)["attempts"] == 1
    assert cluster.state("node1") == "idle"
    heal()
    third = _cycle(node, now + 400)
    assert third.action.applied and not third.action.pending
    assert cluster.state("node1") in ("down", "drained")
    assert cluster.reason("node1").startswith("healthd: INJECTED gpu0")
    assert json.loads((node.state_dir / "policy.json").read_text())["pending"] is None


def test_scontrol_missing_keeps_the_action_pending(cluster: Any, cut_off: Harness, tmp_path: Path) -> None:
    def heal() -> None:
        cut_off.slurm_extra = ""

    _fails_then_applies(cut_off, cluster, f"sinfo not found in {tmp_path / 'bin'}", heal)


def test_scontrol_failing_keeps_the_action_pending(
    cluster: Any, harness: Callable[..., Harness], tmp_path: Path, host_guard: Any
) -> None:
    broken = tmp_path / "broken-slurm.conf"
    broken.write_text(cluster.conf.read_text() + "NoSuchKey=1\n")
    host_guard.allow_slurm_conf(broken)  # the test cluster's own conf, made unreadable to scontrol
    node = harness(FAULT, slurm_conf=broken)

    def heal() -> None:
        node.slurm_conf = cluster.conf

    _fails_then_applies(node, cluster, "Unable to process configuration file", heal)


def test_scontrol_hanging_times_out_and_the_action_is_applied_later(
    cluster: Any, harness: Callable[..., Harness]
) -> None:
    node = harness(FAULT, slurm_conf=cluster.conf, slurm_extra="reconcile_interval = 0")
    ctld = cluster.procs["slurmctld"]
    os.kill(ctld.pid, signal.SIGSTOP)  # slurmctld stops answering; real scontrol waits for it
    try:
        started = time.monotonic()
        now = time.time()
        node.faults(("CRITICAL", "INJECTED", "gpu0"))
        outcome = _cycle(node, now)
        assert time.monotonic() - started < 3 + 5  # [slurm].timeout = 3, plus the pass
        assert outcome.action.pending
        assert any("timed out after 3s" in e for e in outcome.action.errors), outcome.action.errors
    finally:
        os.kill(ctld.pid, signal.SIGCONT)
    cluster.wait(lambda: cluster.run("scontrol", "ping", check=False).returncode == 0, 20, "slurmctld answering")
    applied = _cycle(node, now + 400)
    assert applied.action.applied
    assert cluster.state("node1") in ("down", "drained")


def test_pending_action_is_dropped_when_the_fault_clears_before_slurm_returns(cluster: Any, cut_off: Harness) -> None:
    node = cut_off
    now = time.time()
    node.faults(("CRITICAL", "INJECTED", "gpu0"))
    assert _cycle(node, now).action.pending
    node.faults()
    node.slurm_extra = ""
    healthy = _cycle(node, now + 400)
    assert healthy.exit_code == 0 and not healthy.action.applied and not healthy.action.pending
    assert json.loads((node.state_dir / "policy.json").read_text())["pending"] is None
    assert cluster.state("node1") == "idle" and cluster.reason("node1") == ""


def test_slurmctld_down_and_back_the_daemon_applies_the_pending_action(
    cluster: Any, harness: Callable[..., Harness], start_daemon: Callable[..., Any]
) -> None:
    node = harness(FAULT, slurm_conf=cluster.conf)
    cluster.stop("slurmctld")
    try:
        node.faults(("CRITICAL", "INJECTED", "gpu0"))
        running = start_daemon(node.daemon())
        reports = node.wait_passes(2)
        assert all(r.actions[0].outcome is ActionOutcome.PENDING for r in reports[:2]), [r.actions for r in reports]
        assert _pending(node)["action"] == Action.TAKE_OUT_NOW.value
        assert cluster.state("node1") == ""  # nobody answers
    finally:
        cluster.start_ctld()
    # The first retry comes 10 s after the failure (the backoff); the daemon keeps passing meanwhile.

    def applied() -> bool:
        return any(a.outcome is ActionOutcome.TAKEN for r in node.reports for a in r.actions)

    wait_for(applied, 40, "the action applied")
    assert cluster.state("node1") in ("down", "drained")
    assert cluster.reason("node1").startswith("healthd: INJECTED gpu0")
    assert running.thread.is_alive()
    assert running.stop() == 0
