"""What the scheduler says about nodes: the values the Slurm adapter produces and the policy reads.

Neither side imports the other. ``healthd.slurm`` parses scontrol's output into
these values; ``healthd.policy`` decides from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# Node state flags (scontrol man page, NODE STATE): a pending or running reboot.
REBOOT_FLAGS = frozenset({"REBOOT_REQUESTED", "REBOOT_ISSUED", "REBOOTING"})
# Flags that keep a node out of service: DRAIN (drained/draining) and FAIL (failing/
# failed, set by `scontrol update State=FAIL`; scontrol prints e.g. ALLOCATED+FAIL).
OUT_FLAGS = frozenset({"DRAIN", "FAIL"})
# Base states in which jobs still run on the node.
BUSY_STATES = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})


@dataclass(frozen=True)
class NodeInfo:
    """What healthd needs to know about one node, as slurmctld reports it."""

    name: str
    state: str
    flags: frozenset[str]
    reason: str
    reason_user: str
    partitions: tuple[str, ...]
    # When slurmctld set the reason (its own clock, whole seconds); None when not printed.
    reason_time: Optional[float] = None

    @property
    def drained(self) -> bool:
        """DRAIN is set (shown as draining while jobs run, drained once idle)."""
        return "DRAIN" in self.flags

    @property
    def down(self) -> bool:
        return self.state == "DOWN"

    @property
    def failed(self) -> bool:
        """FAIL is set (shown as failing while jobs run, fail once idle)."""
        return "FAIL" in self.flags

    @property
    def out(self) -> bool:
        """Out of service for the scheduler: DRAIN, FAIL or DOWN."""
        return bool(self.flags & OUT_FLAGS) or self.down

    @property
    def busy(self) -> bool:
        return self.state in BUSY_STATES

    @property
    def reboot_pending(self) -> bool:
        return bool(self.flags & REBOOT_FLAGS)

    @property
    def state_text(self) -> str:
        return "+".join([self.state, *sorted(self.flags)])


@dataclass(frozen=True)
class PartitionView:
    """One partition as the circuit breaker sees it.

    ``out`` lists the nodes out with a healthd reason as (not DOWN, reason time,
    name), sorted: the order in which they took their places under the limit (see
    ``breaker.breaker_confirm``).
    """

    name: str
    size: int
    out: tuple[tuple[bool, float, str], ...]
