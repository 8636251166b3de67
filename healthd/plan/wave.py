"""Failure waves: which raises of a hardware fault are this node's own, and which a partition shared.

Pure functions over the circuit breaker's reads (``PartitionView``). Escalation to repair
counts a raise only when its node was not in a wave (docs/escalation.md, "What counts as
a wave"): other nodes of its partitions out for the same code, or the breaker's budget
full once the node is out (from then on the breaker holds every other node that fails,
and a held node leaves no mark in Slurm). The first node out of a wave sees neither, so
its raise stays provisional (``state.ProvisionalRaise``) while it is out: a later read that
finds other nodes out for the same code takes it back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping

from healthd.plan.breaker import counted_out, shared_codes, view_limit
from healthd.plan.state import ProvisionalRaise

if TYPE_CHECKING:
    from healthd.config.models import PolicySettings
    from healthd.model import Finding
    from healthd.slurm.nodestate import PartitionView


def budget_full(node: str, views: Mapping[str, PartitionView], settings: PolicySettings, now: float) -> str:
    """Why ``node`` out fills the breaker budget of every one of its partitions, or "".

    Counted as ``breaker.over_limit`` counts (``breaker.counted_out``): the other nodes out with healthd's reason
    within ``[policy].breaker_window``, plus this one. Only where the limit is less than the
    whole partition: where it is the whole (a one-node partition, ``max_out_fraction = 1.0``)
    the breaker holds no one, and every node that fails goes out where the others see it.
    """
    since = now - settings.breaker_window
    why = ""
    for view in sorted(views.values(), key=lambda v: v.name):
        limit = view_limit(view, settings.max_out_fraction)
        if not (limit < view.size and counted_out(view, node, since) + 1 >= limit):
            # A partition of this node where others may still go out, and be seen doing so
            # (``shared_codes``): a wave shows there, so this one full partition hides nothing.
            return ""
        why = why or (
            f"partition {view.name} was at the circuit breaker's limit ({limit} of {view.size} nodes) "
            "with this node out: other nodes that fail are held, unseen"
        )
    return why


def in_wave(
    node: str,
    findings: Iterable[Finding],
    repeats: Mapping[str, tuple[str, int]],
    views: Mapping[str, PartitionView],
    settings: PolicySettings,
    now: float,
) -> dict[str, str]:
    """The hardware faults of a pass (by key, those in ``repeats``) raised in a wave, and why.

    A fault is in a wave when other nodes of ``node``'s partitions are out with healthd's
    reason for its code, or when ``node`` out fills a partition's breaker budget.
    """
    codes = shared_codes(node, views, now - settings.breaker_window)
    full = budget_full(node, views, settings, now)
    waves: dict[str, str] = {}
    for finding in findings:
        if finding.key not in repeats:
            continue
        if finding.code in codes:
            waves[finding.key] = f"other nodes of the partition were out for {finding.code}"
        elif full:
            waves[finding.key] = full
    return waves


def provisional(
    findings: Iterable[Finding], repeats: Mapping[str, tuple[str, int]], uncounted: Mapping[str, str], now: float
) -> tuple[ProvisionalRaise, ...]:
    """The raises a take-out counted (hardware faults not in a wave), provisional until the wave can be told."""
    return tuple(
        ProvisionalRaise(f.key, repeats[f.key][0], f.code, now)
        for f in findings
        if f.key in repeats and f.key not in uncounted
    )


def taken_back(
    node: str,
    raises: tuple[ProvisionalRaise, ...],
    views: Mapping[str, PartitionView],
    window: float,
) -> dict[ProvisionalRaise, str]:
    """The provisional raises a later read of the partitions shows to be a wave's, and why.

    Only other nodes taken out within ``window`` of the raise's own take-out count: its wave.
    """
    back = {}
    for r in raises:
        if r.code in shared_codes(node, views, r.since - window):
            back[r] = f"other nodes of the partition went out for {r.code} after this node"
    return back


def still_provisional(raises: tuple[ProvisionalRaise, ...], now: float, window: float) -> tuple[ProvisionalRaise, ...]:
    """The raises whose wave may still show: taken out less than ``[policy].breaker_window`` ago.

    Past the window the breaker no longer counts the take-out, and a later one is a new
    wave: the raise stands.
    """
    return tuple(r for r in raises if 0 <= now - r.since <= window)
