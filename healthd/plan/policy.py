"""The policy: a pure function from a pass, remembered state and the node's Slurm state to one decision.

No I/O happens here. The findings that call for the strongest action decide (see
docs/policy.md): CRITICAL takes the node out now, WARNING drains it after its
jobs, UNKNOWN only reports unless ``[policy].unknown_action = "drain"``, and a
clean pass resumes a node that healthd itself took out. Hysteresis is per check:
a check acts once it has failed ``fail_passes`` passes in a row, and the node is
resumed after ``clean_passes`` clean passes of the whole node. The ownership
rules (never touch a node with someone else's reason, or one with a reboot
pending) are applied against the node state read this pass.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Optional

from healthd.model import Finding, PassResult, RunState, Status, Tier
from healthd.plan.acks import FindingRef, adopted, widest
from healthd.plan.ackview import UNACKNOWLEDGEABLE
from healthd.plan.breaker import BreakerHold, next_hold, over_limit
from healthd.plan.wave import ProvisionalRaise
from healthd.slurm.nodestate import NodeInfo, PartitionView
from healthd.slurm.reasons import ACTING_ORDER, Reasons, acting_key, reason_head

if TYPE_CHECKING:
    from healthd.config.models import EscalationSettings, PolicySettings

# Retry delays for an action slurmctld did not accept: 10 s doubling up to 5 min.
BACKOFF_BASE = 10.0
BACKOFF_MAX = 300.0
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
# The finding detail naming what fixes the fault short of a person (set by the checks).
REMEDY = "remedy"


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


class Coverage(NamedTuple):
    """Which checks a pass ran, for the rules that keep an active check's drain (docs/active.md).

    ``tier``: the pass's (``healthd.model.Tier``). ``active``: the enabled active checks,
    which only a pass of ``Tier.ACTIVE`` or ``Tier.ALL`` runs. ``active_running``: another
    process holds ``state_dir/active.lock``, so a diagnostic is running on the node now.
    """

    tier: Tier = Tier.ORDINARY
    active: frozenset[str] = frozenset()
    active_running: bool = False


ORDINARY_PASS = Coverage()


class PassFacts(NamedTuple):
    """What ``decide`` knows of the node this pass: what it found, remembers and read.

    ``result``: the pass (acknowledgements applied). ``state``: the policy's memory.
    ``node``: the node as Slurm answered, None when Slurm could not be asked (unreachable,
    disabled) or was not yet. ``partial``: only some checks ran (``--only``). ``repeats``
    maps a finding's key to its unit and how often its code was raised there (from the
    node's history), for escalation. ``boot_id``: this boot's ("" when unreadable), to tell
    when a reboot asked for has happened. ``coverage``: which checks ran, of the active ones.
    """

    result: PassResult
    state: PolicyState
    node: Optional[NodeInfo]
    partial: bool = False
    repeats: Mapping[str, tuple[str, int]] = MappingProxyType({})
    boot_id: str = ""
    coverage: Coverage = ORDINARY_PASS


class PolicyRules(NamedTuple):
    """What the config says about acting on a node, made once per pass.

    ``settings``: ``[policy]``. ``reasons``: healthd's reasons under ``[slurm] reason_prefix``, with
    no default: rules made without the configured prefix would not know healthd's own drains.
    ``escalation``: ``[escalation]`` (None: no escalation to repair). ``reboot`` and ``reset``:
    ``[remediation]``. ``reconcile_interval``: ``[slurm]``'s, the most a pass goes without
    reading the node (``needs_node``). ``decide`` reads the first four; the plan all of them.
    """

    settings: PolicySettings
    reasons: Reasons
    escalation: Optional[EscalationSettings] = None
    reboot: bool = False
    reset: bool = False
    reconcile_interval: float = 3600.0


def _acting(finding: Finding) -> bool:
    return finding.status is not Status.OK and finding.check != OWN_CHECK


def _severity(result: PassResult) -> Status:
    """The status the policy acts on: the first of CRITICAL, WARNING, UNKNOWN present.

    ``Status.rank`` puts UNKNOWN above WARNING for reporting; for acting, a WARNING
    seen on one check must still drain the node when another check was UNKNOWN.
    healthd's own findings are left out.
    """
    present = {f.status for f in result.findings if f.check != OWN_CHECK}
    present |= {r.status for r in result.results if r.check != OWN_CHECK}
    for status in ACTING_ORDER:
        if status in present:
            return status
    return Status.OK


def ran_checks(result: PassResult) -> frozenset[str]:
    """Checks that ran to the end this pass (a not-applicable check ran and found nothing to check)."""
    return frozenset(r.check for r in result.results if r.state in (RunState.RAN, RunState.NOT_APPLICABLE))


def _streaks(state: PolicyState, result: PassResult, partial: bool, coverage: Coverage) -> PolicyState:
    """Count consecutive failing/UNKNOWN passes per check and clean passes of the node.

    A check that reports no fault resets its fail streak only if it ran to the end:
    a timeout says nothing about the fault it saw last pass. A check absent from the
    pass (``--only``) keeps its counts; a full pass forgets checks that no longer exist,
    but not the enabled active checks, which only their own passes run: an ordinary pass
    between two failing diagnostics must not wipe their count (``fail_passes`` >= 2).
    """
    fail = dict(state.fail_streaks)
    unknown = dict(state.unknown_streaks)
    if not partial:
        kept = {r.check for r in result.results} | coverage.active
        fail = {c: n for c, n in fail.items() if c in kept}
        unknown = {c: n for c, n in unknown.items() if c in kept}
    for check in result.results:
        if check.check == OWN_CHECK:
            continue
        statuses = {f.status for f in check.findings}
        if statuses & {Status.CRITICAL, Status.WARNING}:
            fail[check.check] = fail.get(check.check, 0) + 1
        elif check.state is RunState.RAN or not check.applicable:
            fail.pop(check.check, None)
        if Status.UNKNOWN in statuses:
            unknown[check.check] = unknown.get(check.check, 0) + 1
        else:
            unknown.pop(check.check, None)
    clean = state.clean_streak + 1 if _severity(result) is Status.OK else 0
    return state._replace(fail_streaks=fail, unknown_streaks=unknown, clean_streak=clean)


def _action_for(status: Status) -> Action:
    return Action.TAKE_OUT_NOW if status is Status.CRITICAL else Action.DRAIN_AFTER_JOBS


def _causes(findings: list[Finding]) -> tuple[FindingRef, ...]:
    """What an administrator's resume acknowledges: never a finding the runner made up."""
    return tuple(sorted({FindingRef.of(f) for f in findings if f.code not in UNACKNOWLEDGEABLE}))


