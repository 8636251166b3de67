"""Failure waves and escalation to repair: a hardware code shared by a whole partition never sends a node to repair.

The pure policy, pass after pass on every node of one partition, through the real
``plan``, ``execute`` and ``conclude``; slurmctld is faked at the adapter's boundary (a
node's drain, DOWN and resume; the breaker's partition read) and the node's history at
what escalation reads of it (``History.repeats``). The real cluster runs the same waves
in tests/slurm/test_trust_escalation.py.
"""

from __future__ import annotations

from typing import Any, Union

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from healthd.config.models import Config, EscalationSettings, PolicySettings, SlurmSettings
from healthd.cycle.execute import execute
from healthd.model import CheckResult, Finding, PassResult, RunState, Status
from healthd.plan.breaker import allowed_out, group_views
from healthd.plan.plan import Executed, Observed, Plan, Read, Situation, conclude, held_raises, plan
from healthd.plan.rules import PolicyRules
from healthd.plan.state import PolicyState, ProvisionalRaise
from healthd.plan.wave import budget_full, in_wave, still_provisional
from healthd.slurm.adapter import PartitionNodes, SlurmClient
from healthd.slurm.nodestate import NodeGroup, NodeInfo, PartitionView
from healthd.slurm.reasons import Reasons

SUBJECT = "0000:3b:00"
WAVES = 10


class _Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def advance(self, seconds: float) -> None:
        self.now += seconds


class _Controller(SlurmClient):
    """slurmctld for one partition, at the adapter's boundary: who is out, with which reason and stamp."""

    def __init__(self, size: int, clock: _Clock) -> None:
        super().__init__(SlurmSettings())
        self.size, self.clock = size, clock
        self.out: dict[str, tuple[str, float, bool]] = {}

    def drain(self, name: str, reason: str) -> None:
        down = self.out.get(name, ("", 0.0, False))[2]
        self.out[name] = (reason, float(int(self.clock.now)), down)

    def down(self, name: str, reason: str) -> None:
        self.out[name] = (reason, float(int(self.clock.now)), True)

    def resume(self, name: str) -> None:
        self.out.pop(name, None)

    def partitions(self, names: tuple[str, ...]) -> list[NodeGroup]:
        groups = [
            NodeGroup("batch", 1, "DOWN" if down else "IDLE", frozenset({"DRAIN"}), reason, stamp, name)
            for name, (reason, stamp, down) in sorted(self.out.items())
        ]
        spare = self.size - len(self.out)
        return [*groups, NodeGroup("batch", spare, "IDLE", frozenset(), "", None, "spare")] if spare else groups

    def partition_nodes(self) -> dict[str, PartitionNodes]:
        return {"batch": PartitionNodes(self.size, f"n[000-{self.size - 1:03d}]")}

    def read(self, name: str) -> NodeInfo:
        if name not in self.out:
            return NodeInfo(name, "IDLE", frozenset(), "", "", ("batch",))
        reason, stamp, down = self.out[name]
        return NodeInfo(name, "DOWN" if down else "IDLE", frozenset({"DRAIN"}), reason, "root", ("batch",), stamp)


