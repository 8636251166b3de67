"""The policy's rules: severity, hysteresis, ownership and resume, from a pass and the node as read.

Pure functions. ``PolicyRules`` is what the config says about acting; ``PassFacts`` what a
pass knows of the node. The findings that call for the strongest action decide (see
docs/policy.md): CRITICAL takes the node out now, WARNING drains it after its jobs,
UNKNOWN only reports unless ``[policy].unknown_action = "drain"``, and a clean pass
resumes a node that healthd itself took out. Hysteresis is per check: a check acts once
it has failed ``fail_passes`` passes in a row, and the node is resumed after
``clean_passes`` clean passes of the whole node. The ownership rules (never touch a node
with someone else's reason, or one with a reboot pending) are applied against the node
state read this pass. ``healthd.plan.policy.decide`` strings them together.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping, NamedTuple, Optional

from healthd.model import Finding, PassResult, RunState, Status, Tier
from healthd.plan.acks import FindingRef, adopted, widest
from healthd.plan.ackview import UNACKNOWLEDGEABLE
from healthd.plan.state import (
    OWN_CHECK,
    TAKING_OUT,
    Action,
    Decision,
    Pending,
    PolicyEvent,
    PolicyState,
    advance,
)
from healthd.slurm.nodestate import NodeInfo
from healthd.slurm.reasons import ACTING_ORDER, Reasons, acting_key, reason_head

if TYPE_CHECKING:
    from healthd.config.models import EscalationSettings, PolicySettings


# Retry delays for an action slurmctld did not accept: 10 s doubling up to 5 min.
BACKOFF_BASE = 10.0


BACKOFF_MAX = 300.0


class Coverage(NamedTuple):
    """Which checks a pass ran, for the rules that keep an active check's drain (docs/active.md).

    ``tier``: the pass's (``healthd.model.Tier``). ``active``: the enabled active checks,
    which only a pass of ``Tier.ACTIVE`` or ``Tier.ALL`` runs. ``active_running``: another
    process holds ``state_dir/active.lock``, so a diagnostic is running on the node now.
    """

    tier: Tier = Tier.ORDINARY
    active: frozenset[str] = frozenset()
    active_running: bool = False


ORDINARY_PASS = Coverage()


class PassFacts(NamedTuple):
    """What ``decide`` knows of the node this pass: what it found, remembers and read.

    ``result``: the pass (acknowledgements applied). ``state``: the policy's memory.
    ``node``: the node as Slurm answered, None when Slurm could not be asked (unreachable,
    disabled) or was not yet. ``partial``: only some checks ran (``--only``). ``repeats``
    maps a finding's key to its unit and how often its code was raised there (from the
    node's history), for escalation. ``boot_id``: this boot's ("" when unreadable), to tell
    when a reboot asked for has happened. ``coverage``: which checks ran, of the active ones.
    """

    result: PassResult
    state: PolicyState
    node: Optional[NodeInfo]
    partial: bool = False
    repeats: Mapping[str, tuple[str, int]] = MappingProxyType({})
    boot_id: str = ""
    coverage: Coverage = ORDINARY_PASS


class PolicyRules(NamedTuple):
    """What the config says about acting on a node, made once per pass.

    ``settings``: ``[policy]``. ``reasons``: healthd's reasons under ``[slurm] reason_prefix``, with
    no default: rules made without the configured prefix would not know healthd's own drains.
    ``escalation``: ``[escalation]`` (None: no escalation to repair). ``reboot`` and ``reset``:
    ``[remediation]``. ``reconcile_interval``: ``[slurm]``'s, the most a pass goes without
    reading the node (``needs_node``). ``decide`` reads the first four; the plan all of them.
    """

    settings: PolicySettings
    reasons: Reasons
    escalation: Optional[EscalationSettings] = None
    reboot: bool = False
    reset: bool = False
    reconcile_interval: float = 3600.0


def _acting(finding: Finding) -> bool:
    return finding.status is not Status.OK and finding.check != OWN_CHECK


def acting_severity(result: PassResult) -> Status:
    """The status the policy acts on: the first of CRITICAL, WARNING, UNKNOWN present.

    ``Status.rank`` puts UNKNOWN above WARNING for reporting; for acting, a WARNING
    seen on one check must still drain the node when another check was UNKNOWN.
    healthd's own findings are left out.
    """
    present = {f.status for f in result.findings if f.check != OWN_CHECK}
    present |= {r.status for r in result.results if r.check != OWN_CHECK}
    for status in ACTING_ORDER:
        if status in present:
            return status
    return Status.OK


def ran_checks(result: PassResult) -> frozenset[str]:
    """Checks that ran to the end this pass (a not-applicable check ran and found nothing to check)."""
    return frozenset(r.check for r in result.results if r.state in (RunState.RAN, RunState.NOT_APPLICABLE))


def count_streaks(state: PolicyState, result: PassResult, partial: bool, coverage: Coverage) -> PolicyState:
    """Count consecutive failing/UNKNOWN passes per check and clean passes of the node.

    A check that reports no fault resets its fail streak only if it ran to the end:
    a timeout says nothing about the fault it saw last pass. A check absent from the
    pass (``--only``) keeps its counts; a full pass forgets checks that no longer exist,
    but not the enabled active checks, which only their own passes run: an ordinary pass
    between two failing diagnostics must not wipe their count (``fail_passes`` >= 2).
    """
    fail = dict(state.fail_streaks)
    unknown = dict(state.unknown_streaks)
    if not partial:
        kept = {r.check for r in result.results} | coverage.active
        fail = {c: n for c, n in fail.items() if c in kept}
        unknown = {c: n for c, n in unknown.items() if c in kept}
    for check in result.results:
        if check.check == OWN_CHECK:
            continue
        statuses = {f.status for f in check.findings}
        if statuses & {Status.CRITICAL, Status.WARNING}:
            fail[check.check] = fail.get(check.check, 0) + 1
        elif check.state is RunState.RAN or not check.applicable:
            fail.pop(check.check, None)
        if Status.UNKNOWN in statuses:
            unknown[check.check] = unknown.get(check.check, 0) + 1
        else:
            unknown.pop(check.check, None)
    clean = state.clean_streak + 1 if acting_severity(result) is Status.OK else 0
    return state._replace(fail_streaks=fail, unknown_streaks=unknown, clean_streak=clean)


def _action_for(status: Status) -> Action:
    return Action.TAKE_OUT_NOW if status is Status.CRITICAL else Action.DRAIN_AFTER_JOBS


def _causes(findings: list[Finding]) -> tuple[FindingRef, ...]:
    """What an administrator's resume acknowledges: never a finding the runner made up."""
    return tuple(sorted({FindingRef.of(f) for f in findings if f.code not in UNACKNOWLEDGEABLE}))


