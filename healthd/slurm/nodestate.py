"""What the scheduler says about nodes: the values the Slurm adapter produces and the policy reads.

Neither side imports the other. ``healthd.slurm.adapter`` parses scontrol's output into
these values; ``healthd.plan.policy`` decides from them (by ``healthd.plan.rules``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional

# Node state flags (scontrol man page, NODE STATE): a pending or running reboot.
REBOOT_FLAGS = frozenset({"REBOOT_REQUESTED", "REBOOT_ISSUED", "REBOOTING"})
# Flags that keep a node out of service: DRAIN (drained/draining) and FAIL (failing/
# failed, set by `scontrol update State=FAIL`; scontrol prints e.g. ALLOCATED+FAIL).
OUT_FLAGS = frozenset({"DRAIN", "FAIL"})
# Base states in which jobs still run on the node.
BUSY_STATES = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})
# Power saving (slurm.conf SuspendProgram/ResumeProgram; scontrol(1) NODE STATE). sinfo
# marks them with a suffix: POWER_DOWN "!" (requested), POWERING_DOWN "%", POWERED_DOWN
# "~", POWERING_UP "#". POWER_UP is the requested power-up, shown with POWERED_DOWN.
POWER_FLAGS = frozenset({"POWER_DOWN", "POWERING_DOWN", "POWERED_DOWN", "POWER_UP", "POWERING_UP"})


class NodeInfo(NamedTuple):
    """What healthd needs to know about one node, as slurmctld reports it."""

    name: str
    state: str
    flags: frozenset[str]
    reason: str
    reason_user: str
    partitions: tuple[str, ...]
    # When slurmctld set the reason (its own clock, whole seconds); None when not printed.
    reason_time: Optional[float] = None
    # When the node last booted, as its slurmd reported at registration (slurmctld's clock,
    # whole seconds); None before the first registration or while powering up.
    boot_time: Optional[float] = None
    # The state a pending reboot leaves the node in (``DOWN``, ``RESUME``); "" when none.
    next_state: str = ""

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
    def reboot_requested(self) -> bool:
        """``scontrol reboot`` asked for it; slurmctld issues it once the node is idle (``@`` in sinfo)."""
        return "REBOOT_REQUESTED" in self.flags

    @property
    def power_saving(self) -> bool:
        """Powered down, or on its way down or up: the machine is not (or not yet) running its jobs' OS."""
        return bool(self.flags & POWER_FLAGS)

    @property
    def reserved(self) -> bool:
        """In an active advanced reservation (any kind; see ``maintenance``)."""
        return "RESERVED" in self.flags

    @property
    def maintenance(self) -> bool:
        """In an active reservation with the MAINT flag: an administrator's maintenance window."""
        return "MAINTENANCE" in self.flags

    @property
    def state_text(self) -> str:
        return "+".join([self.state, *sorted(self.flags)])


class PartitionView(NamedTuple):
    """One partition as the circuit breaker sees it.

    ``out`` lists the nodes out with a healthd reason as (not DOWN, reason time,
    name), sorted: the order in which they took their places under the limit (see
    ``breaker.breaker_confirm``).
    """

    name: str
    size: int
    out: tuple[tuple[bool, float, str], ...]
    # (node, the code its healthd reason names), for the nodes in ``out``: a code other nodes
    # of the partition are out for is a shared fault, not a repeat (docs/escalation.md).
    codes: tuple[tuple[str, str], ...] = ()
    # Set for one breaker shard of a large partition (healthd.plan.shard): then ``size`` and
    # ``out`` are the shard's, and ``limit`` (1) is how many of it may be out at once.
    limit: Optional[int] = None


@dataclass(frozen=True)
class NodeGroup:
    """Nodes of one partition that share a state, a reason and its time, as one line of sinfo.

    What the circuit breaker reads instead of the node table: a partition's size is
    the sum of its groups' ``count``, and only the groups out with a healthd reason
    have their ``nodelist`` (a Slurm host list) expanded.
    """

    partition: str
    count: int
    state: str
    flags: frozenset[str]
    reason: str
    reason_time: Optional[float]
    nodelist: str
    reason_user: str = ""  # who set the reason ("" when none was set or the read does not say)

    @property
    def down(self) -> bool:
        return self.state == "DOWN"

    @property
    def out(self) -> bool:
        """As ``NodeInfo.out``: DRAIN, FAIL or DOWN."""
        return bool(self.flags & OUT_FLAGS) or self.down
