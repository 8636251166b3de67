"""The policy's memory: ``PolicyState``, its records, its two state machines and ``policy.json``'s (de)serialisation.

Pure values and the one function that moves the phases (``advance``, by the transition
tables; docs/policy.md, "The policy state machine"). Also the vocabulary every part of the
policy shares: ``Action``, ``Decision`` and the records a decision leaves behind
(``Pending``, ``Repair``, ``RebootRequest``, ``BreakerHold``, ``ProvisionalRaise``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping, NamedTuple, Optional

from healthd.plan.acks import FindingRef

# healthd's own pseudo-check (state directory problems, a pass that raised): its findings
# say nothing about the node's hardware, so they are reported but never acted on.
OWN_CHECK = "healthd"


class Action(enum.Enum):
    NONE = "none"
    DRAIN_AFTER_JOBS = "drain_after_jobs"
    TAKE_OUT_NOW = "take_out_now"
    RESUME = "resume"
    HOLD = "hold"
    # Drain, then have Slurm reboot the node once its jobs end (docs/remediation.md).
    REBOOT = "reboot"


ACTING = (Action.DRAIN_AFTER_JOBS, Action.TAKE_OUT_NOW, Action.RESUME, Action.REBOOT)


TAKING_OUT = (Action.DRAIN_AFTER_JOBS, Action.TAKE_OUT_NOW, Action.REBOOT)


class Decision(NamedTuple):
    """What to do with the node. ``intended`` is what a HOLD holds back (else equals ``action``)."""

    action: Action
    intended: Action
    reason: str
    explanation: str
    causes: tuple[FindingRef, ...] = ()


class Pending(NamedTuple):
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
class Repair:
    """The node is out for hardware work: ``code`` was raised ``count`` times on ``unit`` (docs/history.md).

    It stays out until ``healthd ack --repaired`` names the subject or unit, or an
    administrator resumes it; healthd never resumes it on its own.
    """

    code: str
    subject: str
    unit: str
    count: int
    severity: str
    since: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "subject": self.subject,
            "unit": self.unit,
            "count": self.count,
            "severity": self.severity,
            "since": self.since,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Repair:
        return cls(
            code=str(data["code"]),
            subject=str(data["subject"]),
            unit=str(data.get("unit", data["subject"])),
            count=int(data.get("count", 0)),
            severity=str(data.get("severity", "CRITICAL")),
            since=float(data.get("since", 0.0)),
        )

    def names(self, subject: str) -> bool:
        """Whether ``subject`` (as given to ``healthd ack --repaired``) is this repair's subject or unit."""
        return subject in (self.subject, self.unit)


class RebootRequest(NamedTuple):
    """A reboot healthd asked Slurm for: the boot it is to end, when, the reason, the finding behind it."""

    boot_id: str
    at: float
    reason: str
    cause: str

    def to_dict(self) -> dict[str, Any]:
        return {"boot_id": self.boot_id, "at": self.at, "reason": self.reason, "cause": self.cause}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RebootRequest:
        return cls(str(data["boot_id"]), float(data["at"]), str(data.get("reason", "")), str(data["cause"]))


class WritePhase(enum.Enum):
    """Which of healthd's writes to Slurm has an outcome the next pass must still learn.

    See docs/policy.md, "The policy state machine". Stored in ``policy.json`` as the two
    flags it has always had (``unconfirmed``, ``resume_sent``), so every file reads the same.
    """

    # Every write healthd sent has a known outcome.
    SETTLED = "settled"
    # A drain the circuit breaker must confirm was sent, and its confirmation did not finish:
    # the next pass reads the partitions with the node and confirms or undoes it.
    DRAIN_UNCONFIRMED = "drain_unconfirmed"
    # A RESUME was sent whose answer was lost: a node found in service is healthd's own doing.
    RESUME_SENT = "resume_sent"
    # Both: the breaker's undo (a RESUME) of a drain that lost its place, or a resume over a
    # drain not yet confirmed, with no answer. The next pass settles the resume, then confirms.
    UNDO_SENT = "undo_sent"


