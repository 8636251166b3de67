"""``healthd fleet backtest`` through the real CLI on a synthetic fleet with planted lemons.

The avoided failures are recomputed here from the JSON's drains and the raw accounting
lines, without healthd's reader: a large run that failed, started while one of its
nodes was drained, and whose earliest cause event within [end - 10 min, end + 5 min]
on its nodes is on a drained node it held, or is none.
"""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from healthd_testkit import synth
from healthd_testkit.paths import REPO
from hostlist import expand_hostlist  # python-hostlist itself, not healthd's reader

from healthd.fleet.analyze import FleetSettings
from healthd.fleet.backtest import BacktestSettings, backtest
from healthd.fleet.backtest_schema import BacktestOut, json_schema
from healthd.fleet.causes import DEFAULT_CAUSES, CauseRules

Cli = Callable[..., tuple[int, str, str]]
MIN_GPUS = 64
CAUSE_TEXTS = (*(text for _, text in synth.CAUSE_REASONS), synth.CO_REASON[1])


@pytest.fixture(scope="module")
def lemon_fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[synth.Fleet, Path, Path]:
    directory = tmp_path_factory.mktemp("backtest")
    spec = synth.FleetSpec(nodes=200, days=90, runs=60_000, events=3_000, incident_lemons=4, lemon_factor=15, seed=3)
    fleet = synth.plant(spec)
    jobs, events = directory / "jobs.txt", directory / "events.txt"
    jobs.write_text("\n".join(synth.job_lines(fleet)) + "\n")
    events.write_text("\n".join(synth.event_lines(fleet)) + "\n")
    return fleet, jobs, events


def local(text: str) -> float:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()


def iso(text: Optional[str]) -> Optional[float]:
    return None if text is None else datetime.datetime.fromisoformat(text).timestamp()


def causes(events: Path) -> list[tuple[str, float]]:
    found = []
    for line in events.read_text().splitlines()[1:]:
        _, node, start, _, _, _, reason = line.split("|")
        if reason in CAUSE_TEXTS:
            found.append((node, local(start)))
    return found


def expected_avoided(document: dict[str, Any], jobs: Path, events: Path) -> set[tuple[str, str]]:
    """(job id, end) of the failed large runs the drains should have avoided, from the raw lines."""
    drains = [(d["node"], iso(d["start"]), iso(d["end"])) for d in document["drains"]]
    first = iso(document["steps"][0]["time"])
    cause_events = causes(events)
    avoided = set()
    for line in jobs.read_text().splitlines()[1:]:
        job_id, _, _, state, _, _, start, end, _, _, node_list, tres = line.split("|")
        gpus = int(tres.split("gres/gpu=")[1].split(",")[0])
        begun, ended = local(start), local(end)
        if gpus < MIN_GPUS or not state.startswith(("FAILED", "NODE_FAIL")) or begun < first:
            continue
        nodes = set(expand_hostlist(node_list))
        held = {n for n, s, e in drains if n in nodes and s <= begun and (e is None or begun < e)}
        if not held:
            continue
        near = sorted((t, n) for n, t in cause_events if n in nodes and ended - 600 <= t <= ended + 300)
        if not near or near[0][1] in held:
            avoided.add((job_id, end))
    return avoided


def test_draining_lowers_the_large_job_failure_rate_by_exactly_the_failures_on_drained_nodes(
    cli: Cli, lemon_fleet: tuple[synth.Fleet, Path, Path]
) -> None:
    fleet, jobs, events = lemon_fleet
    code, out, err = cli(
        "fleet", "backtest", "--jobs", str(jobs), "--events", str(events), "--min-gpus", str(MIN_GPUS), "--json"
    )
    assert (code, err) == (0, "")
    document = json.loads(out)
    BacktestOut.model_validate(document)
    large = document["large_jobs"]
    assert large["failure_rate_with_draining"] < large["failure_rate"]
    drained = {flag["node"] for step in document["steps"] for flag in step["drained"]}
    assert drained == set(fleet.incident_lemons)
    found = {(a["job_id"], a["end"][:19]) for a in document["avoided"]}
    assert found == expected_avoided(document, jobs, events)
    assert large["avoided_failures"] == len(found) > 0
    assert large["failure_rate_with_draining"] == round((large["failed"] - len(found)) / large["runs"], 4)
    assert document["cost"]["node_hours_drained"] > 0