def wanted_action(result: PassResult, state: PolicyState, rules: PolicyRules) -> Decision:
    """The action the pass calls for, before looking at the node.

    Findings whose check has failed enough passes in a row are *ready*; the ready
    finding first in acting order decides the action and names the reason.
    """
    if acting_severity(result) is Status.OK:
        return Decision(Action.RESUME, Action.RESUME, "", "all checks pass")
    settings = rules.settings
    ready: list[Finding] = []
    not_ready: list[tuple[Finding, int, int]] = []
    for finding in filter(_acting, result.findings):
        if finding.status is Status.UNKNOWN:
            if settings.unknown_action == "report":
                continue
            streak, needed = state.unknown_streaks.get(finding.check, 0), settings.unknown_passes
        else:
            streak, needed = state.fail_streaks.get(finding.check, 0), settings.fail_passes
        if streak >= needed:
            ready.append(finding)
        else:
            not_ready.append((finding, streak, needed))
    if not ready and not not_ready:
        return Decision(Action.NONE, Action.NONE, "", "UNKNOWN results are only reported ([policy].unknown_action)")
    wait_text = ""
    wait_action = Action.NONE
    if not_ready:
        first, streak, needed = min(not_ready, key=lambda item: acting_key(item[0]))
        wait_text = f"{first.status.name} from {first.check} for {streak} of {needed} consecutive passes needed"
        wait_action = _action_for(first.status)
    if not ready:
        found = [item[0] for item in not_ready]
        return Decision(Action.HOLD, wait_action, rules.reasons.reason(found), wait_text, _causes(found))
    top = min(ready, key=acting_key)
    want = _action_for(top.status)
    explanation = f"{top.status.name} from {top.check}"
    if wait_text and wait_action is not want:
        explanation += f"; {wait_text}"
    return Decision(want, want, rules.reasons.reason(ready), explanation, _causes(ready))


