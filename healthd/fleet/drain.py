"""``healthd fleet lemons --drain``: take flagged nodes out through the Slurm adapter, within the circuit breaker.

``read_cluster`` reads what the plan needs the way the node agent does: each
flagged node (``SlurmClient.node``) and its partitions' groups (the breaker's sinfo
read), never the whole node table. ``plan_drains`` is pure: from the ranked
verdicts, the nodes and the partitions it decides, most suspicious first, which
nodes to drain and why the others are left alone (a silent lemon, flagged on job
failures alone, unless silent lemons are asked for; unknown to Slurm, already out,
someone else's reason, a pending reboot, or the partition's
``[policy].max_out_fraction`` of nodes out by healthd already reached, counting the
drains planned before). ``apply_drains`` sends them, then, like the node agent
(``healthd.cycle.execute``), reads the partitions again after the settle time and puts
back every node that ``breaker.breaker_confirm`` says lost its place, in case node
agents drained nodes meanwhile.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, NamedTuple, Sequence

from healthd.config.models import PolicySettings
from healthd.fleet.lemons import LemonVerdict
from healthd.plan.breaker import breaker_confirm, group_views, over_limit
from healthd.slurm.adapter import SlurmClient, SlurmError, SlurmNotFound
from healthd.slurm.nodestate import NodeInfo, PartitionView
from healthd.slurm.reasons import Reasons

if TYPE_CHECKING:
    from healthd.config.sections import Config

Views = dict[str, PartitionView]
# Job failures are what users can cause (a broken job, a node chosen with -w, two accounts
# of one person): a drain on them alone needs the operator's explicit word.
SILENT = (
    "a silent lemon: flagged on job failures alone, without incident evidence (healthd's or Slurm's events); "
    "drained only with --drain-silent"
)


class DrainStep(NamedTuple):
    """One flagged node: drain it (``drain``) or why not; after ``apply_drains``, what happened."""

    node: str
    reason: str
    drain: bool
    why: str


def summary(verdict: LemonVerdict) -> str:
    """The reason's text after ``LEMON``: the signals an administrator reads in ``sinfo -R``."""
    s = verdict.signals
    return (
        f"{s.out_count} incidents, {s.single_node_failures}/{s.single_node_runs} runs failed, score {verdict.score:.1f}"
    )


def read_cluster(client: SlurmClient, names: Sequence[str], reasons: Reasons) -> tuple[dict[str, NodeInfo], Views]:
    """The flagged nodes slurmctld knows, and the breaker's view of their partitions.

    A node slurmctld does not know is left out (the plan says so); any other error,
    such as slurmctld not answering, is raised: it says nothing about the node.
    """
    nodes: dict[str, NodeInfo] = {}
    for name in names:
        try:
            nodes[name] = client.node(name)
        except SlurmNotFound:
            raise
        except SlurmError as exc:
            if "does not know" not in str(exc) and "not found" not in str(exc).lower():
                raise
    return nodes, _views(client, nodes.values(), reasons)


def _views(client: SlurmClient, nodes: Iterable[NodeInfo], reasons: Reasons) -> Views:
    partitions = tuple(sorted({p for node in nodes for p in node.partitions}))
    return group_views(client.partitions(partitions), partitions, reasons)


def plan_drains(
    lemons: Sequence[LemonVerdict],
    table: Mapping[str, NodeInfo],
    views: Views,
    reasons: Reasons,
    policy: PolicySettings,
    now: float,
    silent: bool = False,
) -> list[DrainStep]:
    """The drains to send, most suspicious first, each within the circuit breaker given those before it.

    A lemon without incident evidence (``LemonVerdict.incident_evidence``) is left alone unless ``silent``.
    """
    views = dict(views)
    steps = []
    for verdict in lemons:
        reason = reasons.lemon(summary(verdict))
        if not (verdict.incident_evidence or silent):
            steps.append(DrainStep(verdict.node, reason, False, SILENT))
            continue
        node = table.get(verdict.node)
        if node is None:
            steps.append(DrainStep(verdict.node, reason, False, "not a node slurmctld knows"))
            continue
        if node.out:
            if reasons.is_lemon(node.reason):
                why = "already out as a lemon"
            elif reasons.owns(node.reason):
                why = f"already out by healthd ({node.reason})"
            else:
                why = f"out with someone else's reason ({node.reason}): left alone"
            steps.append(DrainStep(verdict.node, reason, False, why))
            continue
        if node.reboot_pending:
            steps.append(DrainStep(verdict.node, reason, False, "a reboot is pending: left alone"))
            continue
        mine = {p: views[p] for p in node.partitions if p in views}
        # The same wave rule as a pass: only nodes taken out within breaker_window hold the budget.
        held = over_limit(node.name, mine, policy, now)
        if held:
            steps.append(DrainStep(verdict.node, reason, False, f"held by the circuit breaker: {held}"))
            continue
        steps.append(DrainStep(verdict.node, reason, True, "drain"))
        # Later candidates count this drain: planned drains are stamped in rank order.
        for name, view in mine.items():
            views[name] = view._replace(out=(*view.out, (True, now, node.name)))
    return steps


def apply_drains(
    steps: Sequence[DrainStep],
    client: SlurmClient,
    reasons: Reasons,
    policy: PolicySettings,
    sleep: Callable[[float], None] = time.sleep,
) -> list[DrainStep]:
    """Send the planned drains; confirm each against the breaker after the settle time; put back losers."""
    done: list[DrainStep] = []
    for step in steps:
        if not step.drain:
            done.append(step)
            continue
        try:
            client.drain(step.node, step.reason)
            done.append(step._replace(why="drained"))
        except SlurmError as exc:
            done.append(step._replace(drain=False, why=f"drain failed: {exc}"))
    drained = [step.node for step in done if step.drain]
    if not drained:
        return done
    sleep(policy.breaker_settle)
    try:
        table, views = read_cluster(client, drained, reasons)
    except SlurmError as exc:
        return [
            s._replace(why=f"drained; could not confirm against the breaker: {exc}") if s.drain else s for s in done
        ]
    confirmed = []
    for step in done:
        node = table.get(step.node)
        if not step.drain or node is None:
            confirmed.append(step)
            continue
        why = breaker_confirm(step.node, {p: views[p] for p in node.partitions if p in views}, policy)
        if why:
            try:
                client.resume(step.node)
                confirmed.append(step._replace(drain=False, why=f"put back: {why}"))
            except SlurmError as exc:
                confirmed.append(step._replace(why=f"over the breaker's limit ({why}) and resume failed: {exc}"))
        else:
            confirmed.append(step)
    return confirmed


def drain_lemons(
    config: Config, lemons: Sequence[LemonVerdict], now: float, *, apply: bool, silent: bool
) -> list[DrainStep]:
    """``fleet lemons --drain`` whole: read the cluster, plan, and (``apply``) send and confirm, under ``config``.

    The fleet's one step that acts on Slurm, as the pass is the node agent's: the command
    line hands it the verdicts and prints what it returns (``SlurmError`` if a read fails).
    """
    reasons = Reasons(config.slurm.reason_prefix)
    client = SlurmClient(config.slurm)
    nodes, views = read_cluster(client, [verdict.node for verdict in lemons], reasons)
    steps = plan_drains(lemons, nodes, views, reasons, config.policy, now, silent)
    return apply_drains(steps, client, reasons, config.policy) if apply else steps
