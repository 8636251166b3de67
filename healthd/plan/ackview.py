"""Which stored acknowledgement covers a finding of a recorded pass, read from JSON alone (``healthd status``).

``healthd status`` shows a pass document and the ``acks`` state file as they are on disk,
and imports no model (``healthd.model`` brings dataclasses: bench/README.md, the status
figure); this module applies ``healthd.plan.acks``'s rules to those documents: an ack
names a finding's key and event, and covers it up to the status it was given at.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

# The check name under which the pipeline reports the policy's own findings (DRAIN_HELD).
POLICY_CHECK = "policy"
# UNKNOWN findings the runner and the pipeline make when a check (or the pass) could not
# observe: they describe healthd's view, not a fault, and recur while the cause lasts.
# Acknowledging one would report a check that keeps timing out as OK, so none ever is.
UNACKNOWLEDGEABLE = frozenset({"CHECK_TIMEOUT", "CHECK_ERROR", "CHECK_STUCK", "PLUGIN_LOAD_FAILED", "PASS_FAILED"})
# Status.rank (healthd.model), by name; tests/plan/test_ack_view.py holds the two equal.
RANK = {"OK": 0, "WARNING": 1, "UNKNOWN": 2, "CRITICAL": 3}


class Given(NamedTuple):
    """One stored acknowledgement as ``healthd status`` shows it: the status it covers up to (None: any), who, when."""

    status: Optional[str]
    by: str
    at: float


def stored_acks(document: Any) -> dict[tuple[str, Optional[str]], Given]:
    """The ``acks`` state document by finding (key, event); entries of the wrong shape are left out (a pass
    reports them: ``healthd.cycle.acks``)."""
    items = document.get("acks") if isinstance(document, dict) else None
    found: dict[tuple[str, Optional[str]], Given] = {}
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            continue
        event, status, at = item.get("event"), item.get("status"), item.get("at")
        if status is not None and status not in RANK:
            continue
        when = float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else 0.0
        found[(item["key"], None if event is None else str(event))] = Given(status, str(item.get("by", "")), when)
    return found


def finding_id(finding: dict[str, Any]) -> tuple[str, Optional[str]]:
    """A finding document's identity for acknowledgement: ``FindingRef``'s key and event."""
    details = finding.get("details")
    event = details.get("event") if isinstance(details, dict) else None
    key = f"{finding.get('check', '')}/{finding.get('code', '')}/{finding.get('subject', '')}"
    return key, None if event is None else str(event)


def covering(finding: dict[str, Any], acks: dict[tuple[str, Optional[str]], Given]) -> Optional[Given]:
    """The stored ack that covers ``finding``, one the next pass would downgrade were it reported as it is; or None.

    None for an OK finding, the policy's own, an unacknowledgeable one, and one worse
    than the status its ack was given at (``FindingRef.covers``).
    """
    status, code = finding.get("status"), finding.get("code")
    if status not in RANK or status == "OK" or code in UNACKNOWLEDGEABLE or finding.get("check") == POLICY_CHECK:
        return None
    given = acks.get(finding_id(finding))
    if given is None or (given.status is not None and RANK[str(status)] > RANK[given.status]):
        return None
    return given
