"""One finished pass: ``PassOutcome``, with its ``action`` section, the one value every output is made from.

``healthd.cycle.pipeline`` builds it at the end of each pass. The ``check --once`` table,
its ``--json`` document and ``last-pass`` (the document, built in ``pipeline._finish`` and
read back by ``healthd status``) and the daemon's sinks (healthd.service.sinks: log,
metrics, systemd) all take it; nothing here acts or writes.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

from healthd.model import PassResult
from healthd.plan.acks import FindingRef
from healthd.plan.ackview import POLICY_CHECK
from healthd.plan.state import ACTING, OWN_CHECK, Action, Decision, PolicyState
from healthd.slurm.problem import SlurmProblem

if TYPE_CHECKING:
    from healthd.plan.state import Repair
    from healthd.slurm.nodestate import NodeInfo

# The code of the finding that stands for a pass that raised (healthd.cycle.pipeline.failed_pass).
PASS_FAILED = "PASS_FAILED"  # noqa: S105 (a finding code)


class ActionOutcome(enum.Enum):
    """The outcome of one decided action (the ``outcome`` label of ``healthd_actions_total``)."""

    TAKEN = "taken"  # Slurm accepted it
    PENDING = "pending"  # Slurm failed or could not be reached; retried on later passes
    HELD_BACK = "held_back"  # hysteresis streak not reached yet, or the circuit breaker is open
    DRY_RUN = "dry_run"  # decided only: dry run
    DISABLED = "disabled"  # decided only: Slurm actions are off

    @property
    def changes_or_should_change_the_node(self) -> bool:
        """True when the node's state changed, or would have but for a failure or a hold."""
        return self in (ActionOutcome.TAKEN, ActionOutcome.PENDING, ActionOutcome.HELD_BACK)


class PassAction(NamedTuple):
    """One action decided in a pass: its kind (``drain_after_jobs``, ``resume``...), its outcome, and why."""

    kind: Action
    outcome: ActionOutcome
    detail: str = ""


class ActionSection(NamedTuple):
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
    steps: tuple[str, ...] = ()
    # The Slurm failures among ``errors``, as values (each one's ``message`` is in ``errors``).
    slurm_errors: tuple[SlurmProblem, ...] = ()
    # A one-shot pass (``check``, the hook): no later pass of its own retries a pending action.
    one_shot: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The section as the document holds it; ``slurm_errors`` only when there are some (an additive key)."""
        section: dict[str, Any] = {
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
            "steps": list(self.steps),
            "one_shot": self.one_shot,
        }
        if self.slurm_errors:
            section["slurm_errors"] = _indexed(self.errors, self.slurm_errors)
        return section


def _indexed(errors: tuple[str, ...], problems: tuple[SlurmProblem, ...]) -> list[dict[str, Any]]:
    """The document's entries of ``problems``, each with where its message stands in ``errors`` (in the same order)."""
    entries, start = [], 0
    for problem in problems:
        start = errors.index(problem.message, start)
        entries.append(problem.to_dict(start))
        start += 1
    return entries


class PassOutcome(NamedTuple):
    """One finished pass: everything it did, the one value the table, the JSON document, the
    daemon's sinks (log, metrics, systemd) and ``last-pass`` (which ``healthd status`` renders) come from.

    ``result`` is the pass as reported (acks applied, DRAIN_HELD added), ``action`` what the
    policy decided and what became of it, ``state`` the policy state the pass left, ``document``
    the pass serialised (``healthd.cycle.render.pass_to_dict`` with ``action``: the ``--json``
    output and ``last-pass``), ``node`` the node as Slurm reported it this pass (None when the
    pass did not read it). What the sinks read is derived here, never kept apart.
    """

    result: PassResult
    action: ActionSection
    state: PolicyState
    document: dict[str, Any]
    node: Optional[NodeInfo] = None

    @property
    def exit_code(self) -> int:
        return int(self.result.status)

    @property
    def problems(self) -> tuple[str, ...]:
        """What went wrong around the pass (state that could not be saved, Slurm errors): the action's errors."""
        return self.action.errors

    @property
    def actions(self) -> tuple[PassAction, ...]:
        """The action decided, with its outcome (``ActionOutcome``); none when nothing acting was decided.

        An acting decision was ``taken`` (Slurm accepted it), is ``pending`` (Slurm failed;
        retried later), or was only a ``dry_run``/``disabled`` (Slurm actions off). A HOLD
        of an acting decision is ``held_back`` (hysteresis streak not reached, or the
        circuit breaker).
        """
        section, decision = self.action, self.action.decision
        if decision.action in ACTING:
            if section.applied:
                kind = ActionOutcome.TAKEN
            elif section.dry_run:
                kind = ActionOutcome.DRY_RUN
            elif not section.slurm_enabled:
                kind = ActionOutcome.DISABLED
            else:
                kind = ActionOutcome.PENDING
            return (PassAction(decision.action, kind, decision.reason or decision.explanation),)
        if decision.action is Action.HOLD and decision.intended in ACTING:
            return (PassAction(decision.intended, ActionOutcome.HELD_BACK, decision.explanation),)
        return ()

    @property
    def breaker_open(self) -> Optional[bool]:
        """Whether the circuit breaker held a take-out back (the DRAIN_HELD finding); None when the pass failed."""
        findings = self.result.findings
        if any(f.check == OWN_CHECK and f.code == PASS_FAILED for f in findings):
            return None
        return any(f.check == POLICY_CHECK and f.code == "DRAIN_HELD" for f in findings)

    @property
    def took_out(self) -> tuple[tuple[str, str], ...]:
        """``(check, code)`` of each finding for which healthd holds the node out (the policy state's)."""
        return tuple(_check_and_code(ref.key) for ref in self.state.took_out)

    @property
    def repair(self) -> Optional[Repair]:
        """The node's repair, if any (the policy state's)."""
        return self.state.repair


def _check_and_code(key: str) -> tuple[str, str]:
    """``(check, code)`` of a finding's key, ``check/code/subject`` (healthd.model.Finding.key)."""
    check, _, rest = key.partition("/")
    return check, rest.partition("/")[0]