def _wanted(result: PassResult, state: PolicyState, rules: PolicyRules) -> Decision:
    """The action the pass calls for, before looking at the node.

    Findings whose check has failed enough passes in a row are *ready*; the ready
    finding first in acting order decides the action and names the reason.
    """
    if _severity(result) is Status.OK:
        return Decision(Action.RESUME, Action.RESUME, "", "all checks pass")
    settings = rules.settings
    ready: list[Finding] = []
    not_ready: list[tuple[Finding, int, int]] = []
    for finding in filter(_acting, result.findings):
        if finding.status is Status.UNKNOWN:
            if settings.unknown_action == "report":
                continue
            streak, needed = state.unknown_streaks.get(finding.check, 0), settings.unknown_passes
        else:
            streak, needed = state.fail_streaks.get(finding.check, 0), settings.fail_passes
        if streak >= needed:
            ready.append(finding)
        else:
            not_ready.append((finding, streak, needed))
    if not ready and not not_ready:
        return Decision(Action.NONE, Action.NONE, "", "UNKNOWN results are only reported ([policy].unknown_action)")
    wait_text = ""
    wait_action = Action.NONE
    if not_ready:
        first, streak, needed = min(not_ready, key=lambda item: acting_key(item[0]))
        wait_text = f"{first.status.name} from {first.check} for {streak} of {needed} consecutive passes needed"
        wait_action = _action_for(first.status)
    if not ready:
        found = [item[0] for item in not_ready]
        return Decision(Action.HOLD, wait_action, rules.reasons.reason(found), wait_text, _causes(found))
    top = min(ready, key=acting_key)
    want = _action_for(top.status)
    explanation = f"{top.status.name} from {top.check}"
    if wait_text and wait_action is not want:
        explanation += f"; {wait_text}"
    return Decision(want, want, rules.reasons.reason(ready), explanation, _causes(ready))


