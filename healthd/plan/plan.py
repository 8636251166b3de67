"""Plan one pass: checks' results, remembered state and what Slurm said go in; one decision and its writes come out.

Pure: no I/O. ``plan`` may answer with a ``Read`` instead of a ``Plan``: the
pipeline (``healthd.cycle.pipeline``) has ``healthd.cycle.execute`` make that read and plans
again with what it found. So every Slurm read is one the policy asked for: the
node when the pass may act on it, then its partitions when a take-out must pass
the circuit breaker; or both in one read when the pass's decision, as far as it
is known before the node is read, is a take-out the breaker must pass. That read
covers every partition (docs/scale.md, "Why the node's partitions are not
remembered").
``conclude`` turns what ``execute`` did with the plan's steps into the state to
remember and the pass as reported.
"""

from __future__ import annotations

import enum
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, Mapping, NamedTuple, Optional, Union

from healthd.model import CheckResult, Finding, PassResult, RunState, Status
from healthd.plan.acks import Ack, FindingRef, adopted, apply_acks, merge, widest
from healthd.plan.ackview import POLICY_CHECK
from healthd.plan.breaker import backing_off, binds, breaker_confirm, breaker_held, circuit_breaker, holders
from healthd.plan.policy import decide
from healthd.plan.remedy import GpuReset, reset_target, top_cause
from healthd.plan.rules import (
    BACKOFF_MAX,
    ORDINARY_PASS,
    Coverage,
    PassFacts,
    PolicyRules,
    acknowledged_by_resume,
    after_apply,
    after_failure,
    needs_node,
    settle_own_resume,
    skips_breaker,
)
from healthd.plan.state import (
    ACTING,
    TAKING_OUT,
    Action,
    Decision,
    PolicyEvent,
    PolicyState,
    ProvisionalRaise,
    RebootRequest,
    advance,
    waiting,
)
from healthd.plan.wave import in_wave, provisional, still_provisional, taken_back
from healthd.slurm.nodestate import NodeInfo, PartitionView
from healthd.slurm.problem import SlurmProblem
from healthd.slurm.reasons import Reasons, reason_head

if TYPE_CHECKING:
    from healthd.config.models import PolicySettings


class Read(enum.Enum):
    """A Slurm read the plan needs before it can decide."""

    NODE = "node"  # the node's own state
    PARTITIONS = "partitions"  # the node's partitions, for the circuit breaker
    NODE_AND_PARTITIONS = "node and partitions"  # both, from one sinfo (docs/scale.md)


_NODE_READS = frozenset({Read.NODE, Read.NODE_AND_PARTITIONS})
_PARTITION_READS = frozenset({Read.PARTITIONS, Read.NODE_AND_PARTITIONS})


class Step(enum.Enum):
    """One write to Slurm, in the order ``execute`` sends them."""

    DRAIN = "drain"
    CONFIRM = "confirm"  # the circuit breaker's read-after-write (breaker.breaker_confirm)
    DOWN = "down"
    RESUME = "resume"
    REBOOT = "reboot"  # a plain ``scontrol reboot``: Slurm reboots the drained node once its jobs end
    RESET = "reset"  # a GPU reset (healthd.cycle.gpureset) on a drained, idle node: not a Slurm write


class Observed(NamedTuple):
    """What Slurm answered this pass; each read was asked for by a plan."""

    asked: frozenset[Read] = frozenset()
    node: Optional[NodeInfo] = None
    views: Optional[Mapping[str, PartitionView]] = None
    errors: tuple[SlurmProblem, ...] = ()

    @property
    def node_asked(self) -> bool:
        return bool(self.asked & _NODE_READS)

    @property
    def partitions_asked(self) -> bool:
        return bool(self.asked & _PARTITION_READS)


class Situation(NamedTuple):
    """Everything a plan is made from. ``result`` is the checks' pass before acknowledgements."""

    result: PassResult
    state: PolicyState
    acks: tuple[Ack, ...]
    observed: Observed
    now: float
    partial: bool
    slurm_enabled: bool
    dry_run: bool
    repeats: Mapping[str, tuple[str, int]] = MappingProxyType({})
    boot_id: str = ""  # this boot's id ("" when unreadable): tells a reboot asked for from one done
    coverage: Coverage = ORDINARY_PASS  # which checks ran, of the active ones (rules.Coverage)


