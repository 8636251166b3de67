"""``healthd.plan.ackview``: the plan's ack rules over JSON documents, as ``healthd status`` applies them."""

from __future__ import annotations

from typing import Any

from healthd.model import Status
from healthd.plan.ackview import RANK, Given, covering, stored_acks


def _finding(status: str, code: str = "MOUNT_MISSING", check: str = "mounts", event: Any = None) -> dict[str, Any]:
    details = {} if event is None else {"event": event}
    return {"check": check, "code": code, "subject": "/x", "status": status, "details": details}


def test_the_rank_is_the_models() -> None:
    assert {status.name: status.rank for status in Status} == RANK


def test_stored_acks_keeps_what_it_can_read_and_leaves_the_rest() -> None:
    document = {
        "acks": [
            {"key": "mounts/MOUNT_MISSING//x", "event": None, "status": "WARNING", "at": 5, "by": "alice"},
            {"key": "xid/XID_79/gpu0", "event": 7, "at": True},
            {"key": "bad", "status": "BROKEN"},
            "not an object",
            {"event": "no key"},
        ]
    }
    assert stored_acks(document) == {
        ("mounts/MOUNT_MISSING//x", None): Given("WARNING", "alice", 5.0),
        ("xid/XID_79/gpu0", "7"): Given(None, "", 0.0),
    }
    assert stored_acks({"acks": "no list"}) == {} and stored_acks([]) == {}


def test_an_ack_covers_up_to_its_status_and_never_what_healthd_could_not_observe() -> None:
    acks = stored_acks({"acks": [{"key": "mounts/MOUNT_MISSING//x", "status": "WARNING", "at": 1, "by": "a"}]})
    assert covering(_finding("WARNING"), acks) == Given("WARNING", "a", 1.0)
    assert covering(_finding("CRITICAL"), acks) is None, "worse than acknowledged: a fault nobody has seen"
    assert covering(_finding("OK"), acks) is None
    assert covering(_finding("WARNING", event="e1"), acks) is None, "a new event"
    timeout = stored_acks({"acks": [{"key": "mounts/CHECK_TIMEOUT//x", "at": 1, "by": "a"}]})
    assert covering(_finding("UNKNOWN", code="CHECK_TIMEOUT"), timeout) is None
    held = stored_acks({"acks": [{"key": "policy/DRAIN_HELD//x", "at": 1, "by": "a"}]})
    assert covering(_finding("WARNING", code="DRAIN_HELD", check="policy"), held) is None