# A lemon drain (``healthd fleet lemons --drain``) is decided from the fleet's records, which one
# node's clean pass does not refute: the node agent neither lifts nor rewrites it (docs/fleet.md).
_LEMON_HELD = "out as a lemon node (healthd fleet lemons): an administrator resumes it"
# A REPAIR drain is lifted only once ``healthd ack --repaired`` ended its repair (docs/history.md).
# With its record gone (policy.json lost, its ``repair`` key damaged), nothing says the hardware
# work was done: the drain stays, as a lemon's does, until an administrator resumes the node.
_REPAIR_HELD = "out for repair, with no repair record left in policy.json: an administrator resumes it"


def _unrecorded_repair(node: NodeInfo, state: PolicyState, reasons: Reasons) -> bool:
    """The node is out with healthd's REPAIR reason, but no repair is recorded nor was one ended."""
    return node.out and reasons.is_repair(node.reason) and state.repair is None and not state.repair_ended


def _resume_against_node(decision: Decision, state: PolicyState, facts: PassFacts, rules: PolicyRules) -> Decision:
    """A RESUME ``decision`` given the node as read: only a node healthd itself took out, once proven clean.

    ``state`` is this pass's (``facts.state`` moved on by the pass).
    """
    nothing = decision._replace(action=Action.NONE, intended=Action.NONE)
    node, reasons, settings = facts.node, rules.reasons, rules.settings
    if node is None and not state.took_out:
        return nothing
    if node is not None and not (node.out and reasons.owns(node.reason)):
        return nothing._replace(explanation="all checks pass")
    if node is not None and reasons.is_lemon(node.reason):
        return nothing._replace(explanation=_LEMON_HELD)
    if node is not None and _unrecorded_repair(node, state, reasons):
        return nothing._replace(explanation=_REPAIR_HELD)
    # A pass proves nothing about a check that did not run (--only, a timeout).
    unverified = sorted({ref.check for ref in state.took_out} - ran_checks(facts.result))
    if unverified:
        checks = ", ".join(unverified)
        return nothing._replace(explanation=f"not resuming: {checks}, which took the node out, did not run this pass")
    if facts.partial and not state.took_out:
        why = "not resuming on a partial pass (--only): which checks took the node out is not known"
        return nothing._replace(explanation=why)
    held = _active_hold(state, facts.coverage)
    if held:
        return decision._replace(action=Action.HOLD, explanation=held)
    if node is None:
        return decision
    hands_off = _hands_off(node)
    if hands_off:
        return decision._replace(action=Action.NONE, explanation=hands_off)
    if state.clean_streak < settings.clean_passes:
        return decision._replace(
            action=Action.HOLD,
            explanation=f"clean for {state.clean_streak} of {settings.clean_passes} passes needed to resume",
        )
    return decision._replace(explanation=f"all checks pass; resuming node out for {node.reason!r}")


def _active_hold(state: PolicyState, coverage: Coverage) -> str:
    """Why the active checks keep this pass from resuming the node, or "" (docs/active.md, "Resuming").

    A pass of the active checks alone cannot tell the other checks are clean. A pass
    while a diagnostic runs would put the node in service beside it. And when which
    checks took the node out is not known (the policy state was lost), an active check
    may have: only a pass that ran every check may then resume the node.
    """
    if coverage.tier is Tier.ACTIVE:
        return "not resuming on a pass of the active checks alone: the daemon's pass of every check resumes"
    if coverage.active_running:
        return "not resuming: active checks are running on this node (active.lock is held)"
    if coverage.active and coverage.tier is not Tier.ALL and not state.took_out:
        checks = ", ".join(sorted(coverage.active))
        return (
            "not resuming: which checks took the node out is not known (policy state lost), "
            f"and the active checks ({checks}) did not run this pass"
        )
    return ""


def _hands_off(node: NodeInfo) -> str:
    """Why no write at all may be sent for ``node`` now, or "" (docs/slurm.md, "Reboots, power saving ...").

    A pending reboot (anyone's): a DOWN would kill the jobs it waits for, a RESUME
    cancel it. Power saving: the machine is off or on its way, what was seen is not
    about a running node, and slurmctld answers a reboot of it with success and does
    nothing. A maintenance reservation: the administrator's window, where burn-in
    tests raise faults on purpose.
    """
    if node.reboot_pending:
        return "reboot pending: node left alone"
    if node.power_saving:
        return f"power saving ({node.state_text}): node left alone"
    if node.maintenance:
        return "in a maintenance reservation: the administrator's, node left alone"
    return ""