class Plan(NamedTuple):
    """The decision and the writes that carry it out.

    ``state`` is what to remember once every step succeeded (or when there are
    none); ``interrupted`` is saved before the first write, so a pass killed in the
    middle leaves its next pass a pending action (and an unconfirmed drain) to
    finish, and knows of a RESUME it may have sent (``resume_sent``) and of a GPU
    reset it may have started (``reset_tried``). ``unasked``
    says why Slurm was not asked this pass, if it was not; ``errors`` are the reads
    that failed. ``reboot`` is the request to remember once
    the REBOOT step went through.
    """

    result: PassResult
    decision: Decision
    steps: tuple[Step, ...]
    node: Optional[NodeInfo]
    state: PolicyState
    interrupted: Optional[PolicyState]
    acks: tuple[Ack, ...]
    acknowledged: tuple[FindingRef, ...]
    held_why: str
    unasked: str
    errors: tuple[SlurmProblem, ...]
    reboot: Optional[RebootRequest] = None
    reset: Optional[GpuReset] = None
    # Findings (by key) whose raise in this pass escalation must not count, and why (historyschema.Kind.UNCOUNTED).
    uncounted: Mapping[str, str] = MappingProxyType({})
    # The raises this pass's take-out counts, provisional while the node is out (healthd.plan.wave).
    counted: tuple[ProvisionalRaise, ...] = ()
    # Provisional raises of an earlier take-out that this pass's read shows were a wave's: taken back, and why.
    retracted: Mapping[ProvisionalRaise, str] = MappingProxyType({})


class Executed(NamedTuple):
    """What ``execute`` did with a plan's steps.

    ``lost`` is set when the circuit breaker's confirmation gave the node's place
    back (the node was resumed); ``error`` when a write failed (the failure as a value); ``rehearsed`` when
    it was a dry run, with ``would`` the steps it would have sent. ``reset`` is a
    GPU reset's outcome (``gpureset.ResetOutcome`` value) and ``reset_message`` why;
    ``problems`` what reading healthd's own state met on the way (the reset marks).
    """

    done: tuple[Step, ...] = ()
    lost: str = ""
    error: Optional[SlurmProblem] = None
    rehearsed: bool = False
    would: tuple[Step, ...] = ()
    reset: str = ""
    reset_message: str = ""
    problems: tuple[str, ...] = ()


class Conclusion(NamedTuple):
    """The pass as reported and the policy state to save."""

    result: PassResult
    decision: Decision
    state: PolicyState
    applied: bool


def held_finding(node: str, why: str) -> CheckResult:
    """The policy's CRITICAL ``DRAIN_HELD``: a take-out the circuit breaker held back is a fault to see."""
    finding = Finding(POLICY_CHECK, Status.CRITICAL, "DRAIN_HELD", node, f"not taken out (circuit breaker): {why}")
    return CheckResult(check=POLICY_CHECK, state=RunState.RAN, findings=(finding,), duration_seconds=0.0)


def _with_held(result: PassResult, why: str) -> PassResult:
    return result._replace(results=(*result.results, held_finding(result.node, why))) if why else result


class _Breaker(NamedTuple):
    decision: Decision
    state: PolicyState
    held_why: str
    node: Optional[NodeInfo]
    confirm: bool = False
    undo: bool = False


