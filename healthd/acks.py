"""Acknowledged findings: what an administrator has seen and accepted, kept in state file ``acks``.

An acknowledgement comes from an administrator resuming a node healthd took out
(the findings that caused it) or from ``healthd ack``. It matches a finding by
``Finding.key`` plus ``details["event"]`` when the check sets one, so a *new*
event with the same key is not covered. An acknowledged finding is reported with
status OK and details ``acknowledged: true`` and ``acknowledged_status``; the
policy and the exit code only ever see the downgraded finding. An acknowledgement
is dropped once its check runs and no longer reports the finding, so a condition
that clears and later recurs is acted on again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Optional

from healthd.model import CheckResult, Finding, PassResult, RunState, Status
from healthd.state import StateFile

STATE_NAME = "acks"
# The check name under which the pipeline reports the policy's own findings (DRAIN_HELD).
POLICY_CHECK = "policy"
# UNKNOWN findings the runner and the pipeline make when a check (or the pass) could not
# observe: they describe healthd's view, not a fault, and recur while the cause lasts.
# Acknowledging one would report a check that keeps timing out as OK, so none ever is.
UNACKNOWLEDGEABLE = frozenset({"CHECK_TIMEOUT", "CHECK_ERROR", "CHECK_STUCK", "PLUGIN_LOAD_FAILED", "PASS_FAILED"})


@dataclass(frozen=True, order=True)
class FindingRef:
    """Identity of one finding for acknowledgement: its key and, if any, its event id."""

    key: str
    event: Optional[str] = None

    @classmethod
    def of(cls, finding: Finding) -> FindingRef:
        event = finding.details.get("event")
        return cls(finding.key, None if event is None else str(event))

    @property
    def check(self) -> str:
        return self.key.split("/", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "event": self.event}

    @classmethod
    def from_dict(cls, data: Any) -> FindingRef:
        if not isinstance(data, dict) or not isinstance(data.get("key"), str):
            raise ValueError(f"not a finding reference: {data!r}")
        event = data.get("event")
        return cls(data["key"], None if event is None else str(event))


@dataclass(frozen=True)
class Ack:
    """One acknowledgement: which finding, when (epoch seconds), and how it was given."""

    ref: FindingRef
    at: float
    by: str


def _acknowledged(finding: Finding) -> Finding:
    details = dict(finding.details)
    details["acknowledged"] = True
    details["acknowledged_status"] = finding.status.name
    return replace(finding, status=Status.OK, details=details)


def apply_acks(result: PassResult, acks: Iterable[Ack]) -> tuple[PassResult, tuple[Ack, ...]]:
    """Downgrade acknowledged findings; return the new pass and the acks still in force.

    An ack survives if its finding is still reported, or if its check did not run
    to completion this pass (a timeout or ``--only`` says nothing about the finding).
    An ack saved under the key a finding had before another check adopted it
    (``PassResult.renames``) acknowledges the finding under its new key, and is kept
    under that key: an administrator's resume must survive an upgrade that moves a finding.
    """
    by_ref: dict[FindingRef, Ack] = {}
    for ack in acks:
        current = adopted(ack.ref, result)
        by_ref.setdefault(current, replace(ack, ref=current))
    ran = {r.check for r in result.results if r.state is RunState.RAN}
    seen: set[FindingRef] = set()
    results: list[CheckResult] = []
    for check in result.results:
        findings = []
        for finding in check.findings:
            ref = FindingRef.of(finding)
            if finding.status is not Status.OK and finding.code not in UNACKNOWLEDGEABLE and ref in by_ref:
                seen.add(ref)
                findings.append(_acknowledged(finding))
            else:
                findings.append(finding)
        results.append(replace(check, findings=tuple(findings)))
    kept = tuple(a for ref, a in sorted(by_ref.items()) if ref in seen or ref.check not in ran)
    return replace(result, results=tuple(results)), kept


def adopted(ref: FindingRef, result: PassResult) -> FindingRef:
    """``ref`` under the key its finding has in ``result``, should another check have adopted it since it was saved."""
    key = result.current_key(ref.key)
    return ref if key == ref.key else FindingRef(key, ref.event)


class AckStore:
    """The ``acks`` state file."""

    def __init__(self, state: StateFile) -> None:
        self.state = state
        self.problems: list[str] = []

    def load(self) -> tuple[Ack, ...]:
        """The stored acks; a malformed file or entry is reported in ``problems`` and ignored."""
        items = self.state.load().get("acks", [])
        if not isinstance(items, list):
            self.problems.append(f"{self.state.path}: acks is {type(items).__name__}, not a list: ignored")
            return ()
        acks = []
        for index, item in enumerate(items):
            try:
                if not isinstance(item, dict):
                    raise TypeError(f"{type(item).__name__}, not an object")
                acks.append(Ack(FindingRef.from_dict(item), float(item.get("at", 0.0)), str(item.get("by", ""))))
            except (ValueError, TypeError) as exc:
                self.problems.append(f"{self.state.path}: acks[{index}] ignored: {exc}")
        return tuple(acks)

    def save(self, acks: Iterable[Ack]) -> None:
        self.state.save({"acks": [{**a.ref.to_dict(), "at": a.at, "by": a.by} for a in acks]})


def merge(existing: Iterable[Ack], refs: Iterable[FindingRef], at: float, by: str) -> tuple[Ack, ...]:
    """``existing`` plus an ack for each new ref (an existing ack keeps its time)."""
    merged = {a.ref: a for a in existing}
    for ref in refs:
        merged.setdefault(ref, Ack(ref, at, by))
    return tuple(merged[r] for r in sorted(merged))


def refs_from_document(document: dict[str, Any], selectors: Iterable[str]) -> list[FindingRef]:
    """Findings of a saved pass document (``last-pass``) that are not OK and match a selector.

    A selector is a check name or a finding code (case-insensitive for codes); no
    selectors means every such finding. Synthetic findings of the policy itself
    (e.g. ``DRAIN_HELD``) and ``UNACKNOWLEDGEABLE`` ones are never acknowledged.
    """
    wanted = [s.strip() for s in selectors if s.strip()]
    refs = []
    for check in document.get("checks", []):
        if not isinstance(check, dict) or check.get("name") == POLICY_CHECK:
            continue
        for finding in check.get("findings", []):
            if not isinstance(finding, dict) or finding.get("status") == Status.OK.name:
                continue
            name, code = str(finding.get("check", "")), str(finding.get("code", ""))
            if code in UNACKNOWLEDGEABLE:
                continue
            if wanted and not any(s == name or s.upper() == code.upper() for s in wanted):
                continue
            details = finding.get("details")
            event = details.get("event") if isinstance(details, dict) else None
            key = f"{name}/{code}/{finding.get('subject', '')}"
            refs.append(FindingRef(key, None if event is None else str(event)))
    return refs