class RepairPhase(enum.Enum):
    """Where the node is in a repair (docs/history.md, "Escalation"); ``PolicyState.repair`` describes IN_REPAIR."""

    NONE = "none"
    IN_REPAIR = "in_repair"
    # ``healthd ack --repaired`` ended the repair: the node's REPAIR drain is healthd's to lift.
    REPAIR_ENDED = "repair_ended"


class PolicyEvent(enum.Enum):
    """What moves the policy's phases: a write about to be sent, an answer, a read, a command."""

    # Saved before the first write (Plan.interrupted), and what a failed write leaves.
    CONFIRMED_DRAIN_SENDING = "confirmed drain sending"
    DRAIN_SENDING = "drain sending"
    CONFIRM_FAILED = "confirm failed"
    RESUME_UNANSWERED = "resume unanswered"
    UNDO_UNANSWERED = "undo unanswered"
    # Answers and reads.
    CONFIRMED = "confirmed"
    RESUMED = "resumed"
    RESUME_SETTLED = "resume settled"
    # Repair.
    ESCALATED = "escalated"
    REPAIR_ACKED = "repair acked"
    ADMIN_RESUMED = "admin resumed"
    BREAKER_HELD = "breaker held"


class BreakerHold(NamedTuple):
    """The circuit breaker held this node back; its partitions are read again at ``next_check``.

    ``by``: the shard-mates out that held it (only in a partition counted by shards,
    healthd.plan.shard), which the re-read reads first (docs/scale.md, "Breaker shards").
    """

    why: str
    since: float
    attempts: int
    next_check: float
    by: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        held = {"why": self.why, "since": self.since, "attempts": self.attempts, "next_check": self.next_check}
        return {**held, "by": list(self.by)} if self.by else held

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BreakerHold:
        return cls(
            why=str(data.get("why", "")),
            since=float(data.get("since", 0.0)),
            attempts=int(data.get("attempts", 0)),
            next_check=float(data.get("next_check", 0.0)),
            by=_hint(data.get("by", [])),
        )


def _hint(value: Any) -> tuple[str, ...]:
    """``BreakerHold.by``: only which shard-mates to read first, so a bad value is none, not a lost hold."""
    try:
        return _names(value)
    except TypeError:
        return ()


class ProvisionalRaise(NamedTuple):
    """A raise counted toward repair by a take-out whose wave could not yet be told (``PolicyState.provisional``).

    ``key``: the finding's; ``unit`` and ``code``: what the history counts it under;
    ``since``: the take-out pass's time, from which the raise is looked for when taken back.
    """

    key: str
    unit: str
    code: str
    since: float

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProvisionalRaise:
        return cls(str(data["key"]), str(data["unit"]), str(data["code"]), float(data["since"]))


