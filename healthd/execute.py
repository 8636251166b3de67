"""Carry a plan out through Slurm: the only code that calls the Slurm adapter.

``observe`` makes the reads a plan asks for; ``execute`` sends the plan's writes
in order and stops at the first that fails; ``rehearse`` is the dry run's
execute: it records that nothing was sent. Slurm trouble never raises from here:
it comes back as an error text for the plan to keep pending.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from healthd.breaker import breaker_confirm, partition_views
from healthd.nodestate import NodeInfo
from healthd.plan import Executed, Observed, Plan, Read, Step
from healthd.policy import GpuReset
from healthd.reasons import owned
from healthd.slurm import SlurmClient, SlurmError

if TYPE_CHECKING:
    from healthd.config import Config


def observe(client: SlurmClient, read: Read, node: str, observed: Observed, prefix: str) -> Observed:
    """Make ``read`` for ``node`` and add its answer (or its error) to ``observed``."""
    asked = observed.asked | {read}
    try:
        if read is Read.NODE:
            return replace(observed, asked=asked, node=client.show_node(node))
        partitions = observed.node.partitions if observed.node else ()
        return replace(observed, asked=asked, views=partition_views(client.show_all(), partitions, prefix))
    except SlurmError as exc:
        return replace(observed, asked=asked, errors=(*observed.errors, str(exc)))


def _confirm(client: SlurmClient, name: str, config: Config, sleep: Callable[[float], None]) -> str:
    """The circuit breaker's read-after-write: after the settle time, may this drained node stay out?

    Returns "" when it keeps its place (``breaker.breaker_confirm``); otherwise it has
    been resumed here and the text says why. When the read fails the drain is
    undone too: a node that cannot prove its place under the limit does not keep it.
    Raises SlurmError when the undo fails (the plan's state keeps the drain
    unconfirmed) or when the node no longer carries a healthd reason (someone
    else's now: left alone).
    """
    prefix = config.slurm.reason_prefix
    sleep(config.policy.breaker_settle)
    try:
        nodes = client.show_all()
    except SlurmError as exc:
        client.resume(name)
        return f"could not confirm the drain against the circuit breaker ({exc}); put back"
    me = next((n for n in nodes if n.name == name), None)
    if me is None or not (me.out and owned(me.reason, prefix)):
        raise SlurmError(f"node {name} no longer carries a healthd reason after the drain: left alone")
    why = breaker_confirm(name, partition_views(nodes, me.partitions, prefix), config.policy)
    if why:
        client.resume(name)
    return why


def execute(plan: Plan, client: SlurmClient, config: Config, sleep: Callable[[float], None] = time.sleep) -> Executed:
    """Send the plan's steps; a failed write ends the sequence (the rest would act on a guess)."""
    done: list[Step] = []
    if plan.node is None:
        return Executed()
    if plan.reset is not None:
        return _reset(plan.reset, plan.node, config)
    name, reason = plan.node.name, plan.decision.reason
    try:
        for step in plan.steps:
            if step is Step.DRAIN:
                client.drain(name, reason)
            elif step is Step.CONFIRM:
                lost = _confirm(client, name, config, sleep)
                if lost:
                    return Executed(tuple(done), lost=lost)
            elif step is Step.DOWN:
                client.down(name, reason)
            elif step is Step.REBOOT:
                # Plain: the DRAIN just sent keeps the node out through the reboot (plan._steps).
                client.reboot(name, reason, nextstate=None, asap=False)
            else:
                client.resume(name)
            done.append(step)
    except SlurmError as exc:
        return Executed(tuple(done), error=str(exc))
    return Executed(tuple(done))


def _reset(gpu: GpuReset, node: NodeInfo, config: Config) -> Executed:
    """A GPU reset, through ``healthd.gpureset`` (which checks the node and the GPU's processes again)."""
    from healthd.gpureset import ResetSettings, reset_gpu

    settings = ResetSettings(nvidia_smi=config.remediation.nvidia_smi)
    outcome = reset_gpu(gpu.pci, node=node, settings=settings)
    done = (Step.RESET,) if outcome.done else ()
    return Executed(done, reset=outcome.outcome.value, reset_message=outcome.message)


def rehearse(plan: Plan) -> Executed:
    """The dry run's execute: records the steps it would have sent, sends nothing."""
    return Executed(would=plan.steps, rehearsed=True)