def _breaker(decision: Decision, state: PolicyState, s: Situation, rules: PolicyRules) -> Union[Read, _Breaker]:
    """The circuit breaker's part of the plan (docs/policy.md, "Circuit breaker").

    Before a take-out it asks for the node's partitions, unless a hold is still
    backing off. A drain that an earlier pass left unconfirmed is confirmed now
    (and undone if it lost its place). ``node`` comes back None when a read the
    breaker needed failed: then nothing is acted on. A node held back keeps no
    repair (``breaker.breaker_held``).
    """
    node, observed, settings = s.observed.node, s.observed, rules.settings
    acting = s.slurm_enabled and not s.dry_run
    if node is None or decision.intended not in TAKING_OUT:
        return _Breaker(decision, state._replace(held=None), "", node)
    ours = node.drained and rules.reasons.owns(node.reason)
    if ours and state.unconfirmed and acting:
        if observed.views is None:
            return Read.PARTITIONS if not observed.partitions_asked else _Breaker(decision, state, "", None)
        why = breaker_confirm(node.name, observed.views, settings)
        if why:
            held = decision._replace(action=Action.HOLD, explanation=why)
            # The undo puts the node back in service: healthd then has nothing out, and the causes
            # that ``decide`` added (it read the node drained with healthd's reason) must not be
            # remembered, or the next pass would take this RESUME for an administrator's.
            by = holders(node.name, observed.views, settings, s.now)
            undone = advance(breaker_held(state, why, s.now, node.name, by), PolicyEvent.CONFIRMED)._replace(
                took_out=()
            )
            return _Breaker(held, undone, why, node, undo=True)
        return _Breaker(decision, advance(state, PolicyEvent.CONFIRMED)._replace(held=None), "", node)
    if ours or decision.action not in TAKING_OUT:
        # Nothing left to confirm: the node is not out with healthd's reason, or not acting (dry run).
        return _Breaker(decision, advance(state, PolicyEvent.CONFIRMED)._replace(held=None), "", node)
    hold = backing_off(state, s.now)
    if hold is not None:
        explanation = f"{hold.why} (circuit breaker; partition re-checked in {hold.next_check - s.now:.0f}s)"
        held = decision._replace(action=Action.HOLD, explanation=explanation)
        return _Breaker(held, advance(state, PolicyEvent.BREAKER_HELD)._replace(pending=None), hold.why, node)
    if observed.views is None:
        return Read.PARTITIONS if not observed.partitions_asked else _Breaker(decision, state, "", None)
    decision, why = circuit_breaker(decision, node.name, observed.views, settings, s.now)
    if why:
        by = holders(node.name, observed.views, settings, s.now)
        return _Breaker(decision, breaker_held(state, why, s.now, node.name, by), why, node)
    return _Breaker(decision, state._replace(held=None), "", node, confirm=binds(observed.views, settings))


# ``decide`` with this pass's rules bound: a result, a policy state and the node go in.
_Judge = Callable[[PassResult, PolicyState, Optional[NodeInfo]], tuple[Decision, PolicyState]]


def _first_read(s: Situation, judge: _Judge, window: float) -> Read:
    """The pass's first read: the node alone, or the node with its partitions when the breaker will need them.

    The breaker is consulted for a take-out of a node that is not already out with
    healthd's reason, and to confirm a drain an earlier pass left unconfirmed. The
    decision is guessed as ``decide`` makes it without the node; a node out
    with healthd's reason (``took_out``), one the last read found out by another's
    hand or left alone (``skips_breaker``) or held within its backoff needs no
    partitions, unless its take-out counted a raise that is still provisional: a read of its
    partitions while it is out may show the wave it was part of (healthd.plan.wave).
    The guess only sets the cost: when the node turns out otherwise,
    ``_breaker`` asks for ``Read.PARTITIONS`` as before, and a combined read not
    needed answers for the node all the same. One combined read is two RPCs
    where the node read and the breaker read were four (docs/scale.md).
    """
    state = s.state
    # The combined read packs the whole node table: only where the last breaker read found no
    # partition counted by shards. Otherwise (or before any breaker read) the node is read alone, and
    # its partitions after it (docs/scale.md, "Breaker shards").
    combined = Read.NODE_AND_PARTITIONS if state.sharded is False else Read.NODE
    if backing_off(state, s.now) is not None:
        return Read.NODE
    if state.unconfirmed or still_provisional(state.provisional, s.now, window):
        return combined
    if state.took_out or state.skips_breaker:
        return Read.NODE
    decision, _ = judge(apply_acks(s.result, s.acks)[0], state, None)
    return combined if decision.action in TAKING_OUT else Read.NODE


def _remember(state: PolicyState, node: NodeInfo, now: float, reasons: Reasons) -> PolicyState:
    """What a read of the node teaches the next passes: when it was read, and whether it skips the breaker."""
    return state._replace(last_read=now, skips_breaker=skips_breaker(node, reasons))


