"""The analysis: sacct job runs and sacctmgr events in, one ``FleetReport`` out. Live and offline both end here.

``analyze(jobs, events, settings)`` takes the two texts as iterables of lines
(an open file, ``str.splitlines()``), reads the events first (thousands), then
streams the job runs (millions) once, keeping per-bucket and per-node counters
and only the failed runs' details, so memory grows with the fleet, not with the
number of runs. The rules are the study's (docs/fleet.md):

- a run that ended FAILED or NODE_FAIL is attributed to the earliest cause event on
  any of its nodes that started within [end - window_before, end + window_after];
- MTTF of a bucket (largest power of two <= its GPUs) = its runs' wall hours /
  its attributed failures; r_f is fitted over all GPU runs (``reliability``);
- every run counts, requeued runs included (sacct -D prints each).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Optional

from healthd.fleet.causes import CauseRules, Incident, NodeEvents, group_incidents
from healthd.fleet.hosts import HostlistError, excluded, expand
from healthd.fleet.lemons import Baseline, NodeSignals, Verdict, detect
from healthd.fleet.reliability import (
    PROJECTION_GPUS,
    Bucket,
    SizePoint,
    bucket,
    fit_rate,
    size_points,
)
from healthd.fleet.sacct import (
    EVENT_COLUMNS,
    JOB_COLUMNS,
    InputSummary,
    LineTally,
    LocalTimes,
    cached,
    first_word,
    open_table,
    sacct_command,
    sacctmgr_command,
    tres_gpus,
)

FAILED_STATES = frozenset({"FAILED", "NODE_FAIL"})
DEFAULT_GPUS_PER_NODE = 8
_XID = re.compile(r"S?XID_\d+")


@dataclass(frozen=True)
class FleetSettings:
    """Everything the analysis can be told; the defaults are the study's."""

    window_before: float = 600.0  # seconds before a run's end in which a cause may start
    window_after: float = 300.0  # and after it
    incident_gap: float = 300.0  # cause events on one node this close are one incident
    rules: CauseRules = field(default_factory=CauseRules)
    checkpoint_interval: float = 1800.0  # seconds, for expected ETTR
    restart_overhead: float = 600.0  # seconds; the study saw 5-20 minutes
    gpus_per_node: Optional[int] = None  # None: the most common GPUs per node among the runs
    alpha: float = 0.05  # the false discovery rate of the lemon test
    since: Optional[float] = None  # only runs that ended in [since, until] (epoch seconds)
    until: Optional[float] = None


@dataclass(frozen=True)
class Attributed:
    """A failed run and the cause it is attributed to."""

    job_id: str
    node: str
    cause: str
    state: str
    gpus: int
    nodes: int
    end: float
    hours: float
    user: str
    incident: int  # index into FleetReport.incidents


@dataclass(frozen=True)
class CauseTotal:
    """One cause code of the taxonomy."""

    code: str
    failures: int
    gpu_hours_lost: float
    incidents: int


@dataclass(frozen=True)
class FleetReport:
    """All the analysis found, as values; ``render`` turns it into a table, JSON or HTML."""

    settings: FleetSettings
    jobs: InputSummary
    events: InputSummary
    start: Optional[float]
    end: Optional[float]
    runs: int
    failed_runs: int
    gpus_per_node: int
    buckets: tuple[Bucket, ...]
    rate_per_node_hour: Optional[float]
    sizes: tuple[SizePoint, ...]  # the fitted model at each observed bucket
    projection: tuple[SizePoint, ...]
    attributed: tuple[Attributed, ...]
    taxonomy: tuple[CauseTotal, ...]
    incidents: tuple[Incident, ...]
    verdicts: tuple[Verdict, ...]  # every node, most suspicious first
    baseline: Baseline
    other_events: int  # events whose reason is not a cause (maintenance, administrators)

    @property
    def lemons(self) -> tuple[Verdict, ...]:
        return tuple(v for v in self.verdicts if v.flagged)

    @property
    def days(self) -> float:
        return (self.end - self.start) / 86400 if self.start is not None and self.end is not None else 0.0