def test_each_step_flags_what_the_report_of_the_history_before_it_flags(
    lemon_fleet: tuple[synth.Fleet, Path, Path],
) -> None:
    """The incremental per-step test against the whole analysis of the window up to the step."""
    from healthd.fleet.analyze import FleetSettings, analyze

    _, jobs, events = lemon_fleet
    lines, event_lines = jobs.read_text().splitlines(), events.read_text().splitlines()
    replay = backtest(lines, event_lines, options=BacktestSettings(min_gpus=MIN_GPUS))
    assert replay.report.start is not None
    for step in replay.steps[:4]:
        settings = FleetSettings(since=replay.report.start, until=step.time, window_after=0.0)
        report = analyze(lines, event_lines, settings)
        evidence = {v.node for v in report.lemons if v.incident_evidence}
        drained_so_far = {f.node for s in replay.steps if s.time <= step.time for f in s.flagged}
        assert {f.node for f in step.flagged} <= evidence
        assert evidence <= drained_so_far


@pytest.mark.parametrize(("min_gpus", "outcome"), [(MIN_GPUS, "helped"), (1_000_000, "no_large_runs")])
def test_the_json_carries_the_verdict_the_text_starts_with(
    cli: Cli, lemon_fleet: tuple[synth.Fleet, Path, Path], min_gpus: int, outcome: str
) -> None:
    _, jobs, events = lemon_fleet
    given = ("fleet", "backtest", "--jobs", str(jobs), "--events", str(events), "--min-gpus", str(min_gpus))
    code, out, err = cli(*given, "--json")
    assert (code, err) == (0, "")
    document = json.loads(out)
    BacktestOut.model_validate(document)
    assert document["verdict"]["outcome"] == outcome
    code, text, _ = cli(*given)
    assert code == 0 and text.split("\n")[0] == f"verdict: {document['verdict']['text']}"
    if outcome == "helped":
        large = document["large_jobs"]
        assert f"({large['avoided_failures']} of {large['failed']} failures avoided)" in document["verdict"]["text"]


def test_the_backtest_schema_file_is_up_to_date() -> None:
    assert (REPO / "docs/fleet-backtest.schema.json").read_text() == json_schema()


def test_the_table_names_the_drained_nodes_and_the_rates(cli: Cli, lemon_fleet: tuple[synth.Fleet, Path, Path]) -> None:
    fleet, jobs, events = lemon_fleet
    code, out, _ = cli("fleet", "backtest", "--jobs", str(jobs), "--events", str(events), "--min-gpus", "64")
    assert code == 0
    assert "backtest: 12 steps of 7 days, large jobs >= 64 GPUs" in out
    assert "with draining" in out and "node-hours drained" in out
    for node in fleet.incident_lemons:
        assert f"  {node}  " in out


@pytest.mark.parametrize("option", [("--every", "10m"), ("--every", "soon"), ("--min-gpus", "0")])
def test_bad_options_are_usage_errors(
    cli: Cli, lemon_fleet: tuple[synth.Fleet, Path, Path], option: tuple[str, str]
) -> None:
    _, jobs, events = lemon_fleet
    code, _, err = cli("fleet", "backtest", "--jobs", str(jobs), "--events", str(events), *option)
    assert code == 64
    assert option[0] in err


@pytest.mark.parametrize("prefix", ["healthd:", "site hc:"])
def test_a_lemon_resumed_by_an_administrator_comes_back_and_is_drained_again_only_on_a_new_incident(
    lemon_fleet: tuple[synth.Fleet, Path, Path], prefix: str
) -> None:
    fleet, jobs, events = lemon_fleet
    lines, event_lines = jobs.read_text().splitlines(), events.read_text().splitlines()
    # A prefix of two words ([slurm] reason_prefix allows it) is recognised whole.
    settings = FleetSettings(rules=CauseRules(prefix, DEFAULT_CAUSES))
    first = backtest(lines, event_lines, settings, BacktestSettings(min_gpus=MIN_GPUS))
    drain = first.drains[0]
    node = drain.node
    clock = datetime.datetime.fromtimestamp
    resumed = drain.start + 86400
    # The accounting shows healthd's LEMON drain of the node, resumed a day later.
    lemon = (
        f"synth|{node}|{clock(drain.start + 60):%Y-%m-%dT%H:%M:%S}|{clock(resumed):%Y-%m-%dT%H:%M:%S}|"
        f"DRAIN|root(0)|{prefix} LEMON 7 incidents"
    )
    again = backtest(lines, [*event_lines, lemon], settings, BacktestSettings(min_gpus=MIN_GPUS))
    mine = [d for d in again.drains if d.node == node]
    assert mine[0].start == drain.start and mine[0].end == resumed
    incidents = sorted(t for t, _ in fleet.incidents[node] if t > resumed)
    assert len(mine) > 1, "drained again after a new incident"
    assert mine[1].start > incidents[0]
    returned = [s for s in again.steps if node in s.returned]
    assert returned and returned[0].time > resumed