def _steps(decision: Decision, node: NodeInfo, breaker: _Breaker) -> tuple[Step, ...]:
    """The writes for ``decision``.

    A reboot is DRAIN then a plain reboot, never ASAP or a nextstate: on 22.05 those
    lose the DRAIN when the node registers again, and the node must stay out until
    a clean pass (docs/slurm.md, "Reboot requests"). Taking out now is DRAIN then
    DOWN: DRAIN first so no new job can land on the node, DOWN to kill (and requeue,
    where allowed) the running jobs. DOWN alone is not durable: with ReturnToService=2
    the node returns when slurmd re-registers, but the DRAIN flag and its reason
    survive that. The breaker's CONFIRM sits
    between the two, so a node that loses its place never has its jobs killed.
    """
    if breaker.undo:
        return (Step.RESUME,)
    if decision.action not in ACTING:
        return ()
    if decision.action is Action.RESUME:
        return (Step.RESUME,)
    steps: list[Step] = []
    if not (node.drained and reason_head(node.reason) == reason_head(decision.reason)):
        steps.append(Step.DRAIN)
    if breaker.confirm:
        steps.append(Step.CONFIRM)
    if decision.action is Action.TAKE_OUT_NOW:
        steps.append(Step.DOWN)
    if decision.action is Action.REBOOT:
        steps.append(Step.REBOOT)
    return tuple(steps)


def plan(s: Situation, rules: PolicyRules) -> Union[Read, Plan]:
    """The plan for this pass, or the Slurm read it needs first (see the module docstring)."""
    state, observed = s.state, s.observed
    # The findings that took the node out, under their keys of this pass (acks.adopted).
    state = state._replace(took_out=widest(adopted(r, s.result) for r in state.took_out))
    shared = _wave(s, rules.settings)
    repeats = {key: count for key, count in s.repeats.items() if key not in shared}
    judge = _judge(s, rules, repeats)
    unasked = ""
    if not s.slurm_enabled:
        unasked = "Slurm actions disabled ([slurm].enabled = false)"
    elif state.pending is not None and waiting(state.pending.next_try, s.now, BACKOFF_MAX):
        unasked = f"backing off after: {state.pending.error}"
    elif not observed.node_asked and needs_node(
        apply_acks(s.result, s.acks)[0], state, rules.settings, s.now, rules.reconcile_interval
    ):
        return _first_read(s, judge, rules.settings.breaker_window)
    state, acks, acknowledged = _settle(s, state, rules.reasons)
    state, retracted = _wave_seen(s, state, rules)
    result, kept = apply_acks(s.result, acks)
    decision, new_state = judge(result, state, observed.node)
    if observed.views is not None:
        new_state = new_state._replace(sharded=any(v.limit is not None for v in observed.views.values()))
    breaker = _breaker(decision, new_state, s, rules)
    if isinstance(breaker, Read):
        return breaker
    decision, node = breaker.decision, breaker.node
    writes = _writes(s, result, breaker, unasked)
    gpu_reset: Optional[GpuReset] = None
    if rules.reset and s.slurm_enabled and not s.dry_run and not writes.steps and not breaker.undo:
        gpu_reset = reset_target(result, decision, writes.state, node, rules.reasons)
        if gpu_reset is not None:
            # The try is spent before nvidia-smi starts: a pass killed during the reset (slurmd's
            # 60 s kill of the hook) must not leave its next pass a reset to start again.
            writes = _Writes((Step.RESET,), writes.state, _reset_tried(writes.state, gpu_reset))
    uncounted = held_raises(s.repeats, breaker.held_why) or shared
    counted: tuple[ProvisionalRaise, ...] = ()
    if Step.DRAIN in writes.steps and decision.action in TAKING_OUT and writes.state.repair is None:
        counted = provisional(s.result.findings, s.repeats, uncounted, s.now)
    return Plan(
        result=_with_held(result, breaker.held_why),
        decision=decision,
        steps=writes.steps,
        node=node,
        state=writes.state,
        interrupted=writes.interrupted,
        acks=kept,
        acknowledged=acknowledged,
        held_why=breaker.held_why,
        unasked=unasked,
        errors=observed.errors,
        reboot=writes.reboot,
        reset=gpu_reset,
        uncounted=uncounted,
        counted=counted,
        retracted=retracted,
    )


