"""MTTF by job size, the "nodes in series" fit, its projection, and expected ETTR: pure arithmetic.

The study's model (Meta, "Revisiting Reliability in Large-Scale Machine Learning
Research Clusters"): a job on n nodes fails when any of its nodes does, each at
rate r_f, so MTTF(n) = 1 / (n * r_f). With runs observed for h_i hours on n_i
nodes and F attributed failures, the failures are Poisson with mean
r_f * sum(n_i * h_i), whose maximum-likelihood estimate is r_f = F / sum(n_i * h_i):
failures per node-hour of job time. ETTR is derived in docs/fleet.md ("ETTR").
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

PROJECTION_GPUS = (1024, 4096, 16384, 100_000)
NODE_DAYS = 1000 * 24.0  # hours in 1000 node-days


def bucket(gpus: int) -> int:
    """The largest power of two <= ``gpus`` (``gpus`` >= 1)."""
    return 1 << (gpus.bit_length() - 1)


class SizeBucket(NamedTuple):
    """The runs of one job-size bucket and their MTTF (None without attributed failures)."""

    gpus: int
    runs: int
    job_hours: float
    node_hours: float
    failures: int

    @property
    def mttf_hours(self) -> Optional[float]:
        return self.job_hours / self.failures if self.failures else None

    def to_dict(self) -> dict[str, object]:
        return {
            "gpus": self.gpus,
            "runs": self.runs,
            "job_hours": round(self.job_hours, 3),
            "failures": self.failures,
            "mttf_hours": None if self.mttf_hours is None else round(self.mttf_hours, 3),
        }


def fit_rate(buckets: tuple[SizeBucket, ...]) -> Optional[float]:
    """r_f in failures per node-hour (the Poisson MLE above); None when there are no node-hours."""
    node_hours = sum(b.node_hours for b in buckets)
    if node_hours <= 0:
        return None
    return sum(b.failures for b in buckets) / node_hours


def model_mttf(gpus: float, gpus_per_node: int, rate: float) -> Optional[float]:
    """MTTF(N) = 1 / (nodes(N) * r_f) in hours, nodes(N) = N / GPUs per node (at least one node)."""
    if rate <= 0:
        return None
    return 1.0 / (max(gpus / gpus_per_node, 1.0) * rate)


def ettr(mttf_hours: Optional[float], checkpoint_hours: float, restart_hours: float) -> float:
    """Expected ETTR of a job whose failures come at rate 1/MTTF (docs/fleet.md, "ETTR").

    Work is saved every ``checkpoint_hours`` (tau); a failure loses the work since the
    last checkpoint and costs ``restart_hours`` (R). For exponential failures at rate
    lambda the expected wall time to finish one interval is (1/lambda + R)(e^(lambda tau) - 1)
    (Daly 2006, with checkpoint cost 0 and no failure during the restart), so
    ETTR = lambda tau / ((1 + lambda R)(e^(lambda tau) - 1)); to first order
    1 - lambda (tau/2 + R) (Young 1974).
    """
    if mttf_hours is None or mttf_hours <= 0 or math.isinf(mttf_hours):
        return 1.0
    rate = 1.0 / mttf_hours
    x = rate * checkpoint_hours
    if x == 0:
        return 1.0 / (1.0 + rate * restart_hours)
    if x > 700:  # e**x overflows a float; the job then (practically) never finishes an interval
        return 0.0
    return x / ((1.0 + rate * restart_hours) * math.expm1(x))


class SizePoint(NamedTuple):
    """MTTF and expected ETTR of one job size: an observed bucket or a projection."""

    gpus: int
    nodes: float
    mttf_hours: Optional[float]
    ettr: float
    observed: bool

    def to_dict(self) -> dict[str, object]:
        return {
            "gpus": self.gpus,
            "nodes": round(self.nodes, 3),
            "mttf_hours": None if self.mttf_hours is None else round(self.mttf_hours, 3),
            "ettr": round(self.ettr, 4),
            "observed": self.observed,
        }


def size_points(
    sizes: tuple[int, ...],
    gpus_per_node: int,
    rate: Optional[float],
    checkpoint_hours: float,
    restart_hours: float,
    observed: bool,
) -> tuple[SizePoint, ...]:
    """The fitted model's MTTF and ETTR at each of ``sizes`` GPUs."""
    points = []
    for gpus in sizes:
        mttf = model_mttf(gpus, gpus_per_node, rate) if rate else None
        points.append(
            SizePoint(gpus, max(gpus / gpus_per_node, 1.0), mttf, ettr(mttf, checkpoint_hours, restart_hours), observed)
        )
    return tuple(points)
