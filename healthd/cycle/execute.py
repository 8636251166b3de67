"""Carry a plan out through Slurm: the pass's one caller of the Slurm adapter's reads and writes.

``observe`` makes the reads a plan asks for; ``execute`` sends the plan's writes
in order and stops at the first that fails; ``rehearse`` is the dry run's
execute: it records that nothing was sent. Slurm trouble never raises from here:
it comes back as a value (``SlurmProblem``: kind, command, detail) for the plan to keep pending.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Optional

from healthd.plan.breaker import breaker_confirm, counted_out, group_views, out_by_healthd
from healthd.plan.plan import Executed, Observed, Plan, Read, Step
from healthd.plan.remedy import GpuReset
from healthd.plan.shard import SHARD_LIMIT, shard, shard_view, sharded
from healthd.slurm.adapter import SlurmClient, SlurmError, node_in_groups
from healthd.slurm.hostlist import HostlistError, expand
from healthd.slurm.nodestate import NodeGroup, NodeInfo, PartitionView
from healthd.slurm.problem import SlurmFailure
from healthd.slurm.reasons import Reasons, place_stamp, with_place

if TYPE_CHECKING:
    from healthd.config.models import Config, PolicySettings
    from healthd.cycle.gpureset import ResetMarks


def observe(
    client: SlurmClient,
    read: Read,
    node: str,
    observed: Observed,
    reasons: Reasons,
    settings: PolicySettings,
    *,
    boot_time: bool = False,
    first: tuple[str, ...] = (),
) -> Observed:
    """Make ``read`` for ``node`` and add its answer (or its error) to ``observed``.

    The node is read alone (``SlurmClient.node``), or with its boot time when
    ``boot_time`` asks for it (``show_node``: the whole table, see docs/scale.md);
    the breaker's read covers only the node's partitions, a large one only the node's
    shard (``read_views``), ``first`` (the shard-mates that held it last time) first.
    Both at once are one sinfo of every partition's groups, which holds the node's own
    state too (``read_node_and_views``).
    """
    asked = observed.asked | {read}
    try:
        if read is Read.NODE_AND_PARTITIONS and not boot_time:
            info, views = read_node_and_views(client, node, reasons, settings)
            return observed._replace(asked=asked, node=info, views=views)
        if read is not Read.PARTITIONS:
            info = client.show_node(node) if boot_time else client.node(node)
            observed = observed._replace(asked=asked, node=info)
            if read is Read.NODE:
                return observed
        current = observed.node
        partitions = current.partitions if current else ()
        # Before a take-out (the node not out with healthd's reason yet) one shard-mate in its place is enough.
        enough = current is not None and not (current.out and reasons.owns(current.reason))
        views = read_views(client, node, partitions, reasons, settings, enough=enough, first=first)
        return observed._replace(asked=asked, views=views)
    except SlurmError as exc:
        return observed._replace(asked=asked, errors=(*observed.errors, exc.problem))


def read_node_and_views(
    client: SlurmClient, name: str, reasons: Reasons, settings: PolicySettings
) -> tuple[NodeInfo, dict[str, PartitionView]]:
    """The node and the breaker's view of its partitions from one sinfo of every partition (``SlurmClient.all_groups``).

    Every partition, not the ones the node was last seen in: slurmctld packs the
    whole node table for ``sinfo -p`` too, and a partition the node has just joined
    must count (docs/scale.md). A node in no partition is in no group:
    ``show_node`` then answers for it (and says whether slurmctld knows it), and it
    has no partition to count.
    """
    groups = client.all_groups()
    info = node_in_groups(groups, name)
    if info is None:
        return client.show_node(name), {}
    return info, _views(groups, info.partitions, name, reasons, settings)


def _views(
    groups: list[NodeGroup], partitions: tuple[str, ...], name: str, reasons: Reasons, settings: PolicySettings
) -> dict[str, PartitionView]:
    """The breaker's views from whole partitions' groups; one above ``breaker_shard_above`` cut to ``name``'s shard.

    Every node of a large partition counts against its shard alone, whichever read it
    made: the cut keeps one rule for the partition however its nodes read it.
    """
    try:
        views = group_views(groups, partitions, reasons)
        for partition, view in views.items():
            if sharded(view.size, settings.breaker_shard_above):
                members = [n for g in groups if g.partition == partition for n in expand(g.nodelist)]
                views[partition] = shard_view(view, shard(name, members, settings.max_out_fraction))
        return views
    except HostlistError as exc:
        raise SlurmError(f"sinfo: {exc}") from None


def read_views(
    client: SlurmClient,
    name: str,
    partitions: tuple[str, ...],
    reasons: Reasons,
    settings: PolicySettings,
    *,
    enough: bool = False,
    first: tuple[str, ...] = (),
) -> dict[str, PartitionView]:
    """The circuit breaker's view of ``partitions``, none of it a read of the whole node table for a large one.

    ``scontrol show partition`` (one cheap RPC) gives each partition's size and host
    list. Those of at most ``[policy].breaker_shard_above`` nodes are read together with
    one sinfo (a whole-table pack on slurmctld); each larger one is read node by node,
    only the nodes of ``name``'s shard (``_shard_read``). ``enough``: stop reading a shard
    at its first node out in its place, which is all a node not yet out needs to be held;
    ``first``: shard-mates to read before the others.
    """
    if not partitions:
        return {}
    listed = client.partition_nodes()
    large = tuple(p for p in partitions if p in listed and sharded(listed[p].size, settings.breaker_shard_above))
    whole = tuple(p for p in partitions if p not in large)
    views = _views(client.partitions(whole), whole, name, reasons, settings) if whole else {}
    for partition in large:
        nodelist = listed[partition].nodelist
        views[partition] = _shard_read(client, name, partition, nodelist, reasons, settings, enough, first)
    return views


def _shard_read(
    client: SlurmClient,
    name: str,
    partition: str,
    nodelist: str,
    reasons: Reasons,
    settings: PolicySettings,
    enough: bool,
    first: tuple[str, ...],
) -> PartitionView:
    """The breaker's view of ``name``'s shard of ``partition``: each of its nodes read alone (``sinfo -n``).

    ``enough``: stop at the first shard-mate out in its place. ``first``: the shard-mates
    to read first, those that held the node last time: most likely still out, so a held
    node's re-read is one node read, not half its shard.
    The others are read in name order starting after ``name``, so that the nodes of a
    shard do not all read the same node first. A single-node read costs slurmctld the
    same at any table size (docs/scale.md, "Reads").
    """
    try:
        mates = shard(name, expand(nodelist), settings.max_out_fraction)
    except HostlistError as exc:
        raise SlurmError(f"scontrol show partition: {exc}") from None
    if name not in mates:
        raise SlurmError(f"node {name} is not in the host list of partition {partition}")
    at = mates.index(name)
    since = time.time() - settings.breaker_window
    groups: list[NodeGroup] = []
    rest = [mate for mate in (*mates[at + 1 :], *mates[:at]) if mate not in first]
    ahead = [m for m in dict.fromkeys(first) if m in mates and m != name]
    for mate in (*ahead, *rest, *(() if enough else (name,))):
        groups.append(_as_group(client.node(mate), partition))
        view = group_views(groups, (partition,), reasons)[partition]
        if enough and counted_out(view, name, since) >= SHARD_LIMIT:
            break
    view = group_views(groups, (partition,), reasons).get(partition, PartitionView(partition, 0, ()))
    return shard_view(view, mates)


def _as_group(node: NodeInfo, partition: str) -> NodeGroup:
    """One node read alone, as a one-node group of ``partition`` (what ``group_views`` counts)."""
    return NodeGroup(partition, 1, node.state, node.flags, node.reason, node.reason_time, node.name, node.reason_user)


def _confirm(
    client: SlurmClient, name: str, partitions: tuple[str, ...], config: Config, sleep: Callable[[float], None]
) -> tuple[str, Optional[float]]:
    """The circuit breaker's read-after-write: after the settle time, may this drained node stay out?

    Returns ("", the stamp of its drain) when it keeps its place (``breaker.breaker_confirm``);
    otherwise it has been resumed here and the text says why. When the read fails the drain is
    undone too: a node that cannot prove its place under the limit does not keep it.
    Raises SlurmError when the undo fails (the plan's state keeps the drain
    unconfirmed) or when the node no longer carries a healthd reason (someone
    else's now: left alone).
    """
    sleep(config.policy.breaker_settle)
    try:
        views = read_views(client, name, partitions, Reasons(config.slurm.reason_prefix), config.policy)
    except SlurmError as exc:
        client.resume(name)
        return f"could not confirm the drain against the circuit breaker ({exc}); put back", None
    if not out_by_healthd(name, views):
        left = f"node {name} no longer carries a healthd reason after the drain: left alone"
        raise SlurmError(left, SlurmFailure.TAKEN_OVER, "")
    why = breaker_confirm(name, views, config.policy)
    if why:
        client.resume(name)
    stamps = [when for view in views.values() for _, when, out in view.out if out == name and when != float("inf")]
    return why, (stamps[0] if stamps else None)


def execute(
    plan: Plan,
    client: SlurmClient,
    config: Config,
    sleep: Callable[[float], None] = time.sleep,
    *,
    resets: Optional[ResetMarks] = None,
    deadline: Optional[float] = None,
) -> Executed:
    """Send the plan's steps; a failed write ends the sequence (the rest would act on a guess).

    A GPU reset needs ``resets``, the resets any process may still run, and ends by
    ``deadline`` (``time.monotonic``), if given.
    """
    done: list[Step] = []
    node = plan.node
    if node is None:
        return Executed()
    if plan.reset is not None:
        if resets is None:
            raise ValueError("a GPU reset needs the record of running resets")
        return _reset(plan.reset, node, config, resets, deadline)
    name, reason = node.name, plan.decision.reason
    # The drain that holds the node's place: confirmed now, or one of an earlier pass. Every write
    # that sets the reason carries it: slurmctld stamps the reason again, and without the stamp a
    # node that holds its place would order behind nodes that drained after it (breaker_confirm).
    place = place_stamp(node.reason) if node.drained else None
    place = place if place is not None else node.reason_time if node.drained else None
    try:
        for step in plan.steps:
            if step is Step.DRAIN:
                # A node already out with healthd's reason (plan._steps drains it only to update the
                # reason) keeps its place; a new drain has none until its CONFIRM.
                client.drain(name, _placed(reason, place))
            elif step is Step.CONFIRM:
                lost, place = _confirm(client, name, node.partitions, config, sleep)
                if lost:
                    return Executed(tuple(done), lost=lost)
            elif step is Step.DOWN:
                client.down(name, _placed(reason, place))
            elif step is Step.REBOOT:
                # Plain: the DRAIN just sent keeps the node out through the reboot (plan._steps).
                client.reboot(name, _placed(reason, place), nextstate=None, asap=False)
            else:
                client.resume(name)
            done.append(step)
    except SlurmError as exc:
        return Executed(tuple(done), error=exc.problem)
    return Executed(tuple(done))


def _placed(reason: str, place: Optional[float]) -> str:
    return with_place(reason, place) if place is not None else reason


def _reset(gpu: GpuReset, node: NodeInfo, config: Config, resets: ResetMarks, deadline: Optional[float]) -> Executed:
    """A GPU reset, through ``healthd.cycle.gpureset`` (which checks the node and the GPU's processes again)."""
    from healthd.cycle.gpureset import ResetSettings, reset_gpu

    settings = ResetSettings(nvidia_smi=config.remediation.nvidia_smi)
    outcome = reset_gpu(gpu.pci, node=node, marks=resets, settings=settings, deadline=deadline)
    done = (Step.RESET,) if outcome.done else ()
    return Executed(done, reset=outcome.outcome.value, reset_message=outcome.message, problems=outcome.problems)


def rehearse(plan: Plan) -> Executed:
    """The dry run's execute: records the steps it would have sent, sends nothing."""
    return Executed(would=plan.steps, rehearsed=True)