# A lemon drain (``healthd fleet lemons --drain``) is decided from the fleet's records, which one
# node's clean pass does not refute: the node agent neither lifts nor rewrites it (docs/fleet.md).
_LEMON_HELD = "out as a lemon node (healthd fleet lemons): an administrator resumes it"


# A REPAIR drain is lifted only once ``healthd ack --repaired`` ended its repair (docs/history.md).
# With its record gone (policy.json lost, its ``repair`` key damaged), nothing says the hardware
# work was done: the drain stays, as a lemon's does, until an administrator resumes the node.
_REPAIR_HELD = "out for repair, with no repair record left in policy.json: an administrator resumes it"


def _unrecorded_repair(node: NodeInfo, state: PolicyState, reasons: Reasons) -> bool:
    """The node is out with healthd's REPAIR reason, but no repair is recorded nor was one ended."""
    return node.out and reasons.is_repair(node.reason) and state.repair is None and not state.repair_ended


def resume_against_node(decision: Decision, state: PolicyState, facts: PassFacts, rules: PolicyRules) -> Decision:
    """A RESUME ``decision`` given the node as read: only a node healthd itself took out, once proven clean.

    ``state`` is this pass's (``facts.state`` moved on by the pass).
    """
    nothing = decision._replace(action=Action.NONE, intended=Action.NONE)
    node, reasons, settings = facts.node, rules.reasons, rules.settings
    if node is None and not state.took_out:
        return nothing
    if node is not None and not (node.out and reasons.owns(node.reason)):
        return nothing._replace(explanation="all checks pass")
    if node is not None and reasons.is_lemon(node.reason):
        return nothing._replace(explanation=_LEMON_HELD)
    if node is not None and _unrecorded_repair(node, state, reasons):
        return nothing._replace(explanation=_REPAIR_HELD)
    # A pass proves nothing about a check that did not run (--only, a timeout).
    unverified = sorted({ref.check for ref in state.took_out} - ran_checks(facts.result))
    if unverified:
        checks = ", ".join(unverified)
        return nothing._replace(explanation=f"not resuming: {checks}, which took the node out, did not run this pass")
    if facts.partial and not state.took_out:
        why = "not resuming on a partial pass (--only): which checks took the node out is not known"
        return nothing._replace(explanation=why)
    held = _active_hold(state, facts.coverage)
    if held:
        return decision._replace(action=Action.HOLD, explanation=held)
    if node is None:
        return decision
    hands_off = hands_off_why(node)
    if hands_off:
        return decision._replace(action=Action.NONE, explanation=hands_off)
    if state.clean_streak < settings.clean_passes:
        return decision._replace(
            action=Action.HOLD,
            explanation=f"clean for {state.clean_streak} of {settings.clean_passes} passes needed to resume",
        )
    return decision._replace(explanation=f"all checks pass; resuming node out for {node.reason!r}")


def _active_hold(state: PolicyState, coverage: Coverage) -> str:
    """Why the active checks keep this pass from resuming the node, or "" (docs/active.md, "Resuming").

    A pass of the active checks alone cannot tell the other checks are clean. A pass
    while a diagnostic runs would put the node in service beside it. And when which
    checks took the node out is not known (the policy state was lost), an active check
    may have: only a pass that ran every check may then resume the node.
    """
    if coverage.tier is Tier.ACTIVE:
        return "not resuming on a pass of the active checks alone: the daemon's pass of every check resumes"
    if coverage.active_running:
        return "not resuming: active checks are running on this node (active.lock is held)"
    if coverage.active and coverage.tier is not Tier.ALL and not state.took_out:
        checks = ", ".join(sorted(coverage.active))
        return (
            "not resuming: which checks took the node out is not known (policy state lost), "
            f"and the active checks ({checks}) did not run this pass"
        )
    return ""