def _booted(request: RebootRequest, boot_id: str, node: Optional[NodeInfo]) -> bool:
    """Whether the machine booted since ``request``: the boot id changed, else Slurm's boot time moved past it."""
    if boot_id and request.boot_id:
        return boot_id != request.boot_id
    return node is not None and node.boot_time is not None and node.boot_time > request.at


def _remediate(
    decision: Decision, state: PolicyState, facts: PassFacts, rules: PolicyRules
) -> tuple[Decision, PolicyState]:
    """A reboot in place of a take-out, and the node kept out until one has happened (docs/remediation.md).

    A take-out whose top finding declares ``remedy = "reboot"`` becomes a REBOOT
    when ``[remediation] reboot`` is on, once per finding: if the same finding is
    there after the reboot it is an ordinary take-out. Once asked for, the reboot
    stands until the machine has booted, however long its jobs take; a pass in
    between resumes nothing. If the reboot did not happen (no reboot pending in
    Slurm, same boot) it is not asked for again: the node stays out for a person.
    """
    result, node = facts.result, facts.node
    if _severity(result) is Status.OK:
        state = state._replace(rebooted="", reset_tried=())
    request = state.reboot
    if request is not None and _booted(request, facts.boot_id, node):
        state = state._replace(reboot=None, rebooted=request.cause)
        request = None
    unsent = state.pending is not None and state.pending.action is Action.REBOOT
    if request is not None and unsent and not (node is not None and node.reboot_pending):
        # A pass cut short after its DRAIN: the reboot may never have reached Slurm.
        request = None
    if request is not None:
        # The node is judged in its new boot: clean passes before the reboot do not count.
        state = state._replace(clean_streak=0)
        waiting_why = f"waiting for the reboot asked for at {request.at:.0f} ({request.reason})"
        if node is not None and not node.reboot_pending and not node.power_saving:
            waiting_why = f"the reboot asked for at {request.at:.0f} did not happen: left out for a person"
        if decision.action in TAKING_OUT:
            return decision._replace(action=Action.NONE, explanation=waiting_why), state
        return Decision(Action.NONE, Action.NONE, "", waiting_why, decision.causes), state
    if not rules.reboot or decision.action not in TAKING_OUT:
        return decision, state
    top = top_cause(result, decision)
    if top is None or top.details.get(REMEDY) != "reboot" or top.key == state.rebooted:
        return decision, state
    causes = set(decision.causes)
    behind = [f for f in result.findings if FindingRef.of(f) in causes]
    why = f"{top.status.name} from {top.check}: its remedy is a reboot, after the node's jobs end"
    return Decision(Action.REBOOT, Action.REBOOT, rules.reasons.reboot(behind), why, decision.causes), state


class GpuReset(NamedTuple):
    """A GPU to reset: the finding that asks for it and the GPU's PCI bus id."""

    key: str
    pci: str


def reset_target(
    result: PassResult, decision: Decision, state: PolicyState, node: Optional[NodeInfo], reasons: Reasons
) -> Optional[GpuReset]:
    """The GPU to reset this pass, if any (docs/remediation.md, "GPU reset").

    Only on a node healthd drained that runs no job, with nothing else to send this
    pass, no reboot asked for and no repair: a finding with ``remedy = "reset"`` and
    its ``pci``, once per finding until a clean pass. ``healthd.cycle.gpureset`` checks the
    node and the GPU's processes again just before the reset.
    """
    if node is None or decision.action is not Action.NONE or state.reboot is not None or state.repair is not None:
        return None
    if not (node.drained and reasons.owns(node.reason)) or node.busy or _hands_off(node):
        return None
    wanted = [
        f
        for f in result.findings
        if f.status in (Status.CRITICAL, Status.WARNING)
        and f.check != OWN_CHECK
        and f.details.get(REMEDY) == "reset"
        and isinstance(f.details.get("pci"), str)
        and f.key not in state.reset_tried
    ]
    if not wanted:
        return None
    top = min(wanted, key=acting_key)
    return GpuReset(top.key, str(top.details["pci"]))