def test_the_html_page_has_a_backtest_section(
    cli: Cli, lemon_fleet: tuple[synth.Fleet, Path, Path], tmp_path: Path
) -> None:
    fleet, jobs, events = lemon_fleet
    page = tmp_path / "report.html"
    inputs = ("--jobs", str(jobs), "--events", str(events), "--min-gpus", "64")
    code, _, _ = cli("fleet", "backtest", *inputs, "--html", str(page))
    assert code == 0
    html = page.read_text()
    section = html[html.index('<section id="backtest">') :]
    assert "with draining" in section and "Assumptions" in section
    for node in fleet.incident_lemons:
        assert f"<td>{node}</td>" in section
    assert '<div class="plots">' in html  # the report's own page, the section after it


def test_the_verdict_and_the_chart_give_the_rates_by_step_and_name_the_silent_lemons(
    cli: Cli, lemon_fleet: tuple[synth.Fleet, Path, Path], tmp_path: Path
) -> None:
    fleet, jobs, events = lemon_fleet
    lines, event_lines = jobs.read_text().splitlines(), events.read_text().splitlines()
    bt = backtest(lines, event_lines, None, BacktestSettings(min_gpus=MIN_GPUS))
    # The steps' intervals hold every large run, failure and avoided failure of the replay, once.
    assert sum(r.runs for r in bt.by_step) == bt.large_runs
    assert sum(r.failed for r in bt.by_step) == bt.large_failed
    assert sum(r.avoided for r in bt.by_step) == len(bt.avoided) > 0
    assert len(bt.by_step) == len(bt.steps)
    assert all(r.start < r.end for r in bt.by_step) and bt.by_step[-1].end == bt.report.end

    page = tmp_path / "report.html"
    inputs = ("--jobs", str(jobs), "--events", str(events), "--min-gpus", str(MIN_GPUS))
    code, out, _ = cli("fleet", "backtest", *inputs, "--html", str(page))
    assert code == 0
    drained = sorted({d.node for d in bt.drains})
    assert out.splitlines()[0] == (
        f"verdict: draining these {len(drained)} nodes ({', '.join(drained)}) would have cut failures of runs of "
        f">= {MIN_GPUS} GPUs from {100 * bt.large_failed / bt.large_runs:.1f}% to "
        f"{100 * (bt.large_failed - len(bt.avoided)) / bt.large_runs:.1f}% "
        f"({len(bt.avoided)} of {bt.large_failed} failures avoided)"
    )
    silent = [line for line in out.splitlines() if "silent lemon" in line]
    assert len(silent) == 1 and "--drain-silent" in silent[0]
    assert all(node in silent[0] for node in fleet.silent_lemons)

    section = page.read_text().split('<section id="backtest">', 1)[1]
    chart = section.split('<svg class="plot" id="plot-backtest"', 1)[1].split("</svg>", 1)[0]
    drawn = [(m[0], float(m[1])) for m in re.findall(r'data-series="([^"]+)" data-rate="([0-9.]+)"', chart)]
    steps = [r for r in bt.by_step if r.runs]
    assert [s for s, _ in drawn] == ["as it was", "with draining"] * len(steps)
    for step, (was, now) in zip(steps, zip(drawn[::2], drawn[1::2])):
        assert was[1] == round(100 * step.failed / step.runs, 2)
        assert now[1] == round(100 * (step.failed - step.avoided) / step.runs, 2)
    assert "verdict: draining these" in section and "silent lemon" in section

    code, out, _ = cli("fleet", "backtest", *inputs, "--drain-silent")
    assert code == 0 and "silent lemon" not in out
    assert all(node in out.splitlines()[0] for node in fleet.silent_lemons)


def test_a_drain_that_avoids_nothing_says_it_would_not_have_helped(
    cli: Cli, lemon_fleet: tuple[synth.Fleet, Path, Path]
) -> None:
    _, jobs, events = lemon_fleet
    # No run of this fleet holds 4096 GPUs: the verdict says there is nothing to judge, and how to count more.
    code, out, _ = cli("fleet", "backtest", "--jobs", str(jobs), "--events", str(events), "--min-gpus", "4096")
    assert code == 0 and out.startswith("verdict: no runs of >= 4096 GPUs started in the replay: nothing to judge")
