"""The policy: a pure function from a pass, remembered state and the node's Slurm state to one decision.

No I/O happens here. ``decide`` applies the rules (``healthd.plan.rules``: severity,
hysteresis, ownership, resume), then the remedies (``healthd.plan.remedy``: escalation
to repair, reboot) to the state the policy remembers (``healthd.plan.state``);
docs/policy.md explains each.
"""

from __future__ import annotations

from healthd.model import Status
from healthd.plan.acks import widest
from healthd.plan.remedy import escalate, remediate
from healthd.plan.rules import (
    PassFacts,
    PolicyRules,
    acting_severity,
    against_node,
    count_streaks,
    may_stand,
    resume_against_node,
    wanted_action,
)
from healthd.plan.state import TAKING_OUT, Action, Decision, PolicyState


def decide(facts: PassFacts, rules: PolicyRules) -> tuple[Decision, PolicyState]:
    """One decision for this pass and the policy state to remember.

    ``facts.node`` is None when Slurm could not be asked (unreachable, disabled): the
    decision is then what the pass calls for, to be kept pending and checked
    against the node's state when it can be read again. A remembered pending
    take-out stands in for a failing pass that calls for nothing more specific,
    while one of its causes may still be there (``may_stand``).
    The pending action is kept while the decision is still that action (the
    caller clears it once Slurm accepts it) and dropped when it no longer is.
    """
    result, state, node, reasons = facts.result, facts.state, facts.node, rules.reasons
    severity = acting_severity(result)
    new_state = count_streaks(state, result, facts.partial, facts.coverage)
    decision = wanted_action(result, new_state, rules)
    pending = state.pending
    if (
        pending is not None
        and pending.action in TAKING_OUT
        and decision.action in (Action.NONE, Action.HOLD)
        and severity is not Status.OK
        and may_stand(pending.causes, result)
    ):
        decision = Decision(
            pending.action, pending.action, pending.reason, f"retrying pending {pending.action.value}", pending.causes
        )
    decision, new_state = escalate(decision, new_state, facts, rules)
    if new_state.repair is None:  # a node in repair is never rebooted (docs/history.md, "Escalation")
        decision, new_state = remediate(decision, new_state, facts, rules)
    if decision.action is Action.RESUME:
        decision = resume_against_node(decision, new_state, facts, rules)
    else:
        decision = against_node(decision, new_state, node, reasons)
    if pending is not None and decision.action is not pending.action:
        new_state = new_state._replace(pending=None)
    if node is not None and node.drained and reasons.owns(node.reason) and decision.causes:
        new_state = new_state._replace(took_out=widest([*new_state.took_out, *decision.causes]))
    return decision, new_state
