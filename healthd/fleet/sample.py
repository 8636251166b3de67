"""A synthetic fleet with a known failure process, written as sacct and sacctmgr would print it.

``healthd fleet sample DIR`` writes one for a newcomer to try ``fleet`` on; the tests
(does the method find what was planted?) and ``bench/bench_fleet.py`` (the study's
scale) use it too. The process:

- node incidents are Poisson in time, ``rate_per_node_day`` per node; planted
  *incident lemons* have ``lemon_factor`` times that. An incident is a drain with a
  cause reason, and with probability ``co_occurrence`` a second cause event on the
  same node 30-120 s later (a PCIe error with an Xid 79, as the study saw);
- planted *silent lemons* fail ``silent_failure`` of their single-node runs with no
  event at all (the study's nodes that fail jobs without tripping checks);
- a run fails NODE_FAIL or FAILED when an incident hits one of its nodes while it
  runs, ending between four minutes before and one minute after the incident (the
  checks run every five minutes); NODE_FAIL runs are requeued half the time (a new
  run under the same JobID, as ``sacct -D`` shows);
- otherwise a run fails FAILED for its user's own reasons with the user's
  probability; *buggy users* fail ``buggy_failure`` of their runs, each always on
  the same node, which their submit lines name (``-w``);
- administrators' maintenance drains fill the events up to ``events``.

Times are formatted in the local zone by whole hours, like ``LocalTimes`` reads them.
"""

from __future__ import annotations

import random
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple, Optional

from healthd.fleet.sacct import EVENT_FIELDS, SACCT_FIELDS, SUBMIT_FIELDS

CAUSE_REASONS = (
    ("XID_79", "healthd: XID_79 0000:3b:00 GPU fallen off the bus"),
    ("XID_48", "healthd: XID_48 0000:5c:00 double-bit ECC error"),
    ("XID_94", "healthd: XID_94 0000:86:00 contained ECC error"),
    ("IB_PORT_DOWN", "healthd: IB_PORT_DOWN mlx5_0/1"),
    ("NOT_RESPONDING", "Not responding"),
    ("KILL_TASK_FAILED", "Kill task failed"),
    ("NHC", "NHC: check_fs_mount: /scratch not mounted"),
)
CO_REASON = ("PCIE_LINK_DEGRADED", "healthd: PCIE_LINK_DEGRADED 0000:3b:00 x16 -> x8")
ADMIN_REASONS = ("maintenance: firmware update", "reboot for kernel 6.1.90", "replace PSU (ticket 4411)", "burn-in")
# Job sizes in GPUs and how often they are submitted (small jobs dominate, as in the study).
SIZES = ((1, 30), (2, 8), (4, 10), (8, 35), (16, 7), (32, 5), (64, 3), (128, 1.5), (256, 0.4), (512, 0.1))


class FleetSpec(NamedTuple):
    """What to generate; the defaults make a small fleet for tests."""

    nodes: int = 200
    gpus_per_node: int = 8
    days: float = 30.0
    runs: int = 20_000
    events: int = 2_000
    users: int = 60
    rate_per_node_day: float = 0.02
    incident_lemons: int = 4
    lemon_factor: float = 15.0
    silent_lemons: int = 2
    silent_failure: float = 0.5
    buggy_users: int = 3
    buggy_failure: float = 0.8
    user_failure: float = 0.03
    co_occurrence: float = 0.3
    mean_run_hours: float = 3.0
    seed: int = 1
    start: float = 1_704_067_200.0  # 2024-01-01 00:00 UTC

    def node_name(self, index: int) -> str:
        return f"gpu{index:04d}"


@dataclass
class Fleet:
    """The generated truth: what a correct analysis should find."""

    spec: FleetSpec
    incident_lemons: tuple[str, ...] = ()
    silent_lemons: tuple[str, ...] = ()
    buggy_nodes: tuple[str, ...] = ()
    incidents: dict[str, list[tuple[float, str]]] = field(default_factory=dict)  # node -> [(time, code)]
    node_failures: dict[str, tuple[str, str]] = field(default_factory=dict)  # "jobid/run" -> (node, code)


