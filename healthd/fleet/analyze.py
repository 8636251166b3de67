"""The analysis: sacct job runs and sacctmgr events in, one ``FleetReport`` out. Live and offline both end here.

``analyze(jobs, events, settings)`` takes the two texts as iterables of lines
(an open file, ``healthd.text.records``), reads the events first (thousands), then
streams the job runs (millions) once, keeping per-bucket and per-node counters
and only the failed runs' details, so memory grows with the fleet, not with the
number of runs. The rules are the study's (docs/fleet.md):

- a run that ended FAILED or NODE_FAIL is attributed to the earliest cause event on
  any of its nodes that started within [end - window_before, end + window_after];
- MTTF of a bucket (largest power of two <= its GPUs) = its runs' wall hours /
  its attributed failures; r_f is fitted over all GPU runs (``reliability``);
- every run counts, requeued runs included (sacct -D prints each);
- a cause that hit many nodes at once is one shared incident, counted against
  none of them (``causes.shared_incidents``);
- a single-node run that its job's own request placed on its node (a node list, on the
  submit line or in the script's ``#SBATCH`` lines, or an exclusion of every other node of
  its partition) is the user's choice: it is kept apart (``pinned``) and is no failure
  evidence against the node.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple, Optional, Protocol, Union

from healthd.fleet.causes import (
    SHARED_NODES,
    SHARED_WINDOW,
    CauseRules,
    Incident,
    NodeEvents,
    SharedIncident,
    group_incidents,
    shared_incidents,
)
from healthd.fleet.columnar import Counted, JobsFile, counting
from healthd.fleet.hosts import Lists, expand
from healthd.fleet.lemons import Baseline, Floors, HeldBack, LemonVerdict, NodeSignals, detect, held_back
from healthd.fleet.reliability import (
    PROJECTION_GPUS,
    SizeBucket,
    SizePoint,
    bucket,
    fit_rate,
    size_points,
)
from healthd.fleet.sacct import (
    EVENT_COLUMNS,
    JOB_COLUMNS,
    USER_TEXT,
    InputSummary,
    LineTally,
    LocalTimes,
    SacctTable,
    first_word,
    is_job_id,
    open_table,
    sacct_command,
    sacctmgr_command,
    tres_gpus,
)
from healthd.fleet.scripts import Blocks, read_scripts
from healthd.fleet.submit import Exclusions, read_exclusions, settle, summary
from healthd.slurm.hostlist import HostlistError

# sacct's State words of a run that failed; no other state starts with either.
FAILED_PREFIXES = ("FAILED", "NODE_FAIL")
DEFAULT_GPUS_PER_NODE = 8
_XID = re.compile(r"S?XID_\d+")
NO_SUBMIT_LINES = (
    "no submit lines: runs their own request placed on a node (-w, #SBATCH lines, -x of every other node) "
    "cannot be told apart and count as failure evidence "
    "(the test still leaves out the user who contributed most)"
)
NO_SCRIPTS = (
    "no batch scripts: node lists in #SBATCH lines are not seen (sacct -B needs "
    "AccountingStoreFlags=job_script), and count as failure evidence"
)


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
    shared_window: float = SHARED_WINDOW  # cause events on many nodes this close are one shared incident
    shared_nodes: int = SHARED_NODES  # "many": more than this
    floors: Floors = field(default_factory=Floors)  # the least evidence the lemon test flags on


# One accepted run as ``_read_jobs`` saw it: (job id, user, partition, node list, start,
# end, GPUs, nodes, failed, shared, pin), shared None when the run did not fail of a cause,
# pin whether its job's request may have placed it (``Observer.placed_runs`` says which did).
Run = tuple[str, str, str, str, float, float, int, int, bool, Optional[bool], bool]


class Observer(Protocol):
    """What a replay of the window (``healthd.fleet.backtest``) needs besides the report's counters."""

    def run(self, run: Run, number: int) -> None:
        """Each run the report's Python reader counts, and the number of its line."""

    def event(self, names: tuple[str, ...], start: float, end: Optional[float], reason: str) -> None:
        """Each node event read in the window."""

    def placed_runs(self, runs: frozenset[tuple[str, str, str]]) -> None:
        """(job id, node, partition) of the single-node runs their job's believed request placed there."""

    def count(
        self, path: Path, table: SacctTable, window: tuple[Optional[float], Optional[float]], pins: frozenset[str]
    ) -> Optional[Counted]:
        """``columnar.counting``'s counts, the observer's own way, its lines streaming; None: it sees every run."""