def _judge(s: Situation, rules: PolicyRules, repeats: Mapping[str, tuple[str, int]]) -> _Judge:
    """``decide`` with this pass's rules and what the situation says of the whole pass bound."""

    def judge(result: PassResult, state: PolicyState, node: Optional[NodeInfo]) -> tuple[Decision, PolicyState]:
        return decide(PassFacts(result, state, node, s.partial, repeats, s.boot_id, s.coverage), rules)

    return judge


def _settle(
    s: Situation, state: PolicyState, reasons: Reasons
) -> tuple[PolicyState, tuple[Ack, ...], tuple[FindingRef, ...]]:
    """What the node as read settles: an unanswered RESUME, and an administrator's resume (its acknowledgements)."""
    node, acks = s.observed.node, s.acks
    if node is None:
        return state, acks, ()
    state = settle_own_resume(_remember(state, node, s.now, reasons), node, reasons)
    acknowledged = acknowledged_by_resume(state, node)
    if acknowledged and not s.dry_run:
        # An administrator put the node back: that acknowledges its findings, and ends a repair.
        acks = merge(acks, acknowledged, s.now, "slurm-resume")
        state = advance(state, PolicyEvent.ADMIN_RESUMED)._replace(took_out=(), reboot=None)
    return state, acks, acknowledged


class _Writes(NamedTuple):
    """A plan's writes, the state once they went through, and what to save before the first (see ``Plan``)."""

    steps: tuple[Step, ...]
    state: PolicyState
    interrupted: Optional[PolicyState] = None
    reboot: Optional[RebootRequest] = None


def _writes(s: Situation, result: PassResult, breaker: _Breaker, unasked: str) -> _Writes:
    """The Slurm writes for the breaker's decision, or the pending action when the node could not be read."""
    decision, state, node = breaker.decision, breaker.state, breaker.node
    if not (s.slurm_enabled and not s.dry_run and (decision.action in ACTING or breaker.undo)):
        return _Writes((), state)
    if node is None:
        why = unasked or (s.observed.errors[-1].message if s.observed.errors else "node state not read")
        return _Writes((), after_failure(state, decision, why, s.now, s.observed.node_asked))
    steps = _steps(decision, node, breaker)
    request: Optional[RebootRequest] = None
    if Step.REBOOT in steps:
        top = top_cause(result, decision)
        request = RebootRequest(s.boot_id, s.now, decision.reason, top.key if top else "")
    if breaker.undo:
        # Killed before the undo is known to be through: the next pass confirms or undoes again.
        return _Writes(steps, state, advance(state, PolicyEvent.UNDO_UNANSWERED), request)
    if not steps:
        return _Writes(steps, state, None, request)
    cut_short = after_failure(state, decision, "not confirmed: interrupted while sending", s.now, True)
    # A pass killed after the reboot was asked for must still know it was, and one killed
    # after a RESUME that it may have been (settle_own_resume).
    interrupted = advance(cut_short, _sending(steps))._replace(reboot=request or cut_short.reboot)
    return _Writes(steps, state, interrupted, request)


def _wave(s: Situation, settings: PolicySettings) -> dict[str, str]:
    """The hardware faults of this pass (by key) raised while the node's partitions were in a wave, and why.

    Such a raise is a shared fault (a switch, a driver rollout), or one the breaker keeps
    from being told apart from one: it does not escalate and is not counted (``wave.in_wave``,
    docs/escalation.md).
    """
    views = s.observed.views
    if not views or not s.repeats:
        return {}
    return in_wave(s.result.node, s.result.findings, s.repeats, views, settings, s.now)


def _wave_seen(s: Situation, state: PolicyState, rules: PolicyRules) -> tuple[PolicyState, dict[ProvisionalRaise, str]]:
    """What this pass's read shows of the waves behind the node's provisional raises (``wave.taken_back``).

    A raise the read shows was a wave's is taken back. Once the node is read back in
    service, its take-out is over and the raises left stand; so they do past the window.
    """
    node, views = s.observed.node, s.observed.views
    raises = still_provisional(state.provisional, s.now, rules.settings.breaker_window)
    if not raises or node is None:
        return state._replace(provisional=raises), {}
    back = taken_back(node.name, raises, views, rules.settings.breaker_window) if views else {}
    out = node.out and rules.reasons.owns(node.reason)
    left = tuple(r for r in raises if r not in back) if out else ()
    return state._replace(provisional=left), back


