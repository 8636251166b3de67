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

What a user can cause is not a node fault, and a tiny fleet has no baseline, so the
test that flags (``detect`` with ``Floors``) guards the plain one (docs/fleet.md,
"Evidence a user cannot make" and "Evidence floors"):

- failure evidence is the runs not placed on the node by their own request, tested
  against rates from those runs, and again with the user who contributed most of the
  node's excess left out; the larger p-value counts, so one user alone, or one user
  with a little noise from others, cannot make a lemon;
- a test runs only on enough evidence (``min_incidents`` incidents,
  ``min_failures`` counted failures), and nothing is flagged on a fleet of fewer
  than ``min_nodes`` nodes or a window shorter than ``min_days``.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple, Optional, Sequence

MAX_ROUNDS = 10


class Floors(NamedTuple):
    """The least evidence for which the lemon test flags anything (docs/fleet.md, "Evidence floors")."""

    min_nodes: int = 10  # nodes observed: the baseline is the others' mean and spread
    min_days: float = 7.0  # the window: a lemon fails again and again, not on one bad day
    min_incidents: int = 3  # of the node's own, for the incident test to run on it
    min_failures: int = 5  # counted (not pinned) failed runs, for the failure test to run on it

    def fleet_notes(self, nodes: int, days: float) -> tuple[str, ...]:
        """Why the fleet or window is too small to flag any node; empty when it is not."""
        notes = []
        if nodes < self.min_nodes:
            notes.append(
                f"fleet too small for a lemon baseline: {nodes} nodes observed, at least {self.min_nodes} needed"
            )
        if days < self.min_days:
            notes.append(
                f"window too short to tell a lemon from one bad day: {days:.2f} days, at least {self.min_days:g} needed"
            )
        return tuple(notes)


class NodeSignals(NamedTuple):
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
    pinned_runs: int  # single-node runs their job's own request placed on the node (docs/fleet.md)
    pinned_failures: int
    counted_failures: int  # the failures that are evidence: single-node runs not pinned
    counted_expected: float  # from the users' rates over their runs not pinned
    failing_users: int  # distinct users with a counted failure on the node
    top_user: str  # the user with the largest excess of counted failures over expected ("" if none)
    top_user_failures: int
    top_user_expected: float

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
            "pinned_runs": self.pinned_runs,
            "pinned_failures": self.pinned_failures,
            "counted_failures": self.counted_failures,
            "counted_expected": round(self.counted_expected, 3),
            "failing_users": self.failing_users,
            "top_user_failures": self.top_user_failures,
        }


class LemonVerdict(NamedTuple):
    """One node's test result."""

    signals: NodeSignals
    p_incidents: float
    p_failures: float
    q_value: float  # Benjamini-Hochberg adjusted
    flagged: bool
    # The incident test alone flags the node (its own incidents, Benjamini-Hochberg at
    # alpha): what ``lemons --drain`` needs, unless told to drain silent lemons too.
    incident_evidence: bool = False
    why: tuple[str, ...] = ()  # what the guarded test set aside or lacked, for people

    @property
    def score(self) -> float:
        return -math.log10(max(self.q_value, 1e-300))

    @property
    def node(self) -> str:
        return self.signals.node


class Baseline(NamedTuple):
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