class Attributed(NamedTuple):
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


class CauseTotal(NamedTuple):
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
    buckets: tuple[SizeBucket, ...]
    rate_per_node_hour: Optional[float]
    sizes: tuple[SizePoint, ...]  # the fitted model at each observed bucket
    projection: tuple[SizePoint, ...]
    attributed: tuple[Attributed, ...]
    taxonomy: tuple[CauseTotal, ...]
    incidents: tuple[Incident, ...]
    verdicts: tuple[LemonVerdict, ...]  # every node, most suspicious first
    baseline: Baseline
    other_events: int  # events whose reason is not a cause (maintenance, administrators)
    shared: tuple[SharedIncident, ...] = ()
    submit_lines: Optional[InputSummary] = None  # None: no submit-line input, no exclusion signal
    warnings: tuple[str, ...] = ()
    lemon_floor: tuple[str, ...] = ()  # why the fleet or window is too small to flag any node
    lemon_notes: tuple[str, ...] = ()  # what else the lemon test could not see
    held_back: tuple[HeldBack, ...] = ()  # nodes the plain test flags and the guarded one does not
    job_names: dict[str, str] = field(default_factory=dict)  # JobID -> name, from sacct --json only (display)

    @property
    def lemons(self) -> tuple[LemonVerdict, ...]:
        return tuple(v for v in self.verdicts if v.flagged)

    @property
    def own_incidents(self) -> int:
        """Incidents of one node each, without those that were part of a shared incident."""
        return sum(1 for incident in self.incidents if not incident.shared)

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
    shared: list[SharedIncident]


def _read_events(
    lines: Iterable[str], source: str, settings: FleetSettings, observer: Optional[Observer] = None
) -> _Events:
    table = open_table(lines, source, EVENT_COLUMNS, sacctmgr_command())
    i_node, i_start, i_end, i_reason = (table.index(c) for c in ("NodeName", "TimeStart", "TimeEnd", "Reason"))
    times = LocalTimes()
    tally = LineTally(source)
    low = None if settings.since is None else settings.since - settings.window_before
    high = None if settings.until is None else settings.until + settings.window_after
    causes: list[tuple[tuple[str, ...], float, Optional[float], str]] = []
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
        if observer is not None:
            observer.event(names, start, end, fields[i_reason])
        code = settings.rules.classify(fields[i_reason])
        if code is None:
            other += 1
            continue
        causes.append((names, start, end, code))
    shared, in_shared = shared_incidents(
        [(names, start, code) for names, start, _, code in causes], settings.shared_window, settings.shared_nodes
    )
    per_node = (
        (name, start, end, code, position in in_shared)
        for position, (names, start, end, code) in enumerate(causes)
        for name in names
    )
    incidents, index = group_incidents(per_node, settings.incident_gap)
    return _Events(incidents, index, nodes, other, tally.summary(), last, shared)


@dataclass
class _Node:
    """Per-node counters of attributed failures and exclusions."""

    single_caused: int = 0
    multi_caused: int = 0
    excluded_by: int = 0