def top_cause(result: PassResult, decision: Decision) -> Optional[Finding]:
    """The finding behind ``decision`` that names its reason (first in acting order), if any."""
    causes = set(decision.causes)
    return min((f for f in result.findings if FindingRef.of(f) in causes), key=acting_key, default=None)


def _others(node: NodeInfo, reasons: Reasons) -> bool:
    """The node carries someone else's reason: healthd never overwrites it."""
    return bool(node.reason) and not reasons.owns(node.reason)


def skips_breaker(node: NodeInfo, reasons: Reasons) -> bool:
    """Whether a take-out of ``node`` as read would be decided without the circuit breaker.

    A node with someone else's reason, or in a state healthd leaves alone (``_hands_off``),
    is not taken out; one out with healthd's reason already holds its place. Remembered
    (``PolicyState.skips_breaker``) so the next faulty pass reads the node alone
    (docs/scale.md, "A node out by another's hand").
    """
    return bool(_hands_off(node)) or _others(node, reasons) or (node.drained and reasons.owns(node.reason))


def _against_node(decision: Decision, state: PolicyState, node: Optional[NodeInfo], reasons: Reasons) -> Decision:
    """Apply the ownership rules to a take-out given what Slurm says about the node."""
    if decision.action not in TAKING_OUT or node is None:
        return decision
    hands_off = _hands_off(node)
    if hands_off:
        return decision._replace(action=Action.NONE, explanation=hands_off)
    if _others(node, reasons):
        who = f" by {node.reason_user}" if node.reason_user else ""
        return decision._replace(
            action=Action.NONE,
            explanation=f"node is {node.state_text} with reason {node.reason!r}{who}: not healthd's, left alone",
        )
    # Rewriting a lemon's or an unrecorded repair's reason would let a later clean pass lift it.
    kept = _LEMON_HELD if reasons.is_lemon(node.reason) else ""
    kept = kept or (_REPAIR_HELD if _unrecorded_repair(node, state, reasons) else "")
    if node.drained and kept and not (decision.action is Action.TAKE_OUT_NOW and node.busy):
        return decision._replace(action=Action.NONE, explanation=kept)
    if node.drained and reasons.owns(node.reason):
        if decision.action is Action.REBOOT:
            return decision  # drained already (its reason updated if need be), the reboot still to ask for
        if decision.action is Action.TAKE_OUT_NOW and node.busy:
            return decision._replace(explanation="drained by healthd but jobs still run: taking out now")
        if reason_head(node.reason) != reason_head(decision.reason):
            return decision._replace(action=Action.DRAIN_AFTER_JOBS, explanation="already out: updating the reason")
        return decision._replace(action=Action.NONE, explanation=f"already out ({node.state_text})")
    return decision


def _escalate(
    decision: Decision, state: PolicyState, facts: PassFacts, rules: PolicyRules
) -> tuple[Decision, PolicyState]:
    """Repeat failures send the node to repair, and a node in repair stays out (docs/history.md, "Escalation").

    A finding behind this take-out whose code was raised on its unit (a GPU by UUID
    or serial, an IB port, a DIMM) at least the configured number of times in the
    window makes the node a lemon: it goes out with a ``REPAIR`` reason that no
    clean pass lifts, so it stops the drain/resume ping-pong. Only the findings in
    ``repeats`` can: the caller puts there the codes their check declares a hardware
    unit's fault, counting only this node's own raises (docs/escalation.md).
    """
    result, repeats, escalation = facts.result, facts.repeats, rules.escalation
    repair = state.repair
    if repair is None and escalation is not None and decision.action in TAKING_OUT:
        causes = set(decision.causes)
        hits: list[tuple[Finding, str, int]] = []
        for finding in result.findings:
            if FindingRef.of(finding) not in causes or finding.key not in repeats:
                continue
            unit, count = repeats[finding.key]
            needed = escalation.overrides.get(finding.code, escalation.repeats)
            if needed > 0 and count >= needed:
                hits.append((finding, unit, count))
        if hits:
            finding, unit, count = min(hits, key=lambda hit: acting_key(hit[0]))
            repair = Repair(finding.code, finding.subject, unit, count, finding.status.name, result.started_at)
            state = advance(state, PolicyEvent.ESCALATED, repair)
    if repair is None:
        return decision, state
    action = Action.TAKE_OUT_NOW if repair.severity == Status.CRITICAL.name else Action.DRAIN_AFTER_JOBS
    why = (
        f"in repair: {repair.code} raised {repair.count} times on {repair.unit}; "
        f"`healthd ack --repaired {repair.subject}` returns the node after the hardware work"
    )
    reason = rules.reasons.repair(repair.code, repair.subject, repair.count)
    return Decision(action, action, reason, why, decision.causes), state


