"""Replaying the window: what draining the lemons would have changed for large jobs (docs/fleet.md, "Backtest").

At each step (``every`` seconds from the window's start) the guarded lemon test runs
on the history before the step only: runs that ended before it, incidents that
started before it. The nodes it flags with incident evidence (all flagged nodes
with ``drain_silent``), as ``fleet lemons --drain`` would drain them, are out from
the step on, until an administrator's event on the node that started after the
drain has ended (a repair, a return to service); a returned node is drained again
only on an incident after its return. Then, for each run of at least ``min_gpus``
GPUs that started in the replay (from the first step on): did it hold a drained
node when it started? Slurm lets running jobs finish on a draining node, so only
the runs that started there would not have been placed there.

The per-step test is incremental (running sums): the runs are read once (the
report's own pass, through ``analyze.Observer``), sorted by end, and each step adds
the runs of its week to per-(node, user, partition) counters. A node's failure
test needs the expectation from its users' current rates; the user left out
(``lemons._failure_test``) only matters for a node whose whole test is below
``alpha``, so only those nodes get the full ``analyze._by_user`` (the flagged set and
the flagged nodes' q-values are the same as a full recomputation: a p-value above
``alpha`` changes neither under Benjamini-Hochberg).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from operator import mul
from pathlib import Path
from typing import Callable, Iterable, NamedTuple, Optional, Union

from healthd.fleet.analyze import FleetReport, FleetSettings, Run, Sources, _by_user, analyze
from healthd.fleet.columnar import Counted
from healthd.fleet.columnar_backtest import Key, PlainKey, Session
from healthd.fleet.hosts import expand
from healthd.fleet.lemons import LemonVerdict, NodeSignals, detect, upper_tail
from healthd.fleet.sacct import SacctTable
from healthd.fleet.scripts import Blocks
from healthd.slurm.reasons import Reasons

WEEK = 7 * 86400.0
LARGE_GPUS = 512

DEFAULT_SOURCES = Sources()  # the inputs' names in an error, when the caller names none


class BacktestSettings(NamedTuple):
    every: float = WEEK  # seconds between steps
    min_gpus: int = LARGE_GPUS  # a large job: at least this many GPUs
    drain_silent: bool = False  # drain lemons flagged on job failures alone, as ``lemons --drain-silent``


class Flag(NamedTuple):
    """A node the test flagged at a step and the replay drained, with the evidence before the step."""

    node: str
    time: float
    out_count: int
    counted_failures: int
    counted_expected: float  # 0 where the failure test needed no expectation (below its floor)
    q_value: float
    incident_evidence: bool
    why: tuple[str, ...]


class BacktestStep(NamedTuple):
    time: float
    flagged: tuple[Flag, ...]  # drained at this step
    returned: tuple[str, ...]  # came back since the step before (an administrator's event ended)
    below_floors: tuple[str, ...]


class Drain(NamedTuple):
    node: str
    start: float
    end: Optional[float]  # None: still drained at the end of the window


class LargeRun(NamedTuple):
    """A large run that started on a drained node."""

    job_id: str
    start: float
    end: float
    gpus: int
    failed: bool
    drained: tuple[str, ...]  # the drained nodes it held
    attributed_to: Optional[str]  # the node its failure was attributed to, if any


class StepRate(NamedTuple):
    """The large runs that started between one step and the next: how many, failed, and failed but avoided."""

    start: float
    end: float
    runs: int
    failed: int
    avoided: int


class Backtest(NamedTuple):
    report: FleetReport
    settings: BacktestSettings
    steps: tuple[BacktestStep, ...]
    drains: tuple[Drain, ...]
    large_runs: int  # started in the replay
    large_failed: int
    held: tuple[LargeRun, ...]  # large runs that started holding a drained node
    node_hours_drained: float
    unschedulable: int  # large runs needing more nodes than were left in service
    by_step: tuple[StepRate, ...] = ()  # the large runs of each step's interval, for the chart

    @property
    def avoided(self) -> tuple[LargeRun, ...]:
        """Failed runs that held a drained node, their failure attributed to one of those or to none.

        A failure attributed to another node would have happened without the drain.
        """
        return tuple(
            run for run in self.held if run.failed and (run.attributed_to is None or run.attributed_to in run.drained)
        )

    @property
    def failure_rate(self) -> Optional[float]:
        return self.large_failed / self.large_runs if self.large_runs else None

    @property
    def failure_rate_elsewhere(self) -> Optional[float]:
        """The rate of the large runs that held no drained node: the assumed fate of the others, run elsewhere."""
        rest = self.large_runs - len(self.held)
        return (self.large_failed - len(self.avoided)) / rest if rest else None

    @property
    def failure_rate_drained(self) -> Optional[float]:
        """The rate had the drained nodes been out: the avoided failures ran elsewhere and did not fail."""
        return (self.large_failed - len(self.avoided)) / self.large_runs if self.large_runs else None


class _Recorder:
    """``analyze.Observer``: keeps the single-node runs compactly, the large runs whole, the administrators' events.

    Where DuckDB reads the jobs file (``session``), it sees only the runs the Python reader
    reads (failed runs, large jobs' runs, runs of jobs that exclude nodes, bad lines); DuckDB
    tallies the others by step (``columnar_backtest``).
    """

    def __init__(self, min_gpus: int, reasons: Reasons, session: Session) -> None:
        self.min_gpus = min_gpus
        self.reasons = reasons
        self.session = session
        self.keys: dict[Key, int] = {}
        self.first = array("q")  # per key: the line of its first run
        self.ends = array("d")
        self.key_of = array("l")
        self.failed = bytearray()
        # (run index, (job id, node, partition)) of the runs whose job's request may have placed them
        self.pins: list[tuple[int, tuple[str, str, str]]] = []
        self.pinned: frozenset[tuple[str, str, str]] = frozenset()
        self.large: list[Run] = []
        self.admin: dict[str, list[tuple[float, Optional[float]]]] = {}

    def run(self, run: Run, number: int) -> None:
        job_id, user, partition, node_list, _, end, gpus, nnodes, failed, shared, pin = run
        if gpus >= self.min_gpus:
            self.large.append(run)
        if nnodes != 1 or shared:
            return
        key = (node_list, user, partition)
        index = self.keys.get(key)
        if index is None:
            index = self.keys[key] = len(self.keys)
            self.first.append(number)
        if pin:
            self.pins.append((len(self.ends), (job_id, node_list, partition)))
        self.ends.append(end)
        self.key_of.append(index)
        self.failed.append(failed)

    def event(self, names: tuple[str, ...], start: float, end: Optional[float], reason: str) -> None:
        # What ends a drain: healthd's own lemon drain (an administrator resumed the node) or
        # its repair (``healthd: REPAIR CODE``: the node went to repair and came back). The
        # prefix may be several words (``[slurm] reason_prefix``): Reasons knows it whole.
        reason = reason.strip()
        if self.reasons.is_lemon(reason) or self.reasons.is_repair(reason):
            for name in names:
                self.admin.setdefault(name, []).append((start, end))

    def placed_runs(self, runs: frozenset[tuple[str, str, str]]) -> None:
        self.pinned = runs

    def count(
        self, path: Path, table: SacctTable, window: tuple[Optional[float], Optional[float]], pins: frozenset[str]
    ) -> Optional[Counted]:
        return self.session.count(path, table, window, pins)


class _History:
    """Running sums of the single-node runs up to a step, and the signals the lemon test needs from them."""

    def __init__(
        self, recorder: _Recorder, nodes: list[str], start: float, every: float, plain: Optional[list[PlainKey]]
    ) -> None:
        self.nodes = nodes
        node_id = {name: i for i, name in enumerate(nodes)}
        # ``plain``: DuckDB's numbers of the plain runs' keys renumbered too, ``advance`` adds their tallies.
        by_node, renumber, self.plain = _in_node_order(recorder, nodes, plain)
        self.session = recorder.session
        self.key_node = [node_id[name] for name, _, _ in by_node]
        ups: dict[tuple[str, str], int] = {}
        self.key_up = [ups.setdefault((user, partition), len(ups)) for _, user, partition in by_node]
        self.ups = list(ups)
        self.slices = [(0, 0)] * len(nodes)
        for index, node in enumerate(self.key_node):
            low = self.slices[node][0] if self.slices[node][1] else index
            self.slices[node] = (low, index + 1)
        pinned = {i for i, run in recorder.pins if run in recorder.pinned}
        # The runs by the step they end before: within a step their order does not matter.
        self.buckets: dict[int, array[int]] = {}
        failed = recorder.failed
        for i, (end, key) in enumerate(zip(recorder.ends, recorder.key_of)):
            # A run's key, failure and pin in one int: key * 4 + pinned * 2 + failed.
            code = renumber[key] * 4 + (2 if i in pinned else 0) + failed[i]
            step = int((end - start) // every)
            found = self.buckets.get(step)
            if found is None:
                found = self.buckets[step] = array("q")
            found.append(code)
        self.key_runs = [0] * len(by_node)  # runs not pinned, per key
        self.key_failures = [0] * len(by_node)
        self.up_runs = [0] * len(self.ups)
        self.up_failures = [0] * len(self.ups)
        # Per node id: all single-node runs, their failures, the pinned ones, the counted failures.
        self.all_runs = [0] * len(nodes)
        self.all_failures = [0] * len(nodes)
        self.pinned_runs = [0] * len(nodes)
        self.pinned_failures = [0] * len(nodes)
        self.counted_failures = [0] * len(nodes)

    def advance(self, step: int) -> None:
        """Add the runs that ended in step ``step`` (0: before the first step)."""
        key_node, key_up = self.key_node, self.key_up
        all_runs, all_failures, counted = self.all_runs, self.all_failures, self.counted_failures
        key_runs, key_failures, up_runs, up_failures = self.key_runs, self.key_failures, self.up_runs, self.up_failures
        for code in self.buckets.pop(step, ()):
            key, fail = code >> 2, code & 1
            node = key_node[key]
            all_runs[node] += 1
            all_failures[node] += fail
            if code & 2:
                self.pinned_runs[node] += 1
                self.pinned_failures[node] += fail
                continue
            key_runs[key] += 1
            key_failures[key] += fail
            up = key_up[key]
            up_runs[up] += 1
            up_failures[up] += fail
            counted[node] += fail
        if self.plain:
            self._advance_plain(step)

    def _advance_plain(self, step: int) -> None:
        """Add DuckDB's tallies of the plain single-node runs of ``step``: none failed, none was pinned."""
        key_node, key_up, plain = self.key_node, self.key_up, self.plain
        all_runs, key_runs, up_runs = self.all_runs, self.key_runs, self.up_runs
        for kid, runs in self.session.step(step):
            key = plain[kid]
            all_runs[key_node[key]] += runs
            key_runs[key] += runs
            up_runs[key_up[key]] += runs

    def signals(self, outs: Counter[str], min_failures: int, alpha: float) -> list[NodeSignals]:
        """Every node's signals from the runs added so far (see the module's docstring for the shortcut)."""
        rates = [fails / runs if runs else 0.0 for runs, fails in zip(self.up_runs, self.up_failures)]
        expected_of = list(map(mul, self.key_runs, map(rates.__getitem__, self.key_up)))
        signals = []
        for node, name in enumerate(self.nodes):
            low, high = self.slices[node]
            counted = self.counted_failures[node]
            expected, failing, top = 0.0, 0, ("", 0, 0.0)
            if counted >= min_failures:
                expected = sum(expected_of[low:high])
                # A Poisson tail from at or below the mean is about one half or more: no evidence
                # at an alpha below that, and not worth a sum of terms.
                if (counted > expected or alpha >= 0.4) and upper_tail(counted, expected) <= alpha:
                    failing, top = self._top_user(low, high, rates)
            signals.append(
                NodeSignals(
                    node=name,
                    out_count=outs.get(name, 0),
                    xids=(),
                    single_node_failures_caused=0,
                    multi_node_failures_caused=0,
                    single_node_runs=self.all_runs[node],
                    single_node_failures=self.all_failures[node],
                    expected_single_node_failures=0.0,
                    excluded_by_jobs=0,
                    pinned_runs=self.pinned_runs[node],
                    pinned_failures=self.pinned_failures[node],
                    counted_failures=counted,
                    counted_expected=expected,
                    failing_users=failing,
                    top_user=top[0],
                    top_user_failures=top[1],
                    top_user_expected=top[2],
                )
            )
        return signals

    def _top_user(self, low: int, high: int, rates: list[float]) -> tuple[int, tuple[str, int, float]]:
        """The report's own reckoning (``analyze._by_user``) of one node's failing users and top user."""
        rows = [(self.ups[self.key_up[k]], self.key_runs[k], self.key_failures[k]) for k in range(low, high)]
        _, _, failing, top = _by_user(rows, dict(zip(self.ups, rates)))
        return failing, top


def _in_node_order(
    recorder: _Recorder, nodes: list[str], plain: Optional[list[PlainKey]]
) -> tuple[list[Key], array[int], array[int]]:
    """Every key, grouped by node in ``nodes``' order, each node's keys in the order the reader first saw them.

    Grouped, not sorted: a year has millions of keys. With DuckDB's keys (``plain``), the
    order of a key is the line of its first run, DuckDB's or the Python reader's. Returns the
    keys and the new number of each of the recorder's keys and of each of DuckDB's.
    """
    groups: dict[str, list[tuple[int, Key, int, int]]] = {}
    if plain is None:
        for key, index in recorder.keys.items():
            groups.setdefault(key[0], []).append((index, key, index, -1))
    else:
        first, python = recorder.first, dict(recorder.keys)  # popped where DuckDB has the key too
        for kid, (node, user, partition, line) in enumerate(plain):
            key = (node, user, partition)
            index = python.pop(key, -1)
            groups.setdefault(node, []).append((line if index < 0 else min(line, first[index]), key, index, kid))
        for key, index in python.items():
            groups.setdefault(key[0], []).append((first[index], key, index, -1))
        for group in groups.values():
            group.sort()  # no two keys share a first line
    by_node: list[Key] = []
    renumber = array("q", bytes(8 * len(recorder.keys)))
    renumber_plain = array("q", bytes(8 * (len(plain) if plain else 0)))
    for name in nodes:
        for _, key, index, kid in groups.get(name, ()):
            if index >= 0:
                renumber[index] = len(by_node)
            if kid >= 0:
                renumber_plain[kid] = len(by_node)
            by_node.append(key)
    return by_node, renumber, renumber_plain


class _Drains:
    """Which nodes the replay holds out, since when, and their administrators' events that end a drain."""

    def __init__(self, admin: dict[str, list[tuple[float, Optional[float]]]], incident_starts: dict[str, list[float]]):
        self.admin = {name: sorted(events, key=lambda e: e[0]) for name, events in admin.items()}
        self.incident_starts = incident_starts
        self.since: dict[str, float] = {}
        self.returned_at: dict[str, float] = {}
        self.done: list[Drain] = []

    def _return(self, node: str, since: float) -> Optional[float]:
        """The end of the first administrator's event on ``node`` that started after ``since`` and ended."""
        events = self.admin.get(node, [])
        for _, end in events[bisect_left(events, (since,)) :]:
            if end is not None:
                return end
        return None

    def settle(self, until: float) -> tuple[str, ...]:
        """End the drains whose node came back before ``until``; the nodes that came back."""
        back = []
        for node, since in list(self.since.items()):
            end = self._return(node, since)
            if end is not None and end < until:
                del self.since[node]
                self.returned_at[node] = end
                self.done.append(Drain(node, since, end))
                back.append(node)
        return tuple(sorted(back))

    def may_drain(self, node: str) -> bool:
        """Not out already, and (if it came back) an incident of its own since."""
        if node in self.since:
            return False
        back = self.returned_at.get(node)
        return back is None or bisect_right(self.incident_starts.get(node, []), back) < len(
            self.incident_starts.get(node, [])
        )

    def finish(self) -> tuple[Drain, ...]:
        still = [Drain(node, since, None) for node, since in self.since.items()]
        return tuple(sorted((*self.done, *still), key=lambda d: (d.start, d.node)))


def _flag(verdict: LemonVerdict, time: float) -> Flag:
    s = verdict.signals
    return Flag(
        s.node,
        time,
        s.out_count,
        s.counted_failures,
        s.counted_expected,
        verdict.q_value,
        verdict.incident_evidence,
        verdict.why,
    )


def _history(report: FleetReport, recorder: _Recorder, every: float) -> _History:
    """The running sums before the first step, with DuckDB's tallies of the plain runs by step where it counted."""
    assert report.start is not None and report.end is not None
    plain = recorder.session.plain_keys() if recorder.session.counted else None
    # The report's nodes are every node of a run or an event; the union only guards that.
    named = {v.node for v in report.verdicts} | {name for name, _, _ in recorder.keys}
    nodes = sorted(named if plain is None else named | {found[0] for found in plain})
    history = _History(recorder, nodes, report.start, every, plain)
    if plain is not None:
        recorder.session.tally(report.start, every, _steps(report.start, report.end, every))
    return history


def _replay(
    report: FleetReport, recorder: _Recorder, options: BacktestSettings
) -> tuple[tuple[BacktestStep, ...], _Drains]:
    settings = report.settings
    own = sorted((i.start, i.node) for i in report.incidents if not i.shared)
    starts: dict[str, list[float]] = {}
    for start, node in own:
        starts.setdefault(node, []).append(start)
    assert report.start is not None and report.end is not None
    history = _history(report, recorder, options.every)
    drains = _Drains(recorder.admin, starts)
    outs: Counter[str] = Counter()
    seen = 0
    steps: list[BacktestStep] = []
    at = report.start + options.every
    while at < report.end:
        history.advance(len(steps))
        while seen < len(own) and own[seen][0] < at:
            outs[own[seen][1]] += 1
            seen += 1
        returned = drains.settle(at)
        days = (at - report.start) / 86400
        signals = history.signals(outs, settings.floors.min_failures, settings.alpha)
        verdicts, _ = detect(signals, settings.alpha, settings.floors, days)
        flagged = []
        for verdict in verdicts:
            wanted = verdict.flagged and (verdict.incident_evidence or options.drain_silent)
            if wanted and drains.may_drain(verdict.node):
                drains.since[verdict.node] = at
                flagged.append(_flag(verdict, at))
        steps.append(BacktestStep(at, tuple(flagged), returned, settings.floors.fleet_notes(len(signals), days)))
        at += options.every
    drains.settle(report.end)
    return tuple(steps), drains


def _steps(start: float, end: float, every: float) -> int:
    """How many steps ``_replay`` takes: the same sums of floats."""
    steps, at = 0, start + every
    while at < end:
        steps += 1
        at += every
    return steps


def _held(run: Run, drains: tuple[Drain, ...]) -> tuple[str, ...]:
    names = expand(run[3]) if run[7] > 1 else (run[3],)
    start = run[4]
    out = {d.node for d in drains if d.start <= start and (d.end is None or start < d.end)}
    return tuple(sorted(name for name in names if name in out))


def _cost(report: FleetReport, drains: tuple[Drain, ...], large: list[Run]) -> tuple[float, int]:
    """Node-hours drained within the window, and the large runs that needed more nodes than were left in service."""
    assert report.end is not None
    hours = sum(((d.end if d.end is not None else report.end) - d.start) / 3600 for d in drains)
    fleet = len(report.verdicts)
    short = 0
    for run in large:
        out = sum(1 for d in drains if d.start <= run[4] and (d.end is None or run[4] < d.end))
        short += run[7] > fleet - out
    return hours, short


def backtest(
    jobs: Iterable[str],
    events: Iterable[str],
    settings: Optional[FleetSettings] = None,
    options: Optional[BacktestSettings] = None,
    sources: Sources = DEFAULT_SOURCES,
    submit_lines: Optional[Callable[[], Iterable[str]]] = None,
    job_names: Optional[dict[str, str]] = None,
    scripts: Union[str, Blocks, None] = None,
) -> Backtest:
    """The report of the whole window and its replay in steps (``FleetInputError`` if an input is unusable)."""
    options = options or BacktestSettings()
    settings = settings or FleetSettings()
    with Session(options.min_gpus) as session:
        recorder = _Recorder(options.min_gpus, Reasons(settings.rules.healthd_prefix), session)
        report = analyze(jobs, events, settings, sources, submit_lines, recorder, job_names, scripts)
        if report.start is None or report.end is None:
            return Backtest(report, options, (), (), 0, 0, (), 0.0, 0)
        steps, state = _replay(report, recorder, options)
    drains = state.finish()
    first = report.start + options.every
    large = [run for run in recorder.large if run[4] >= first]
    cause = {(a.job_id, a.end): a.node for a in report.attributed}
    held = []
    for run in large:
        out = _held(run, drains)
        if out:
            held.append(LargeRun(run[0], run[4], run[5], run[6], run[8], out, cause.get((run[0], run[5]))))
    hours, short = _cost(report, drains, large)
    failed = sum(1 for run in large if run[8])
    result = Backtest(report, options, steps, drains, len(large), failed, tuple(held), hours, short)
    return result._replace(by_step=_by_step(result, large))


def _by_step(result: Backtest, large: list[Run]) -> tuple[StepRate, ...]:
    """The large runs, failed runs and avoided failures of each step's interval, by start time."""
    assert result.report.end is not None
    bounds = [step.time for step in result.steps] + [result.report.end]
    avoided = Counter((run.job_id, run.start) for run in result.avoided)
    rates = []
    for start, end in zip(bounds, bounds[1:]):
        inside = [run for run in large if start <= run[4] < end or (end == bounds[-1] and run[4] == end)]
        rates.append(
            StepRate(
                start,
                end,
                len(inside),
                sum(1 for run in inside if run[8]),
                sum(avoided[(run[0], run[4])] for run in inside),
            )
        )
    return tuple(rates)
