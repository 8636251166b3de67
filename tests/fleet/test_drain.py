"""``healthd fleet lemons --drain``: the plan (pure) and the drain through the real test cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit import synth

from healthd.config.models import PolicySettings
from healthd.fleet.drain import plan_drains
from healthd.fleet.lemons import LemonVerdict, NodeSignals
from healthd.slurm.nodestate import NodeInfo, PartitionView
from healthd.slurm.reasons import Reasons


def _verdict(node: str, q: float, incident_evidence: bool = True) -> LemonVerdict:
    signals = NodeSignals(node, 9, ("XID_79",), 2, 1, 40, 3, 1.0, 0, 0, 0, 3, 1.0, 2, "alice", 2, 0.5)
    return LemonVerdict(signals, q, 1.0, q, True, incident_evidence)


def _node(name: str, flags: str = "", reason: str = "", partition: str = "batch") -> NodeInfo:
    return NodeInfo(name, "IDLE", frozenset(f for f in flags.split("+") if f), reason, "root", (partition,))


def test_the_plan_drains_in_rank_order_up_to_the_breaker_and_leaves_others_alone() -> None:
    nodes = [_node(f"n{i}") for i in range(10)]
    nodes[3] = _node("n3", "DRAIN", "bad DIMM")
    nodes[4] = _node("n4", "DRAIN", "healthd: LEMON 3 incidents")
    nodes[5] = _node("n5", "DRAIN+REBOOT_REQUESTED", "")
    lemons = [
        _verdict(n, q) for n, q in (("n1", 1e-9), ("n3", 1e-8), ("n4", 1e-7), ("n5", 1e-6), ("x9", 1e-5), ("n2", 1e-4))
    ]
    table = {node.name: node for node in nodes}
    out = tuple(sorted((True, 0.0, n.name) for n in nodes if n.out and Reasons().owns(n.reason)))
    views = {"batch": PartitionView("batch", len(nodes), out)}
    steps = plan_drains(lemons, table, views, Reasons(), PolicySettings(max_out_fraction=0.2), now=0.0)
    assert [(s.node, s.drain) for s in steps] == [
        ("n1", True),
        ("n3", False),
        ("n4", False),
        ("n5", False),
        ("x9", False),
        ("n2", False),
    ]
    why = {s.node: s.why for s in steps}
    assert "someone else's reason" in why["n3"]
    assert why["n4"] == "already out as a lemon"
    assert "not a node slurmctld knows" in why["x9"]
    # 20% of 10 nodes is 2: the lemon already out and n1 fill it.
    assert why["n2"].startswith("held by the circuit breaker: partition batch: 2 of its 10 nodes taken out by healthd")
    assert steps[0].reason.startswith("healthd: LEMON 9 incidents, 3/40 runs failed, score ")
    assert len(steps[0].reason) <= 64


def test_a_lemon_out_for_longer_than_the_breaker_window_no_longer_holds_the_budget() -> None:
    """As in a pass (docs/policy.md, "The window"): the breaker counts a wave of take-outs, not a
    backlog of nodes that have waited weeks for hardware work."""
    nodes = [_node(f"n{i}") for i in range(10)]
    nodes[4] = _node("n4", "DRAIN", "healthd: LEMON 3 incidents")
    nodes[6] = _node("n6", "DRAIN", "healthd: REPAIR XID_79 gpu3 x3")
    table = {node.name: node for node in nodes}
    policy = PolicySettings(max_out_fraction=0.2)
    now = 30 * 86400.0
    long_ago = now - policy.breaker_window - 1
    views = {"batch": PartitionView("batch", 10, ((True, long_ago, "n4"), (True, long_ago, "n6")))}
    steps = plan_drains([_verdict("n1", 1e-9)], table, views, Reasons(), policy, now=now)
    assert [(s.node, s.drain) for s in steps] == [("n1", True)]
    recent = {"batch": PartitionView("batch", 10, ((True, now - 60, "n4"), (True, now - 60, "n6")))}
    steps = plan_drains([_verdict("n1", 1e-9)], table, recent, Reasons(), policy, now=now)
    assert not steps[0].drain and steps[0].why.startswith("held by the circuit breaker")


@pytest.mark.parametrize("silent", [False, True])
def test_a_silent_lemon_is_drained_only_when_asked_for(silent: bool) -> None:
    """Flagged on job failures alone, with no incident of its own beyond the fleet's: job failures are
    what users can cause, so its drain needs ``--drain-silent``. The lemon with incidents behind it goes."""
    table = {name: _node(name) for name in ("n1", "n2")}
    views = {"batch": PartitionView("batch", 10, ())}
    lemons = [_verdict("n1", 1e-9, incident_evidence=False), _verdict("n2", 1e-8)]
    steps = plan_drains(lemons, table, views, Reasons(), PolicySettings(max_out_fraction=0.5), 0.0, silent)
    assert [(s.node, s.drain) for s in steps] == [("n1", silent), ("n2", True)]
    if not silent:
        assert (
            steps[0].why.startswith("a silent lemon: flagged on job failures alone")
            and "--drain-silent" in steps[0].why
        )


def _lemon_files(tmp_path: Path, names: tuple[str, ...], silent: bool = False) -> tuple[Path, Path, tuple[str, ...]]:
    """A synthetic fleet whose incident (or silent) lemons are renamed to ``names`` (nodes of the test cluster)."""
    count = len(names)
    spec = synth.FleetSpec(incident_lemons=0 if silent else count, silent_lemons=count if silent else 0, seed=4)
    fleet = synth.plant(spec._replace(lemon_factor=25))
    jobs, events = "\n".join(synth.job_lines(fleet)), "\n".join(synth.event_lines(fleet))
    for lemon, name in zip(fleet.silent_lemons if silent else fleet.incident_lemons, names):
        jobs, events = jobs.replace(f"|{lemon}|", f"|{name}|"), events.replace(f"|{lemon}|", f"|{name}|")
    jobs_file, events_file = tmp_path / "jobs.txt", tmp_path / "events.txt"
    jobs_file.write_text(jobs + "\n")
    events_file.write_text(events + "\n")
    return jobs_file, events_file, names


def test_lemons_drain_on_the_real_cluster_dry_run_first_and_within_the_breaker(
    cluster: Any, write_config: Callable[..., Path], cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    config = write_config("", slurm_cluster=cluster.conf)
    jobs, events, _ = _lemon_files(tmp_path, ("node1", "node2"))
    inputs = ("--jobs", str(jobs), "--events", str(events), "--config", str(config))

    code, out, err = cli("fleet", "lemons", *inputs, "--drain")
    assert code == 0, err
    assert "would drain node" in out
    assert cluster.state("node1") == "idle" and cluster.state("node2") == "idle"

    code, out, err = cli("fleet", "lemons", *inputs, "--drain", "--apply")
    assert code == 0, err
    drained = [line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("drained ")]
    # [policy] max_out_fraction 0.1 of three nodes allows one out: the most suspicious goes, the other is held.
    assert len(drained) == 1
    (first,) = drained
    other = "node2" if first == "node1" else "node1"
    assert cluster.state(first) == "drained"
    assert cluster.reason(first).startswith("healthd: LEMON ")
    assert cluster.state(other) == "idle"
    assert f"not drained {other}: held by the circuit breaker" in out

    code, out, _ = cli("fleet", "lemons", *inputs, "--drain", "--apply")
    assert f"not drained {first}: already out as a lemon" in out
    assert cluster.state(other) == "idle"


def test_a_silent_lemon_on_the_real_cluster_waits_for_drain_silent(
    cluster: Any, write_config: Callable[..., Path], cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    config = write_config("", slurm_cluster=cluster.conf)
    jobs, events, _ = _lemon_files(tmp_path, ("node3",), silent=True)
    inputs = ("--jobs", str(jobs), "--events", str(events), "--config", str(config), "--drain")

    code, out, err = cli("fleet", "lemons", *inputs, "--apply")
    assert code == 0, err
    assert "not drained node3: a silent lemon: flagged on job failures alone" in out
    assert cluster.state("node3") == "idle"

    code, out, err = cli("fleet", "lemons", *inputs, "--drain-silent")
    assert code == 0, err
    assert "would drain node3: drain [healthd: LEMON " in out
    assert cli("fleet", "lemons", "--jobs", str(jobs), "--events", str(events), "--drain-silent")[0] == 64


@pytest.mark.parametrize("apply", [False, True])
def test_drain_needs_slurm(
    cli: Callable[..., tuple[int, str, str]], write_config: Callable[..., Path], tmp_path: Path, apply: bool
) -> None:
    config = write_config('[slurm]\nbin_dir = "/nonexistent"\n')
    jobs, events, _ = _lemon_files(tmp_path, ("node1",))
    args = ["fleet", "lemons", "--jobs", str(jobs), "--events", str(events), "--config", str(config), "--drain"]
    code, _, err = cli(*args, *(["--apply"] if apply else []))
    assert code in (69, 78), err