def decide(facts: PassFacts, rules: PolicyRules) -> tuple[Decision, PolicyState]:
    """One decision for this pass and the policy state to remember.

    ``facts.node`` is None when Slurm could not be asked (unreachable, disabled): the
    decision is then what the pass calls for, to be kept pending and checked
    against the node's state when it can be read again. A remembered pending
    take-out stands in for a failing pass that calls for nothing more specific,
    while one of its causes may still be there (``_may_stand``).
    The pending action is kept while the decision is still that action (the
    caller clears it once Slurm accepts it) and dropped when it no longer is.
    """
    result, state, node, reasons = facts.result, facts.state, facts.node, rules.reasons
    severity = _severity(result)
    new_state = _streaks(state, result, facts.partial, facts.coverage)
    decision = _wanted(result, new_state, rules)
    pending = state.pending
    if (
        pending is not None
        and pending.action in TAKING_OUT
        and decision.action in (Action.NONE, Action.HOLD)
        and severity is not Status.OK
        and _may_stand(pending.causes, result)
    ):
        decision = Decision(
            pending.action, pending.action, pending.reason, f"retrying pending {pending.action.value}", pending.causes
        )
    decision, new_state = _escalate(decision, new_state, facts, rules)
    if new_state.repair is None:  # a node in repair is never rebooted (docs/history.md, "Escalation")
        decision, new_state = _remediate(decision, new_state, facts, rules)
    if decision.action is Action.RESUME:
        decision = _resume_against_node(decision, new_state, facts, rules)
    else:
        decision = _against_node(decision, new_state, node, reasons)
    if pending is not None and decision.action is not pending.action:
        new_state = new_state._replace(pending=None)
    if node is not None and node.drained and reasons.owns(node.reason) and decision.causes:
        new_state = new_state._replace(took_out=widest([*new_state.took_out, *decision.causes]))
    return decision, new_state


def _may_stand(causes: tuple[FindingRef, ...], result: PassResult) -> bool:
    """Whether any of a pending take-out's ``causes`` may still be there, as far as this pass can tell.

    It may while its finding is still reported as a fault, or while its check did not run to the
    end or could not observe (UNKNOWN): such a pass says nothing either way. Once every cause's
    check ran and no longer reports it, the take-out is stale: an unrelated UNKNOWN or a WARNING
    still inside its hysteresis must not carry it out (a DOWN kills the node's jobs). A check
    the config now disables is the operator's word that its findings no longer count: its
    causes are gone too (a misfiring check switched off while Slurm was unreachable).
    """
    ran = ran_checks(result)
    disabled = {r.check for r in result.results if r.state is RunState.DISABLED}
    faults = {f.key for f in result.findings if _acting(f)}
    unsure = {r.check for r in result.results if r.status is Status.UNKNOWN}
    # Under the keys of this pass: another check may have adopted a finding since (acks.adopted).
    current = [adopted(ref, result) for ref in causes if ref.check not in disabled]
    return any(ref.key in faults or ref.check not in ran or ref.check in unsure for ref in current)


def needs_node(
    result: PassResult, state: PolicyState, settings: PolicySettings, now: float, reconcile_interval: float
) -> bool:
    """Whether this pass must read the node's Slurm state.

    A pass that can only end in "nothing to do" skips the read (zero RPCs): it is
    clean or only-reporting UNKNOWN, healthd has no node out and nothing pending.
    Every ``reconcile_interval`` seconds the node is read anyway, so a drain whose
    state file was lost is still found and resumed.
    """
    severity = _severity(result)
    if severity in (Status.CRITICAL, Status.WARNING):
        return True
    if severity is Status.UNKNOWN and settings.unknown_action == "drain":
        return True
    return bool(state.took_out) or state.pending is not None or now - state.last_read >= reconcile_interval


def _in_service(node: NodeInfo) -> bool:
    return not node.out and not node.reboot_pending


