from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from healthd.model import CheckResult, Finding, RunState, Status, worst


def test_worst_of_nothing_is_ok() -> None:
    assert worst([]) is Status.OK


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([Status.OK, Status.WARNING], Status.WARNING),
        ([Status.WARNING, Status.UNKNOWN], Status.UNKNOWN),
        ([Status.UNKNOWN, Status.CRITICAL, Status.OK], Status.CRITICAL),
        ([Status.CRITICAL, Status.WARNING], Status.CRITICAL),
    ],
)
def test_worst_order(statuses: list[Status], expected: Status) -> None:
    assert worst(statuses) is expected


@given(st.lists(st.sampled_from(list(Status))))
def test_worst_is_a_member_with_maximal_rank(statuses: list[Status]) -> None:
    result = worst(statuses)
    assert all(result.rank >= s.rank for s in statuses)
    assert result in statuses or (not statuses and result is Status.OK)


def test_status_values_are_nagios_exit_codes() -> None:
    assert [int(s) for s in (Status.OK, Status.WARNING, Status.CRITICAL, Status.UNKNOWN)] == [0, 1, 2, 3]


def test_parse_rejects_unknown_names() -> None:
    assert Status.parse(" warning ") is Status.WARNING
    with pytest.raises(ValueError, match="unknown status 'bad'"):
        Status.parse("bad")


def test_not_applicable_does_not_count_against_the_node() -> None:
    result = CheckResult("gpu", RunState.NOT_APPLICABLE, (), 0.0, "no GPUs")
    assert result.status is Status.OK and not result.applicable


def test_finding_key_identifies_the_condition() -> None:
    finding = Finding("mounts", Status.CRITICAL, "MOUNT_MISSING", "/scratch", "gone", {"x": 1})
    assert finding.key == "mounts/MOUNT_MISSING//scratch"


def test_exit_codes_name_every_status_with_its_code() -> None:
    # healthd.exitcodes keeps its own copy so that cheap commands need not import the model.
    from healthd.exitcodes import STATUS_CODES

    assert {status.name: int(status) for status in Status} == STATUS_CODES