@lru_cache(maxsize=1 << 16)
def upper_tail(k: int, mean: float, size: Optional[float] = None) -> float:
    """P(X >= k) for Poisson(mean), or negative binomial with that mean and ``size``.

    Summed from k upward, term by term, so that tiny tails keep their precision
    (1 - CDF would round them to 0). Remembered: the incident test asks the same few
    counts against one mean for every node, and ``fleet backtest`` asks at every step.
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


class HeldBack(NamedTuple):
    """A node the plain test flags and the guarded one does not, and why."""

    node: str
    plain_q: float
    q_value: float
    why: tuple[str, ...]


def held_back(plain: Sequence[LemonVerdict], guarded: Sequence[LemonVerdict]) -> tuple[HeldBack, ...]:
    """The nodes flagged by ``plain`` and not by ``guarded``, most suspicious (to the plain test) first."""
    flagged = {v.node for v in guarded if v.flagged}
    by_node = {v.node: v for v in guarded}
    return tuple(
        HeldBack(v.node, v.q_value, by_node[v.node].q_value, by_node[v.node].why)
        for v in plain
        if v.flagged and v.node not in flagged
    )


def _failure_test(s: NodeSignals, floors: Optional[Floors]) -> tuple[float, tuple[str, ...]]:
    """The failure test's p-value for one node, and what it set aside or lacked.

    Plain (no floors): every single-node run against its user's rate. Guarded: the runs
    not pinned to the node, with at least ``min_failures`` failed, tested whole and with
    the user of the largest excess left out; the larger p-value counts, so leaving out
    a user never makes the test bolder, and a node flagged by it fails the jobs of at
    least two users (with one, nothing is left to test).
    """
    if floors is None:
        return upper_tail(s.single_node_failures, s.expected_single_node_failures), ()
    notes = []
    if s.pinned_failures:
        notes.append(
            f"{s.pinned_failures} of its {s.single_node_failures} failed runs were placed on it by their own request "
            "(a node list, on the submit line or in #SBATCH lines, or -x of every other node): "
            "the user's choice, not evidence"
        )
    if s.counted_failures < floors.min_failures:
        if s.counted_failures:
            notes.append(
                f"{s.counted_failures} failed runs counted, at least {floors.min_failures} needed for the failure test"
            )
        return 1.0, tuple(notes)
    whole = upper_tail(s.counted_failures, s.counted_expected)
    # The others' failures have positive rates behind them, so their expectation is positive;
    # should rounding leave none, the rest is no evidence rather than infinite evidence.
    rest_mean = s.counted_expected - s.top_user_expected
    rest = upper_tail(s.counted_failures - s.top_user_failures, rest_mean) if rest_mean > 0 else 1.0
    if rest > whole and s.top_user_failures:
        notes.append(
            f"{s.top_user_failures} of its {s.counted_failures} counted failures are one user's ({s.top_user}): "
            f"tested without them, p {rest:.2g} (with them {whole:.2g})"
        )
    return max(whole, rest), tuple(notes)


def _incident_notes(s: NodeSignals, floors: Optional[Floors]) -> tuple[str, ...]:
    if floors is None or not 0 < s.out_count < floors.min_incidents:
        return ()
    return (f"{s.out_count} incidents of its own, at least {floors.min_incidents} needed for the incident test",)


def detect(
    signals: Sequence[NodeSignals], alpha: float = 0.05, floors: Optional[Floors] = None, days: float = math.inf
) -> tuple[list[LemonVerdict], Baseline]:
    """Every node's verdict, most suspicious first, and the baseline the last round used.

    Without ``floors``, the plain test of the module's docstring; with them, the guarded
    one that flags (``days`` is the window's length, for ``Floors.min_days``).
    """
    if not signals:
        return [], Baseline(0, 0.0, 0.0)
    failure_tests = [_failure_test(s, floors) for s in signals]
    p_failures = [p for p, _ in failure_tests]
    notes = [(*_incident_notes(s, floors), *why) for s, (_, why) in zip(signals, failure_tests)]
    fleet_ok = floors is None or not floors.fleet_notes(len(signals), days)
    least = 0 if floors is None else floors.min_incidents
    flagged: frozenset[str] = frozenset()
    verdicts: list[LemonVerdict] = []
    base = baseline([s.out_count for s in signals])
    poisson_only = True  # round one: the plain Poisson test against the whole fleet's mean
    for _ in range(MAX_ROUNDS):
        kept = [s.out_count for s in signals if s.node not in flagged]
        base = baseline(kept) if kept else base
        # With no incident among the nodes kept, half an incident over them stands in for the mean.
        mean = base.mean if base.mean > 0 else 0.5 / max(base.nodes, 1)
        size = None if poisson_only else base.size
        p_incidents = [upper_tail(s.out_count, mean, size) if s.out_count >= least else 1.0 for s in signals]
        combined = [min(1.0, 2 * min(a, b)) for a, b in zip(p_incidents, p_failures)]
        q_values = benjamini_hochberg(combined)
        # Incident evidence: the incident test alone, at the same false discovery rate, flags it.
        q_incidents = benjamini_hochberg(p_incidents)
        verdicts = [
            LemonVerdict(s, a, b, q, fleet_ok and q <= alpha, fleet_ok and qi <= alpha, why)
            for s, a, b, q, qi, why in zip(signals, p_incidents, p_failures, q_values, q_incidents, notes)
        ]
        now_flagged = frozenset(v.node for v in verdicts if v.flagged)
        if now_flagged == flagged and not poisson_only:
            break
        flagged = now_flagged
        poisson_only = False
    verdicts.sort(key=lambda v: (v.q_value, -v.signals.out_count, -v.signals.single_node_failures, v.node))
    return verdicts, base
