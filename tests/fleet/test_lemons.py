"""The guarded lemon test: what a user can cause is no evidence, and a tiny fleet flags nothing and says why."""

from __future__ import annotations

from typing import Optional

import pytest
from healthd_testkit import synth
from healthd_testkit.paths import FIXTURES
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from healthd.fleet.analyze import FleetReport, FleetSettings, analyze
from healthd.fleet.hosts import pinned
from healthd.fleet.lemons import Floors

ACCOUNTING = FIXTURES / "slurm" / "accounting"
HEALTHY = synth.FleetSpec(nodes=200, events=500, incident_lemons=0, silent_lemons=0, buggy_users=0, seed=7)
TARGET = "gpu0199"


def test_the_four_job_accounting_fixture_flags_nothing_and_says_why() -> None:
    """Three nodes, seconds of history: the plain test flags node1 after one incident (q 0.044)."""
    report = analyze(
        (ACCOUNTING / "sacct-22.05-take-out.txt").read_text().splitlines(),
        (ACCOUNTING / "sacctmgr-events-22.05-take-out.txt").read_text().splitlines(),
    )
    assert report.lemons == ()
    assert report.lemon_floor == (
        "fleet too small for a lemon baseline: 3 nodes observed, at least 10 needed",
        "window too short to tell a lemon from one bad day: 0.00 days, at least 7 needed",
    )
    (held,) = report.held_back
    assert held.node == "node1" and held.plain_q == pytest.approx(0.044, abs=0.001)
    assert "1 incidents of its own, at least 3 needed for the incident test" in held.why


@pytest.mark.parametrize(
    ("line", "pins"),
    [
        (f"sbatch -w {TARGET} run.sh", True),
        (f"srun --nodelist {TARGET} false", True),
        (f"sbatch --nodelist={TARGET} run.sh", True),
        (f"sbatch -w{TARGET} run.sh", True),
        ("sbatch -N 2 -w gpu[0198-0199] run.sh", True),
        ("sbatch -w ./my-nodes run.sh", True),  # a file of names: still the user's choice
        ("sbatch --nodefile=./my-nodes run.sh", True),
        ("sbatch -F my-nodes run.sh", True),
        (f"sbatch -vw {TARGET} run.sh", True),  # -v takes no argument: getopt reads -v -w
        (f"srun -Qvw{TARGET} false", True),
        (f"sbatch --nodel={TARGET} run.sh", True),  # getopt_long takes an unambiguous prefix
        ("sbatch --nodef my-nodes run.sh", True),
        ("sbatch --wrap 'exit 1' -N 1", False),
        ("sbatch -Nw run.sh", False),  # -N takes the rest of the word: -N w
        ("sbatch --node=2 run.sh", False),  # --node is also --nodes': getopt_long refuses it
        ("sbatch --nodes 2 run.sh", False),
        ("sbatch -x gpu0199 run.sh", False),
        ("sbatch --exclude=gpu0199 --wckey=w run.sh", False),
    ],
)
def test_a_submit_line_pins_its_job_in_every_spelling(line: str, pins: bool) -> None:
    assert pinned(line) is pins


def _with_one_users_failures(pin: Optional[str]) -> tuple[list[str], list[str], list[str]]:
    """The healthy fleet, and mallory: 40 failed runs on gpu0199, 400 completed ones elsewhere.

    ``pin`` is the option of her failing runs' submit lines (``None``: no submit lines at all).
    """
    fleet = synth.plant(HEALTHY)
    jobs, submit = list(synth.job_lines(fleet)), list(synth.submit_lines(fleet))
    for k in range(440):
        fails = k < 40
        node = TARGET if fails else HEALTHY.node_name(k % 150)
        day, hour = 2 + k % 25, k % 20
        when = f"2024-01-{day:02d}T{hour:02d}"
        jobs.append(
            f"{900000 + k}|mallory|gpu|{'FAILED' if fails else 'COMPLETED'}|{int(fails)}:0|{when}:00:00|"
            f"{when}:00:00|{when}:10:00|00:10:00|1|{node}|gres/gpu=8"
        )
        submit.append(f"{900000 + k}|sbatch {pin if fails and pin else ''} run.sh")
    return jobs, list(synth.event_lines(fleet)), submit


def _report(jobs: list[str], events: list[str], submit: Optional[list[str]]) -> FleetReport:
    return analyze(jobs, events, submit_lines=None if submit is None else (lambda: iter(submit)))


@pytest.mark.parametrize("pin", [f"-w {TARGET}", f"--nodelist={TARGET}", f"-w{TARGET}", "-w gpu[0190-0199]"])
def test_runs_a_user_pinned_to_a_node_are_no_evidence_against_it(pin: str) -> None:
    """Issue 23's scenario 6 on a fleet big and long enough: the plain test flags gpu0199, a node one
    user chose for a job that always fails; its pinned runs are set aside and it is not flagged."""
    jobs, events, submit = _with_one_users_failures(pin)
    report = _report(jobs, events, submit)
    assert TARGET not in {v.node for v in report.lemons}
    held = {h.node: h for h in report.held_back}
    assert held[TARGET].plain_q < 1e-6, "without the guard it is a lemon"
    assert held[TARGET].why[0].startswith("40 of its ") and "placed on it by their own request" in held[TARGET].why[0]
    signals = next(v.signals for v in report.verdicts if v.node == TARGET)
    assert (signals.pinned_runs, signals.pinned_failures) == (40, 40)


