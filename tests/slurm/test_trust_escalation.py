"""Escalation and the circuit breaker against what users and shared services do, on the real cluster.

A user can fill a node-local filesystem as often as they like, and buggy jobs can make
the jobs check suspect a GPU: neither is a hardware fault, so neither may send a node to
repair (docs/escalation.md). A shared mount lost on every node at once is one fault of
the fleet, not a repeat on each node. A node waiting for hardware work must not fill the
circuit breaker's budget for ever: the breaker limits a wave of take-outs within
``[policy].breaker_window`` (docs/policy.md).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from healthd_testkit.faults import builtin

from healthd.cycle.outcome import PassOutcome
from healthd.cycle.pipeline import run_pass
from healthd.store.history import History
from healthd.store.historyschema import Kind

pytestmark = pytest.mark.slurm

NODES = ("node1", "node2", "node3")
# 0.34 of the 3-node partition: one node may be out at once.
ONE_OUT = "max_out_fraction = 0.34\nbreaker_settle = 1.3"


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A node-local world-writable tmpfs (mode 1777, 1 MiB) that any user may fill; unmounted after the test.

    Mounted under a directory of its own that every user can reach (pytest's own
    temporary directory is closed to them).
    """
    parent = Path(tempfile.mkdtemp(prefix="healthd-scratch-"))
    parent.chmod(0o755)
    target = parent / "scratch"
    target.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=1777", "tmpfs", str(target)], check=True)
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)
        target.rmdir()
        parent.rmdir()


def _as_user(account: tuple[int, int], *argv: str) -> subprocess.CompletedProcess[str]:
    uid, gid = account
    return subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *argv],
        capture_output=True,
        text=True,
        check=False,
    )


def _mounts_pass(hd: Any, expect: str, extra: str = "") -> PassOutcome:
    """One pass of the real mounts check (and the fault check) on ``hd``'s node."""
    table = f"[checks.mounts]\nexpect = [{expect}]\ninclude_root = false\n{extra}"
    return run_pass(hd.engine(table, checks=builtin("mounts")))


def _on_repair(node: str, tmp_path: Path) -> tuple[str, Path]:
    """An ``on_repair`` ticketing hook that records each call, and the config lines that set it."""
    tickets = tmp_path / f"{node}-tickets"
    hook = tmp_path / f"{node}-ticket.sh"
    hook.write_text(f"#!/bin/sh\nexec /bin/cat >> {tickets}\n")
    hook.chmod(stat.S_IRWXU)
    return f'[remediation]\non_repair = "{hook}"\n', tickets


def _add_config(hd: Any, text: str) -> None:
    """``text`` appended to ``hd``'s config for its every pass."""
    base = hd.config_text()
    hd.config_text = lambda node_name=True: base + text


def _repair(hd: Any) -> Any:
    path = hd.state_dir / "policy.json"
    return json.loads(path.read_text()).get("repair") if path.exists() else None


def test_a_user_filling_a_node_local_filesystem_never_sends_the_node_to_repair(
    cluster: Any, healthd_on: Any, scratch: Path, intruder: tuple[int, int], tmp_path: Path
) -> None:
    hd = healthd_on("node2")
    hook, tickets = _on_repair(hd.node, tmp_path)
    expect = f'{{ path = "{scratch}" }}'
    for round_ in range(1, 4):
        filled = _as_user(intruder, "dd", "if=/dev/zero", f"of={scratch}/mine", "bs=4k")
        assert "No space left" in filled.stderr, filled.stderr
        assert (scratch / "mine").stat().st_uid == intruder[0], "the user's own file fills it"
        out = _mounts_pass(hd, expect, hook)
        assert out.action.decision.reason == f"healthd: MOUNT_SPACE_LOW {scratch}", (round_, out.action)
        cluster.wait(lambda: cluster.state("node2") == "drained", 20, "node2 drained for the full filesystem")
        assert not cluster.reason("node2").startswith("healthd: REPAIR"), round_
        assert _as_user(intruder, "rm", f"{scratch}/mine").returncode == 0
        clean = _mounts_pass(hd, expect, hook)
        assert clean.action.decision.action.value == "resume", (round_, clean.action)
        cluster.wait(lambda: cluster.state("node2") == "idle", 20, "node2 back once the user freed the space")
    assert _repair(hd) is None
    assert not tickets.exists(), "no ticket for what a user did"