@dataclass
class _Jobs:
    """Everything kept from the job runs: counters, and the details of attributed failures only."""

    tally: LineTally
    # (GPUs, nodes) -> [runs, seconds, attributed failures]: few distinct keys, one lookup per run.
    # Seconds, not hours: accounting's are whole, so their sum is exact in any order.
    by_size: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    # (node, user, partition) -> [single-node runs, their failures]: one dict operation per run, summed later.
    # Per partition too: a debug partition's short test runs fail far more often than the same
    # user's production runs, and are no evidence against its nodes.
    single: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)
    # The same for the runs pinned to their node by their submit lines (-w): no failure evidence.
    pinned: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)
    # The same per job whose line pins it: its runs wait apart until its submit line is believed
    # or not (``_settle_choices``).
    held: dict[str, dict[tuple[str, str, str], list[int]]] = field(default_factory=dict)
    nodes: dict[str, _Node] = field(default_factory=dict)
    # The nodes of the multi-node runs' lists, each distinct list expanded once, when first seen,
    # for its partitions and its failed runs alike (a busy scheduler's fragmented lists are
    # millions of distinct strings: expanding them again at the end, only to learn which nodes
    # exist, was most of the report's CPU).
    lists: Lists = field(default_factory=lambda: Lists())
    attributed: list[Attributed] = field(default_factory=list)
    runs: int = 0
    failed: int = 0
    first: Optional[float] = None
    last: Optional[float] = None

    def node(self, name: str) -> _Node:
        found = self.nodes.get(name)
        if found is None:
            found = self.nodes[name] = _Node()
        return found

    def buckets(self) -> tuple[SizeBucket, ...]:
        """The MTTF buckets of the runs with GPUs."""
        sums: dict[int, list[float]] = {}
        # In the keys' order, whoever counted them first (``columnar``): the same sums to the bit.
        for (gpus, nnodes), (runs, seconds, failures) in sorted(self.by_size.items()):
            if gpus > 0:
                hours = seconds / 3600.0
                total = sums.setdefault(bucket(gpus), [0, 0.0, 0.0, 0])
                total[0] += runs
                total[1] += hours
                total[2] += hours * nnodes
                total[3] += failures
        return tuple(SizeBucket(g, int(t[0]), t[1], t[2], int(t[3])) for g, t in sorted(sums.items()))

    def gpus_per_node(self) -> tuple[Optional[int], Optional[str]]:
        """GPUs per node, and a warning when the runs disagree.

        A multi-node run has whole nodes (sbatch -N with --gpus-per-node, as the study's
        jobs do), so the most common GPUs ÷ nodes among them is the node's size;
        single-node runs often take a part of one. Without multi-node runs, the most
        GPUs any run had on one node is the best lower bound.
        """
        whole: Counter[int] = Counter()
        most = 0
        for (gpus, nnodes), (runs, _, _) in sorted(self.by_size.items()):  # ties: the smaller size
            if gpus > 0:
                most = max(most, gpus // nnodes)
                if nnodes > 1 and gpus % nnodes == 0:
                    whole[gpus // nnodes] += int(runs)
        if not whole:
            return (most or None), None
        (size, runs), *others = whole.most_common()
        warning = None
        if others or most > size:
            seen = ", ".join(f"{g} in {n} runs" for g, n in whole.most_common(4))
            warning = (
                f"multi-node runs disagree on GPUs per node ({seen}; up to {most} in one run): "
                f"using {size}; give --gpus-per-node for a fleet of mixed nodes"
            )
        return size, warning


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


def _failed_run(
    jobs: _Jobs,
    fields: list[str],
    columns: tuple[int, int, int],
    run: tuple[float, float, int, int, str],
    events: _Events,
    settings: FleetSettings,
) -> Optional[bool]:
    """Attribute a FAILED or NODE_FAIL run: None without a cause, else whether the cause was shared."""
    i_id, i_user, i_state = columns
    end, hours, gpus, nnodes, node_list = run
    names = (node_list,) if nnodes == 1 else jobs.lists.names(node_list)
    found = _attribute(names, end, events, settings)
    if found is None:
        return None
    name, position = found
    node_events = events.index[name]
    code, incident = node_events.codes[position], node_events.incident[position]
    state = first_word(fields[i_state])
    jobs.attributed.append(
        Attributed(fields[i_id], name, code, state, gpus, nnodes, end, hours, fields[i_user], incident)
    )
    if events.incidents[incident].shared:
        return True  # a cause on many nodes at once: not held against this node
    counters = jobs.node(name)
    if nnodes == 1:
        counters.single_caused += 1
    else:
        counters.multi_caused += 1
    return False


# One run as ``_job_rows`` read it: (line number, fields, job id, the [in the input, used] counters
# of its job's exclusion or None, start, end, GPUs, nodes).
_JobRow = tuple[int, list[str], str, Optional[list[int]], float, float, int, int]


def _read_jobs(
    lines: Iterable[str],
    source: str,
    settings: FleetSettings,
    events: _Events,
    exclusions: Optional[Exclusions],
    observer: Optional[Observer] = None,
) -> _Jobs:
    """One pass over the runs: read each line (``_job_rows``), attribute a failed run (``_failed_run``), count it.

    The two loops (``_job_rows``, ``_count_runs``) are the hot path of four million lines:
    they keep their lookups local, and call a function per run only where the old single
    loop did (``bench/bench_fleet.py`` measures it).
    """
    table = open_table(lines, source, JOB_COLUMNS, sacct_command(), USER_TEXT)
    jobs = _Jobs(LineTally(source))
    # Runs of the jobs whose request excludes or pins nodes: [in the input, used]; all of them
    # may have been placed by their request, so their single-node runs wait apart.
    excluding: dict[str, list[int]] = {} if exclusions is None else {job: [0, 0] for job in exclusions.jobs}
    pins = frozenset(excluding)
    index = table.index
    columns = _RunColumns(index("JobID"), index("User"), index("State"), index("NodeList"), table.optional("Partition"))
    window = (settings.since, settings.until)
    with contextlib.ExitStack() as stack:
        counted = None
        if isinstance(lines, JobsFile) and observer is None:
            counted = stack.enter_context(counting(lines.path, table, window, pins))
        elif isinstance(lines, JobsFile) and observer is not None:
            # A replay counts the runs it needs whole apart, its connection open till it ends (``columnar_backtest``).
            counted = observer.count(lines.path, table, window, pins)
        if counted is not None:
            _add_counted(jobs, counted)
            table = dataclasses.replace(table, rows=iter(counted.others))
        rows = _job_rows(table, jobs.tally, settings, excluding)
        _count_runs(jobs, rows, columns, events, settings, pins, observer)
    if exclusions is not None:
        placed = _settle_choices(jobs, exclusions, excluding)
        if observer is not None:
            observer.placed_runs(placed)
    jobs.runs = jobs.tally.records
    return jobs


def _add_counted(jobs: _Jobs, counted: Counted) -> None:
    """The plain runs that DuckDB counted (``columnar``), into the counters the Python reader adds to."""
    jobs.tally.records += counted.records
    jobs.tally.skipped += counted.skipped
    for key, (runs, seconds) in counted.by_size.items():
        jobs.by_size[key] = [runs, seconds, 0]
    # DuckDB gives each row's names as new strings: one copy of each kept, since at 100M runs the
    # copies are 4 GB of the 22.7M keys (a second of CPU at 10M runs).
    names: dict[str, str] = {}
    one = names.setdefault
    jobs.single.update(
        ((one(node, node), one(user, user), one(partition, partition)), [runs, 0])
        for node, user, partition, runs in counted.single
    )
    for partition, node_list in counted.lists:
        jobs.lists.add(partition, node_list)
    jobs.first, jobs.last = counted.first, counted.last


def _job_rows(
    table: SacctTable, tally: LineTally, settings: FleetSettings, excluding: dict[str, list[int]]
) -> Iterator[_JobRow]:
    """Each run that finished in the window, read from its line; a bad line is rejected, another run skipped."""
    i_id, i_start, i_end, i_nnodes, i_tres = (table.index(c) for c in ("JobID", "Start", "End", "NNodes", "AllocTRES"))
    times = LocalTimes()
    gpus_memo: dict[str, int] = {}
    since, until = settings.since, settings.until
    split = table.split
    for number, line in table.rows:
        fields = split(line)
        if fields is None:
            tally.reject(number, f"{len(line.split('|'))} fields, the header has {table.width}")
            continue
        job_id = fields[i_id]
        if not is_job_id(job_id):
            tally.reject(number, f"JobID {job_id[:40]!r} is not a Slurm job id")
            continue
        own = excluding.get(job_id)
        if own is not None:
            own[0] += 1
        try:
            start = times(fields[i_start])
            end = times(fields[i_end])
            if start is None or end is None:  # never started, or still running
                tally.skipped += 1
                continue
            if end < start:
                start, end = times.fall_back(fields[i_start], fields[i_end])
            nnodes = int(fields[i_nnodes])
            if nnodes < 1:
                raise ValueError(f"NNodes {nnodes} of a run that started")
            tres = fields[i_tres]
            gpus = gpus_memo.get(tres)
            if gpus is None:
                gpus = gpus_memo[tres] = tres_gpus(tres)
        except ValueError as exc:
            tally.reject(number, str(exc))
            continue
        if (since is not None and end < since) or (until is not None and end > until):
            tally.skipped += 1
            continue
        yield number, fields, job_id, own, start, end, gpus, nnodes


class _RunColumns(NamedTuple):
    """Where the fields that ``_count_runs`` reads are in a line of the job runs."""

    job_id: int
    user: int
    state: int
    node_list: int
    partition: Optional[int]  # None: an older input without the Partition column


def _count_runs(
    jobs: _Jobs,
    rows: Iterable[_JobRow],
    columns: _RunColumns,
    events: _Events,
    settings: FleetSettings,
    pins: frozenset[str],
    observer: Optional[Observer],
) -> None:
    """Count each run read, after attributing a failed one; ``pins``: the jobs whose runs wait apart (``held``)."""
    i_id, i_user, i_state, i_list, i_partition = columns
    tally, by_size, single, lists = jobs.tally, jobs.by_size, jobs.single, jobs.lists
    failed_columns = (i_id, i_user, i_state)
    names: dict[str, str] = {}
    first = last = None
    for number, fields, job_id, own, start, end, gpus, nnodes in rows:
        failed = fields[i_state].startswith(FAILED_PREFIXES)
        node_list = fields[i_list]
        hours = (end - start) / 3600.0
        try:
            run = (end, hours, gpus, nnodes, node_list)
            shared = _failed_run(jobs, fields, failed_columns, run, events, settings) if failed else None
        except HostlistError as exc:
            tally.reject(number, str(exc))
            continue
        tally.records += 1
        if own is not None:
            own[1] += 1
        if failed:
            jobs.failed += 1
        if first is None or start < first:
            first = start
        if last is None or end > last:
            last = end
        stats = by_size.get((gpus, nnodes))
        if stats is None:
            stats = by_size[(gpus, nnodes)] = [0, 0.0, 0]
        stats[0] += 1
        stats[1] += end - start
        if shared is not None:
            stats[2] += 1
        partition = fields[i_partition] if i_partition is not None else ""
        if observer is not None:
            run_read = (job_id, fields[i_user], partition, node_list, start, end, gpus, nnodes, failed, shared)
            observer.run((*run_read, job_id in pins), number)
        if nnodes > 1:
            lists.add(partition, node_list)
        elif not shared:  # a run killed by a cause on many nodes is no evidence about its node or its user
            into = jobs.held.setdefault(job_id, {}) if job_id in pins else single
            key = (node_list, fields[i_user], partition)
            counts = into.get(key)
            if counts is None:
                counts = into[_interned(key, names)] = [0, 0]
            counts[0] += 1
            if failed:
                counts[1] += 1
    jobs.first = first if jobs.first is None or (first is not None and first < jobs.first) else jobs.first
    jobs.last = last if jobs.last is None or (last is not None and last > jobs.last) else jobs.last


def _interned(key: tuple[str, str, str], names: dict[str, str]) -> tuple[str, str, str]:
    """``key`` made of the one kept copy of each name: each line's fields are new strings.

    Millions of keys share a few thousand names; called only for a key not seen before.
    """
    node, user, partition = key
    return names.setdefault(node, node), names.setdefault(user, user), names.setdefault(partition, partition)


def _merge(into: dict[tuple[str, str, str], list[int]], counts: dict[tuple[str, str, str], list[int]]) -> None:
    for key, (runs, fails) in counts.items():
        total = into.setdefault(key, [0, 0])
        total[0] += runs
        total[1] += fails


def _partition_nodes(jobs: _Jobs) -> dict[str, set[str]]:
    """Each partition's nodes, as the runs of the window show them (accounting keeps no partition table)."""
    nodes: dict[str, set[str]] = {}
    for table in (jobs.single, jobs.pinned, *jobs.held.values()):
        for name, _, partition in table:
            nodes.setdefault(partition, set()).add(name)
    for partition, names in jobs.lists.partitions.items():
        nodes.setdefault(partition, set()).update(names)
    return nodes


def _settle_choices(jobs: _Jobs, exclusions: Exclusions, runs: dict[str, list[int]]) -> frozenset[tuple[str, str, str]]:
    """Count the believed exclusions; move the runs their job's request placed to ``pinned``, the others to ``single``.

    A run was placed by its job's request when the job named its nodes, or excluded every
    other node its partition has in the window (the scheduler had no other to choose).
    Returns (job id, node, partition) of the placed runs.
    """
    partitions = _partition_nodes(jobs)
    placed = set()
    # The runs of each distinct list of excluded nodes, added to its nodes once: jobs repeat their lists.
    excluding: dict[tuple[str, ...], int] = {}
    for job_id, choice, used in settle(exclusions, runs):
        excluding[choice.excluded] = excluding.get(choice.excluded, 0) + used
        for key, counts in jobs.held.pop(job_id, {}).items():
            node, _, partition = key
            if choice.pinned or _excludes_all_others(choice.excluded, partitions.get(partition, set()), node):
                placed.add((job_id, node, partition))
                _merge(jobs.pinned, {key: counts})
            else:
                _merge(jobs.single, {key: counts})
    for names, used in excluding.items():
        for name in names:
            jobs.node(name).excluded_by += used
    for held in jobs.held.values():  # a request whose line was rejected: its runs count as any other's
        _merge(jobs.single, held)
    jobs.held.clear()
    return frozenset(placed)


def _excludes_all_others(excluded: tuple[str, ...], partition: set[str], node: str) -> bool:
    """Whether ``excluded`` holds every node of ``partition`` but ``node``, and there is another."""
    others = len(partition) - (node in partition)
    # Most lists are far shorter than their partition: no set is built for them.
    if not others or len(excluded) < others:
        return False
    return partition - {node} <= set(excluded)


Rows = list[tuple[tuple[str, str], int, int]]  # ((user, partition), runs, failures) of one node


def _rates(*tallies: dict[tuple[str, str], list[int]]) -> dict[tuple[str, str], float]:
    """Each (user, partition)'s failure rate over the tallies' runs (``_tally``)."""
    users: dict[tuple[str, str], list[int]] = {}
    for tally in tallies:
        for key, (runs, fails) in tally.items():
            total = users.setdefault(key, [0, 0])
            total[0] += runs
            total[1] += fails
    return {key: fails / runs for key, (runs, fails) in users.items() if runs}


def _tally(table: dict[tuple[str, str, str], list[int]]) -> tuple[dict[tuple[str, str], list[int]], dict[str, Rows]]:
    """Each (user, partition)'s [runs, failures] in ``table``, and each node's rows: one pass over its keys."""
    users: dict[tuple[str, str], list[int]] = {}
    per_node: dict[str, Rows] = {}
    for (name, user, partition), (runs, fails) in table.items():
        total = users.get((user, partition))
        if total is None:
            total = users[(user, partition)] = [0, 0]
        total[0] += runs
        total[1] += fails
        rows = per_node.get(name)
        if rows is None:
            rows = per_node[name] = []
        rows.append(((user, partition), runs, fails))
    return users, per_node


def _by_user(rows: Rows, rates: dict[tuple[str, str], float]) -> tuple[int, float, int, tuple[str, int, float]]:
    """A node's counted failures, their expectation, the users who failed there, and its top user.

    The top user is the one whose failures exceed their expectation most (a user's
    partitions together): the contributor ``lemons._failure_test`` leaves out.
    """
    users: dict[str, list[float]] = {}
    for (user, partition), runs, fails in rows:
        entry = users.setdefault(user, [0, 0.0])
        entry[0] += fails
        entry[1] += runs * rates.get((user, partition), 0.0)
    failures = int(sum(f for f, _ in users.values()))
    expected = sum(e for _, e in users.values())
    failing = sum(1 for f, _ in users.values() if f)
    if not failing:
        return failures, expected, 0, ("", 0, 0.0)
    top, (top_failures, top_expected) = max(
        users.items(), key=lambda item: (item[1][0] - item[1][1], item[1][0], item[0])
    )
    return failures, expected, failing, (top, int(top_failures), top_expected)


def _signals(jobs: _Jobs, events: _Events) -> list[NodeSignals]:
    """Per-node signals over every node seen in a run or an event."""
    fleet = {name for name, _, _ in jobs.single} | {name for name, _, _ in jobs.pinned} | set(jobs.nodes) | events.nodes
    fleet.update(jobs.lists.nodes)
    own = [incident for incident in events.incidents if not incident.shared]
    outs: Counter[str] = Counter(incident.node for incident in own)
    xids: dict[str, set[str]] = {}
    for incident in own:
        xids.setdefault(incident.node, set()).update(c for c in incident.codes if _XID.fullmatch(c))
    # p_u is estimated per (user, partition): its runs in one partition share a purpose. The
    # plain test's rates count every run; the evidence's count the runs not pinned.
    counted_users, counted = _tally(jobs.single)
    pinned_users, pinned = _tally(jobs.pinned)
    rates, counted_rates = _rates(counted_users, pinned_users), _rates(counted_users)
    signals = []
    empty = _Node()
    for name in sorted(fleet):
        node = jobs.nodes.get(name, empty)
        # Sorted: the sums of expectations are the same whoever counted the runs first (``columnar``).
        evidence = sorted(counted.get(name, []))
        placed = pinned.get(name)
        rows = sorted(evidence + placed) if placed else evidence
        failures, expected, failing, (top, top_failures, top_expected) = _by_user(evidence, counted_rates)
        signals.append(
            NodeSignals(
                node=name,
                out_count=outs.get(name, 0),
                xids=tuple(sorted(xids.get(name, ()))),
                single_node_failures_caused=node.single_caused,
                multi_node_failures_caused=node.multi_caused,
                single_node_runs=sum(runs for _, runs, _ in rows),
                single_node_failures=sum(fails for _, _, fails in rows),
                expected_single_node_failures=sum(runs * rates.get(key, 0.0) for key, runs, _ in rows),
                excluded_by_jobs=node.excluded_by,
                pinned_runs=sum(runs for _, runs, _ in pinned.get(name, [])),
                pinned_failures=sum(fails for _, _, fails in pinned.get(name, [])),
                counted_failures=failures,
                counted_expected=expected,
                failing_users=failing,
                top_user=top,
                top_user_failures=top_failures,
                top_user_expected=top_expected,
            )
        )
    return signals


def _taxonomy(
    attributed: list[Attributed], incidents: list[Incident], shared: list[SharedIncident]
) -> tuple[CauseTotal, ...]:
    failures: Counter[str] = Counter()
    lost: dict[str, float] = {}
    for run in attributed:
        failures[run.cause] += 1
        lost[run.cause] = lost.get(run.cause, 0.0) + run.gpus * run.hours
    # A shared incident is one incident, not one per node it hit.
    seen: Counter[str] = Counter(code for incident in incidents if not incident.shared for code in incident.codes)
    seen.update(code for incident in shared for code in incident.codes)
    codes = set(failures) | set(seen)
    totals = [CauseTotal(code, failures[code], lost.get(code, 0.0), seen[code]) for code in codes]
    return tuple(sorted(totals, key=lambda t: (-t.failures, -t.gpu_hours_lost, -t.incidents, t.code)))


class Sources(NamedTuple):
    """What each input is called in an error (a file's name, or the command it came from)."""

    jobs: str = "jobs"
    events: str = "events"
    submit: str = "submit lines"


def analyze(
    jobs: Iterable[str],
    events: Iterable[str],
    settings: Optional[FleetSettings] = None,
    sources: Sources = Sources(),
    submit_lines: Optional[Callable[[], Iterable[str]]] = None,
    observer: Optional[Observer] = None,
    job_names: Optional[dict[str, str]] = None,
    scripts: Union[str, Blocks, None] = None,
) -> FleetReport:
    """The whole report from sacct's and sacctmgr's parsable output (``FleetInputError`` if one is unusable).

    ``submit_lines`` gives the lines of ``sacct -o JobID,SubmitLine`` afresh at each call (read
    twice, ``healthd.fleet.submit``); without it there is no exclusion signal. ``observer``
    sees each run and event as they are read (``healthd.fleet.backtest``); ``job_names`` (JobID to
    name, from ``sacct --json``) are shown, never analysed. ``scripts`` is the output of
    ``sacct -B -j ...`` for the window's batch jobs (``healthd.fleet.scripts``): their
    ``#SBATCH`` node options join their submit lines'.
    """
    settings = settings or FleetSettings()
    with _collector_paused():
        read_events = _read_events(events, sources.events, settings, observer)
        requested = None if scripts is None else read_scripts(scripts)
        engine = isinstance(jobs, JobsFile)  # DuckDB reads the submit lines where it reads the jobs
        exclusions = None if submit_lines is None else read_exclusions(submit_lines, sources.submit, requested, engine)
        read_jobs = _read_jobs(jobs, sources.jobs, settings, read_events, exclusions, observer)
        # No script seen: none given, or only NONE where accounting keeps none (no job_script flag).
        unseen = requested is None or (requested.records > 0 and requested.stored == 0)
        notes = (NO_SCRIPTS,) if exclusions is not None and unseen else ()
        names = {} if job_names is None else job_names  # filled while the jobs are read (``sacct_json.stream``)
        return _replace_notes(_report(settings, read_jobs, read_events, exclusions, names), notes)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector paused while the analysis runs, as it was after.

    The analysis builds millions of small containers that hold no cycle (keys, counters,
    rows), and each collection of the oldest generation walks them all again: a quarter of
    the report's CPU at a million runs (``bench/bench_fleet.py``, docs/scale.md).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _replace_notes(report: FleetReport, notes: tuple[str, ...]) -> FleetReport:
    return dataclasses.replace(report, lemon_notes=report.lemon_notes + notes) if notes else report


def _report(
    settings: FleetSettings, jobs: _Jobs, events: _Events, exclusions: Optional[Exclusions], job_names: dict[str, str]
) -> FleetReport:
    """The report of what the pass kept: the reliability model, the taxonomy, and the lemon test."""
    per_node, warnings = _gpus_per_node(settings, jobs)
    buckets = jobs.buckets()
    rate = fit_rate(buckets)
    checkpoint_hours, restart_hours = settings.checkpoint_interval / 3600, settings.restart_overhead / 3600
    start, end = _window(settings, jobs, events)
    days = (end - start) / 86400 if start is not None and end is not None else 0.0
    signals = _signals(jobs, events)
    verdicts, base = detect(signals, settings.alpha, settings.floors, days)
    plain, _ = detect(signals, settings.alpha)
    return FleetReport(
        settings=settings,
        jobs=jobs.tally.summary(),
        events=events.summary,
        start=start,
        end=end,
        runs=jobs.runs,
        failed_runs=jobs.failed,
        gpus_per_node=per_node,
        buckets=buckets,
        rate_per_node_hour=rate,
        sizes=size_points(tuple(b.gpus for b in buckets), per_node, rate, checkpoint_hours, restart_hours, True),
        projection=size_points(PROJECTION_GPUS, per_node, rate, checkpoint_hours, restart_hours, False),
        attributed=tuple(jobs.attributed),
        taxonomy=_taxonomy(jobs.attributed, events.incidents, events.shared),
        incidents=tuple(events.incidents),
        verdicts=tuple(verdicts),
        baseline=base,
        other_events=events.other,
        shared=tuple(events.shared),
        submit_lines=summary(exclusions),
        warnings=warnings,
        lemon_floor=settings.floors.fleet_notes(len(signals), days),
        lemon_notes=() if exclusions is not None else (NO_SUBMIT_LINES,),
        held_back=held_back(plain, verdicts),
        job_names=job_names,
    )


def _gpus_per_node(settings: FleetSettings, jobs: _Jobs) -> tuple[int, tuple[str, ...]]:
    """The GPUs per node the model uses (``--gpus-per-node``, else inferred from the runs), and a warning if unsure."""
    if settings.gpus_per_node is not None:
        return settings.gpus_per_node, ()
    inferred, warning = jobs.gpus_per_node()
    return inferred or DEFAULT_GPUS_PER_NODE, (warning,) if warning else ()


def _window(settings: FleetSettings, jobs: _Jobs, events: _Events) -> tuple[Optional[float], Optional[float]]:
    """The window the report covers: ``--since``/``--until``, else from the first run's start to the last end seen."""
    ends = [t for t in (jobs.last, events.last) if t is not None]
    start = settings.since if settings.since is not None else jobs.first
    end = settings.until if settings.until is not None else (max(ends) if ends else None)
    return start, end