def test_one_users_failures_are_no_lemon_without_submit_lines_either() -> None:
    """Without submit lines the pin cannot be seen; left out, the one user who made the excess takes it along."""
    jobs, events, _ = _with_one_users_failures(None)
    report = _report(jobs, events, None)
    assert TARGET not in {v.node for v in report.lemons}
    (why,) = [h.why for h in report.held_back if h.node == TARGET]
    assert any(w.startswith("40 of its ") and "are one user's (mallory)" in w for w in why), why
    assert report.lemon_notes and report.lemon_notes[0].startswith("no submit lines")


def test_a_forged_pin_does_not_hide_another_users_failures() -> None:
    """mallory's newline forges a record pinning job 900000 (her own failing run's id here stands for
    anyone's): the job then has two submit-line records for one run, and neither is believed."""
    jobs, events, submit = _with_one_users_failures(None)
    submit += ["900001|sbatch --wrap 'echo", f"900000|sbatch -w {TARGET} run.sh", "'"]
    report = _report(jobs, events, submit)
    signals = next(v.signals for v in report.verdicts if v.node == TARGET)
    assert signals.pinned_runs == 0 and signals.counted_failures >= 40


def test_a_silent_lemon_that_fails_many_users_is_still_flagged_with_a_pinning_user_on_it() -> None:
    """Leaving out the top user costs a real lemon little: the others' failures there still stand out."""
    spec = HEALTHY._replace(silent_lemons=1, buggy_users=1, days=60, runs=40_000, seed=11)
    fleet = synth.plant(spec)
    report = analyze(
        list(synth.job_lines(fleet)), list(synth.event_lines(fleet)), submit_lines=lambda: synth.submit_lines(fleet)
    )
    flagged = {v.node: v for v in report.lemons}
    (silent,) = fleet.silent_lemons
    assert silent in flagged and not flagged[silent].incident_evidence
    assert flagged[silent].signals.failing_users >= 10
    assert not set(fleet.buggy_nodes) & set(flagged)


def test_per_node_floors_keep_one_or_two_incidents_from_making_a_lemon() -> None:
    """A node with two incidents on a fleet where no other node has any: the plain test flags it."""
    fleet = synth.plant(HEALTHY._replace(rate_per_node_day=0.0))
    events = list(synth.event_lines(fleet))
    events += [
        f"synth|{TARGET}|2024-01-{day:02d}T03:00:00|2024-01-{day:02d}T09:00:00|DRAIN|root(0)|healthd: XID_79 gpu0"
        for day in (5, 19)
    ]
    jobs = list(synth.job_lines(fleet))
    report = analyze(jobs, events)
    assert report.lemons == ()
    (held,) = report.held_back
    assert held.node == TARGET and held.why[0] == "2 incidents of its own, at least 3 needed for the incident test"
    lowered = analyze(jobs, events, FleetSettings(floors=Floors(min_incidents=2)))
    assert [v.node for v in lowered.lemons] == [TARGET] and lowered.lemons[0].incident_evidence


@pytest.mark.slow
@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(size=st.integers(0, 100), days=st.integers(1, 365), seed=st.integers(0, 10**6))
@example(size=0, days=24, seed=130680)  # 3 nodes, 24 days: the plain test flags one of them
def test_a_healthy_fleet_of_any_size_and_length_flags_at_most_the_false_discovery_rates_share(
    size: int, days: int, seed: int
) -> None:
    """Healthy synthetic fleets of 3 to 3,000 nodes over a day to a year (buggy users pinned to their
    nodes included) flag no more than alpha of their nodes: none at all below 20 nodes.

    Most fleets drawn are small (``size`` maps to 3 * 1000 ** (size/100)^2 nodes: half are under 18);
    the runs are bounded, since the test's null holds at any number of them.

    The guarantee is a probability: any one fleet may flag a node by chance, at most alpha of
    the time (seed 36379, 16 nodes over 329 days, gives one node 19 incidents where 6.6 were
    expected, p = 6e-5, and it is flagged). Measured, it is far rarer: none of 460 random
    fleets drawn this way flagged beyond the bound. So the examples are derandomized: the same
    ones every run, a regression of the method, not the dice, fails the test."""
    nodes = round(3 * 1000 ** ((size / 100) ** 2))
    spec = synth.FleetSpec(
        nodes=nodes,
        days=days,
        runs=max(200, min(3000, nodes * days)),
        events=0,
        incident_lemons=0,
        silent_lemons=0,
        buggy_users=min(3, nodes),
        seed=seed,
    )
    fleet = synth.plant(spec)
    report = analyze(
        list(synth.job_lines(fleet)), list(synth.event_lines(fleet)), submit_lines=lambda: synth.submit_lines(fleet)
    )
    assert len(report.lemons) <= report.settings.alpha * nodes, [v.node for v in report.lemons]
    if nodes < report.settings.floors.min_nodes or report.days < report.settings.floors.min_days:
        assert report.lemon_floor, "below the floors, the report says why"
