"""Acknowledged findings: what an administrator has seen and accepted, kept in state file ``acks``.

An acknowledgement comes from an administrator resuming a node healthd took out
(the findings that caused it) or from ``healthd ack``. It matches a finding by
``Finding.key`` plus ``details["event"]`` when the check sets one, so a *new*
event with the same key is not covered. It also keeps the status the finding had
when it was acknowledged, and never covers the finding once it is worse than that:
an acknowledged corrected machine check (WARNING) does not hide an uncorrected one
(CRITICAL) that a check reports under the same key and event. An acknowledged
finding is reported with status OK and details ``acknowledged: true``,
``acknowledged_status``, ``acknowledged_by`` and ``acknowledged_at`` (epoch seconds);
the policy and the exit code only ever see the downgraded finding. An acknowledgement
is dropped once its check runs and no longer reports the finding, so a condition that
clears and later recurs is acted on again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, NamedTuple, Optional

from healthd.model import CheckResult, Finding, PassResult, RunState, Status
from healthd.plan.ackview import POLICY_CHECK, UNACKNOWLEDGEABLE


@dataclass(frozen=True, order=True)
class FindingRef:
    """Identity of one finding for acknowledgement: its key and, if any, its event id.

    ``status`` is the finding's status when the reference was taken: the most an
    acknowledgement made from it covers. It is not part of the identity (two
    references to one finding at different statuses are equal), so the policy's
    causes and ``took_out`` carry it to an administrator's resume unchanged. None
    means it is not known: a reference saved before healthd recorded it (see
    ``apply_acks``).
    """

    key: str
    event: Optional[str] = None
    status: Optional[Status] = field(default=None, compare=False)

    @classmethod
    def of(cls, finding: Finding) -> FindingRef:
        event = finding.details.get("event")
        return cls(finding.key, None if event is None else str(event), finding.status)

    @property
    def check(self) -> str:
        return self.key.split("/", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"key": self.key, "event": self.event}
        if self.status is not None:
            data["status"] = self.status.name
        return data

    @classmethod
    def from_dict(cls, data: Any) -> FindingRef:
        if not isinstance(data, dict) or not isinstance(data.get("key"), str):
            raise ValueError(f"not a finding reference: {data!r}")
        event, status = data.get("event"), data.get("status")
        if status is not None and status not in Status.__members__:
            raise ValueError(f"unknown status {status!r} in finding reference {data['key']!r}")
        return cls(data["key"], None if event is None else str(event), None if status is None else Status[status])

    def covers(self, finding: Finding) -> bool:
        """Whether an acknowledgement of this reference covers ``finding``, one with the same identity.

        Only up to the status acknowledged: a finding that got worse under the same key
        and event is a fault nobody has seen yet. An unknown status covers any.
        """
        return self.status is None or finding.status.rank <= self.status.rank


def widest(refs: Iterable[FindingRef]) -> tuple[FindingRef, ...]:
    """``refs`` without repeats, sorted; of equal ones, the one with the worst status (unknown beats known)."""
    kept: dict[FindingRef, FindingRef] = {}
    for ref in refs:
        held = kept.setdefault(ref, ref)
        if held.status is not None and (ref.status is None or ref.status.rank > held.status.rank):
            kept[ref] = ref
    return tuple(sorted(kept.values()))


class Ack(NamedTuple):
    """One acknowledgement: which finding (with the status acknowledged), when (epoch seconds), and how it was given."""

    ref: FindingRef
    at: float
    by: str


def _acknowledged(finding: Finding, ack: Ack) -> Finding:
    details = dict(finding.details)
    details["acknowledged"] = True
    details["acknowledged_status"] = finding.status.name
    # Who and when, so that `healthd status` and the check table can say it from the pass alone.
    details["acknowledged_by"] = ack.by
    details["acknowledged_at"] = ack.at
    return replace(finding, status=Status.OK, details=details)


def apply_acks(result: PassResult, acks: Iterable[Ack]) -> tuple[PassResult, tuple[Ack, ...]]:
    """Downgrade acknowledged findings; return the new pass and the acks still in force.

    An ack survives if its finding is still reported (at whatever status), or if its
    check did not run to completion this pass (a timeout or ``--only`` says nothing
    about the finding). A finding worse than the status acknowledged is not covered
    (``FindingRef.covers``); its ack stays, so the finding is covered again if it comes
    back down, and an administrator who resumes the node for the worse one widens it.
    An ack saved under the key a finding had before another check adopted it
    (``PassResult.renames``) acknowledges the finding under its new key, and is kept
    under that key: an administrator's resume must survive an upgrade that moves a finding.

    An ack without a status (saved by a healthd that did not record one) covers its
    finding as it stands the first time a pass sees it, and is kept with that status
    from then on. Its status when it was given is lost; reading it as the mildest
    would take out, on upgrade, nodes an administrator had put back knowingly, and
    reading it as the worst would keep the gap this closes open for as long as the
    ack lives. Pinning it at the first pass changes nothing on upgrade and covers no
    later rise.
    """
    by_ref: dict[FindingRef, Ack] = {}
    for ack in acks:
        _keep(by_ref, ack._replace(ref=adopted(ack.ref, result)))
    ran = {r.check for r in result.results if r.state is RunState.RAN}
    seen: set[FindingRef] = set()
    results: list[CheckResult] = []
    for check in result.results:
        findings = []
        for finding in check.findings:
            ref = FindingRef.of(finding)
            given = by_ref.get(ref)
            if given is None or finding.status is Status.OK or finding.code in UNACKNOWLEDGEABLE:
                findings.append(finding)
                continue
            seen.add(ref)
            if given.ref.status is None:
                by_ref[ref] = given._replace(ref=ref)
            findings.append(_acknowledged(finding, given) if given.ref.covers(finding) else finding)
        results.append(check._replace(findings=tuple(findings)))
    kept = tuple(a for ref, a in sorted(by_ref.items()) if ref in seen or ref.check not in ran)
    return result._replace(results=tuple(results)), kept


def adopted(ref: FindingRef, result: PassResult) -> FindingRef:
    """``ref`` under the key its finding has in ``result``, should another check have adopted it since it was saved."""
    key = result.current_key(ref.key)
    return ref if key == ref.key else replace(ref, key=key)


def merge(existing: Iterable[Ack], refs: Iterable[FindingRef], at: float, by: str) -> tuple[Ack, ...]:
    """``existing`` plus an ack for each new ref.

    An existing ack keeps its time and source; a ref that acknowledges its finding at a
    worse status than before widens it to that status.
    """
    merged = {a.ref: a for a in existing}
    for ref in refs:
        _keep(merged, Ack(ref, at, by))
    return tuple(merged[r] for r in sorted(merged))


def revoke(acks: Iterable[Ack], selectors: Iterable[str]) -> tuple[tuple[Ack, ...], tuple[Ack, ...]]:
    """``acks`` split into those kept and those a selector names; no selectors name every one.

    A selector is a finding's key (``check/code/subject``, as ``healthd ack --list`` shows
    it), its check's name, or its code (case-insensitive).
    """
    wanted = [s.strip() for s in selectors if s.strip()]
    kept: list[Ack] = []
    revoked: list[Ack] = []
    for ack in acks:
        check, code = [*ack.ref.key.split("/", 2), ""][:2]
        named = any(s in (ack.ref.key, check) or s.upper() == code.upper() for s in wanted)
        (revoked if named or not wanted else kept).append(ack)
    return tuple(kept), tuple(revoked)


def _keep(acks: dict[FindingRef, Ack], ack: Ack) -> None:
    """Add ``ack`` to ``acks``; where its finding already has one, that one stays, at the wider status of the two."""
    held = acks.setdefault(ack.ref, ack)
    acks[ack.ref] = held._replace(ref=widest([held.ref, ack.ref])[0])


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
            status = Status.__members__.get(str(finding.get("status")))
            refs.append(FindingRef(key, None if event is None else str(event), status))
    return refs