@dataclass
class _Events:
    incidents: list[Incident]
    index: dict[str, NodeEvents]
    nodes: set[str]
    other: int
    summary: InputSummary
    last: Optional[float]


def _read_events(lines: Iterable[str], source: str, settings: FleetSettings) -> _Events:
    table = open_table(lines, source, EVENT_COLUMNS, sacctmgr_command())
    i_node, i_start, i_end, i_reason = (table.index(c) for c in ("NodeName", "TimeStart", "TimeEnd", "Reason"))
    times = LocalTimes()
    tally = LineTally(source)
    low = None if settings.since is None else settings.since - settings.window_before
    high = None if settings.until is None else settings.until + settings.window_after
    causes: list[tuple[str, float, Optional[float], str]] = []
    nodes: set[str] = set()
    other = 0
    last: Optional[float] = None
    for number, line in table.rows:
        fields = table.split(line)
        if fields is None:
            tally.reject(number, f"{len(line.split('|'))} fields, the header has {table.width}")
            continue
        try:
            names = expand(fields[i_node].strip())
            start = times(fields[i_start])
            end = times(fields[i_end])
        except (ValueError, HostlistError) as exc:
            tally.reject(number, str(exc))
            continue
        if not names or start is None:  # a cluster-wide event (no node), or one never started
            tally.skipped += 1
            continue
        if (low is not None and start < low) or (high is not None and start > high):
            tally.skipped += 1
            continue
        tally.records += 1
        nodes.update(names)
        last = start if last is None else max(last, start)
        code = settings.rules.classify(fields[i_reason])
        if code is None:
            other += 1
            continue
        causes.extend((name, start, end, code) for name in names)
    incidents, index = group_incidents(causes, settings.incident_gap)
    return _Events(incidents, index, nodes, other, tally.summary(), last)


@dataclass
class _Node:
    """Per-node counters while the runs stream by."""

    users: dict[str, list[int]] = field(default_factory=dict)  # user -> [single-node runs, failures]
    single_caused: int = 0
    multi_caused: int = 0
    excluded_by: int = 0


@dataclass
class _Jobs:
    """Everything kept from the job runs."""

    tally: LineTally
    buckets: dict[int, list[float]] = field(default_factory=dict)  # gpus -> [runs, hours, node-hours, failures]
    nodes: dict[str, _Node] = field(default_factory=dict)
    users: dict[str, list[int]] = field(default_factory=dict)  # user -> [single-node runs, failures]
    multi_lists: set[str] = field(default_factory=set)
    attributed: list[Attributed] = field(default_factory=list)
    per_node_gpus: Counter[int] = field(default_factory=Counter)
    runs: int = 0
    failed: int = 0
    first: Optional[float] = None
    last: Optional[float] = None

    def node(self, name: str) -> _Node:
        found = self.nodes.get(name)
        if found is None:
            found = self.nodes[name] = _Node()
        return found


def _attribute(
    names: tuple[str, ...], end: float, events: _Events, settings: FleetSettings
) -> Optional[tuple[str, int]]:
    """(node, event position) of the earliest cause on ``names`` in the window around ``end``, or None."""
    low, high = end - settings.window_before, end + settings.window_after
    best: Optional[tuple[float, str, int]] = None
    for name in names:
        node_events = events.index.get(name)
        if node_events is None:
            continue
        position = node_events.first_in(low, high)
        if position is not None:
            candidate = (node_events.starts[position], name, position)
            if best is None or candidate < best:
                best = candidate
    return None if best is None else (best[1], best[2])