def test_buggy_jobs_and_administrator_resumes_never_send_the_node_to_repair(
    cluster: Any, healthd_on: Any, tmp_path: Path
) -> None:
    """APP_XID_SUSPECT (the jobs check) is the jobs' doing until proved otherwise: it never escalates.

    The fault check reports the jobs check's code, a new event for each suspicion as the
    jobs check makes one for each new job's Xid; when the jobs check suspects a GPU, with
    real users' jobs, is tests/slurm/test_jobs.py's to test. Before, the third suspicion
    (five jobs, two resumes) sent the node to repair.
    """
    hd = healthd_on("node3")
    hook, tickets = _on_repair(hd.node, tmp_path)
    _add_config(hd, hook)
    for round_ in range(1, 4):
        hd.faults(
            {
                "status": "WARNING",
                "code": "APP_XID_SUSPECT",
                "subject": "0000:3b:00",
                "details": {"event": f"jobs-{round_}", "uuid": "GPU-aaaa"},
            }
        )
        out = hd.cycle()
        assert out.action.decision.reason == "healthd: APP_XID_SUSPECT 0000:3b:00", (round_, out.action)
        cluster.wait(lambda: cluster.state("node3") == "drained", 20, "node3 drained for the suspect GPU")
        # The administrator looked, found the GPU healthy and put the node back.
        cluster.run("scontrol", "update", "NodeName=node3", "State=RESUME")
        cluster.wait(lambda: cluster.state("node3") == "idle", 20, "node3 resumed by the administrator")
        assert hd.cycle().action.decision.action.value == "none", round_
    assert _repair(hd) is None
    assert not tickets.exists(), "no ticket for what jobs did"


def _lose_and_restore(mount: Path, lose: bool) -> None:
    if lose:
        subprocess.run(["umount", str(mount)], check=True)
    else:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)


def test_a_shared_mount_flapping_on_every_node_sends_none_to_repair(
    cluster: Any, healthd_on: Any, scratch: Path, tmp_path: Path
) -> None:
    """The mount table is the host's: one umount is the shared filesystem lost on all three nodes at once."""
    harnesses = [healthd_on(n, policy=ONE_OUT) for n in NODES]
    hooks = [_on_repair(hd.node, tmp_path) for hd in harnesses]
    expect = f'{{ path = "{scratch}" }}'
    extra = "probe_usage = false\n"
    for round_ in range(1, 4):
        _lose_and_restore(scratch, lose=True)
        outcomes = [_mounts_pass(hd, expect, extra + hook) for hd, (hook, _) in zip(harnesses, hooks)]
        out = [n for n in NODES if cluster.reason(n).startswith("healthd: ")]
        assert len(out) == 1, (round_, out)
        assert cluster.reason(out[0]).startswith(f"healthd: MOUNT_MISSING {scratch}"), cluster.reason(out[0])
        held = [o for o in outcomes if o.action.decision.action.value == "hold"]
        assert len(held) == 2, [o.action for o in outcomes]
        _lose_and_restore(scratch, lose=False)
        for hd, (hook, _) in zip(harnesses, hooks):
            clean = _mounts_pass(hd, expect, extra + hook)
            assert clean.action.decision.action.value in ("resume", "none"), (round_, hd.node, clean.action)
            assert "in repair" not in clean.action.decision.explanation, (round_, hd.node, clean.action)
        cluster.wait(lambda: all(cluster.state(n) == "idle" for n in NODES), 20, "every node back")
    for hd, (_, tickets) in zip(harnesses, hooks):
        assert _repair(hd) is None, hd.node
        assert not tickets.exists(), f"no ticket on {hd.node} for a shared mount"
        saved = json.loads((hd.state_dir / "policy.json").read_text())
        assert saved.get("pending") is None, (hd.node, saved.get("pending"))


def _xid(hd: Any) -> dict[str, Any]:
    """Uncorrectable ECC (a hardware unit's fault, docs/escalation.md) on ``hd``'s node, its own GPU's."""
    return {"status": "CRITICAL", "code": "XID_48", "subject": "0000:3b:00", "details": {"uuid": f"GPU-{hd.node}"}}


