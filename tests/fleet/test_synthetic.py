"""The method against a synthetic fleet whose failure process is known: it finds what was planted."""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest
from healthd_testkit import synth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from healthd.fleet.analyze import FleetReport, analyze


def _run(spec: synth.FleetSpec) -> tuple[synth.Fleet, FleetReport]:
    fleet = synth.plant(spec)
    jobs = list(synth.job_lines(fleet))
    return fleet, analyze(jobs, list(synth.event_lines(fleet)))


def test_every_planted_node_failure_is_attributed_to_its_node_and_cause() -> None:
    fleet, report = _run(synth.FleetSpec(seed=3))
    planted = Counter(fleet.node_failures.values())
    found = Counter((a.node, a.cause) for a in report.attributed)
    assert sum(planted.values()) > 50
    # Every planted failure is found on its node. By the rule, a user's failure that ends near
    # an unrelated incident is attributed too, and a second incident just before the one that
    # hit the run takes the cause: both are rare.
    assert Counter(node for node, _ in planted.elements()) <= Counter(node for node, _ in found.elements())
    assert sum((planted & found).values()) >= 0.95 * sum(planted.values())
    assert sum((found - planted).values()) <= 0.05 * sum(found.values())


def test_the_fitted_rate_recovers_the_planted_rate_on_a_healthy_fleet() -> None:
    spec = synth.FleetSpec(incident_lemons=0, silent_lemons=0, runs=40_000, days=60, seed=5)
    _, report = _run(spec)
    assert report.rate_per_node_hour is not None
    per_node_day = report.rate_per_node_hour * 24
    assert per_node_day == pytest.approx(spec.rate_per_node_day, rel=0.15)
    assert report.gpus_per_node == 8
    assert [p.gpus for p in report.projection] == [1024, 4096, 16384, 100_000]
    mttf = [p.mttf_hours for p in report.projection]
    assert all(a is not None and b is not None and a > b for a, b in zip(mttf, mttf[1:]))


def test_planted_lemons_of_both_kinds_are_flagged_and_buggy_users_nodes_are_not() -> None:
    spec = synth.FleetSpec(days=60, runs=40_000, seed=11)
    fleet, report = _run(spec)
    flagged = [v.node for v in report.lemons]
    planted = set(fleet.incident_lemons) | set(fleet.silent_lemons)
    assert planted <= set(flagged)
    assert len(set(flagged) - planted) <= 1  # the false discovery rate is 5%
    assert not set(fleet.buggy_nodes) & set(flagged)
    # The most suspicious come first: the planted ones rank above any other.
    assert set(flagged[: len(planted)]) == planted


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10_000))
def test_a_healthy_fleet_flags_about_none(seed: int) -> None:
    spec = synth.FleetSpec(incident_lemons=0, silent_lemons=0, buggy_users=3, runs=10_000, seed=seed)
    _, report = _run(spec)
    assert len(report.lemons) <= 1


HEALTHY = synth.FleetSpec(nodes=200, events=500, incident_lemons=0, silent_lemons=0, buggy_users=0, seed=7)
RACK = [f"gpu{i:04d}" for i in range(32, 48)]


def _stamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


