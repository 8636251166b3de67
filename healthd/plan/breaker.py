"""The circuit breaker: how many nodes of a partition healthd may hold out, who keeps a place, and the hold.

Pure functions over ``PartitionView`` (healthd.slurm.nodestate): the limit and its count
(``allowed_out``, ``counted_out``), the check before a take-out (``over_limit``,
``circuit_breaker``), the read-after-write that ``healthd.cycle.execute`` and
``healthd fleet lemons --drain`` make after the drain (``breaker_confirm``), and the hold
of a node held back with its backoff (``breaker_held``, ``backing_off``). The plan
(``healthd.plan.plan``) asks for the reads; the failure waves escalation leaves uncounted
(``healthd.plan.wave``) use the same count. A view with its own ``limit`` is one breaker
shard of a large partition (``healthd.plan.shard``). docs/policy.md, "Circuit breaker", explains the design.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable, Mapping, Optional, Sequence

from healthd.plan.spread import jitter
from healthd.plan.state import TAKING_OUT, Action, BreakerHold, Decision, PolicyEvent, PolicyState, advance, waiting
from healthd.slurm.hostlist import expand
from healthd.slurm.nodestate import NodeGroup, PartitionView
from healthd.slurm.reasons import Reasons, place_stamp

if TYPE_CHECKING:
    from healthd.config.models import PolicySettings

# Reading the partitions again while the circuit breaker holds: 30 s doubling up to
# 10 min, stretched by a stable per-node factor of 0.75-1.25 (healthd.plan.spread) so the
# nodes of a mass failure do not all ask slurmctld at the same moment.
BREAKER_BASE = 30.0
BREAKER_MAX = 600.0


def group_views(groups: Iterable[NodeGroup], partitions: Sequence[str], reasons: Reasons) -> dict[str, PartitionView]:
    """For each of ``partitions``: its size and the nodes in it that are out with a healthd reason.

    ``groups`` are sinfo's lines for those partitions (``SlurmClient.partitions``);
    only the groups out with a healthd reason have their host lists expanded. Each
    such node's reason code goes into ``codes`` (``Reasons.code``).
    """
    sizes: dict[str, int] = {}
    outs: dict[str, list[tuple[bool, float, str]]] = {}
    codes: dict[str, list[tuple[str, str]]] = {}
    for group in groups:
        if group.partition not in partitions:
            continue
        sizes[group.partition] = sizes.get(group.partition, 0) + group.count
        if group.out and reasons.owns(group.reason):
            # A reason with no readable time sorts last: it never takes a place from a stamped one.
            # A taken-out node keeps the stamp of the drain that won its place (reasons.with_place).
            stamp = place_stamp(group.reason)
            when = stamp if stamp is not None else group.reason_time if group.reason_time is not None else float("inf")
            names = expand(group.nodelist)
            outs.setdefault(group.partition, []).extend((not group.down, when, n) for n in names)
            code = reasons.code(group.reason)
            codes.setdefault(group.partition, []).extend((n, code) for n in names if code)
    return {
        p: PartitionView(p, size, tuple(sorted(outs.get(p, []))), tuple(sorted(codes.get(p, []))))
        for p, size in sizes.items()
    }


def recent(when: float, since: Optional[float]) -> bool:
    """Whether a node out since ``when`` still holds a place: taken out at or after ``since`` (None: always).

    A node whose reason has no readable time (``when`` infinite) always holds one.
    """
    return since is None or when >= since


def shared_codes(node: str, views: Mapping[str, PartitionView], since: float) -> frozenset[str]:
    """The reason codes of the other nodes of ``node``'s partitions that healthd took out at or after ``since``.

    Only a take-out with a readable time inside the window says that a fault is shared now: a node
    kept out for weeks (in repair, say) for the same code is no wave, or in a large partition some
    node would always be out for the common codes and no raise there would ever count.
    """
    fresh = {name for view in views.values() for _, when, name in view.out if when != math.inf and when >= since}
    return frozenset(code for view in views.values() for name, code in view.codes if name != node and name in fresh)


def out_by_healthd(node: str, views: Mapping[str, PartitionView]) -> bool:
    """Whether ``node`` is out with a healthd reason in these views (it is in at least one's ``out``)."""
    return any(node == name for view in views.values() for *_, name in view.out)


def allowed_out(size: int, fraction: float) -> int:
    """How many nodes of a ``size``-node partition healthd may hold out at once: always at least one.

    The limit is a fraction of the whole partition, this node included
    (docs/policy.md: 10% of 100 nodes is 10). The epsilon keeps a product such as
    0.29 * 100 = 28.999999999999996 from flooring to 28.
    """
    return max(1, math.floor(fraction * size + 1e-9))


def view_limit(view: PartitionView, fraction: float) -> int:
    """How many nodes of ``view`` healthd may hold out at once: a shard's own limit, else ``allowed_out``."""
    return view.limit if view.limit is not None else allowed_out(view.size, fraction)


def counted_out(view: PartitionView, node: str, since: Optional[float]) -> int:
    """The nodes of ``view`` other than ``node`` that healthd took out at or after ``since`` (None: ever)."""
    return sum(1 for _, when, out in view.out if out != node and recent(when, since))


def binds(views: Mapping[str, PartitionView], settings: PolicySettings) -> bool:
    """Whether the limit is less than the whole of one of these partitions: only then must a drain be confirmed.

    Where the limit is the whole partition, no number of simultaneous drains can exceed it.
    """
    return any(view_limit(v, settings.max_out_fraction) < v.size for v in views.values())


def _breaker_text(view: PartitionView, count: int, limit: int, settings: PolicySettings) -> str:
    whose = f"its {view.size} nodes" if view.limit is None else f"the {view.size} nodes of this node's breaker shard"
    return (
        f"partition {view.name}: {count} of {whose} taken out by healthd in the last "
        f"{settings.breaker_window:g}s; the limit is {limit} "
        f"([policy].max_out_fraction = {settings.max_out_fraction:g})"
    )


def over_limit(
    node: str, views: Mapping[str, PartitionView], settings: PolicySettings, now: Optional[float] = None
) -> str:
    """Before acting: why taking ``node`` out would break the limit, or "".

    ``views`` are the node's partitions as read before acting, at ``now`` (None: count
    every node out, however long ago). The node is held when, in any of them, the
    nodes other than itself that healthd took out within ``[policy].breaker_window``
    fill ``allowed_out``: a wave, not a backlog of nodes waiting for hardware work.
    Several nodes may pass this check at the same moment; ``breaker_confirm`` settles
    that after the drain, by slurmctld's clock alone.
    """
    since = None if now is None else now - settings.breaker_window
    for view in sorted(views.values(), key=lambda v: v.name):
        limit = view_limit(view, settings.max_out_fraction)
        others = counted_out(view, node, since)
        if others >= limit:
            return _breaker_text(view, others, limit, settings)
    return ""


def breaker_confirm(node: str, views: Mapping[str, PartitionView], settings: PolicySettings) -> str:
    """After draining ``node``, whether it keeps its place: "" if so, else why it must resume itself.

    ``views`` are read at least ``[policy].breaker_settle`` seconds after the drain.
    The nodes out by healthd take their places in ``PartitionView`` order: nodes
    already DOWN first (a DOWN is sent only after a node kept its place, and it
    stamps the reason again), then by the time slurmctld stamped the reason, then
    by name. A node past the limit in any partition loses. Why this holds however
    many nodes drain at once, with Slurm as the only shared state: take the kept
    node that is last in that order; every other kept node drained before its read
    (a drain sent after the read is stamped in a later second, because the settle
    time exceeds the stamps' one-second resolution), so it saw them all ahead of
    itself and would have lost had they filled the limit. A node missing from the
    list (its drain was overtaken) loses.
    Only the nodes ahead whose drain was stamped no more than ``[policy].breaker_window``
    before this node's own drain stamp count: the limit then holds for every span of
    that length (docs/policy.md, "Why the limit holds"), a backlog of old take-outs
    does not fill it, and the window is measured by slurmctld's clock alone.
    """
    for name, view in sorted(views.items()):
        limit = view_limit(view, settings.max_out_fraction)
        order = [(when, out) for _, when, out in view.out]
        mine = [when for when, out in order if out == node]
        if not mine:
            return f"partition {name}: this node is not out with a healthd reason after the drain"
        own = mine[0]
        since = own - settings.breaker_window if own != float("inf") else None
        ahead = order[: [out for _, out in order].index(node)]
        counted = sum(1 for when, _ in ahead if recent(when, since))
        if counted >= limit:
            return _breaker_text(view, counted + 1, limit, settings) + f"; {node} drained after {limit} other(s)"
    return ""


def next_hold(
    previous: Optional[BreakerHold], why: str, now: float, node: str, by: tuple[str, ...] = ()
) -> BreakerHold:
    """The hold after the breaker held ``node`` back (again): when to read its partitions next, and who held it."""
    attempts = (previous.attempts if previous else 0) + 1
    delay = min(BREAKER_BASE * 2 ** (attempts - 1), BREAKER_MAX) * jitter(node)
    return BreakerHold(why, previous.since if previous else now, attempts, now + delay, by)


def holders(node: str, views: Mapping[str, PartitionView], settings: PolicySettings, now: float) -> tuple[str, ...]:
    """The shard-mates out within ``[policy].breaker_window`` that hold ``node``'s place: read first next time.

    Only shards (``view.limit`` set): a partition counted whole is read in one sinfo, whose
    cost does not depend on which of its nodes is out. A shard has about
    ``1 / max_out_fraction`` nodes, so the list stays short.
    """
    since = now - settings.breaker_window
    return tuple(
        sorted(
            {
                out
                for v in views.values()
                if v.limit is not None
                for _, when, out in v.out
                if out != node and recent(when, since)
            }
        )
    )


def circuit_breaker(
    decision: Decision,
    node: str,
    views: Mapping[str, PartitionView],
    settings: PolicySettings,
    now: Optional[float] = None,
) -> tuple[Decision, str]:
    """Hold back a take-out that would put too much of a partition out at once (``breaker.over_limit``).

    A fault that hits many nodes at once is more likely a shared cause (a file
    server, a bad config push) than many broken nodes. Returns the decision and why
    it held.
    """
    if decision.action not in TAKING_OUT:
        return decision, ""
    why = over_limit(node, views, settings, now)
    if why:
        return decision._replace(action=Action.HOLD, explanation=why), why
    return decision, ""


def breaker_held(state: PolicyState, why: str, now: float, node: str, by: tuple[str, ...] = ()) -> PolicyState:
    """State after the circuit breaker held the node back: when to read its partitions again.

    A repair is dropped too. A node in repair is out already, so the breaker never
    holds it: the repair was decided by a take-out that never happened (this pass's, or
    one left pending or unconfirmed), and kept it would turn every later pass, a clean
    one included, into a take-out "in repair" (docs/escalation.md). The raise behind it
    is not counted either (``plan.held_raises``).
    """
    held = next_hold(state.held, why, now, node, by)
    return advance(state, PolicyEvent.BREAKER_HELD)._replace(held=held, pending=None)


def backing_off(state: PolicyState, now: float) -> Optional[BreakerHold]:
    """The breaker's hold while it keeps the node back without reading its partitions again (``next_hold``)."""
    hold = state.held
    return hold if hold is not None and waiting(hold.next_check, now, BREAKER_MAX * 1.25) else None
