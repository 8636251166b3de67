"""Lemon nodes: the study's per-node signals and a test that a healthy fleet passes (docs/fleet.md, "Lemon nodes").

Every node is observed over the same window, so its counts are comparable. Two
one-sided tests per node:

1. Incidents. The node's incident count against the fleet baseline: Poisson with
   the fleet's mean, or negative binomial when the nodes not flagged vary more than
   Poisson allows. The baseline is re-estimated without the nodes flagged, until the
   flagged set stops changing: a few lemons then cannot raise the bar they are
   measured against, and on a healthy fleet the first round is the plain test.
2. Job failures beyond what their users explain. Each single-node run of user u
   fails with u's fleet-wide rate p_u; the node's expected failures are the sum of
   p_u over its runs, and the count it saw is tested against Poisson(expected)
   (conservative: a sum of Bernoullis varies less). A node where one user's broken
   job fails again and again is expected to see those failures and is not flagged.

A node's p-value is the smaller of the two, doubled (Bonferroni over two tests);
Benjamini-Hochberg across all nodes then keeps the false discovery rate at
``alpha``, so on a fleet of healthy nodes the chance of flagging any is at most
``alpha``. The score is -log10 of the adjusted p-value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

MAX_ROUNDS = 10


@dataclass(frozen=True)
class NodeSignals:
    """What the fleet's records say about one node over the window."""

    node: str
    out_count: int  # distinct incidents
    xids: tuple[str, ...]  # distinct Xid codes among its causes
    single_node_failures_caused: int  # attributed failures of one-node runs, cause on this node
    multi_node_failures_caused: int
    single_node_runs: int
    single_node_failures: int  # FAILED or NODE_FAIL, any cause (user's included)
    expected_single_node_failures: float  # from the users' own failure rates
    excluded_by_jobs: int

    @property
    def single_node_failure_rate(self) -> Optional[float]:
        return self.single_node_failures / self.single_node_runs if self.single_node_runs else None

    def to_dict(self) -> dict[str, object]:
        rate = self.single_node_failure_rate
        return {
            "out_count": self.out_count,
            "xids": list(self.xids),
            "single_node_failures_caused": self.single_node_failures_caused,
            "multi_node_failures_caused": self.multi_node_failures_caused,
            "single_node_runs": self.single_node_runs,
            "single_node_failures": self.single_node_failures,
            "single_node_failure_rate": None if rate is None else round(rate, 4),
            "expected_single_node_failures": round(self.expected_single_node_failures, 3),
            "excluded_by_jobs": self.excluded_by_jobs,
        }


@dataclass(frozen=True)
class Verdict:
    """One node's test result."""

    signals: NodeSignals
    p_incidents: float
    p_failures: float
    q_value: float  # Benjamini-Hochberg adjusted
    flagged: bool

    @property
    def score(self) -> float:
        return -math.log10(max(self.q_value, 1e-300))

    @property
    def node(self) -> str:
        return self.signals.node


@dataclass(frozen=True)
class Baseline:
    """The fleet's incidents per node over the window, from the nodes not flagged."""

    nodes: int
    mean: float
    variance: float

    @property
    def size(self) -> Optional[float]:
        """The negative binomial's size r when the counts are overdispersed; None means Poisson."""
        if self.variance <= self.mean or self.mean <= 0:
            return None
        return self.mean * self.mean / (self.variance - self.mean)


def _log_pmf(k: int, mean: float, size: Optional[float]) -> float:
    if size is None:
        return k * math.log(mean) - mean - math.lgamma(k + 1)
    p = size / (size + mean)
    return math.lgamma(k + size) - math.lgamma(size) - math.lgamma(k + 1) + size * math.log(p) + k * math.log1p(-p)


def upper_tail(k: int, mean: float, size: Optional[float] = None) -> float:
    """P(X >= k) for Poisson(mean), or negative binomial with that mean and ``size``.

    Summed from k upward, term by term, so that tiny tails keep their precision
    (1 - CDF would round them to 0).
    """
    if k <= 0:
        return 1.0
    if mean <= 0:
        return 0.0
    total = 0.0
    j = k
    while True:
        term = math.exp(_log_pmf(j, mean, size))
        total += term
        if j > mean and term <= total * 1e-15:
            break
        j += 1
        if j - k > 100_000:  # a heavy tail far beyond any real count: what is summed suffices
            break
    return min(total, 1.0)


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Adjusted p-values (q-values) of the Benjamini-Hochberg step-up procedure (1995)."""
    count = len(p_values)
    order = sorted(range(count), key=lambda i: p_values[i])
    adjusted = [1.0] * count
    running = 1.0
    for rank in range(count, 0, -1):
        i = order[rank - 1]
        running = min(running, p_values[i] * count / rank)
        adjusted[i] = running
    return adjusted


def baseline(counts: Sequence[int]) -> Baseline:
    n = len(counts)
    if n == 0:
        return Baseline(0, 0.0, 0.0)
    mean = sum(counts) / n
    variance = sum((c - mean) ** 2 for c in counts) / (n - 1) if n > 1 else mean
    return Baseline(n, mean, variance)


def detect(signals: Sequence[NodeSignals], alpha: float = 0.05) -> tuple[list[Verdict], Baseline]:
    """Every node's verdict, most suspicious first, and the baseline the last round used."""
    if not signals:
        return [], Baseline(0, 0.0, 0.0)
    p_failures = [upper_tail(s.single_node_failures, s.expected_single_node_failures) for s in signals]
    flagged: frozenset[str] = frozenset()
    verdicts: list[Verdict] = []
    base = baseline([s.out_count for s in signals])
    poisson_only = True  # round one: the plain Poisson test against the whole fleet's mean
    for _ in range(MAX_ROUNDS):
        kept = [s.out_count for s in signals if s.node not in flagged]
        base = baseline(kept) if kept else base
        # With no incident among the nodes kept, half an incident over them stands in for the mean.
        mean = base.mean if base.mean > 0 else 0.5 / max(base.nodes, 1)
        size = None if poisson_only else base.size
        p_incidents = [upper_tail(s.out_count, mean, size) for s in signals]
        combined = [min(1.0, 2 * min(a, b)) for a, b in zip(p_incidents, p_failures)]
        q_values = benjamini_hochberg(combined)
        verdicts = [Verdict(s, a, b, q, q <= alpha) for s, a, b, q in zip(signals, p_incidents, p_failures, q_values)]
        now_flagged = frozenset(v.node for v in verdicts if v.flagged)
        if now_flagged == flagged and not poisson_only:
            break
        flagged = now_flagged
        poisson_only = False
    verdicts.sort(key=lambda v: (v.q_value, -v.signals.out_count, -v.signals.single_node_failures, v.node))
    return verdicts, base
