"""What became of an action the policy decided in a pass, as the daemon logs and exports it."""

from __future__ import annotations

import enum


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
