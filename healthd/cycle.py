"""One cycle: run a pass, apply acknowledgements, decide, act through Slurm, record the result.

``run_cycle`` is what ``healthd check --once`` (and the HealthCheckProgram hook)
and the daemon call each pass. It never prints; everything it did or could not do
is in the returned ``CycleOutcome`` and in log records. Slurm trouble (scontrol
missing, slurmctld down, a timeout) never raises: the intended action is kept in
the ``policy`` state file and retried with backoff on later passes.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Optional

from healthd.acks import POLICY_CHECK, AckStore, FindingRef, apply_acks, merge
from healthd.acks import STATE_NAME as ACKS_STATE
from healthd.model import CheckResult, Finding, PassResult, RunState, Status
from healthd.policy import (
    ACTING,
    BACKOFF_MAX,
    BREAKER_MAX,
    OWN_CHECK,
    TAKING_OUT,
    Action,
    Decision,
    PolicyState,
    acknowledged_by_resume,
    after_apply,
    after_failure,
    allowed_out,
    breaker_confirm,
    breaker_held,
    circuit_breaker,
    decide,
    needs_node,
    waiting,
)
from healthd.slurm import NodeInfo, SlurmClient, SlurmError, owned, partition_views, reason_head
from healthd.state import StateError
from healthd.statelock import LockTimeout, StateLock

if TYPE_CHECKING:
    from healthd.config import Config
    from healthd.engine import Engine

LAST_PASS = "last-pass"  # noqa: S105 (a state file name)
POLICY_STATE = "policy"


@dataclass(frozen=True)
class ActionReport:
    """The ``action`` section of the pass document."""

    decision: Decision
    node_state: Optional[str]
    node_reason: Optional[str]
    applied: bool
    held: bool
    pending: bool
    dry_run: bool
    slurm_enabled: bool
    acknowledged: tuple[FindingRef, ...]
    errors: tuple[str, ...]
    next_retry: Optional[float] = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision.action.value,
            "intended": self.decision.intended.value,
            "reason": self.decision.reason,
            "explanation": self.decision.explanation,
            "causes": [c.to_dict() for c in self.decision.causes],
            "node_state": self.node_state,
            "node_reason": self.node_reason,
            "applied": self.applied,
            "held": self.held,
            "pending": self.pending,
            "next_retry": self.next_retry,
            "dry_run": self.dry_run,
            "slurm_enabled": self.slurm_enabled,
            "acknowledged": [a.to_dict() for a in self.acknowledged],
            "errors": list(self.errors),
        }


@dataclass(frozen=True)
class CycleOutcome:
    """Everything one cycle did. ``result`` is the pass as reported (acks applied, DRAIN_HELD added)."""

    result: PassResult
    action: ActionReport
    state: PolicyState
    document: dict[str, Any]

    @property
    def exit_code(self) -> int:
        return int(self.result.status)


def _held_finding(node: str, why: str) -> CheckResult:
    finding = Finding(
        check=POLICY_CHECK,
        status=Status.CRITICAL,
        code="DRAIN_HELD",
        subject=node,
        message=f"not taken out (circuit breaker): {why}",
    )
    return CheckResult(check=POLICY_CHECK, state=RunState.RAN, findings=(finding,), duration_seconds=0.0)


def _apply(client: SlurmClient, node: NodeInfo, decision: Decision, confirm: Optional[Callable[[], str]]) -> str:
    """Send the write RPCs for ``decision``; returns why the circuit breaker undid a drain, or "".

    Taking out now is DRAIN then DOWN: DRAIN first so no new job can land on the
    node, DOWN to kill (and requeue, where allowed) the running jobs. DOWN alone is
    not durable: with ReturnToService=2 the node returns when slurmd re-registers,
    but the DRAIN flag (and its reason) survives that. ``confirm`` runs between the
    two (see ``_confirm``), so a node that loses its place never has its jobs killed.
    """
    if decision.action is Action.RESUME:
        client.resume(node.name)
        return ""
    if not (node.drained and reason_head(node.reason) == reason_head(decision.reason)):
        client.drain(node.name, decision.reason)
    if confirm is not None:
        why = confirm()
        if why:
            return why
    if decision.action is Action.TAKE_OUT_NOW:
        client.down(node.name, decision.reason)
    return ""


def _confirm(client: SlurmClient, name: str, config: Config, settle: float) -> str:
    """The circuit breaker's read-after-write: after ``settle`` seconds, may this drained node stay out?

    Returns "" when it keeps its place (``policy.breaker_confirm``); otherwise it has
    been resumed here and the text says why. When the read fails the drain is
    undone too: a node that cannot prove its place under the limit does not keep it.
    Raises SlurmError when the undo fails (the caller keeps the drain unconfirmed)
    or when the node no longer carries a healthd reason (someone else's now: left alone).
    """
    prefix = config.slurm.reason_prefix
    if settle > 0:
        time.sleep(settle)
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


def _load_policy_state(engine: Engine, errors: list[str]) -> PolicyState:
    state_file = engine.state.file(POLICY_STATE)
    try:
        return PolicyState.from_dict(state_file.load())
    except ValueError as exc:
        errors.append(f"{state_file.path}: {exc}; starting from empty policy state")
        return PolicyState()


def _report(
    decision: Decision, *, dry: bool, enabled: bool, errors: list[str], node: Optional[NodeInfo] = None
) -> ActionReport:
    return ActionReport(
        decision=decision,
        node_state=node.state_text if node else None,
        node_reason=node.reason if node else None,
        applied=False,
        held=False,
        pending=False,
        dry_run=dry,
        slurm_enabled=enabled,
        acknowledged=(),
        errors=tuple(errors),
    )


def run_cycle(
    engine: Engine,
    *,
    dry_run: bool = False,
    logger: Optional[logging.Logger] = None,
    client: Optional[SlurmClient] = None,
    clock: Callable[[], float] = time.time,
    only: Optional[list[str]] = None,
) -> CycleOutcome:
    """Run one pass and carry its decision out; see the module docstring.

    The policy and acks state is read, acted on and written back under the state
    directory lock (``healthd.statelock``); a pass that cannot get the lock within
    ``[slurm].lock_timeout`` is reported but acts on nothing. Whatever goes wrong
    after the checks ran, the pass is still reported and saved: an unexpected
    exception becomes an UNKNOWN ``healthd/PASS_FAILED`` finding.
    """
    log = logger or logging.getLogger("healthd.cycle")
    config = engine.config
    dry = dry_run or config.policy.dry_run
    enabled = config.slurm.enabled
    try:
        raw = engine.run_pass(only)
    except Exception as exc:  # anything from the engine must still give a reported pass
        from healthd.engine import node_name

        return _failed(engine, PassResult(node_name(config), clock(), 0.0, ()), exc, log, dry=dry, enabled=enabled)
    errors: list[str] = []
    lock = StateLock(config.paths.state_dir, config.slurm.lock_timeout)
    try:
        lock.acquire()
    except LockTimeout as exc:
        log.warning("%s: not acting this pass", exc)
        result, _ = apply_acks(raw, AckStore(engine.state.file(ACKS_STATE)).load())
        decision = Decision(Action.NONE, Action.NONE, "", f"not acting this pass: {exc}")
        return _finish(engine, result, _report(decision, dry=dry, enabled=enabled, errors=[str(exc)]), None)
    except OSError as exc:
        # The directory is missing or unwritable: no state can be saved there either,
        # and checking (and acting on a fault) must go on; the problem is reported.
        errors.append(f"cannot lock {lock.path}: {exc.strerror or exc}; going on without the lock")
    try:
        return _locked_cycle(engine, raw, errors, log, dry=dry, client=client, clock=clock, partial=only is not None)
    except Exception as exc:  # see the docstring
        return _failed(engine, raw, exc, log, dry=dry, enabled=enabled)
    finally:
        lock.release()


def _failed(
    engine: Engine, raw: PassResult, exc: Exception, log: logging.Logger, *, dry: bool, enabled: bool
) -> CycleOutcome:
    """The pass as far as it got, plus an UNKNOWN ``PASS_FAILED`` finding; nothing acted on or saved but the pass."""
    message = f"pass failed: {type(exc).__name__}: {exc}"
    log.error("%s", message, exc_info=exc)
    finding = Finding(OWN_CHECK, Status.UNKNOWN, "PASS_FAILED", OWN_CHECK, message)
    own = CheckResult(OWN_CHECK, RunState.ERROR, (finding,), 0.0, message)
    result = replace(raw, results=(*raw.results, own))
    decision = Decision(Action.NONE, Action.NONE, "", "the pass failed: nothing decided")
    return _finish(engine, result, _report(decision, dry=dry, enabled=enabled, errors=[message]), None)


def _locked_cycle(
    engine: Engine,
    raw: PassResult,
    errors: list[str],
    log: logging.Logger,
    *,
    dry: bool,
    client: Optional[SlurmClient],
    clock: Callable[[], float],
    partial: bool,
) -> CycleOutcome:
    config = engine.config
    prefix = config.slurm.reason_prefix
    enabled = config.slurm.enabled
    now = clock()
    state = _load_policy_state(engine, errors)
    store = AckStore(engine.state.file(ACKS_STATE))
    acks = store.load()

    node: Optional[NodeInfo] = None
    attempted = False
    slurm_error = ""
    slurm = client or SlurmClient(config.slurm, output_format=state.slurm_output or None)
    slurm.start_budget()
    if not enabled:
        slurm_error = "Slurm actions disabled ([slurm].enabled = false)"
    elif state.pending is not None and waiting(state.pending.next_try, now, BACKOFF_MAX):
        slurm_error = f"backing off after: {state.pending.error}"
    elif needs_node(apply_acks(raw, acks)[0], state, config.policy, now, config.slurm.reconcile_interval):
        attempted = True
        try:
            node = slurm.show_node(raw.node)
            state = replace(state, last_read=now)
        except SlurmError as exc:
            slurm_error = str(exc)
            errors.append(slurm_error)

    acknowledged: tuple[FindingRef, ...] = ()
    if node is not None:
        acknowledged = acknowledged_by_resume(state, node)
        if acknowledged and not dry:
            acks = merge(acks, acknowledged, now, "slurm-resume")
            state = replace(state, took_out=())
            log.warning("node %s was resumed by someone else: %d finding(s) acknowledged", raw.node, len(acknowledged))

    result, kept_acks = apply_acks(raw, acks)
    decision, new_state = decide(result, state, node, config.policy, prefix, partial=partial)

    acting = enabled and not dry
    decision, new_state, held_why, node, confirm = _breaker(
        slurm, node, decision, new_state, now, errors, config, acting=acting
    )

    applied = pending = False
    if decision.action in ACTING and acting:
        if node is None:
            why = slurm_error or (errors[-1] if errors else "node state not read")
            new_state = after_failure(new_state, decision, why, now, attempted)
            pending = True
        else:
            # Saved before the writes: if slurmd kills the hook (or the host dies) mid-way,
            # the next pass still knows what it was doing and retries it (and confirms the drain).
            with contextlib.suppress(StateError):
                unconfirmed = after_failure(new_state, decision, "not confirmed: interrupted while sending", now, True)
                unconfirmed = replace(unconfirmed, unconfirmed=unconfirmed.unconfirmed or confirm)
                engine.state.file(POLICY_STATE).save(unconfirmed.to_dict())
            settle = config.policy.breaker_settle
            check = (lambda: _confirm(slurm, node.name, config, settle)) if confirm else None
            try:
                held_why = _apply(slurm, node, decision, check)
                if held_why:
                    decision = replace(decision, action=Action.HOLD, explanation=held_why)
                    new_state = replace(breaker_held(new_state, held_why, now, node.name), unconfirmed=False)
                else:
                    applied = True
                    new_state = replace(after_apply(new_state, decision), unconfirmed=False)
                    log.warning(
                        "node %s: %s (%s)", raw.node, decision.action.value, decision.reason or decision.explanation
                    )
            except SlurmError as exc:
                errors.append(str(exc))
                new_state = after_failure(new_state, decision, str(exc), now, attempted=True)
                new_state = replace(new_state, unconfirmed=new_state.unconfirmed or confirm)
                pending = True
        if pending:
            why = new_state.pending.error if new_state.pending else ""
            log.warning("node %s: %s is pending: %s", raw.node, decision.action.value, why)
    if held_why:
        result = replace(result, results=(*result.results, _held_finding(raw.node, held_why)))
        log.error(
            "DRAIN_HELD on %s: %s would be %s, held back: %s",
            raw.node,
            decision.reason,
            decision.intended.value,
            held_why,
        )

    new_state = replace(new_state, slurm_output=slurm.output_format or "")
    if dry:
        new_state = replace(
            state,
            fail_streaks=new_state.fail_streaks,
            unknown_streaks=new_state.unknown_streaks,
            clean_streak=new_state.clean_streak,
            slurm_output=new_state.slurm_output,
        )
    try:
        engine.state.file(POLICY_STATE).save(new_state.to_dict())
        if not dry:
            store.save(kept_acks)
    except StateError as exc:
        errors.append(str(exc))
    errors.extend(store.problems)

    report = ActionReport(
        decision=decision,
        node_state=node.state_text if node else None,
        node_reason=node.reason if node else None,
        applied=applied,
        held=decision.action is Action.HOLD,
        pending=new_state.pending is not None and not dry,
        next_retry=new_state.pending.next_try if new_state.pending and not dry else None,
        dry_run=dry,
        slurm_enabled=enabled,
        acknowledged=acknowledged,
        errors=tuple(errors),
    )
    return _finish(engine, result, report, new_state)


def _breaker(
    slurm: SlurmClient,
    node: Optional[NodeInfo],
    decision: Decision,
    state: PolicyState,
    now: float,
    errors: list[str],
    config: Config,
    *,
    acting: bool,
) -> tuple[Decision, PolicyState, str, Optional[NodeInfo], bool]:
    """Run the circuit breaker's check before a take-out.

    Returns the decision, state, why it held, the node (None when a read failed:
    act on nothing) and whether the drain must be confirmed after it is sent
    (``_confirm``). Reading the whole node table is the one expensive RPC, so while
    the breaker holds it is read again only at the hold's backoff time; in between
    the hold stands. A drain left unconfirmed by an earlier pass is confirmed here.
    """
    prefix = config.slurm.reason_prefix
    if node is None or decision.intended not in TAKING_OUT:
        return decision, replace(state, held=None), "", node, False
    ours = node.drained and owned(node.reason, prefix)
    if ours and state.unconfirmed and acting:
        try:
            why = _confirm(slurm, node.name, config, 0.0)
        except SlurmError as exc:
            errors.append(str(exc))
            return decision, state, "", None, False
        if why:
            held = replace(decision, action=Action.HOLD, explanation=why)
            return held, replace(breaker_held(state, why, now, node.name), unconfirmed=False), why, node, False
        return decision, replace(state, held=None, unconfirmed=False), "", node, False
    if ours or decision.action not in TAKING_OUT:
        return decision, replace(state, held=None, unconfirmed=False), "", node, False
    hold = state.held
    if hold is not None and waiting(hold.next_check, now, BREAKER_MAX * 1.25):
        explanation = f"{hold.why} (circuit breaker; partition re-checked in {hold.next_check - now:.0f}s)"
        held = replace(decision, action=Action.HOLD, explanation=explanation)
        return held, replace(state, pending=None), hold.why, node, False
    try:
        views = partition_views(slurm.show_all(), node.partitions, prefix)
    except SlurmError as exc:
        errors.append(str(exc))
        return decision, state, "", None, False
    decision, why = circuit_breaker(decision, node.name, views, config.policy)
    if why:
        return decision, breaker_held(state, why, now, node.name), why, node, False
    # Where the limit is the whole partition, no number of simultaneous drains can exceed it.
    binding = any(allowed_out(v.size, config.policy.max_out_fraction) < v.size for v in views.values())
    return decision, replace(state, held=None), "", node, binding


def _finish(engine: Engine, result: PassResult, report: ActionReport, state: Optional[PolicyState]) -> CycleOutcome:
    from healthd.report import pass_to_dict

    errors = list(report.errors) + engine.state.drain_problems()
    report = replace(report, errors=tuple(errors))
    document = pass_to_dict(result, {"action": report.to_dict()})
    try:
        engine.state.file(LAST_PASS).save(document)
    except StateError as exc:
        report = replace(report, errors=(*report.errors, str(exc)))
        document["action"] = report.to_dict()
    return CycleOutcome(result=result, action=report, state=state or PolicyState(), document=document)