@pytest.mark.parametrize("one_line", [True, False])
def test_a_rack_going_down_at_once_is_one_shared_incident_not_sixteen_lemons(one_line: bool) -> None:
    """The review's switch flap: a rack of 16 nodes loses slurmctld at the same second, six times.

    Each node then has six more incidents than the fleet, which the per-node test alone reads as
    sixteen lemons. Written as one event line for the rack, or one line per node stamped within
    seconds of each other, it is one shared incident each time, held against none of them."""
    fleet = synth.plant(HEALTHY)
    events = list(synth.event_lines(fleet))
    for wave in range(6):
        t = HEALTHY.start + 86400 * (3 + 7 * wave)
        if one_line:
            events.append(f"synth|gpu[0032-0047]|{_stamp(t)}|{_stamp(t + 600)}|DOWN|root(0)|Not responding")
        else:
            events.extend(
                f"synth|{node}|{_stamp(t + k % 3)}|{_stamp(t + 600)}|DOWN|root(0)|Not responding"
                for k, node in enumerate(RACK)
            )
    report = analyze(list(synth.job_lines(fleet)), events)
    assert report.lemons == ()
    assert [(len(s.nodes), s.codes) for s in report.shared] == [(16, ("NOT_RESPONDING",))] * 6
    assert report.shared[0].nodes == tuple(RACK)
    without = analyze(list(synth.job_lines(fleet)), list(synth.event_lines(fleet)))
    own = {v.node: v.signals.out_count for v in without.verdicts if v.node in RACK}
    assert {v.node: v.signals.out_count for v in report.verdicts if v.node in RACK} == own
    assert report.own_incidents == without.own_incidents
    causes = {t.code: t for t in report.taxonomy}
    assert causes["NOT_RESPONDING"].incidents >= 6, "each wave is one incident of the taxonomy"


def test_a_debug_partition_where_every_user_tests_is_no_silent_lemon() -> None:
    """The review's debug node: each user's short test runs in partition debug, all on gpu0199,
    fail 35% of the time for the users' own reasons. With one rate per user over all partitions
    those failures look like the node's; per (user, partition) they are what debug runs do."""
    fleet = synth.plant(HEALTHY)
    jobs = list(synth.job_lines(fleet))
    rng = random.Random(5)
    for user in range(HEALTHY.users):
        for k in range(4):
            state = "FAILED" if rng.random() < 0.35 else "COMPLETED"
            day = 2 + rng.randrange(25)
            when = f"2024-01-{day:02d}T05"
            jobs.append(
                f"{800000 + user * 10 + k}|user{user:03d}|debug|{state}|1:0|{when}:00:00|{when}:00:00|{when}:10:00|"
                f"00:10:00|1|gpu0199|gres/gpu=8"
            )
    report = analyze(jobs, list(synth.event_lines(fleet)))
    assert "gpu0199" not in {v.node for v in report.lemons}
    debug = next(v for v in report.verdicts if v.node == "gpu0199")
    assert debug.signals.single_node_failures > 50
    assert debug.p_failures > 0.05


def test_gpus_per_node_comes_from_multi_node_runs_not_the_most_common_size() -> None:
    """The review's g_jobs: single-GPU runs dominate, but 2-node runs of 16 GPUs say 8 per node."""
    header = "JobID|User|State|Start|End|NNodes|NodeList|AllocTRES"
    run = "{i}|u|COMPLETED|2024-05-01T00:00:00|2024-05-01T02:00:00|{n}|{nodes}|gres/gpu={g}"
    jobs = [header]
    jobs += [run.format(i=i, n=1, nodes=f"gpu{i % 20:02d}", g=1) for i in range(900)]
    jobs += [run.format(i=1000 + i, n=2, nodes="gpu[01-02]", g=16) for i in range(100)]
    events = ["NodeName|TimeStart|TimeEnd|Reason"]
    report = analyze(jobs, events)
    assert report.gpus_per_node == 8 and report.warnings == ()
    # Only single-node runs: the most GPUs one run had on its node.
    assert analyze([*jobs[:901], run.format(i=5000, n=1, nodes="gpu01", g=4)], events).gpus_per_node == 4
    # Multi-node runs that disagree: the most common, and a warning that says so.
    mixed = analyze([*jobs, *(run.format(i=2000 + i, n=2, nodes="gpu[03-04]", g=8) for i in range(10))], events)
    assert mixed.gpus_per_node == 8
    assert mixed.warnings == (
        "multi-node runs disagree on GPUs per node (8 in 100 runs, 4 in 10 runs; up to 8 in one run): "
        "using 8; give --gpus-per-node for a fleet of mixed nodes",
    )
