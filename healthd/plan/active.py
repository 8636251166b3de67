"""When an active pass may run: the node's Slurm state, and the time since the last run.

An active check (``CheckSpec.active``: a GPU diagnostic that loads every GPU) must
never run beside a job. This module only judges; ``healthd.cycle.activerun`` makes the one
``sinfo -n NAME`` read each rule is given, right before the checks start
(docs/active.md). One rule per way in:

- ``refusal`` (``healthd check --once --active``, and the daemon): the node is
  IDLE+DRAIN, not COMPLETING. Slurm starts no job on a node with the DRAIN flag, and
  IDLE as its base state says none is left (not ALLOCATED, MIXED or COMPLETING), so
  the node stays without jobs until someone resumes it. The COMPLETING flag says a
  job's epilog still runs there (GPU reset scripts, processes still holding the GPUs),
  which would fail a diagnostic that is no fault of the node.
- ``epilog_refusal`` (the epilog, ``[active] at_epilog``): no job but completing ones
  is left on the node, outside a maintenance reservation. The epilog itself keeps the
  node COMPLETING, and slurmctld starts no job on a node while it is COMPLETING
  (observed on 22.05, docs/active.md).
- ``daemon_skip`` (the daemon, ``[active] when_drained``): ``refusal``, on a drain
  that is healthd's own and that a pass may lift (not a lemon or repair drain),
  outside a maintenance reservation, once ``interval`` has passed since the last
  active run.
"""

from __future__ import annotations

from typing import Optional

from healthd.slurm.nodestate import NodeInfo
from healthd.slurm.reasons import Reasons


def _unsettled(node: NodeInfo) -> Optional[str]:
    """Why the machine itself is about to change (a reboot, power saving), or None."""
    if node.reboot_pending:
        return f"{node.name} is {node.state_text}: a reboot is pending"
    if node.power_saving:
        return f"{node.name} is {node.state_text}: powered down or on its way"
    return None


def refusal(node: NodeInfo) -> Optional[str]:
    """Why an active pass must not run on ``node`` now, or None when it is idle and drained."""
    if not node.drained:
        return f"{node.name} is {node.state_text}, not drained: active checks run only on an idle, drained node"
    if node.state != "IDLE":
        return f"{node.name} is {node.state_text}: jobs may still run on it (active checks wait until it is idle)"
    if "COMPLETING" in node.flags:
        return f"{node.name} is {node.state_text}: a job's epilog is still running (active checks wait until it ends)"
    return _unsettled(node)


def _maintenance(node: NodeInfo) -> Optional[str]:
    """Why a maintenance reservation keeps healthd's own active runs off ``node``, or None.

    The window is the administrator's (their burn-in raises faults on purpose), and the
    policy acts on nothing there (rules.hands_off_why): a diagnostic would cost node time
    for a result nobody acts on. ``healthd check --once --active`` still runs there.
    """
    return f"{node.name} is in a maintenance reservation: the administrator's" if node.maintenance else None


def epilog_refusal(node: NodeInfo) -> Optional[str]:
    """Why the epilog must not run the active checks on ``node`` now, or None.

    While a job's epilog runs, Slurm shows the node ``IDLE+COMPLETING`` when no other
    job is on it, and ``ALLOCATED+COMPLETING`` or ``MIXED+COMPLETING`` while another
    job still runs on the node's other CPUs (observed on 22.05 with two jobs sharing
    a node). Without COMPLETING (and without DRAIN) nothing would keep a new job off it.
    """
    if node.state != "IDLE":
        return f"{node.name} is {node.state_text}: another job is still on it"
    if not node.flags & {"COMPLETING", "DRAIN"}:
        return f"{node.name} is {node.state_text}, not completing: a job could start beside the checks"
    return _maintenance(node) or _unsettled(node)


def interval_left(last_run: Optional[float], now: float, interval: float) -> float:
    """Seconds before the next active run may start (0: now), ``interval`` after ``last_run``.

    A last run further ahead than ``interval`` means the clock stepped back: it does not hold
    the checks back (as the policy's retry times, ``state.waiting``).
    """
    if last_run is None:
        return 0.0
    left = last_run + interval - now
    return left if 0 < left <= interval else 0.0


def drained_skip(node: Optional[NodeInfo], reasons: Reasons) -> Optional[str]:
    """Why the daemon must not run the active checks on ``node`` (as read this pass), or None.

    Only a drain of healthd's own that a pass may lift: an administrator's drain is
    someone's work on the node (a firmware update, a burn-in of their own), and a resume
    would be theirs too; a lemon or repair drain waits for a person whatever the checks
    find (docs/fleet.md, docs/history.md), so a diagnostic there would learn nothing.
    """
    if node is None:
        return "the pass did not read the node (healthd has not taken it out)"
    if not (node.drained and reasons.owns(node.reason)):
        return f"{node.name} is {node.state_text} with reason {node.reason!r}: not drained by healthd"
    if reasons.is_lemon(node.reason) or reasons.is_repair(node.reason):
        return f"{node.name} is out for {node.reason!r}: a person returns it, whatever the checks find"
    return _maintenance(node) or refusal(node)


def daemon_skip(
    node: Optional[NodeInfo], reasons: Reasons, last_run: Optional[float], now: float, interval: float
) -> Optional[str]:
    """Why the daemon does not start the active checks after this pass, or None when it should."""
    why = drained_skip(node, reasons)
    if why is not None:
        return why
    left = interval_left(last_run, now, interval)
    if left > 0:
        return f"the last active run was {interval - left:.0f}s ago; the next is due in {left:.0f}s ([active] interval)"
    return None