def hands_off_why(node: NodeInfo) -> str:
    """Why no write at all may be sent for ``node`` now, or "" (docs/slurm.md, "Reboots, power saving ...").

    A pending reboot (anyone's): a DOWN would kill the jobs it waits for, a RESUME
    cancel it. Power saving: the machine is off or on its way, what was seen is not
    about a running node, and slurmctld answers a reboot of it with success and does
    nothing. A maintenance reservation: the administrator's window, where burn-in
    tests raise faults on purpose.
    """
    if node.reboot_pending:
        return "reboot pending: node left alone"
    if node.power_saving:
        return f"power saving ({node.state_text}): node left alone"
    if node.maintenance:
        return "in a maintenance reservation: the administrator's, node left alone"
    return ""


def _others(node: NodeInfo, reasons: Reasons) -> bool:
    """The node carries someone else's reason: healthd never overwrites it."""
    return bool(node.reason) and not reasons.owns(node.reason)


def skips_breaker(node: NodeInfo, reasons: Reasons) -> bool:
    """Whether a take-out of ``node`` as read would be decided without the circuit breaker.

    A node with someone else's reason, or in a state healthd leaves alone (``hands_off_why``),
    is not taken out; one out with healthd's reason already holds its place. Remembered
    (``PolicyState.skips_breaker``) so the next faulty pass reads the node alone
    (docs/scale.md, "A node out by another's hand").
    """
    return bool(hands_off_why(node)) or _others(node, reasons) or (node.drained and reasons.owns(node.reason))


def against_node(decision: Decision, state: PolicyState, node: Optional[NodeInfo], reasons: Reasons) -> Decision:
    """Apply the ownership rules to a take-out given what Slurm says about the node."""
    if decision.action not in TAKING_OUT or node is None:
        return decision
    hands_off = hands_off_why(node)
    if hands_off:
        return decision._replace(action=Action.NONE, explanation=hands_off)
    if _others(node, reasons):
        who = f" by {node.reason_user}" if node.reason_user else ""
        return decision._replace(
            action=Action.NONE,
            explanation=f"node is {node.state_text} with reason {node.reason!r}{who}: not healthd's, left alone",
        )
    # Rewriting a lemon's or an unrecorded repair's reason would let a later clean pass lift it.
    kept = _LEMON_HELD if reasons.is_lemon(node.reason) else ""
    kept = kept or (_REPAIR_HELD if _unrecorded_repair(node, state, reasons) else "")
    if node.drained and kept and not (decision.action is Action.TAKE_OUT_NOW and node.busy):
        return decision._replace(action=Action.NONE, explanation=kept)
    if node.drained and reasons.owns(node.reason):
        if decision.action is Action.REBOOT:
            return decision  # drained already (its reason updated if need be), the reboot still to ask for
        if decision.action is Action.TAKE_OUT_NOW and node.busy:
            return decision._replace(explanation="drained by healthd but jobs still run: taking out now")
        if reason_head(node.reason) != reason_head(decision.reason):
            return decision._replace(action=Action.DRAIN_AFTER_JOBS, explanation="already out: updating the reason")
        return decision._replace(action=Action.NONE, explanation=f"already out ({node.state_text})")
    return decision


def may_stand(causes: tuple[FindingRef, ...], result: PassResult) -> bool:
    """Whether any of a pending take-out's ``causes`` may still be there, as far as this pass can tell.

    It may while its finding is still reported as a fault, or while its check did not run to the
    end or could not observe (UNKNOWN): such a pass says nothing either way. Once every cause's
    check ran and no longer reports it, the take-out is stale: an unrelated UNKNOWN or a WARNING
    still inside its hysteresis must not carry it out (a DOWN kills the node's jobs). A check
    the config now disables is the operator's word that its findings no longer count: its
    causes are gone too (a misfiring check switched off while Slurm was unreachable).
    """
    ran = ran_checks(result)
    disabled = {r.check for r in result.results if r.state is RunState.DISABLED}
    faults = {f.key for f in result.findings if _acting(f)}
    unsure = {r.check for r in result.results if r.status is Status.UNKNOWN}
    # Under the keys of this pass: another check may have adopted a finding since (acks.adopted).
    current = [adopted(ref, result) for ref in causes if ref.check not in disabled]
    return any(ref.key in faults or ref.check not in ran or ref.check in unsure for ref in current)


