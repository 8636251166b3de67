"""One finished pass as the daemon's sinks take it: the pass, the actions decided and what became of them.

``report_from_outcome`` condenses a pass's ``PassOutcome`` (healthd.cycle.pipeline) into a
``PassReport``, the one value the sinks (healthd.service.sinks: log, metrics, systemd)
read; nothing here acts or writes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional

if TYPE_CHECKING:
    from healthd.cycle.pipeline import PassOutcome
    from healthd.model import PassResult
    from healthd.plan.policy import Action, Repair


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


@dataclass(frozen=True)
class PassAction:
    """One action decided in a pass: its kind (``drain_after_jobs``, ``resume``...), its outcome, and why."""

    kind: Action
    outcome: ActionOutcome
    detail: str = ""


@dataclass(frozen=True)
class PassReport:
    """What the sinks need from one pass.

    ``result`` is the pass as reported, ``document`` the same pass as saved in
    ``last-pass`` (with its action section), ``problems`` what went wrong around it
    (state that could not be saved, Slurm errors). ``breaker_open`` is None when the
    pass failed before the policy decided anything. ``took_out`` names, as ``(check, code)``,
    the findings for which healthd holds the node out; ``repair`` is the node's repair, if any
    (both from the policy state the pass left).
    """

    result: PassResult
    actions: tuple[PassAction, ...] = ()
    breaker_open: Optional[bool] = None
    took_out: tuple[tuple[str, str], ...] = ()
    repair: Optional[Repair] = None
    problems: tuple[str, ...] = ()
    document: Mapping[str, Any] = field(default_factory=dict, compare=False)


def report_from_outcome(outcome: PassOutcome) -> PassReport:
    """Condense a pass into what is logged and exported.

    An acting decision was ``taken`` (Slurm accepted it), is ``pending`` (Slurm failed;
    retried later), or was only a ``dry_run``/``disabled`` (Slurm actions off). A HOLD of
    an acting decision is ``held_back`` (hysteresis streak not reached, or the circuit
    breaker); the breaker is open when the pipeline added its DRAIN_HELD finding, and not
    known at all when the pass failed (``healthd.cycle.pipeline.failed_pass``).
    """
    from healthd.cycle.pipeline import PASS_FAILED
    from healthd.plan.acks import POLICY_CHECK
    from healthd.plan.policy import ACTING, OWN_CHECK, Action

    report = outcome.action
    decision = report.decision
    detail = decision.reason or decision.explanation
    actions: tuple[PassAction, ...] = ()
    if decision.action in ACTING:
        if report.applied:
            outcome_kind = ActionOutcome.TAKEN
        elif report.dry_run:
            outcome_kind = ActionOutcome.DRY_RUN
        elif not report.slurm_enabled:
            outcome_kind = ActionOutcome.DISABLED
        else:
            outcome_kind = ActionOutcome.PENDING
        actions = (PassAction(decision.action, outcome_kind, detail),)
    elif decision.action is Action.HOLD and decision.intended in ACTING:
        actions = (PassAction(decision.intended, ActionOutcome.HELD_BACK, decision.explanation),)
    findings = outcome.result.findings
    breaker: Optional[bool] = any(f.check == POLICY_CHECK and f.code == "DRAIN_HELD" for f in findings)
    if any(f.check == OWN_CHECK and f.code == PASS_FAILED for f in findings):
        breaker = None
    state = outcome.state
    return PassReport(
        result=outcome.result,
        actions=actions,
        breaker_open=breaker,
        took_out=tuple(_check_and_code(ref.key) for ref in state.took_out),
        repair=state.repair,
        problems=report.errors,
        document=outcome.document,
    )


def _check_and_code(key: str) -> tuple[str, str]:
    """``(check, code)`` of a finding's key, ``check/code/subject`` (healthd.model.Finding.key)."""
    check, _, rest = key.partition("/")
    return check, rest.partition("/")[0]