class _Counts:
    """One node's history as escalation reads it: raises, and ``uncounted`` events taking one back each."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str, str, str]] = []  # (at, kind, unit, code)
        self.open: set[str] = set()

    def _net(self, unit: str, code: str, since: float = 0.0) -> int:
        return sum(
            {"raised": 1, "uncounted": -1}[kind]
            for at, kind, u, c in self.events
            if (u, c) == (unit, code) and at >= since
        )

    def repeats(self, findings: tuple[Finding, ...]) -> dict[str, tuple[str, int]]:
        return {
            f.key: (f.details["uuid"], self._net(f.details["uuid"], f.code) + (f.key not in self.open))
            for f in findings
        }

    def record(self, findings: tuple[Finding, ...], at: float, uncounted: dict[str, str]) -> None:
        for f in findings:
            if f.key not in self.open:
                self.events.append((at, "raised", f.details["uuid"], f.code))
                if f.key in uncounted:
                    self.events.append((at, "uncounted", f.details["uuid"], f.code))
        self.open = {f.key for f in findings}

    def take_back(self, raised: ProvisionalRaise, at: float) -> None:
        if self._net(raised.unit, raised.code, raised.since) > 0:
            self.events.append((at, "uncounted", raised.unit, raised.code))


class _Partition:
    """Every node of one partition running healthd's pass with the same rules."""

    def __init__(self, size: int, fraction: float) -> None:
        self.clock = _Clock()
        self.slurm = _Controller(size, self.clock)
        self.names = [f"n{i:03d}" for i in range(size)]
        self.policy = PolicySettings(max_out_fraction=fraction, breaker_settle=1.3)
        self.config = Config(policy=self.policy)
        rules = (self.policy, Reasons("healthd:"), EscalationSettings(repeats=3))
        self.rules = PolicyRules(*rules, reconcile_interval=3600.0)
        self.states = {name: PolicyState() for name in self.names}
        self.history = {name: _Counts() for name in self.names}
        self.repairs: list[str] = []

    def run(self, name: str, faulty: bool) -> None:
        """One pass on ``name``: plan (making the reads it asks for), execute, conclude, record."""
        now = self.clock.now
        found = (Finding("xid", Status.CRITICAL, "XID_48", SUBJECT, "injected", {"uuid": f"GPU-{name}"}),)
        findings = found if faulty else ()
        result = PassResult(name, now, 0.1, (CheckResult("xid", RunState.RAN, findings, 0.1),))
        repeats = self.history[name].repeats(findings)
        situation = Situation(result, self.states[name], (), Observed(), now, False, True, False, repeats=repeats)
        made: Union[Plan, Read] = plan(situation, self.rules)
        while isinstance(made, Read):
            views = group_views(self.slurm.partitions(("batch",)), ("batch",), Reasons("healthd:"))
            seen = situation.observed
            node = self.slurm.read(name) if made is not Read.PARTITIONS else seen.node
            read = Observed(seen.asked | {made}, node, seen.views if made is Read.NODE else views)
            situation = situation._replace(observed=read)
            made = plan(situation, self.rules)
        executed = execute(made, self.slurm, self.config, sleep=self.clock.advance) if made.steps else Executed()
        done = conclude(made, executed, self.states[name], now)
        self.states[name] = done.state
        self.history[name].record(findings, now, {**made.uncounted, **held_raises(repeats, executed.lost)})
        for raised in made.retracted:
            self.history[name].take_back(raised, now)
        if done.state.repair is not None or done.decision.reason.startswith("healthd: REPAIR"):
            self.repairs.append(name)

    def round(self, order: list[int], faulty: bool, spacing: list[float]) -> None:
        for index, gap in zip(order, spacing):
            self.clock.advance(gap)
            self.run(self.names[index], faulty)

    def out(self) -> set[str]:
        return set(self.slurm.out)


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(
    size=st.integers(3, 24),
    fraction=st.sampled_from([0.1, 0.25, 0.34, 0.5, 0.67]),
    draw=st.data(),
)
def test_a_hardware_code_on_every_node_wave_after_wave_sends_no_node_to_repair(
    size: int, fraction: float, draw: Any
) -> None:
    """Ten waves of XID_48 on every node of the partition, each node's passes in a new order.

    Each wave is one pass on every node with the fault, a second one (the daemon's next
    interval) and a clean one. The breaker lets its share of the partition out each wave;
    no node is ever sent to repair, whatever the order, the size or the breaker's fraction.
    """
    partition = _Partition(size, fraction)
    spacing = st.lists(st.floats(0.0, 20.0), min_size=size, max_size=size)
    for wave in range(WAVES):
        for faulty in (True, True, False):
            order = draw.draw(st.permutations(range(size)), label=f"order {wave}")
            partition.round(order, faulty, draw.draw(spacing, label=f"spacing {wave}"))
            if faulty:
                out = len(partition.out())
                assert 1 <= out <= allowed_out(size, fraction), (wave, partition.out())
            partition.clock.advance(300.0)
        assert partition.out() == set(), (wave, partition.out())
        partition.clock.advance(draw.draw(st.floats(60.0, 7200.0), label=f"gap {wave}"))
    assert partition.repairs == []


def test_a_lone_lemon_still_goes_to_repair_on_its_third_raise() -> None:
    """Where the breaker has room for more than this node, a fault that is this node's alone is counted."""
    partition = _Partition(10, 0.34)
    lemon = partition.names[4]
    for wave in range(3):
        for faulty in (True, True, False):
            partition.run(lemon, faulty)
            for other in partition.names:
                if other != lemon:
                    partition.run(other, False)
            partition.clock.advance(300.0)
        assert (partition.repairs == []) is (wave < 2), wave
    assert set(partition.repairs) == {lemon}
    assert partition.slurm.out[lemon][0].startswith("healthd: REPAIR XID_48 0000:3b:00 x3")


