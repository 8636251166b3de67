"""Cause codes, incidents, host lists, the window rule, MTTF buckets, ETTR and the lemon statistics."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from healthd.fleet.analyze import FleetSettings, analyze
from healthd.fleet.causes import CauseRules, group_incidents, shared_incidents
from healthd.fleet.hosts import excluded, expand
from healthd.fleet.lemons import benjamini_hochberg, upper_tail
from healthd.fleet.reliability import bucket, ettr
from healthd.slurm.hostlist import HostlistError

JOBS = "JobID|User|State|Start|End|NNodes|NodeList|AllocTRES"
EVENTS = "Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User"


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("healthd: XID_79 0000:3b:00 fallen off the bus", "XID_79"),
        ("healthd: REBOOT XID_48 gpu1 (+2 more)", "XID_48"),
        ("healthd: REPAIR IB_PORT_DOWN mlx5_0/1 x3", "IB_PORT_DOWN"),
        ("healthd: LEMON 9 incidents", None),
        ("Not responding", "NOT_RESPONDING"),
        ("Kill task failed", "KILL_TASK_FAILED"),
        ("Prolog error", "PROLOG_ERROR"),
        ("NHC: check_fs_mount: /scratch", "NHC"),
        ("maintenance: firmware update", None),
        ("healthdX: XID_79", None),
        ("", None),
    ],
)
def test_cause_codes(reason: str, code: str) -> None:
    assert CauseRules().classify(reason) == code


def test_the_cause_list_and_prefix_are_configurable() -> None:
    rules = CauseRules("hc:", ("GPU burn failed",))
    assert rules.classify("hc: XID_79 gpu0") == "XID_79"
    assert rules.classify("healthd: XID_79 gpu0") is None
    assert rules.classify("gpu burn failed on 3") == "GPU_BURN_FAILED"
    assert rules.classify("Not responding") is None


def test_events_minutes_apart_on_one_node_are_one_incident() -> None:
    events = [
        ("n1", 0.0, 100.0, "XID_79", False),
        ("n1", 60.0, 200.0, "PCIE", False),
        ("n1", 1000.0, None, "XID_48", False),
        ("n2", 30.0, 40.0, "NHC", False),
    ]
    incidents, index = group_incidents(events, gap=300)
    assert [(i.node, i.start, i.end, i.codes) for i in incidents] == [
        ("n1", 0.0, 200.0, ("XID_79", "PCIE")),
        ("n1", 1000.0, None, ("XID_48",)),
        ("n2", 30.0, 40.0, ("NHC",)),
    ]
    assert index["n1"].incident == (0, 0, 1)


def test_causes_on_more_than_four_nodes_within_30_s_or_on_one_line_are_shared() -> None:
    four = [((f"n{i}",), 100.0 + i, "NOT_RESPONDING") for i in range(4)]
    assert shared_incidents(four) == ([], set()), "four nodes at once may still be chance"
    five = [*four, (("n9",), 130.0, "XID_79")]
    found, lines = shared_incidents(five)
    assert [(s.start, s.nodes, s.codes) for s in found] == [
        (100.0, ("n0", "n1", "n2", "n3", "n9"), ("NOT_RESPONDING", "XID_79"))
    ]
    assert lines == {0, 1, 2, 3, 4}
    spread = [((f"n{i}",), 100.0 + 10 * i, "NOT_RESPONDING") for i in range(5)]  # 40 s from first to last
    assert shared_incidents(spread) == ([], set())
    rack = [(("a1",), 5.0, "NHC"), (("r1", "r2"), 1000.0, "NOT_RESPONDING")]
    found, lines = shared_incidents(rack)
    assert [(s.nodes, s.codes) for s in found] == [(("r1", "r2"), ("NOT_RESPONDING",))] and lines == {1}


def test_an_incident_with_a_shared_event_is_shared() -> None:
    incidents, _ = group_incidents(
        [("n1", 0.0, None, "NOT_RESPONDING", True), ("n1", 60.0, None, "XID_79", False)], 300
    )
    assert [(i.codes, i.shared) for i in incidents] == [(("NOT_RESPONDING", "XID_79"), True)]


def test_host_lists_are_expanded_and_excludes_read_from_the_submit_line() -> None:
    assert expand("gpu[01-03,07]") == ("gpu01", "gpu02", "gpu03", "gpu07")
    assert expand("a1,b[2-3]") == ("a1", "b2", "b3")
    assert expand("None assigned") == ()
    with pytest.raises(HostlistError):
        expand("gpu[03-")
    assert excluded("sbatch -N 2 -x gpu[01-02] run.sh") == ("gpu01", "gpu02")
    assert excluded("srun --exclude=gpu05 -n1 x") == ("gpu05",)
    assert excluded("sbatch --exclude gpu06 -xgpu07 run.sh") == ("gpu06", "gpu07")
    assert excluded("sbatch --export=ALL run.sh") == ()
    assert excluded("sbatch -Qx gpu08 --exclud=gpu09 --exclusive run.sh") == ("gpu08", "gpu09")


def _window_report(event_offset: float, settings: FleetSettings | None = None) -> int:
    end = 1_709_290_800  # 2024-03-01T11:00:00 UTC; the test reads times in the process's zone, so build them
    import time as _time

    def stamp(t: float) -> str:
        return _time.strftime("%Y-%m-%dT%H:%M:%S", _time.localtime(t))

    jobs = [JOBS, f"1|a|NODE_FAIL|{stamp(end - 3600)}|{stamp(end)}|2|n[1-2]|gres/gpu=16"]
    events = [EVENTS, f"c|n2|{stamp(end + event_offset)}|Unknown|DOWN|Not responding|slurm(64030)"]
    return len(analyze(jobs, events, settings).attributed)


@pytest.mark.parametrize(("offset", "attributed"), [(-600, 1), (-601, 0), (300, 1), (301, 0), (0, 1)])
def test_the_window_is_ten_minutes_before_to_five_after_the_end(offset: float, attributed: int) -> None:
    assert _window_report(offset) == attributed


def test_the_window_bounds_are_configurable() -> None:
    assert _window_report(-900, FleetSettings(window_before=1200)) == 1
    assert _window_report(120, FleetSettings(window_after=60)) == 0


def test_the_earliest_cause_among_the_nodes_wins_and_maintenance_is_not_one() -> None:
    jobs = [JOBS, "1|a|FAILED|2024-03-01T10:00:00|2024-03-01T11:00:00|3|n[1-3]|gres/gpu=24"]
    events = [
        EVENTS,
        "c|n3|2024-03-01T10:58:00|Unknown|DRAIN|healthd: XID_79 gpu0|root(0)",
        "c|n1|2024-03-01T10:55:00|Unknown|DRAIN|maintenance|admin(1)",
        "c|n2|2024-03-01T10:57:00|Unknown|DRAIN|healthd: IB_PORT_DOWN mlx5_0/1|root(0)",
    ]
    report = analyze(jobs, events)
    assert [(a.node, a.cause, a.state, a.gpus) for a in report.attributed] == [("n2", "IB_PORT_DOWN", "FAILED", 24)]
    assert report.other_events == 1


def test_every_run_of_a_requeued_job_counts() -> None:
    jobs = [
        JOBS,
        "9|a|NODE_FAIL|2024-03-01T10:00:00|2024-03-01T11:00:00|1|n1|gres/gpu=8",
        "9|a|NODE_FAIL|2024-03-01T11:10:00|2024-03-01T12:00:00|1|n1|gres/gpu=8",
        "9|a|COMPLETED|2024-03-01T13:00:00|2024-03-01T14:00:00|1|n1|gres/gpu=8",
    ]
    events = [
        EVENTS,
        "c|n1|2024-03-01T10:59:00|Unknown|DOWN|Not responding|slurm(1)",
        "c|n1|2024-03-01T12:01:00|Unknown|DOWN|Kill task failed|slurm(1)",
    ]
    report = analyze(jobs, events)
    assert [(b.runs, b.failures, round(b.job_hours, 3)) for b in report.buckets] == [(3, 2, 2.833)]
    assert [a.cause for a in report.attributed] == ["NOT_RESPONDING", "KILL_TASK_FAILED"]
    assert report.buckets[0].mttf_hours == pytest.approx((2 + 50 / 60) / 2)


@given(st.integers(min_value=1, max_value=1 << 20))
def test_the_bucket_is_the_largest_power_of_two_not_above(gpus: int) -> None:
    b = bucket(gpus)
    assert b <= gpus < 2 * b and b & (b - 1) == 0


@given(st.floats(min_value=1.0, max_value=1e5), st.floats(min_value=0.01, max_value=1.0), st.floats(0, 0.5))
def test_ettr_is_a_fraction_close_to_its_first_order_form_for_rare_failures(
    mttf: float, checkpoint: float, restart: float
) -> None:
    value = ettr(mttf, checkpoint, restart)
    assert 0 < value <= 1
    first_order = 1 - (checkpoint / 2 + restart) / mttf
    assert value == pytest.approx(first_order, abs=((checkpoint + restart) / mttf) ** 2 + 1e-9)


def test_ettr_without_failures_is_one() -> None:
    assert ettr(None, 0.5, 0.2) == 1.0


def test_upper_tails_match_closed_forms() -> None:
    assert upper_tail(1, 2.0) == pytest.approx(1 - math.exp(-2))
    assert upper_tail(3, 1.0) == pytest.approx(1 - math.exp(-1) * (1 + 1 + 0.5))
    assert upper_tail(0, 5.0) == 1.0
    # Negative binomial with size 1 is geometric: P(X >= k) = (mean / (1 + mean)) ** k.
    assert upper_tail(4, 3.0, 1.0) == pytest.approx((3 / 4) ** 4)
    assert 0 < upper_tail(200, 1.0) < 1e-300 or upper_tail(200, 1.0) == 0.0


def test_benjamini_hochberg_matches_the_textbook_example() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    assert benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
