"""The Xid catalog covers what it claims, grades buckets as documented, and applies overrides."""

from __future__ import annotations

import pytest

from healthd.model import Status
from healthd_checks.xid_catalog import CATALOG, RECOVERY_ENTRIES, Bucket, Sticky, classify
from healthd_checks.xid_parse import Kind, PciAddress, RecoveryAction, RecoveryChange, XidEvent

PCI = PciAddress(0, 0x3B, 0)
HARDWARE = {48, 61, 62, 64, 74, 79, 95, 109, 110, 119, 120, 140, 143, *range(144, 151)}
APPLICATION = {8, 13, 31, 43, 45, 68, 69, 94}
INFORMATIONAL = {63, 92, 121}


def xid(code: int, **kw: object) -> XidEvent:
    return XidEvent(Kind.XID, code, PCI, "", **kw)  # type: ignore[arg-type]


def test_catalog_covers_every_xid_it_claims() -> None:
    assert set(CATALOG) == HARDWARE | APPLICATION | INFORMATIONAL | {154}
    for code in CATALOG:
        assert classify(xid(code)) == CATALOG[code]


@pytest.mark.parametrize("code", sorted(HARDWARE))
def test_hardware_xids_are_critical_and_sticky(code: int) -> None:
    entry = classify(xid(code))
    assert entry.grade is Status.CRITICAL and entry.sticky is not Sticky.NO


def test_buckets_of_note() -> None:
    assert classify(xid(79)).bucket is Bucket.FALLEN_OFF_BUS and classify(xid(79)).sticky is Sticky.UNTIL_REBOOT
    assert classify(xid(48)).bucket is Bucket.UNCORRECTABLE_ECC
    assert classify(xid(64)).bucket is Bucket.ROW_REMAP_FAILURE
    assert classify(xid(119)).bucket is Bucket.GSP_ERROR
    for code in APPLICATION:
        assert classify(xid(code)).bucket is Bucket.APPLICATION and classify(xid(code)).grade is Status.OK
    for code in INFORMATIONAL:
        assert classify(xid(code)).grade is Status.OK


def test_unknown_xid_is_warning() -> None:
    assert classify(xid(12345)).grade is Status.WARNING and classify(xid(12345)).bucket is Bucket.UNKNOWN


def test_recovery_action_decides_xid_154() -> None:
    assert set(RECOVERY_ENTRIES) == set(RecoveryAction)
    grades = {a: classify(xid(154, recovery=RecoveryChange(0, a.value))) for a in RecoveryAction}
    assert grades[RecoveryAction.NONE].grade is Status.OK
    assert grades[RecoveryAction.NODE_REBOOT].sticky is Sticky.UNTIL_REBOOT
    for action in (RecoveryAction.GPU_RESET, RecoveryAction.DRAIN_P2P, RecoveryAction.DRAIN_AND_RESET):
        assert grades[action].grade is Status.CRITICAL and grades[action].sticky is Sticky.UNTIL_RESET
    assert classify(xid(154, recovery=RecoveryChange(0, 9))).grade is Status.WARNING


def test_sxid_grades_and_overrides() -> None:
    def sxid(fatal: object) -> XidEvent:
        return XidEvent(Kind.SXID, 20034, PCI, "", fatal=fatal)  # type: ignore[arg-type]

    assert classify(sxid(True)).grade is Status.CRITICAL
    assert classify(sxid(False)).grade is Status.OK
    assert classify(sxid(None)).grade is Status.WARNING
    assert classify(sxid(True), {"SXID_20034": Status.WARNING}).grade is Status.WARNING
    assert classify(sxid(True), {"20034": Status.OK}).grade is Status.CRITICAL  # a plain number is an Xid


def test_override_changes_grade_only() -> None:
    entry = classify(xid(63), {"63": Status.CRITICAL})
    assert entry.grade is Status.CRITICAL and entry.bucket is Bucket.INFORMATIONAL
    assert classify(xid(79), {"79": Status.WARNING}).sticky is Sticky.UNTIL_REBOOT
