"""The jobs check's triage, pure: distinct jobs and users per (Xid, GPU, GPC/TPC) decide, one job never drains."""

from __future__ import annotations

from typing import Any, Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from healthd.checks.plugin import JudgeContext, Unobserved
from healthd.model import Status
from healthd.store.historyschema import Event, Kind
from healthd_checks.jobs.check import SUSPECT, JobsObservation, JobXid, distinct_records, judge
from healthd_checks.jobs.settings import JobsSettings

PCI = "0000:3b:00.0"


def _xid(n: int, job: str, user: str = "alice", group: Optional[str] = "GPC 1 TPC 2", code: str = "XID_13") -> JobXid:
    return JobXid(n, code, PCI, "GPU-aaaa", group, job, user, "GPU-aaaa")


def _judge(*events: JobXid, **settings: Any) -> list[tuple[Status, str, str, Any]]:
    jc = JudgeContext("jobs", JobsSettings(**settings), 1_700_000_000.0)
    verdict = judge(JobsObservation(events), jc)
    return [(f.status, f.code, f.subject, f.details.get("jobs")) for f in verdict.findings]


def test_three_jobs_of_two_users_with_the_same_xid_on_one_gpu_are_a_suspect_gpu() -> None:
    assert _judge(_xid(1, "101"), _xid(2, "102", user="bob")) == []
    assert _judge(_xid(1, "101"), _xid(2, "102", user="bob"), _xid(3, "103")) == [
        (Status.WARNING, SUSPECT, f"{PCI} GPC 1 TPC 2", "101,102,103")
    ]


def test_one_users_jobs_never_drain_by_default_and_cannot_be_set_to() -> None:
    assert _judge(*(_xid(n, str(100 + n)) for n in range(10))) == [], "ten jobs (an array) of one user"
    with pytest.raises(ValidationError, match="app_xid_users"):
        JobsSettings(app_xid_users=1)


def test_one_jobs_many_xids_never_drain() -> None:
    assert _judge(*(_xid(n, "101") for n in range(50))) == []


def test_other_tpcs_other_xids_and_too_few_users_do_not_add_up() -> None:
    spread = (_xid(1, "101"), _xid(2, "102", group="GPC 3 TPC 0"), _xid(3, "103", code="XID_31", group=None))
    assert _judge(*spread) == []
    two_users = (_xid(1, "101"), _xid(2, "102", user="bob"), _xid(3, "103"))
    assert _judge(*two_users, app_xid_users=3) == []
    three_users = (_xid(1, "101"), _xid(2, "102", user="bob"), _xid(3, "103", user="carol"))
    assert [f[1] for f in _judge(*three_users, app_xid_users=3)] == [SUSPECT]


def test_an_unreadable_history_is_unknown() -> None:
    jc = JudgeContext("jobs", JobsSettings(), 0.0)
    verdict = judge(JobsObservation((), Unobserved("JOB_HISTORY_UNREADABLE", "/s", "locked")), jc)
    assert [(f.status, f.code) for f in verdict.findings] == [(Status.UNKNOWN, "JOB_HISTORY_UNREADABLE")]


@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from(["u1", "u2"])), max_size=30))
def test_a_finding_needs_as_many_distinct_jobs_and_users_as_the_settings(runs: list[tuple[str, str]]) -> None:
    events = [_xid(n, job, user) for n, (job, user) in enumerate(runs)]
    found = _judge(*events)
    assert bool(found) == (len({job for job, _ in runs}) >= 3 and len({user for _, user in runs}) >= 2)


def test_a_record_an_older_healthd_stored_under_several_jobs_counts_for_none() -> None:
    def row(n: int, job: str, seq: int, boot: str = "b1") -> Event:
        details = {"job": job, "user": job, "seq": seq, "boot": boot, "bucket": "application"}
        return Event(n, 0.0, Kind.JOB_XID, boot, "jobs", "XID_31", PCI, "GPU-aaaa", "OK", "", details)

    rows = [row(1, "101", 7), row(2, "102", 7), row(3, "103", 7), row(4, "104", 8), row(5, "105", 7, boot="b2")]
    assert [r.id for r in distinct_records(rows)] == [4, 5]