def settle_own_resume(state: PolicyState, node: NodeInfo, reasons: Reasons) -> PolicyState:
    """Learn from the node as read whether a RESUME healthd sent without an answer took effect (``resume_sent``).

    In service: it did, so healthd has nothing out and no one acknowledged anything.
    Still out with healthd's reason: it did not; a later resume is someone else's.
    Out with another's reason: nothing to learn yet, the mark stays.
    """
    if not state.resume_sent:
        return state
    if _in_service(node):
        return advance(state, PolicyEvent.RESUME_SETTLED)._replace(took_out=())
    if node.out and reasons.owns(node.reason):
        return advance(state, PolicyEvent.RESUME_SETTLED)
    return state


def acknowledged_by_resume(state: PolicyState, node: NodeInfo) -> tuple[FindingRef, ...]:
    """The findings an administrator acknowledged by resuming a node healthd took out.

    healthd remembers the findings behind every drain it applied; if the node is
    now in service (no DRAIN or FAIL, not DOWN) someone else put it back, unless
    healthd itself may have (``resume_sent``: ``settle_own_resume`` decides first).
    Taking its own resume for an administrator's would report a real fault as OK.
    """
    if state.took_out and not state.resume_sent and _in_service(node):
        return state.took_out
    return ()


def circuit_breaker(
    decision: Decision,
    node: str,
    views: Mapping[str, PartitionView],
    settings: PolicySettings,
    now: Optional[float] = None,
) -> tuple[Decision, str]:
    """Hold back a take-out that would put too much of a partition out at once (``breaker.over_limit``).

    A fault that hits many nodes at once is more likely a shared cause (a file
    server, a bad config push) than many broken nodes. Returns the decision and why
    it held.
    """
    if decision.action not in TAKING_OUT:
        return decision, ""
    why = over_limit(node, views, settings, now)
    if why:
        return decision._replace(action=Action.HOLD, explanation=why), why
    return decision, ""


def waiting(next_time: float, now: float, longest: float) -> bool:
    """Whether ``now`` is still before ``next_time``, a retry time set at most ``longest`` ahead.

    A retry time further ahead than that means the clock stepped back: do not wait.
    """
    return 0 < next_time - now <= longest


def breaker_held(state: PolicyState, why: str, now: float, node: str) -> PolicyState:
    """State after the circuit breaker held the node back: when to read its partitions again.

    A repair is dropped too. A node in repair is out already, so the breaker never
    holds it: the repair was decided by a take-out that never happened (this pass's, or
    one left pending or unconfirmed), and kept it would turn every later pass, a clean
    one included, into a take-out "in repair" (docs/escalation.md). The raise behind it
    is not counted either (``plan.held_raises``).
    """
    return advance(state, PolicyEvent.BREAKER_HELD)._replace(held=next_hold(state.held, why, now, node), pending=None)


def after_apply(state: PolicyState, decision: Decision) -> PolicyState:
    """State once Slurm accepted ``decision``."""
    if decision.action in TAKING_OUT:
        took_out = widest([*state.took_out, *decision.causes])
        return state._replace(pending=None, held=None, took_out=took_out)
    if decision.action is Action.RESUME:
        # Slurm answered: the resume's outcome is known, and a repair drain ended is lifted. The
        # take-out is over, and its raises stand as counted (healthd.plan.wave).
        return advance(state, PolicyEvent.RESUMED)._replace(pending=None, held=None, took_out=(), provisional=())
    return state


def after_failure(state: PolicyState, decision: Decision, error: str, now: float, attempted: bool) -> PolicyState:
    """State when ``decision`` could not be applied: keep it pending with a backoff.

    ``attempted`` is False when this pass did not even try (still backing off), so
    the attempt count and retry time stay as they were.
    """
    previous = state.pending
    same = previous is not None and previous.action is decision.action
    attempts = (previous.attempts if same and previous else 0) + (1 if attempted else 0)
    if attempted or previous is None or not same:
        next_try = now + min(BACKOFF_BASE * 2 ** max(attempts - 1, 0), BACKOFF_MAX)
    else:
        next_try = previous.next_try
    return state._replace(
        pending=Pending(
            action=decision.action,
            reason=decision.reason,
            causes=decision.causes,
            attempts=attempts,
            next_try=next_try,
            since=previous.since if same and previous else now,
            error=error,
        ),
    )