FINDING = Finding("xid", Status.CRITICAL, "XID_48", SUBJECT, "m", {"uuid": "GPU-1"})
SETTINGS = PolicySettings(max_out_fraction=0.34)
NOW = 1_800_000_000.0


def _partition(size: int, *out: tuple[str, float, str]) -> dict[str, PartitionView]:
    nodes = tuple(sorted((True, when, name) for name, when, _ in out))
    return {"batch": PartitionView("batch", size, nodes, tuple(sorted((name, code) for name, _, code in out)))}


def test_what_counts_as_a_wave() -> None:
    repeats = {FINDING.key: ("GPU-1", 1)}
    # Alone, with room for another node: the raise counts (provisionally).
    assert in_wave("n1", (FINDING,), repeats, _partition(10), SETTINGS, NOW) == {}
    # Another node out for the same code: shared.
    shared = in_wave("n1", (FINDING,), repeats, _partition(10, ("n2", NOW - 9, "XID_48")), SETTINGS, NOW)
    assert shared == {FINDING.key: "other nodes of the partition were out for XID_48"}
    # A 3-node partition at 0.34: this node out fills the budget, every other node that fails is held.
    assert (
        "at the circuit breaker's limit"
        in in_wave("n1", (FINDING,), repeats, _partition(3), SETTINGS, NOW)[FINDING.key]
    )
    # Others out for other codes fill it too; a take-out older than the window does not.
    others = _partition(10, ("n2", NOW - 9, "MOUNT_MISSING"), ("n3", NOW - 9, "IB_PORT_DOWN"))
    assert budget_full("n1", others, SETTINGS, NOW) != ""
    old = _partition(10, ("n2", NOW - 4000, "MOUNT_MISSING"), ("n3", NOW - 9, "IB_PORT_DOWN"))
    assert budget_full("n1", old, SETTINGS, NOW) == ""
    # Where the limit is the whole partition the breaker holds no one: a one-node partition is no wave.
    assert budget_full("n1", _partition(1), SETTINGS, NOW) == ""
    assert budget_full("n1", _partition(3), PolicySettings(max_out_fraction=1.0), NOW) == ""
    # Only the hardware faults escalation counts (those in ``repeats``) are judged.
    assert in_wave("n1", (FINDING,), {}, _partition(3), SETTINGS, NOW) == {}


def test_a_provisional_raise_lasts_one_breaker_window() -> None:
    raised = ProvisionalRaise(FINDING.key, "GPU-1", "XID_48", NOW)
    assert still_provisional((raised,), NOW + 3600, 3600.0) == (raised,)
    assert still_provisional((raised,), NOW + 3601, 3600.0) == ()
    assert ProvisionalRaise.from_dict(raised.to_dict()) == raised


def test_a_node_kept_out_for_weeks_makes_no_wave_of_a_fresh_raise() -> None:
    """In a large partition some node is nearly always out for a common code (in repair, say):
    only take-outs within the breaker's window tell of a shared fault, or no raise there would count."""
    repeats = {FINDING.key: ("GPU-1", 1)}
    weeks = _partition(1000, ("n2", NOW - 20 * 86400, "XID_48"))
    assert in_wave("n1", (FINDING,), repeats, weeks, SETTINGS, NOW) == {}
    unstamped = _partition(1000, ("n2", float("inf"), "XID_48"))
    assert in_wave("n1", (FINDING,), repeats, unstamped, SETTINGS, NOW) == {}
    fresh = _partition(1000, ("n2", NOW - 60, "XID_48"))
    assert in_wave("n1", (FINDING,), repeats, fresh, SETTINGS, NOW) != {}


def test_one_small_partition_beside_a_large_one_hides_no_wave() -> None:
    """The budget rule holds only where every partition of the node is full: in a large one beside
    it (a 4-node debug partition and a 1,000-node gpu one) other nodes still go out where they are seen."""
    repeats = {FINDING.key: ("GPU-1", 1)}
    views = {
        "debug": PartitionView("debug", 4, (), ()),
        "gpu": PartitionView("gpu", 1000, (), ()),
    }
    assert budget_full("n1", views, PolicySettings(), NOW) == ""
    assert in_wave("n1", (FINDING,), repeats, views, PolicySettings(), NOW) == {}
    assert budget_full("n1", {"debug": views["debug"]}, PolicySettings(), NOW) != ""