_W = WritePhase
_R = RepairPhase
# The transition tables (docs/policy.md, "The policy state machine", says why each row is there).
# An event with no row for a phase leaves that phase as it is.
WRITE_TRANSITIONS: Mapping[tuple[WritePhase, PolicyEvent], WritePhase] = MappingProxyType(
    {
        (_W.SETTLED, PolicyEvent.CONFIRMED_DRAIN_SENDING): _W.DRAIN_UNCONFIRMED,
        (_W.RESUME_SENT, PolicyEvent.CONFIRMED_DRAIN_SENDING): _W.DRAIN_UNCONFIRMED,
        (_W.UNDO_SENT, PolicyEvent.CONFIRMED_DRAIN_SENDING): _W.DRAIN_UNCONFIRMED,
        (_W.RESUME_SENT, PolicyEvent.DRAIN_SENDING): _W.SETTLED,
        (_W.UNDO_SENT, PolicyEvent.DRAIN_SENDING): _W.DRAIN_UNCONFIRMED,
        (_W.SETTLED, PolicyEvent.CONFIRM_FAILED): _W.DRAIN_UNCONFIRMED,
        (_W.RESUME_SENT, PolicyEvent.CONFIRM_FAILED): _W.UNDO_SENT,
        (_W.SETTLED, PolicyEvent.RESUME_UNANSWERED): _W.RESUME_SENT,
        (_W.DRAIN_UNCONFIRMED, PolicyEvent.RESUME_UNANSWERED): _W.UNDO_SENT,
        (_W.SETTLED, PolicyEvent.UNDO_UNANSWERED): _W.UNDO_SENT,
        (_W.DRAIN_UNCONFIRMED, PolicyEvent.UNDO_UNANSWERED): _W.UNDO_SENT,
        (_W.RESUME_SENT, PolicyEvent.UNDO_UNANSWERED): _W.UNDO_SENT,
        (_W.DRAIN_UNCONFIRMED, PolicyEvent.CONFIRMED): _W.SETTLED,
        (_W.UNDO_SENT, PolicyEvent.CONFIRMED): _W.RESUME_SENT,
        (_W.DRAIN_UNCONFIRMED, PolicyEvent.RESUMED): _W.SETTLED,
        (_W.RESUME_SENT, PolicyEvent.RESUMED): _W.SETTLED,
        (_W.UNDO_SENT, PolicyEvent.RESUMED): _W.SETTLED,
        (_W.RESUME_SENT, PolicyEvent.RESUME_SETTLED): _W.SETTLED,
        (_W.UNDO_SENT, PolicyEvent.RESUME_SETTLED): _W.DRAIN_UNCONFIRMED,
    }
)
REPAIR_TRANSITIONS: Mapping[tuple[RepairPhase, PolicyEvent], RepairPhase] = MappingProxyType(
    {
        (_R.NONE, PolicyEvent.ESCALATED): _R.IN_REPAIR,
        (_R.REPAIR_ENDED, PolicyEvent.ESCALATED): _R.IN_REPAIR,
        (_R.IN_REPAIR, PolicyEvent.REPAIR_ACKED): _R.REPAIR_ENDED,
        (_R.IN_REPAIR, PolicyEvent.ADMIN_RESUMED): _R.NONE,
        (_R.REPAIR_ENDED, PolicyEvent.ADMIN_RESUMED): _R.NONE,
        (_R.REPAIR_ENDED, PolicyEvent.RESUMED): _R.NONE,
        (_R.IN_REPAIR, PolicyEvent.BREAKER_HELD): _R.NONE,
    }
)


class Phases(NamedTuple):
    """The node's place in both machines: its writes in flight and its repair."""

    write: WritePhase = WritePhase.SETTLED
    repair: RepairPhase = RepairPhase.NONE


def transition(phases: Phases, event: PolicyEvent) -> Phases:
    """The phases after ``event`` (pure): each machine's row for its phase and the event, else unchanged."""
    return Phases(
        WRITE_TRANSITIONS.get((phases.write, event), phases.write),
        REPAIR_TRANSITIONS.get((phases.repair, event), phases.repair),
    )