def held_raises(repeats: Mapping[str, tuple[str, int]], why: str) -> dict[str, str]:
    """Every hardware fault of a pass the circuit breaker held back: none of their raises counts."""
    return dict.fromkeys(repeats, f"the circuit breaker held the node back: {why}") if why else {}


def _sending(steps: tuple[Step, ...]) -> PolicyEvent:
    """What a pass killed after its first write leaves: the drain may be unconfirmed, a RESUME unanswered."""
    if Step.CONFIRM in steps:
        return PolicyEvent.CONFIRMED_DRAIN_SENDING
    return PolicyEvent.RESUME_UNANSWERED if Step.RESUME in steps else PolicyEvent.DRAIN_SENDING


def _failed(steps: tuple[Step, ...], decision: Decision) -> Optional[PolicyEvent]:
    """What a failed write leaves, if it changes a phase (a failed DRAIN or DOWN stays pending alone).

    A failed undo (a RESUME for a HOLD) leaves the node holding a place it lost: confirm it
    again. A RESUME that failed may still have reached slurmctld (a timeout, a lost answer).
    """
    if Step.RESUME in steps:
        return PolicyEvent.RESUME_UNANSWERED if decision.action is Action.RESUME else PolicyEvent.UNDO_UNANSWERED
    return PolicyEvent.CONFIRM_FAILED if Step.CONFIRM in steps else None


def _reset_tried(state: PolicyState, gpu_reset: GpuReset) -> PolicyState:
    return state._replace(reset_tried=(*state.reset_tried, gpu_reset.key))


def conclude(the_plan: Plan, executed: Executed, previous: PolicyState, now: float) -> Conclusion:
    """The state to remember and the pass to report, once ``execute`` has run the plan's steps.

    A dry run remembers only the hysteresis counters and what the node's read showed
    (when, whether it skips the breaker): no pending action, no acknowledgement, nothing about
    Slurm that was not done.
    """
    decision, state, result = the_plan.decision, the_plan.state, the_plan.result
    if executed.rehearsed:
        kept = previous._replace(
            fail_streaks=state.fail_streaks,
            unknown_streaks=state.unknown_streaks,
            clean_streak=state.clean_streak,
            last_read=state.last_read,
            skips_breaker=state.skips_breaker,
        )
        return Conclusion(result, decision, kept, applied=False)
    if the_plan.reset is not None:
        # One try per finding: the next pass checks the GPU again, whatever the outcome.
        return Conclusion(result, decision, _reset_tried(state, the_plan.reset), applied=False)
    if not the_plan.steps:
        return Conclusion(result, decision, state, applied=False)
    if executed.error:
        failed = after_failure(state, decision, executed.error.message, now, attempted=True)
        event = _failed(the_plan.steps, decision)
        return Conclusion(result, decision, advance(failed, event) if event else failed, applied=False)
    if executed.lost:
        held = decision._replace(action=Action.HOLD, explanation=executed.lost)
        node = the_plan.node.name if the_plan.node else result.node
        state = advance(breaker_held(state, executed.lost, now, node), PolicyEvent.CONFIRMED)
        return Conclusion(_with_held(result, executed.lost), held, state, applied=False)
    # A node healthd just resumed is in service: the read that found it out no longer describes it.
    skips = state.skips_breaker and Step.RESUME not in executed.done
    applied = advance(after_apply(state, decision), PolicyEvent.CONFIRMED)._replace(skips_breaker=skips)
    if Step.DRAIN in executed.done and the_plan.counted:
        applied = applied._replace(provisional=(*applied.provisional, *the_plan.counted))
    if the_plan.reboot is not None and Step.REBOOT in executed.done:
        applied = applied._replace(reboot=the_plan.reboot)
    return Conclusion(result, decision, applied, decision.action in ACTING)
