"""One cycle: run a pass, apply acknowledgements, decide, act through Slurm, record the result.

``run_cycle`` is what ``healthd check --once`` (and the HealthCheckProgram hook)
and the daemon call each pass. It never prints; everything it did or could not do
is in the returned ``CycleOutcome`` and in log records. Slurm trouble (scontrol
missing, slurmctld down, a timeout) never raises: the intended action is kept in
the ``policy`` state file and retried with backoff on later passes.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Optional

from healthd.acks import POLICY_CHECK, AckStore, FindingRef, apply_acks, merge
from healthd.model import CheckResult, Finding, PassResult, RunState, Status
from healthd.policy import (
    ACTING,
    TAKING_OUT,
    Action,
    Decision,
    PolicyState,
    acknowledged_by_resume,
    after_apply,
    after_failure,
    circuit_breaker,
    decide,
    needs_node,
)
from healthd.slurm import NodeInfo, SlurmClient, SlurmError, out_fraction, owned
from healthd.state import StateError

if TYPE_CHECKING:
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


def _apply(client: SlurmClient, node: NodeInfo, decision: Decision) -> None:
    """Send the write RPCs for ``decision``.

    Taking out now is DRAIN then DOWN: DRAIN first so no new job can land on the
    node, DOWN to kill (and requeue, where allowed) the running jobs. DOWN alone is
    not durable: with ReturnToService=2 the node returns when slurmd re-registers,
    but the DRAIN flag (and its reason) survives that.
    """
    if decision.action is Action.RESUME:
        client.resume(node.name)
        return
    if not (node.drained and node.reason == decision.reason):
        client.drain(node.name, decision.reason)
    if decision.action is Action.TAKE_OUT_NOW:
        client.down(node.name, decision.reason)


def _load_policy_state(engine: Engine, errors: list[str]) -> PolicyState:
    state_file = engine.state.file(POLICY_STATE)
    try:
        return PolicyState.from_dict(state_file.load())
    except ValueError as exc:
        errors.append(f"{state_file.path}: {exc}; starting from empty policy state")
        return PolicyState()


def run_cycle(
    engine: Engine,
    *,
    dry_run: bool = False,
    logger: Optional[logging.Logger] = None,
    client: Optional[SlurmClient] = None,
    clock: Callable[[], float] = time.time,
    only: Optional[list[str]] = None,
) -> CycleOutcome:
    """Run one pass and carry its decision out; see the module docstring."""
    log = logger or logging.getLogger("healthd.cycle")
    config = engine.config
    prefix = config.slurm.reason_prefix
    enabled = config.slurm.enabled
    dry = dry_run or config.policy.dry_run
    errors: list[str] = []

    raw = engine.run_pass(only)
    now = clock()
    state = _load_policy_state(engine, errors)
    store = AckStore(engine.state.file("acks"))
    acks = store.load()

    node: Optional[NodeInfo] = None
    attempted = False
    slurm_error = ""
    slurm = client or SlurmClient(config.slurm)
    if not enabled:
        slurm_error = "Slurm actions disabled ([slurm].enabled = false)"
    elif state.pending is not None and now < state.pending.next_try:
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
    decision, new_state = decide(result, state, node, config.policy, prefix)

    held_why = ""
    if decision.action in TAKING_OUT and node is not None and not (node.drained and owned(node.reason, prefix)):
        try:
            others = [n for n in slurm.show_all() if n.name != node.name]
            decision, held_why = circuit_breaker(decision, out_fraction(others, node.partitions, prefix), config.policy)
        except SlurmError as exc:
            slurm_error = str(exc)
            errors.append(slurm_error)
            node = None
    if held_why:
        result = replace(result, results=(*result.results, _held_finding(raw.node, held_why)))
        log.error(
            "DRAIN_HELD on %s: %s would be %s, held back: %s",
            raw.node,
            decision.reason,
            decision.intended.value,
            held_why,
        )

    applied = pending = False
    if decision.action in ACTING and not dry and enabled:
        if node is None:
            new_state = after_failure(new_state, decision, slurm_error, now, attempted)
            pending = True
        else:
            try:
                _apply(slurm, node, decision)
                applied = True
                new_state = after_apply(new_state, decision)
                log.warning(
                    "node %s: %s (%s)", raw.node, decision.action.value, decision.reason or decision.explanation
                )
            except SlurmError as exc:
                errors.append(str(exc))
                new_state = after_failure(new_state, decision, str(exc), now, attempted=True)
                pending = True
        if pending:
            log.warning("node %s: %s is pending: %s", raw.node, decision.action.value, errors[-1] if errors else "")

    if dry:
        new_state = replace(
            state,
            fail_streak=new_state.fail_streak,
            unknown_streak=new_state.unknown_streak,
            clean_streak=new_state.clean_streak,
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


def _finish(engine: Engine, result: PassResult, report: ActionReport, state: PolicyState) -> CycleOutcome:
    from healthd.report import pass_to_dict

    errors = list(report.errors) + engine.state.drain_problems()
    report = replace(report, errors=tuple(errors))
    document = pass_to_dict(result, {"action": report.to_dict()})
    try:
        engine.state.file(LAST_PASS).save(document)
    except StateError as exc:
        report = replace(report, errors=(*report.errors, str(exc)))
        document["action"] = report.to_dict()
    return CycleOutcome(result=result, action=report, state=state, document=document)
