"""The policy: a pure function from a pass, remembered state and the node's Slurm state to one decision.

No I/O happens here. The worst severity decides (see docs/policy.md):
CRITICAL takes the node out now, WARNING drains it after its jobs, UNKNOWN only
reports unless ``[policy].unknown_action = "drain"``, and a clean pass resumes a
node that healthd itself took out. Hysteresis counts consecutive passes. The
ownership rules (never touch a node someone else drained or downed, or one with a
reboot pending) are applied against the node state read this pass.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional

from healthd.acks import FindingRef
from healthd.config import PolicySettings
from healthd.model import PassResult, Status
from healthd.slurm import NodeInfo, make_reason, owned

# Retry delays for an action slurmctld did not accept: 10 s doubling up to 5 min.
BACKOFF_BASE = 10.0
BACKOFF_MAX = 300.0


class Action(enum.Enum):
    NONE = "none"
    DRAIN_AFTER_JOBS = "drain_after_jobs"
    TAKE_OUT_NOW = "take_out_now"
    RESUME = "resume"
    HOLD = "hold"


ACTING = (Action.DRAIN_AFTER_JOBS, Action.TAKE_OUT_NOW, Action.RESUME)
TAKING_OUT = (Action.DRAIN_AFTER_JOBS, Action.TAKE_OUT_NOW)


@dataclass(frozen=True)
class Decision:
    """What to do with the node. ``intended`` is what a HOLD holds back (else equals ``action``)."""

    action: Action
    intended: Action
    reason: str
    explanation: str
    causes: tuple[FindingRef, ...] = ()


@dataclass(frozen=True)
class Pending:
    """An action slurmctld has not accepted yet, retried with backoff on later passes."""

    action: Action
    reason: str
    causes: tuple[FindingRef, ...]
    attempts: int
    next_try: float
    since: float
    error: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "reason": self.reason,
            "causes": [c.to_dict() for c in self.causes],
            "attempts": self.attempts,
            "next_try": self.next_try,
            "since": self.since,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Pending:
        return cls(
            action=Action(data["action"]),
            reason=str(data.get("reason", "")),
            causes=tuple(FindingRef.from_dict(c) for c in data.get("causes", [])),
            attempts=int(data.get("attempts", 0)),
            next_try=float(data.get("next_try", 0.0)),
            since=float(data.get("since", 0.0)),
            error=str(data.get("error", "")),
        )


@dataclass(frozen=True)
class PolicyState:
    """What the policy remembers between passes (state file ``policy``)."""

    fail_streak: int = 0
    unknown_streak: int = 0
    clean_streak: int = 0
    took_out: tuple[FindingRef, ...] = ()
    pending: Optional[Pending] = None
    last_read: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "fail_streak": self.fail_streak,
            "unknown_streak": self.unknown_streak,
            "clean_streak": self.clean_streak,
            "took_out": [r.to_dict() for r in self.took_out],
            "pending": self.pending.to_dict() if self.pending else None,
            "last_read": self.last_read,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PolicyState:
        """Rebuild from the state file; raises ValueError naming the bad key."""
        try:
            pending = data.get("pending")
            return cls(
                fail_streak=int(data.get("fail_streak", 0)),
                unknown_streak=int(data.get("unknown_streak", 0)),
                clean_streak=int(data.get("clean_streak", 0)),
                took_out=tuple(FindingRef.from_dict(r) for r in data.get("took_out", [])),
                pending=Pending.from_dict(pending) if pending else None,
                last_read=float(data.get("last_read", 0.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"bad policy state: {type(exc).__name__}: {exc}") from None


def _severity(result: PassResult) -> Status:
    """The status the policy acts on: a known fault outranks "could not observe".

    ``Status.rank`` puts UNKNOWN above WARNING for reporting; for acting, a WARNING
    seen on one check must still drain the node when another check was UNKNOWN.
    """
    present = {f.status for f in result.findings} | {r.status for r in result.results}
    for status in (Status.CRITICAL, Status.WARNING, Status.UNKNOWN):
        if status in present:
            return status
    return Status.OK


def _streaks(state: PolicyState, status: Status) -> PolicyState:
    if status in (Status.CRITICAL, Status.WARNING):
        return replace(state, fail_streak=state.fail_streak + 1, unknown_streak=0, clean_streak=0)
    if status is Status.UNKNOWN:
        return replace(state, fail_streak=0, unknown_streak=state.unknown_streak + 1, clean_streak=0)
    return replace(state, fail_streak=0, unknown_streak=0, clean_streak=state.clean_streak + 1)


def _wanted(result: PassResult, state: PolicyState, settings: PolicySettings, prefix: str) -> Decision:
    """The action the pass calls for, before looking at the node."""
    status = _severity(result)
    failing = [f for f in result.findings if f.status is not Status.OK]
    causes = tuple(sorted({FindingRef.of(f) for f in failing}))
    reason = make_reason(prefix, failing)
    if status is Status.CRITICAL:
        want, streak, needed = Action.TAKE_OUT_NOW, state.fail_streak, settings.fail_passes
    elif status is Status.WARNING:
        want, streak, needed = Action.DRAIN_AFTER_JOBS, state.fail_streak, settings.fail_passes
    elif status is Status.UNKNOWN:
        if settings.unknown_action == "report":
            return Decision(Action.NONE, Action.NONE, "", "UNKNOWN results are only reported ([policy].unknown_action)")
        want, streak, needed = Action.DRAIN_AFTER_JOBS, state.unknown_streak, settings.unknown_passes
    else:
        return Decision(Action.RESUME, Action.RESUME, "", "all checks pass")
    if streak < needed:
        return Decision(
            Action.HOLD, want, reason, f"{status.name} for {streak} of {needed} consecutive passes needed", causes
        )
    return Decision(want, want, reason, f"worst result {status.name}", causes)


def _against_node(
    decision: Decision, state: PolicyState, node: Optional[NodeInfo], settings: PolicySettings, prefix: str
) -> Decision:
    """Apply the ownership rules to ``decision`` given what Slurm says about the node."""
    action = decision.action
    if action is Action.RESUME:
        if node is None:
            if state.took_out:
                return decision
            return replace(decision, action=Action.NONE, intended=Action.NONE)
        if not (node.out and owned(node.reason, prefix)):
            return replace(decision, action=Action.NONE, intended=Action.NONE, explanation="all checks pass")
        if node.reboot_pending:
            return replace(decision, action=Action.NONE, explanation="reboot pending: node left alone")
        if state.clean_streak < settings.clean_passes:
            return replace(
                decision,
                action=Action.HOLD,
                explanation=f"clean for {state.clean_streak} of {settings.clean_passes} passes needed to resume",
            )
        return replace(decision, explanation=f"all checks pass; resuming node out for {node.reason!r}")
    if action not in TAKING_OUT or node is None:
        return decision
    if node.reboot_pending:
        return replace(decision, action=Action.NONE, explanation="reboot pending: node left alone")
    if node.out and not owned(node.reason, prefix):
        who = f" by {node.reason_user}" if node.reason_user else ""
        return replace(
            decision,
            action=Action.NONE,
            explanation=f"node is {node.state_text}{who} with reason {node.reason!r}: not healthd's, left alone",
        )
    if node.drained and owned(node.reason, prefix):
        if action is Action.TAKE_OUT_NOW and node.busy:
            return replace(decision, explanation="drained by healthd but jobs still run: taking out now")
        if node.reason != decision.reason:
            return replace(decision, action=Action.DRAIN_AFTER_JOBS, explanation="already out: updating the reason")
        return replace(decision, action=Action.NONE, explanation=f"already out ({node.state_text})")
    return decision


def decide(
    result: PassResult,
    state: PolicyState,
    node: Optional[NodeInfo],
    settings: PolicySettings,
    prefix: str,
) -> tuple[Decision, PolicyState]:
    """One decision for this pass and the policy state to remember.

    ``node`` is None when Slurm could not be asked (unreachable, disabled): the
    decision is then what the pass calls for, to be kept pending and checked
    against the node's state when it can be read again. A remembered pending
    action stands in for a pass that calls for nothing more specific unless
    the pass is clean.
    """
    new_state = _streaks(state, _severity(result))
    decision = _wanted(result, new_state, settings, prefix)
    pending = state.pending
    if pending is not None and decision.action in (Action.NONE, Action.HOLD) and result.status is not Status.OK:
        decision = Decision(
            pending.action, pending.action, pending.reason, f"retrying pending {pending.action.value}", pending.causes
        )
    decision = _against_node(decision, new_state, node, settings, prefix)
    if result.status is Status.OK:
        new_state = replace(new_state, pending=None)
    if node is not None:
        took_out = new_state.took_out
        if node.drained and owned(node.reason, prefix) and decision.causes:
            took_out = tuple(sorted(set(took_out) | set(decision.causes)))
        new_state = replace(new_state, pending=None, took_out=took_out)
    return decision, new_state


def needs_node(
    result: PassResult, state: PolicyState, settings: PolicySettings, now: float, reconcile_interval: float
) -> bool:
    """Whether this pass must read the node's Slurm state.

    A pass that can only end in "nothing to do" skips the read (zero RPCs): it is
    clean or only-reporting UNKNOWN, healthd has no node out and nothing pending.
    Every ``reconcile_interval`` seconds the node is read anyway, so a drain whose
    state file was lost is still found and resumed.
    """
    severity = _severity(result)
    if severity in (Status.CRITICAL, Status.WARNING):
        return True
    if severity is Status.UNKNOWN and settings.unknown_action == "drain":
        return True
    return bool(state.took_out) or state.pending is not None or now - state.last_read >= reconcile_interval


def acknowledged_by_resume(state: PolicyState, node: NodeInfo) -> tuple[FindingRef, ...]:
    """The findings an administrator acknowledged by resuming a node healthd took out.

    healthd remembers the findings behind every drain it applied; if the node is
    now in service (no DRAIN, not DOWN) someone else put it back.
    """
    if state.took_out and not node.out and not node.reboot_pending:
        return state.took_out
    return ()


def circuit_breaker(
    decision: Decision, counts: Mapping[str, tuple[int, int]], settings: PolicySettings
) -> tuple[Decision, str]:
    """Hold back a take-out that would put too much of a partition out at once.

    ``counts`` maps each of the node's partitions to (nodes already out with a
    healthd reason, nodes in the partition), not counting this node. The first
    node of a partition may always go; after that a node is held when taking it
    out would make the healthd-out fraction exceed ``max_out_fraction``: a fault
    that hits many nodes at once is more likely a shared cause (a file server, a
    bad config push) than many broken nodes. Returns the decision and why it held.
    """
    if decision.action not in TAKING_OUT:
        return decision, ""
    for partition, (already, total) in sorted(counts.items()):
        if already >= 1 and total > 0 and (already + 1) / total > settings.max_out_fraction:
            why = (
                f"partition {partition}: {already} of {total} nodes already out by healthd; taking this one "
                f"out would exceed [policy].max_out_fraction={settings.max_out_fraction:g}"
            )
            return replace(decision, action=Action.HOLD, explanation=why), why
    return decision, ""


def after_apply(state: PolicyState, decision: Decision) -> PolicyState:
    """State once Slurm accepted ``decision``."""
    if decision.action in TAKING_OUT:
        return replace(state, pending=None, took_out=tuple(sorted(set(state.took_out) | set(decision.causes))))
    if decision.action is Action.RESUME:
        return replace(state, pending=None, took_out=())
    return state


def after_failure(state: PolicyState, decision: Decision, error: str, now: float, attempted: bool) -> PolicyState:
    """State when ``decision`` could not be applied: keep it pending with a backoff.

    ``attempted`` is False when this pass did not even try (still backing off), so
    the attempt count and retry time stay as they were.
    """
    previous = state.pending
    same = previous is not None and previous.action is decision.action
    attempts = (previous.attempts if same and previous else 0) + (1 if attempted else 0)
    if attempted or previous is None:
        next_try = now + min(BACKOFF_BASE * 2 ** max(attempts - 1, 0), BACKOFF_MAX)
    else:
        next_try = previous.next_try
    return replace(
        state,
        pending=Pending(
            action=decision.intended if decision.action is Action.HOLD else decision.action,
            reason=decision.reason,
            causes=decision.causes,
            attempts=attempts,
            next_try=next_try,
            since=previous.since if same and previous else now,
            error=error,
        ),
    )