class _Clock:
    """Local ``YYYY-MM-DDTHH:MM:SS`` for epoch seconds, one localtime call per hour."""

    def __init__(self) -> None:
        self._hours: dict[int, str] = {}

    def __call__(self, epoch: float) -> str:
        whole = int(epoch)
        hour, rest = divmod(whole, 3600)
        prefix = self._hours.get(hour)
        if prefix is None:
            prefix = self._hours[hour] = time.strftime("%Y-%m-%dT%H", time.localtime(hour * 3600))
        minutes, seconds = divmod(rest, 60)
        return f"{prefix}:{minutes:02d}:{seconds:02d}"


def _elapsed(seconds: float) -> str:
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}" if days else f"{hours:02d}:{minutes:02d}:{secs:02d}"


def plant(spec: FleetSpec) -> Fleet:
    """Choose the lemons, buggy users' nodes and every node's incidents."""
    rng = random.Random(spec.seed)  # noqa: S311 (a seeded sample, no secret)
    names = [spec.node_name(i) for i in range(spec.nodes)]
    chosen = rng.sample(names, spec.incident_lemons + spec.silent_lemons + spec.buggy_users)
    fleet = Fleet(
        spec,
        incident_lemons=tuple(sorted(chosen[: spec.incident_lemons])),
        silent_lemons=tuple(sorted(chosen[spec.incident_lemons : spec.incident_lemons + spec.silent_lemons])),
        buggy_nodes=tuple(chosen[spec.incident_lemons + spec.silent_lemons :]),
    )
    span = spec.days * 86400
    lemons = set(fleet.incident_lemons)
    for name in names:
        rate = spec.rate_per_node_day * (spec.lemon_factor if name in lemons else 1.0) / 86400
        times = []
        t = spec.start + rng.expovariate(rate) if rate > 0 else float("inf")
        while t < spec.start + span:
            times.append((t, rng.choice(CAUSE_REASONS)[0]))
            t += rng.expovariate(rate)
        fleet.incidents[name] = times
    return fleet


def job_lines(fleet: Fleet) -> Iterator[str]:
    """The header and one line per run, as ``sacct -a -X -D -P -o SACCT_FIELDS`` prints them."""
    yield "|".join(SACCT_FIELDS)
    yield from (run for run, _ in _runs(fleet))


def submit_lines(fleet: Fleet) -> Iterator[str]:
    """The header and one line per run, as ``sacct -a -X -D -P -o JobID,SubmitLine`` prints them."""
    yield "|".join(SUBMIT_FIELDS)
    yield from (submit for _, submit in _runs(fleet))


