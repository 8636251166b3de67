"""The policy's remedies: escalation to repair, a reboot in place of a take-out, a GPU reset.

Pure functions ``healthd.plan.policy.decide`` applies after the rules have chosen an
action (docs/history.md, "Escalation"; docs/remediation.md).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from healthd.model import Finding, PassResult, Status
from healthd.plan.acks import FindingRef
from healthd.plan.rules import PassFacts, PolicyRules, acting_severity, hands_off_why
from healthd.plan.state import (
    OWN_CHECK,
    TAKING_OUT,
    Action,
    Decision,
    PolicyEvent,
    PolicyState,
    RebootRequest,
    Repair,
    advance,
)
from healthd.slurm.nodestate import NodeInfo
from healthd.slurm.reasons import Reasons, acting_key

# The finding detail naming what fixes the fault short of a person (set by the checks).
REMEDY = "remedy"


def escalate(
    decision: Decision, state: PolicyState, facts: PassFacts, rules: PolicyRules
) -> tuple[Decision, PolicyState]:
    """Repeat failures send the node to repair, and a node in repair stays out (docs/history.md, "Escalation").

    A finding behind this take-out whose code was raised on its unit (a GPU by UUID
    or serial, an IB port, a DIMM) at least the configured number of times in the
    window makes the node a lemon: it goes out with a ``REPAIR`` reason that no
    clean pass lifts, so it stops the drain/resume ping-pong. Only the findings in
    ``repeats`` can: the caller puts there the codes their check declares a hardware
    unit's fault, counting only this node's own raises (docs/escalation.md).
    """
    result, repeats, escalation = facts.result, facts.repeats, rules.escalation
    repair = state.repair
    if repair is None and escalation is not None and decision.action in TAKING_OUT:
        causes = set(decision.causes)
        hits: list[tuple[Finding, str, int]] = []
        for finding in result.findings:
            if FindingRef.of(finding) not in causes or finding.key not in repeats:
                continue
            unit, count = repeats[finding.key]
            needed = escalation.overrides.get(finding.code, escalation.repeats)
            if needed > 0 and count >= needed:
                hits.append((finding, unit, count))
        if hits:
            finding, unit, count = min(hits, key=lambda hit: acting_key(hit[0]))
            repair = Repair(finding.code, finding.subject, unit, count, finding.status.name, result.started_at)
            state = advance(state, PolicyEvent.ESCALATED, repair)
    if repair is None:
        return decision, state
    action = Action.TAKE_OUT_NOW if repair.severity == Status.CRITICAL.name else Action.DRAIN_AFTER_JOBS
    why = (
        f"in repair: {repair.code} raised {repair.count} times on {repair.unit}; "
        f"`healthd ack --repaired {repair.subject}` returns the node after the hardware work"
    )
    reason = rules.reasons.repair(repair.code, repair.subject, repair.count)
    return Decision(action, action, reason, why, decision.causes), state


def _booted(request: RebootRequest, boot_id: str, node: Optional[NodeInfo]) -> bool:
    """Whether the machine booted since ``request``: the boot id changed, else Slurm's boot time moved past it."""
    if boot_id and request.boot_id:
        return boot_id != request.boot_id
    return node is not None and node.boot_time is not None and node.boot_time > request.at


def remediate(
    decision: Decision, state: PolicyState, facts: PassFacts, rules: PolicyRules
) -> tuple[Decision, PolicyState]:
    """A reboot in place of a take-out, and the node kept out until one has happened (docs/remediation.md).

    A take-out whose top finding declares ``remedy = "reboot"`` becomes a REBOOT
    when ``[remediation] reboot`` is on, once per finding: if the same finding is
    there after the reboot it is an ordinary take-out. Once asked for, the reboot
    stands until the machine has booted, however long its jobs take; a pass in
    between resumes nothing. If the reboot did not happen (no reboot pending in
    Slurm, same boot) it is not asked for again: the node stays out for a person.
    """
    result, node = facts.result, facts.node
    if acting_severity(result) is Status.OK:
        state = state._replace(rebooted="", reset_tried=())
    request = state.reboot
    if request is not None and _booted(request, facts.boot_id, node):
        state = state._replace(reboot=None, rebooted=request.cause)
        request = None
    unsent = state.pending is not None and state.pending.action is Action.REBOOT
    if request is not None and unsent and not (node is not None and node.reboot_pending):
        # A pass cut short after its DRAIN: the reboot may never have reached Slurm.
        request = None
    if request is not None:
        # The node is judged in its new boot: clean passes before the reboot do not count.
        state = state._replace(clean_streak=0)
        waiting_why = f"waiting for the reboot asked for at {request.at:.0f} ({request.reason})"
        if node is not None and not node.reboot_pending and not node.power_saving:
            waiting_why = f"the reboot asked for at {request.at:.0f} did not happen: left out for a person"
        if decision.action in TAKING_OUT:
            return decision._replace(action=Action.NONE, explanation=waiting_why), state
        return Decision(Action.NONE, Action.NONE, "", waiting_why, decision.causes), state
    if not rules.reboot or decision.action not in TAKING_OUT:
        return decision, state
    top = top_cause(result, decision)
    if top is None or top.details.get(REMEDY) != "reboot" or top.key == state.rebooted:
        return decision, state
    causes = set(decision.causes)
    behind = [f for f in result.findings if FindingRef.of(f) in causes]
    why = f"{top.status.name} from {top.check}: its remedy is a reboot, after the node's jobs end"
    return Decision(Action.REBOOT, Action.REBOOT, rules.reasons.reboot(behind), why, decision.causes), state


class GpuReset(NamedTuple):
    """A GPU to reset: the finding that asks for it and the GPU's PCI bus id."""

    key: str
    pci: str


def reset_target(
    result: PassResult, decision: Decision, state: PolicyState, node: Optional[NodeInfo], reasons: Reasons
) -> Optional[GpuReset]:
    """The GPU to reset this pass, if any (docs/remediation.md, "GPU reset").

    Only on a node healthd drained that runs no job, with nothing else to send this
    pass, no reboot asked for and no repair: a finding with ``remedy = "reset"`` and
    its ``pci``, once per finding until a clean pass. ``healthd.cycle.gpureset`` checks the
    node and the GPU's processes again just before the reset.
    """
    if node is None or decision.action is not Action.NONE or state.reboot is not None or state.repair is not None:
        return None
    if not (node.drained and reasons.owns(node.reason)) or node.busy or hands_off_why(node):
        return None
    wanted = [
        f
        for f in result.findings
        if f.status in (Status.CRITICAL, Status.WARNING)
        and f.check != OWN_CHECK
        and f.details.get(REMEDY) == "reset"
        and isinstance(f.details.get("pci"), str)
        and f.key not in state.reset_tried
    ]
    if not wanted:
        return None
    top = min(wanted, key=acting_key)
    return GpuReset(top.key, str(top.details["pci"]))


def top_cause(result: PassResult, decision: Decision) -> Optional[Finding]:
    """The finding behind ``decision`` that names its reason (first in acting order), if any."""
    causes = set(decision.causes)
    return min((f for f in result.findings if FindingRef.of(f) in causes), key=acting_key, default=None)