def _read_jobs(lines: Iterable[str], source: str, settings: FleetSettings, events: _Events) -> _Jobs:
    table = open_table(lines, source, JOB_COLUMNS, sacct_command())
    i_id, i_user, i_state, i_start, i_end, i_nnodes, i_list, i_tres = (
        table.index(c) for c in ("JobID", "User", "State", "Start", "End", "NNodes", "NodeList", "AllocTRES")
    )
    i_submit = table.optional("SubmitLine")
    times = LocalTimes()
    gpus_of = cached(tres_gpus)
    jobs = _Jobs(LineTally(source))
    tally = jobs.tally
    since, until = settings.since, settings.until
    split = table.split
    for number, line in table.rows:
        fields = split(line)
        if fields is None:
            tally.reject(number, f"{len(line.split('|'))} fields, the header has {table.width}")
            continue
        try:
            start = times(fields[i_start])
            end = times(fields[i_end])
            if start is None or end is None:  # never started, or still running
                tally.skipped += 1
                continue
            if end < start:
                raise ValueError(f"End {fields[i_end]} is before Start {fields[i_start]}")
            nnodes = int(fields[i_nnodes])
            gpus = gpus_of(fields[i_tres])
            node_list = fields[i_list]
            if nnodes < 1:
                raise ValueError(f"NNodes {nnodes} of a run that started")
        except ValueError as exc:
            tally.reject(number, str(exc))
            continue
        if (since is not None and end < since) or (until is not None and end > until):
            tally.skipped += 1
            continue
        state = first_word(fields[i_state])
        failed = state in FAILED_STATES
        user = fields[i_user]
        try:
            names = (node_list,) if nnodes == 1 else expand(node_list) if failed else ()
            excludes = excluded(fields[i_submit]) if i_submit is not None else ()
        except HostlistError as exc:
            tally.reject(number, str(exc))
            continue
        tally.records += 1
        jobs.runs += 1
        if jobs.first is None or start < jobs.first:
            jobs.first = start
        if jobs.last is None or end > jobs.last:
            jobs.last = end
        hours = (end - start) / 3600.0
        attributed = None
        if failed:
            jobs.failed += 1
            found = _attribute(names, end, events, settings)
            if found is not None:
                name, position = found
                node_events = events.index[name]
                incident = node_events.incident[position]
                attributed = Attributed(
                    fields[i_id], name, node_events.codes[position], state, gpus, nnodes, end, hours, user, incident
                )
                jobs.attributed.append(attributed)
                counters = jobs.node(name)
                if nnodes == 1:
                    counters.single_caused += 1
                else:
                    counters.multi_caused += 1
        if gpus > 0:
            stats = jobs.buckets.get(bucket(gpus))
            if stats is None:
                stats = jobs.buckets[bucket(gpus)] = [0, 0.0, 0.0, 0]
            stats[0] += 1
            stats[1] += hours
            stats[2] += hours * nnodes
            if attributed is not None:
                stats[3] += 1
            if gpus % nnodes == 0:
                jobs.per_node_gpus[gpus // nnodes] += 1
        if nnodes == 1:
            per_user = jobs.node(node_list).users.get(user)
            if per_user is None:
                per_user = jobs.nodes[node_list].users[user] = [0, 0]
            per_user[0] += 1
            fleet_user = jobs.users.get(user)
            if fleet_user is None:
                fleet_user = jobs.users[user] = [0, 0]
            fleet_user[0] += 1
            if failed:
                per_user[1] += 1
                fleet_user[1] += 1
        else:
            jobs.multi_lists.add(node_list)
        for name in excludes:
            jobs.node(name).excluded_by += 1
    return jobs


def _signals(jobs: _Jobs, events: _Events) -> list[NodeSignals]:
    """Per-node signals over every node seen in a run or an event."""
    fleet = set(jobs.nodes) | events.nodes
    for node_list in jobs.multi_lists:
        try:
            fleet.update(expand(node_list))
        except HostlistError:
            continue  # its run was counted bad already
    outs: Counter[str] = Counter(incident.node for incident in events.incidents)
    xids: dict[str, set[str]] = {}
    for incident in events.incidents:
        xids.setdefault(incident.node, set()).update(c for c in incident.codes if _XID.fullmatch(c))
    rates = {user: fails / runs for user, (runs, fails) in jobs.users.items() if runs}
    signals = []
    empty = _Node()
    for name in sorted(fleet):
        node = jobs.nodes.get(name, empty)
        runs = sum(r for r, _ in node.users.values())
        fails = sum(f for _, f in node.users.values())
        expected = sum(r * rates.get(user, 0.0) for user, (r, _) in node.users.items())
        signals.append(
            NodeSignals(
                node=name,
                out_count=outs.get(name, 0),
                xids=tuple(sorted(xids.get(name, ()))),
                single_node_failures_caused=node.single_caused,
                multi_node_failures_caused=node.multi_caused,
                single_node_runs=runs,
                single_node_failures=fails,
                expected_single_node_failures=expected,
                excluded_by_jobs=node.excluded_by,
            )
        )
    return signals


def _taxonomy(attributed: list[Attributed], incidents: list[Incident]) -> tuple[CauseTotal, ...]:
    failures: Counter[str] = Counter()
    lost: dict[str, float] = {}
    for run in attributed:
        failures[run.cause] += 1
        lost[run.cause] = lost.get(run.cause, 0.0) + run.gpus * run.hours
    seen: Counter[str] = Counter(code for incident in incidents for code in incident.codes)
    codes = set(failures) | set(seen)
    totals = [CauseTotal(code, failures[code], lost.get(code, 0.0), seen[code]) for code in codes]
    return tuple(sorted(totals, key=lambda t: (-t.failures, -t.gpu_hours_lost, -t.incidents, t.code)))


def analyze(
    jobs: Iterable[str],
    events: Iterable[str],
    settings: Optional[FleetSettings] = None,
    jobs_source: str = "jobs",
    events_source: str = "events",
) -> FleetReport:
    """The whole report from sacct's and sacctmgr's parsable output (``FleetInputError`` if one is unusable)."""
    settings = settings or FleetSettings()
    read_events = _read_events(events, events_source, settings)
    read_jobs = _read_jobs(jobs, jobs_source, settings, read_events)
    if settings.gpus_per_node is not None:
        per_node = settings.gpus_per_node
    elif read_jobs.per_node_gpus:
        per_node = read_jobs.per_node_gpus.most_common(1)[0][0]
    else:
        per_node = DEFAULT_GPUS_PER_NODE
    buckets = tuple(Bucket(gpus, int(s[0]), s[1], s[2], int(s[3])) for gpus, s in sorted(read_jobs.buckets.items()))
    rate = fit_rate(buckets)
    checkpoint_hours, restart_hours = settings.checkpoint_interval / 3600, settings.restart_overhead / 3600
    verdicts, base = detect(_signals(read_jobs, read_events), settings.alpha)
    ends = [t for t in (read_jobs.last, read_events.last) if t is not None]
    return FleetReport(
        settings=settings,
        jobs=read_jobs.tally.summary(),
        events=read_events.summary,
        start=settings.since if settings.since is not None else read_jobs.first,
        end=settings.until if settings.until is not None else (max(ends) if ends else None),
        runs=read_jobs.runs,
        failed_runs=read_jobs.failed,
        gpus_per_node=per_node,
        buckets=buckets,
        rate_per_node_hour=rate,
        sizes=size_points(tuple(b.gpus for b in buckets), per_node, rate, checkpoint_hours, restart_hours, True),
        projection=size_points(PROJECTION_GPUS, per_node, rate, checkpoint_hours, restart_hours, False),
        attributed=tuple(read_jobs.attributed),
        taxonomy=_taxonomy(read_jobs.attributed, read_events.incidents),
        incidents=tuple(read_events.incidents),
        verdicts=tuple(verdicts),
        baseline=base,
        other_events=read_events.other,
    )