def _runs(fleet: Fleet) -> Iterator[tuple[str, str]]:
    """(sacct line, submit line) of each run; the same runs on every call (seeded)."""
    spec = fleet.spec
    rng = random.Random(spec.seed + 1)  # noqa: S311 (a seeded sample, no secret)
    clock = _Clock()
    span = spec.days * 86400
    silent = set(fleet.silent_lemons)
    starts = {name: [t for t, _ in times] for name, times in fleet.incidents.items()}
    sizes = [size for size, _ in SIZES if size <= spec.nodes * spec.gpus_per_node]
    weights = [weight for size, weight in SIZES if size in sizes]
    users = [f"user{u:03d}" for u in range(spec.users)]
    buggy = dict(zip(users[: spec.buggy_users], fleet.buggy_nodes))
    job = 1000
    written = 0
    requeue: Optional[tuple[int, str, int, int, str, str]] = None
    while written < spec.runs:
        if requeue is not None:
            job_id, user, gpus, nnodes, first, node_list = requeue
            requeue = None
            start = rng.uniform(spec.start, spec.start + span)
        else:
            job += 1
            job_id = job
            user = rng.choice(users)
            gpus = rng.choices(sizes, weights)[0]
            nnodes = max(1, gpus // spec.gpus_per_node)
            start = rng.uniform(spec.start, spec.start + span)
            if user in buggy:
                gpus, nnodes = min(gpus, spec.gpus_per_node), 1
                first, node_list = buggy[user], buggy[user]
            else:
                index = rng.randrange(spec.nodes - nnodes + 1)
                first = spec.node_name(index)
                last = spec.node_name(index + nnodes - 1)
                node_list = first if nnodes == 1 else f"gpu[{first[3:]}-{last[3:]}]"
        end = start + rng.expovariate(1 / (spec.mean_run_hours * 3600)) + 60
        state = "COMPLETED"
        hit = _first_hit(fleet, starts, int(first[3:]), nnodes, (start, end))
        if hit is not None:
            end = max(start + 1, hit[0] + rng.uniform(-240, 60))
            state = rng.choice(("NODE_FAIL", "FAILED"))
            fleet.node_failures[f"{job_id}/{written}"] = (hit[1], hit[2])
        else:
            own = spec.buggy_failure if user in buggy else spec.user_failure
            silent_hit = nnodes == 1 and first in silent and rng.random() < spec.silent_failure
            if silent_hit or rng.random() < own:
                state = "FAILED"
        exit_code = "0:0" if state == "COMPLETED" else "1:0"
        tres = f"billing={gpus},cpu={gpus * 12},gres/gpu={gpus},mem={gpus * 120}G,node={nnodes}"
        exclude = f" -x {spec.node_name(rng.randrange(spec.nodes))}" if rng.random() < 0.01 else ""
        # A buggy user lands on the same node every time because they chose it.
        pin = f" -w {first}" if user in buggy else ""
        yield (
            f"{job_id}|{user}|gpu|{state}|{exit_code}|{clock(start - 60)}|{clock(start)}|{clock(end)}|"
            f"{_elapsed(end - start)}|{nnodes}|{node_list}|{tres}",
            f"{job_id}|sbatch -N {nnodes} --gpus-per-node={min(gpus, spec.gpus_per_node)}{exclude}{pin} train.sh",
        )
        written += 1
        if state == "NODE_FAIL" and rng.random() < 0.5:
            requeue = (job_id, user, gpus, nnodes, first, node_list)


def _first_hit(
    fleet: Fleet, starts: dict[str, list[float]], base: int, nnodes: int, span: tuple[float, float]
) -> Optional[tuple[float, str, str]]:
    """The first incident (time, node, code) on the run's nodes while it runs, if any."""
    start, end = span
    hit: Optional[tuple[float, str, str]] = None
    for index in range(base, base + nnodes):
        name = fleet.spec.node_name(index)
        times = starts[name]
        position = bisect_right(times, start)
        if position < len(times) and times[position] < end and (hit is None or times[position] < hit[0]):
            hit = (times[position], name, fleet.incidents[name][position][1])
    return hit


def event_lines(fleet: Fleet, cluster: str = "synth") -> Iterator[str]:
    """The header and one line per event, as ``sacctmgr -P show event Format=EVENT_FIELDS`` prints them."""
    spec = fleet.spec
    rng = random.Random(spec.seed + 2)  # noqa: S311 (a seeded sample, no secret)
    clock = _Clock()
    reasons = dict(CAUSE_REASONS)
    yield "|".join(EVENT_FIELDS)
    count = 0
    for name in sorted(fleet.incidents):
        for t, code in fleet.incidents[name]:
            repair = rng.uniform(0.5, 24) * 3600
            yield f"{cluster}|{name}|{clock(t)}|{clock(t + repair)}|DRAIN|root(0)|{reasons[code]}"
            count += 1
            if rng.random() < spec.co_occurrence:
                later = t + rng.uniform(30, 120)
                yield f"{cluster}|{name}|{clock(later)}|{clock(t + repair)}|DRAIN|root(0)|{CO_REASON[1]}"
                count += 1
    span = spec.days * 86400
    while count < spec.events:
        name = spec.node_name(rng.randrange(spec.nodes))
        t = rng.uniform(spec.start, spec.start + span)
        yield f"{cluster}|{name}|{clock(t)}|{clock(t + 4 * 3600)}|DRAIN|admin(1000)|{rng.choice(ADMIN_REASONS)}"
        count += 1