def _streak_map(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        raise TypeError("not an object")
    return {str(check): int(count) for check, count in value.items()}


def _names(value: Any) -> tuple[str, ...]:
    # A string would otherwise become one name per letter.
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise TypeError("not a list of names")
    return tuple(value)


def _flag(value: Any) -> bool:
    # bool("false") is True: only JSON's true and false are flags.
    if not isinstance(value, bool):
        raise TypeError(f"{value!r} is not true or false")
    return value


def _finding_refs(value: Any) -> tuple[FindingRef, ...]:
    if not isinstance(value, list):
        raise TypeError("not a list")
    return tuple(FindingRef.from_dict(item) for item in value)


def _provisional(value: Any) -> tuple[ProvisionalRaise, ...]:
    if not isinstance(value, list):
        raise TypeError("not a list")
    return tuple(ProvisionalRaise.from_dict(item) for item in value)


def _optional(make: Callable[[Mapping[str, Any]], Any]) -> Callable[[Any], Any]:
    """A reader for a record that may be absent (null)."""
    return lambda value: make(value) if value else None


# How each key of the policy state file is read; a key not named here (one an older
# version wrote, such as ``partitions``) is ignored.
_READERS: Mapping[str, Callable[[Any], Any]] = {
    "fail_streaks": _streak_map,
    "unknown_streaks": _streak_map,
    "clean_streak": int,
    "took_out": _finding_refs,
    "pending": _optional(Pending.from_dict),
    "held": _optional(BreakerHold.from_dict),
    "last_read": float,
    "unconfirmed": _flag,
    "repair": _optional(Repair.from_dict),
    "reboot": _optional(RebootRequest.from_dict),
    "rebooted": str,
    "reset_tried": _names,
    "skips_breaker": _flag,
    "resume_sent": _flag,
    "repair_ended": _flag,
    "provisional": _provisional,
    "sharded": _flag,
}


class PolicyState(NamedTuple):
    """What the policy remembers between passes (state file ``policy``).

    ``fail_streaks`` and ``unknown_streaks`` count, per check, the consecutive
    passes in which it reported CRITICAL/WARNING, or UNKNOWN; ``clean_streak``
    counts consecutive passes in which the whole node was clean.
    ``unconfirmed``, ``resume_sent`` and ``repair_ended`` (with ``repair``) store the
    node's ``phases``, which only ``advance`` changes (docs/policy.md, "The policy
    state machine").
    """

    fail_streaks: Mapping[str, int] = MappingProxyType({})
    unknown_streaks: Mapping[str, int] = MappingProxyType({})
    clean_streak: int = 0
    took_out: tuple[FindingRef, ...] = ()
    pending: Optional[Pending] = None
    held: Optional[BreakerHold] = None
    last_read: float = 0.0
    unconfirmed: bool = False
    repair: Optional[Repair] = None
    reboot: Optional[RebootRequest] = None
    # The finding key a reboot was done for: if it is still there, no second reboot for it.
    rebooted: str = ""
    # Finding keys whose GPU reset was tried: one try each until a clean pass.
    reset_tried: tuple[str, ...] = ()
    # The last read found the node where a take-out skips the circuit breaker (``skips_breaker``):
    # a faulty pass then reads the node alone.
    skips_breaker: bool = False
    # healthd sent a RESUME whose outcome it did not learn (the answer was lost, the pass was
    # killed after the write): a node found in service is then healthd's own doing, not an
    # administrator's resume (``settle_own_resume``).
    resume_sent: bool = False
    # ``healthd ack --repaired`` ended the repair: the node's REPAIR drain is healthd's to lift.
    # Without it a REPAIR reason with no repair record (policy.json lost or damaged) stays.
    repair_ended: bool = False
    # Raises this node's take-out counted toward repair before its wave could be told
    # (healthd.plan.wave): a later read of its partitions may still take them back.
    provisional: tuple[ProvisionalRaise, ...] = ()
    # Whether the last breaker read found a partition of this node counted by shards (healthd.plan.shard);
    # None until one did. Only what the next faulty pass reads first depends on it, never the count.
    sharded: Optional[bool] = None

    # ``unconfirmed``, ``resume_sent`` and ``repair_ended`` are how ``phases`` is stored (the keys
    # policy.json has always had): only ``advance`` changes them, by the transition tables.
    @property
    def phases(self) -> Phases:
        """The node's phases, as the flags and the repair record say."""
        write = {
            (False, False): WritePhase.SETTLED,
            (True, False): WritePhase.DRAIN_UNCONFIRMED,
            (False, True): WritePhase.RESUME_SENT,
            (True, True): WritePhase.UNDO_SENT,
        }[(self.unconfirmed, self.resume_sent)]
        if self.repair is not None:
            return Phases(write, RepairPhase.IN_REPAIR)
        return Phases(write, RepairPhase.REPAIR_ENDED if self.repair_ended else RepairPhase.NONE)

    def to_dict(self) -> dict[str, Any]:
        return {
            "fail_streaks": dict(sorted(self.fail_streaks.items())),
            "unknown_streaks": dict(sorted(self.unknown_streaks.items())),
            "clean_streak": self.clean_streak,
            "took_out": [r.to_dict() for r in self.took_out],
            "pending": self.pending.to_dict() if self.pending else None,
            "held": self.held.to_dict() if self.held else None,
            "last_read": self.last_read,
            "unconfirmed": self.unconfirmed,
            "repair": self.repair.to_dict() if self.repair else None,
            "reboot": self.reboot.to_dict() if self.reboot else None,
            "rebooted": self.rebooted,
            "reset_tried": list(self.reset_tried),
            "skips_breaker": self.skips_breaker,
            "resume_sent": self.resume_sent,
            "repair_ended": self.repair_ended,
            # Only while there is one: a file from before provisional raises reads and writes back the same.
            **({"provisional": [r.to_dict() for r in self.provisional]} if self.provisional else {}),
            **({"sharded": self.sharded} if self.sharded is not None else {}),
        }

    @classmethod
    def read(cls, data: Any) -> tuple[PolicyState, tuple[str, ...]]:
        """Rebuild from the state file key by key, and the problems met, each naming its key.

        A malformed key is dropped alone (it takes its default) and the rest is kept:
        one bad field must not forget a take-out, a hold or a reboot in progress. Only
        a document that is not an object at all gives the empty state.
        """
        if not isinstance(data, Mapping):
            return cls(), (f"bad policy state: not an object but {type(data).__name__}; starting from empty",)
        values: dict[str, Any] = {}
        problems: list[str] = []
        for key, reader in _READERS.items():
            if key not in data:
                continue
            try:
                values[key] = reader(data[key])
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                problems.append(f"bad policy state: {key}: {type(exc).__name__}: {exc}; dropped, the rest kept")
        return cls(**values), tuple(problems)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PolicyState:
        """Rebuild from a document that must be whole; raises ValueError naming the first bad key."""
        state, problems = cls.read(data)
        if problems:
            raise ValueError(problems[0])
        return state


def advance(state: PolicyState, event: PolicyEvent, repair: Optional[Repair] = None) -> PolicyState:
    """``state`` moved by ``event`` (``transition``): the one place the phase flags change.

    A machine whose phase stays keeps its flags as they are. ``repair`` is the record
    ESCALATED puts the node in repair for; every other repair phase has none.
    """
    if (event is PolicyEvent.ESCALATED) is (repair is None):
        raise ValueError(f"{event.name}: a repair record goes with ESCALATED and with no other event")
    was = state.phases
    now = transition(was, event)
    if now.write is not was.write:
        unconfirmed = now.write in (WritePhase.DRAIN_UNCONFIRMED, WritePhase.UNDO_SENT)
        resume_sent = now.write in (WritePhase.RESUME_SENT, WritePhase.UNDO_SENT)
        state = state._replace(unconfirmed=unconfirmed, resume_sent=resume_sent)
    if now.repair is not was.repair:
        record = (repair or state.repair) if now.repair is RepairPhase.IN_REPAIR else None
        state = state._replace(repair=record, repair_ended=now.repair is RepairPhase.REPAIR_ENDED)
    return state


def waiting(next_time: float, now: float, longest: float) -> bool:
    """Whether ``now`` is still before ``next_time``, a retry time set at most ``longest`` ahead.

    A retry time further ahead than that means the clock stepped back: do not wait.
    """
    return 0 < next_time - now <= longest