@pytest.mark.parametrize(("fraction", "allowed"), [("0.34", 1), ("0.67", 2)])
def test_a_hardware_code_on_every_node_ten_waves_running_sends_none_to_repair(
    cluster: Any, healthd_on: Any, tmp_path: Path, fraction: str, allowed: int
) -> None:
    """XID_48 on every node of the 3-node partition, ten times over: a fault of the fleet, never a repair.

    node1's passes come first each wave, so it wins the breaker's place every time. At
    0.34 its take-out fills the budget (the other nodes are held, unseen in Slurm); at 0.67
    node2 goes out after it for the same code, and node1's provisional raise is taken back
    by its next read. Before, node1 counted its raise every wave and went to repair at the third.
    """
    harnesses = [healthd_on(n, policy=f"max_out_fraction = {fraction}\nbreaker_settle = 1.3") for n in NODES]
    hooks = [_on_repair(hd.node, tmp_path) for hd in harnesses]
    for hd, (hook, _) in zip(harnesses, hooks):
        _add_config(hd, hook)
    for wave in range(1, 11):
        for hd in harnesses:
            hd.faults(_xid(hd))
        taken = [hd.cycle() for hd in harnesses]
        assert [o.action.decision.reason for o in taken if o.action.applied] == ["healthd: XID_48 0000:3b:00"] * allowed
        out = [n for n in NODES if cluster.reason(n).startswith("healthd: ")]
        assert out == list(NODES[:allowed]), (wave, out)
        assert not any(cluster.reason(n).startswith("healthd: REPAIR") for n in NODES), wave
        for hd in harnesses:
            hd.faults()
        for hd in harnesses:
            clean = hd.cycle()
            assert clean.action.decision.action.value in ("resume", "none"), (wave, hd.node, clean.action)
            assert "in repair" not in clean.action.decision.explanation, (wave, hd.node)
        cluster.wait(lambda: all(cluster.state(n) == "idle" for n in NODES), 20, "every node back")
    for hd, (_, tickets) in zip(harnesses, hooks):
        assert _repair(hd) is None, hd.node
        assert not tickets.exists(), f"no ticket on {hd.node} for a shared fault"
        with History.open(hd.state_dir) as history:
            events = history.events(since=0.0, kinds=(Kind.RAISED, Kind.UNCOUNTED))
            kinds = [e.kind for e in events if e.code == "XID_48"]
        assert kinds.count(Kind.RAISED) == kinds.count(Kind.UNCOUNTED) == 10, (hd.node, kinds)


def test_a_node_in_repair_holds_the_breaker_only_for_its_window(cluster: Any, healthd_on: Any) -> None:
    """One REPAIR node fills the 3-node partition's budget only for ``breaker_window``; a sick node then goes out."""
    window = 30.0
    policy = f"{ONE_OUT}\nbreaker_window = {window:g}"
    # node1 goes to repair where the breaker has room for every node: at 0.34 its take-out alone
    # fills the budget, and a raise made then is a wave's, never counted (docs/escalation.md).
    repairing = healthd_on("node1", policy=f"max_out_fraction = 1.0\nbreaker_window = {window:g}")
    _add_config(repairing, "[escalation]\nrepeats = 1\n")
    repairing.faults({"status": "CRITICAL", "code": "XID_48", "subject": "0000:3b:00", "details": {"uuid": "GPU-a"}})
    sent = repairing.cycle()
    assert sent.action.decision.reason == "healthd: REPAIR XID_48 0000:3b:00 x1", sent.action
    out_since = time.time()
    cluster.wait(lambda: cluster.reason("node1").startswith("healthd: REPAIR"), 20, "node1 in repair")

    # Inside the window node1's take-out is part of a wave: the breaker holds the next node.
    early = healthd_on("node3", policy=policy)
    early.faults(("CRITICAL", "MOUNT_MISSING", "/shared"))
    assert early.cycle().action.decision.action.value == "hold"
    assert cluster.state("node3") == "idle"

    # Past it, node1 is a backlog of hardware work, not a wave: a sick node goes out.
    time.sleep(max(0.0, out_since + window + 2 - time.time()))
    sick = healthd_on("node2", policy=policy)
    sick.faults(("CRITICAL", "MOUNT_MISSING", "/shared"))
    job = cluster.submit("node2")
    taken = sick.cycle()
    assert taken.action.applied and taken.action.decision.reason == "healthd: MOUNT_MISSING /shared", taken.action
    assert cluster.reason("node2").startswith("healthd: MOUNT_MISSING /shared"), cluster.reason("node2")
    assert cluster.state("node2") in ("down", "drained", "idle+drain", "down+drain"), cluster.state("node2")
    assert cluster.job_state(job) != "RUNNING", "the sick node's job did not stay on it"
    assert cluster.reason("node1").startswith("healthd: REPAIR"), "node1 stays in repair"
    assert os.path.exists(sick.state_dir / "policy.json")
