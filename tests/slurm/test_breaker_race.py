"""The circuit breaker when every node sees the same fault at the same moment, on the real cluster.

A shared filesystem hangs, a restart wave hits the daemons, every hook fires on the
same HealthCheckInterval tick: all nodes read Slurm and drain in the same second.
The limit (here 1 of the 3-node partition) must hold in every trial, no job may be
killed on a node that loses its place, and once the fault clears no node stays out.
"""

from __future__ import annotations

import random
import shutil
import threading
import time
from typing import Any, Optional

import pytest

from healthd.cycle.outcome import PassOutcome
from healthd.slurm.adapter import SlurmClient, SlurmError
from healthd.store.history import History
from healthd.store.historyschema import Kind

pytestmark = pytest.mark.slurm

NODES = ("node1", "node2", "node3")
MOUNT = ("CRITICAL", "MOUNT_MISSING", "/scratch")
# 0.34 of 3 nodes: one node may be out. A short settle keeps 20+ trials quick; it must exceed 1 s.
POLICY = "max_out_fraction = 0.34\nbreaker_settle = 1.3"
TRIALS = 24


def _healthd_out(cluster: Any) -> list[str]:
    return [n for n in NODES if cluster.reason(n).startswith("healthd: ")]


def _watch_downs(cluster: Any, stop: threading.Event, seen: list[set[str]]) -> None:
    """Record every set of nodes that sinfo shows DOWN while the trial runs (jobs killed there)."""
    while not stop.is_set():
        out = cluster.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout.split("\n")
        seen.append({line.split()[0] for line in out if line.strip() and line.split()[1].startswith("down")})
        time.sleep(0.1)


def _simultaneous(harnesses: list[Any], delays: list[float]) -> list[PassOutcome]:
    barrier = threading.Barrier(len(harnesses))
    outcomes: list[Optional[PassOutcome]] = [None] * len(harnesses)

    def run(index: int) -> None:
        barrier.wait()
        time.sleep(delays[index])
        outcomes[index] = harnesses[index].cycle()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(harnesses))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert all(o is not None for o in outcomes), "a pass did not finish"
    return [o for o in outcomes if o is not None]


def test_the_limit_holds_when_every_node_fails_at_once(cluster: Any, healthd_on: Any) -> None:
    rng = random.Random(20261124)
    harnesses = [healthd_on(n, policy=POLICY) for n in NODES]
    for trial in range(TRIALS):
        for hd in harnesses:
            shutil.rmtree(hd.state_dir, ignore_errors=True)
            hd.faults(MOUNT)
        # Most trials start all passes in the same instant; some stagger them so a later
        # pass's first read can already see an earlier drain, or land inside the settle time.
        delays = [0.0] * 3 if trial % 3 else [rng.choice([0.0, 0.2, 0.7, 1.5]) for _ in NODES]
        jobs = {n: cluster.submit(n) for n in NODES} if trial % 8 == 0 else {}
        stop, downs = threading.Event(), []  # type: ignore[var-annotated]
        watcher = threading.Thread(target=_watch_downs, args=(cluster, stop, downs))
        watcher.start()
        try:
            outcomes = _simultaneous(harnesses, delays)
        finally:
            stop.set()
            watcher.join()
        context = f"trial {trial}, delays {delays}"

        out = _healthd_out(cluster)
        assert len(out) == 1, f"{context}: healthd holds {out} out; the limit is 1"
        applied = [o.result.node for o in outcomes if o.action.applied]
        held = [o.result.node for o in outcomes if o.action.held]
        assert applied == out, f"{context}: applied {applied}, out {out}"
        assert sorted(held) == sorted(set(NODES) - set(out)), f"{context}: held {held}"
        for outcome in outcomes:
            if outcome.action.held:
                codes = [f.code for f in outcome.result.findings if f.check == "policy"]
                assert codes == ["DRAIN_HELD"], f"{context}: {outcome.result.node} reported {codes}"
        assert max((len(d) for d in downs), default=0) <= 1, f"{context}: DOWN at once: {max(downs, key=len)}"
        for node, job in jobs.items():
            expected = "PENDING" if node in out else "RUNNING"
            assert cluster.job_state(job) == expected, f"{context}: job on {node}"
        for node in set(NODES) - set(out):
            assert cluster.state(node) in ("idle", "allocated", "mixed"), f"{context}: {node} is {cluster.state(node)}"

        # The fault clears everywhere: the node that went out comes back, nobody stays drained.
        for hd in harnesses:
            hd.faults()
        for hd in harnesses:
            hd.cycle()
        assert _healthd_out(cluster) == [], f"{context}: still out after the fault cleared"
        cluster.reset()


class _ConfirmFails(SlurmClient):
    """The confirming read (a partition read after the drain) fails, as under an overloaded slurmctld."""

    def partitions(self, names: tuple[str, ...]) -> list[Any]:
        if any(call[0] == "update" and "State=DRAIN" in call for call in self.calls):
            raise SlurmError("`sinfo -p batch` timed out after 8s")
        return super().partitions(names)


def test_a_drain_that_cannot_be_confirmed_is_undone(cluster: Any, healthd_on: Any) -> None:
    job = cluster.submit("node2")
    hd = healthd_on("node2", policy=POLICY)
    hd.faults(MOUNT)
    outcome = hd.cycle(client=_ConfirmFails(hd.engine().config.slurm))
    assert outcome.action.held and not outcome.action.applied
    assert "could not confirm" in outcome.action.decision.explanation
    assert [f.code for f in outcome.result.findings if f.check == "policy"] == ["DRAIN_HELD"]
    assert not cluster.reason("node2").startswith("healthd: ")
    assert cluster.state("node2") == "allocated" and cluster.job_state(job) == "RUNNING"


def test_an_unconfirmed_drain_is_confirmed_by_the_next_pass(cluster: Any, healthd_on: Any) -> None:
    """A pass killed between the drain and its confirmation: the next pass finishes the job."""
    other = healthd_on("node1", policy=POLICY)
    other.faults(MOUNT)
    assert other.cycle().action.applied
    hd = healthd_on("node3", policy=POLICY)
    hd.faults(MOUNT)
    # What the killed pass left behind: its drain in Slurm, an unconfirmed take-out in its state.
    cluster.run("scontrol", "update", "NodeName=node3", "State=DRAIN", "Reason=healthd: MOUNT_MISSING /scratch")
    hd.state_dir.mkdir(parents=True, exist_ok=True)
    (hd.state_dir / "policy.json").write_text('{"unconfirmed": true}')
    outcome = hd.cycle()
    assert outcome.action.held, outcome.action
    assert "node3 drained after 1 other(s)" in outcome.action.decision.explanation
    assert not cluster.reason("node3").startswith("healthd: ")
    assert _healthd_out(cluster) == ["node1"]


def test_actions_and_holds_are_in_the_node_history(cluster: Any, healthd_on: Any) -> None:
    first, second = healthd_on("node1", policy=POLICY), healthd_on("node2", policy=POLICY)
    for hd in (first, second):
        hd.faults(MOUNT)
    assert first.cycle().action.applied
    assert second.cycle().action.held
    for hd, outcome in ((first, "applied"), (second, "held")):
        with History.open(hd.state_dir) as history:
            actions = list(history.events(since=0.0, kinds=(Kind.ACTION,)))
        assert [(e.code, e.status) for e in actions] == [("take_out_now", outcome)], hd.node
        assert actions[0].subject == hd.node
