"""The values that cross module boundaries: statuses, findings and check results.

Everything here is an immutable record (CONTRIBUTING.md, "Records") or an enum. Checks produce ``Finding``s, the
runner wraps them in ``CheckResult``s, and a whole pass is a ``PassResult``; the
policy, the sinks and the CLI only ever read these.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple, Optional, Union

DetailValue = Union[str, int, float, bool, None]


class Status(enum.IntEnum):
    """A grade, valued as its Nagios plugin exit code (OK 0 ... UNKNOWN 3).

    The numeric value is the exit code, not the order of badness: use ``rank``
    and ``worst()`` to compare. A known fault (CRITICAL) outranks "could not
    observe" (UNKNOWN) because it demands action whatever else we failed to
    see; UNKNOWN outranks WARNING because an unobserved GPU may be a dead one.
    """

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3

    @property
    def rank(self) -> int:
        return _RANK[self]

    @classmethod
    def parse(cls, text: str) -> Status:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown status {text!r} (expected one of {', '.join(s.name for s in cls)})") from None


_RANK = {Status.OK: 0, Status.WARNING: 1, Status.UNKNOWN: 2, Status.CRITICAL: 3}


def worst(statuses: Iterable[Status]) -> Status:
    """The worst of ``statuses`` by ``Status.rank``; OK when there are none."""
    result = Status.OK
    for status in statuses:
        if status.rank > result.rank:
            result = status
    return result


class Tier(enum.Enum):
    """Which checks a pass runs (docs/active.md).

    ``ORDINARY``: every check but the active ones (the hook, the daemon, ``check --once``).
    ``ACTIVE``: the active checks alone (``check --once --active``, the epilog), a partial pass.
    ``ALL``: both, a whole pass that may resume the node (the daemon, on its own idle drain).
    """

    ORDINARY = "ordinary"
    ACTIVE = "active"
    ALL = "all"


@dataclass(frozen=True)
class Finding:
    """One observation a check wants the operator (and the policy) to see.

    ``code`` is short, stable and machine-matchable (``MOUNT_HUNG``, ``XID_79``);
    ``subject`` names the thing (``/scratch``, ``gpu3``, ``mlx5_0:1``); ``message``
    is one line for people; ``details`` holds structured extras.
    """

    check: str
    status: Status
    code: str
    subject: str
    message: str
    details: Mapping[str, DetailValue] = field(default_factory=dict, hash=False, compare=False)

    @property
    def key(self) -> str:
        """Identity of the condition across passes (used for hysteresis and acks)."""
        return f"{self.check}/{self.code}/{self.subject}"


class RunState(enum.Enum):
    """How a check's run ended, as seen by the runner."""

    RAN = "ran"
    NOT_APPLICABLE = "not_applicable"
    ERROR = "error"
    TIMEOUT = "timeout"
    STUCK = "stuck"
    DISABLED = "disabled"


class EventTally(NamedTuple):
    """Events one check counted among its findings for one counter (``healthd_<name>_total``), by label values.

    A check declares the counter (``healthd.checks.plugin.EventCounter``); the runner tallies
    the check's findings into this, and the metrics sink exports it as it is.
    """

    name: str
    documentation: str
    labels: tuple[str, ...]
    counts: tuple[tuple[tuple[str, ...], float], ...]


@dataclass(frozen=True)
class Device:
    """A device a check saw in a pass, for the node history's per-boot inventory.

    ``kind`` names the class of device (``"gpu"``) and ``index`` its number among
    them as its tool counts (NVML's index); ``address`` is its slot on this node (the
    PCI bus id), which stays put when the part in it is swapped; ``uuid`` and
    ``serial`` identify the part, so a replaced one is told from a repaired one.
    """

    kind: str
    index: int
    address: str
    uuid: Optional[str] = None
    serial: Optional[str] = None


class CheckResult(NamedTuple):
    """The outcome of one check in one pass: findings, the event counts of its findings, the devices it saw."""

    check: str
    state: RunState
    findings: tuple[Finding, ...]
    duration_seconds: float
    reason: str = ""
    tallies: tuple[EventTally, ...] = ()
    devices: tuple[Device, ...] = ()

    @property
    def status(self) -> Status:
        if self.state in (RunState.NOT_APPLICABLE, RunState.DISABLED):
            return Status.OK
        return worst(f.status for f in self.findings)

    @property
    def applicable(self) -> bool:
        return self.state not in (RunState.NOT_APPLICABLE, RunState.DISABLED)


class PassResult(NamedTuple):
    """Every check's result for one pass, with when it started (epoch seconds).

    ``renames`` are the finding keys that moved from one check to another
    (``CheckSpec.adopts``), as (old key prefix, new key prefix): ``current_key``
    turns a key saved before the move into the one its finding has now.
    """

    node: str
    started_at: float
    duration_seconds: float
    results: tuple[CheckResult, ...]
    renames: tuple[tuple[str, str], ...] = ()

    def current_key(self, key: str) -> str:
        """``key`` as this pass's findings spell it: a key of an adopted finding gets its new check's name."""
        for old, new in self.renames:
            if key.startswith(old):
                return new + key[len(old) :]
        return key

    @property
    def status(self) -> Status:
        return worst(r.status for r in self.results)

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for r in self.results for f in r.findings)

    @property
    def devices(self) -> tuple[Device, ...]:
        return tuple(d for r in self.results for d in r.devices)