def needs_node(
    result: PassResult, state: PolicyState, settings: PolicySettings, now: float, reconcile_interval: float
) -> bool:
    """Whether this pass must read the node's Slurm state.

    A pass that can only end in "nothing to do" skips the read (zero RPCs): it is
    clean or only-reporting UNKNOWN, healthd has no node out and nothing pending.
    Every ``reconcile_interval`` seconds the node is read anyway, so a drain whose
    state file was lost is still found and resumed.
    """
    severity = acting_severity(result)
    if severity in (Status.CRITICAL, Status.WARNING):
        return True
    if severity is Status.UNKNOWN and settings.unknown_action == "drain":
        return True
    return bool(state.took_out) or state.pending is not None or now - state.last_read >= reconcile_interval


def _in_service(node: NodeInfo) -> bool:
    return not node.out and not node.reboot_pending


def settle_own_resume(state: PolicyState, node: NodeInfo, reasons: Reasons) -> PolicyState:
    """Learn from the node as read whether a RESUME healthd sent without an answer took effect (``resume_sent``).

    In service: it did, so healthd has nothing out and no one acknowledged anything.
    Still out with healthd's reason: it did not; a later resume is someone else's.
    Out with another's reason: nothing to learn yet, the mark stays.
    """
    if not state.resume_sent:
        return state
    if _in_service(node):
        return advance(state, PolicyEvent.RESUME_SETTLED)._replace(took_out=())
    if node.out and reasons.owns(node.reason):
        return advance(state, PolicyEvent.RESUME_SETTLED)
    return state


def acknowledged_by_resume(state: PolicyState, node: NodeInfo) -> tuple[FindingRef, ...]:
    """The findings an administrator acknowledged by resuming a node healthd took out.

    healthd remembers the findings behind every drain it applied; if the node is
    now in service (no DRAIN or FAIL, not DOWN) someone else put it back, unless
    healthd itself may have (``resume_sent``: ``settle_own_resume`` decides first).
    Taking its own resume for an administrator's would report a real fault as OK.
    """
    if state.took_out and not state.resume_sent and _in_service(node):
        return state.took_out
    return ()


def after_apply(state: PolicyState, decision: Decision) -> PolicyState:
    """State once Slurm accepted ``decision``."""
    if decision.action in TAKING_OUT:
        took_out = widest([*state.took_out, *decision.causes])
        return state._replace(pending=None, held=None, took_out=took_out)
    if decision.action is Action.RESUME:
        # Slurm answered: the resume's outcome is known, and a repair drain ended is lifted. The
        # take-out is over, and its raises stand as counted (healthd.plan.wave).
        return advance(state, PolicyEvent.RESUMED)._replace(pending=None, held=None, took_out=(), provisional=())
    return state


def after_failure(state: PolicyState, decision: Decision, error: str, now: float, attempted: bool) -> PolicyState:
    """State when ``decision`` could not be applied: keep it pending with a backoff.

    ``attempted`` is False when this pass did not even try (still backing off), so
    the attempt count and retry time stay as they were.
    """
    previous = state.pending
    same = previous is not None and previous.action is decision.action
    attempts = (previous.attempts if same and previous else 0) + (1 if attempted else 0)
    if attempted or previous is None or not same:
        next_try = now + min(BACKOFF_BASE * 2 ** max(attempts - 1, 0), BACKOFF_MAX)
    else:
        next_try = previous.next_try
    return state._replace(
        pending=Pending(
            action=decision.action,
            reason=decision.reason,
            causes=decision.causes,
            attempts=attempts,
            next_try=next_try,
            since=previous.since if same and previous else now,
            error=error,
        ),
    )
