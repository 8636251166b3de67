"""The Xid catalog against NVIDIA's own lists, the grades of each bucket, Xid 154, SXids and overrides.

The literal lists below are copied by hand from the "Resolution Bucket (Immediate
Action)" column of NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/
analyzing-xid-catalog.html, sheet "Xids"), independently of the table in
checks/healthd_checks/xid/catalog.py, so a wrong row in that table fails here.
"""

from __future__ import annotations

import re

import pytest
from healthd_testkit.paths import REPO

from healthd.model import Status
from healthd_checks.xid.catalog import CATALOG, CLEARS, RECOVERY_ENTRIES, Bucket, Sticky, XidAction, classify
from healthd_checks.xid.parse import LineKind, PciAddress, RecoveryAction, RecoveryChange, XidEvent

PCI = PciAddress(0, 0x3B, 0)

NVIDIA_RESET_GPU = [46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158]
NVIDIA_RESTART_BM = [79]
NVIDIA_IGNORE = [14, 37, 38, 43, 44, 63, 66, 67, 92, 93, 106, 107, 108, 121, 137, 141, 152, 153, 157, 160, 161]
NVIDIA_RESTART_APP = [8, 11, 13, 25, 31, 32, 39, 40, 41, 60, 68, 69, 70, 71, 72, 75, 76, 77, 80, 82, 83, 84, 85, 86]
NVIDIA_RESTART_APP += [88, 89, 94, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105]
NVIDIA_RESTART_APP += [126, 127, 128, 129, 130, 131, 132, 133, 134, 135, 139]
NVIDIA_OTHER = {
    45: "WORKFLOW_XID_45",
    48: "WORKFLOW_XID_48",
    54: "CHECK_MECHANICALS",
    74: "WORKFLOW_NVLINK_ERR",
    78: "UPDATE_SWFW",
    142: "CONTACT_SUPPORT",
    **{code: "WORKFLOW_NVLINK5_ERR" for code in range(144, 151)},
    151: "RESTART_VM",
    154: "XID_154",
    159: "CHECK_UVM",
}
# Rows the catalog marks "Unused" (deprecated); their immediate action is CONTACT_SUPPORT.
NVIDIA_UNUSED = [1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 26, 27, 28, 29, 30]
NVIDIA_UNUSED += [33, 34, 35, 36, 42, 47, 49, 50, 51, 52, 53, 55, 56, 57, 58, 59, 61, 65, 73, 81, 87, 90, 91]
NVIDIA_UNUSED += [111, 112, 113, 114, 115, 116, 117, 118, 122, 123, 124, 125, 138]


def xid(code: int, **kw: object) -> XidEvent:
    return XidEvent(LineKind.XID, code, PCI, "", **kw)  # type: ignore[arg-type]


def test_lists_cover_the_catalog_once() -> None:
    lists = [NVIDIA_RESET_GPU, NVIDIA_RESTART_BM, NVIDIA_IGNORE, NVIDIA_RESTART_APP, list(NVIDIA_OTHER), NVIDIA_UNUSED]
    every = [code for codes in lists for code in codes]
    assert sorted(every) == list(range(1, 162))  # 162 and later have no immediate action in the catalog
    # Graded from the catalog's descriptions: power smoothing (162, 163); 167-169, as Xids 62 and 158 are.
    assert set(CATALOG) == {*every, 162, 163, 167, 168, 169}


@pytest.mark.parametrize(
    ("codes", "action"),
    [
        (NVIDIA_RESET_GPU, "RESET_GPU"),
        (NVIDIA_RESTART_BM, "RESTART_BM"),
        (NVIDIA_IGNORE, "IGNORE"),
        (NVIDIA_RESTART_APP, "RESTART_APP"),
        (NVIDIA_UNUSED, "CONTACT_SUPPORT"),
    ],
)
def test_immediate_action_matches_nvidia(codes: list[int], action: str) -> None:
    assert {code: classify(xid(code)).action.value for code in codes} == dict.fromkeys(codes, action)


def test_other_immediate_actions_match_nvidia() -> None:
    assert {code: classify(xid(code)).action.value for code in NVIDIA_OTHER} == NVIDIA_OTHER


@pytest.mark.parametrize("code", NVIDIA_RESET_GPU)
def test_reset_gpu_xids_are_critical_until_reset(code: int) -> None:
    entry = classify(xid(code))
    assert (entry.grade, entry.sticky) == (Status.CRITICAL, Sticky.UNTIL_RESET)


def test_restart_bm_xids_are_critical_until_reboot() -> None:
    for code in NVIDIA_RESTART_BM:
        entry = classify(xid(code))
        assert (entry.grade, entry.sticky, entry.bucket) == (
            Status.CRITICAL,
            Sticky.UNTIL_REBOOT,
            Bucket.FALLEN_OFF_BUS,
        )


@pytest.mark.parametrize("code", NVIDIA_IGNORE + NVIDIA_RESTART_APP)
def test_ignore_and_restart_app_xids_are_ok(code: int) -> None:
    entry = classify(xid(code))
    assert (entry.grade, entry.sticky) == (Status.OK, Sticky.NO)


def test_only_restart_app_xids_may_escalate_on_repeats() -> None:
    assert {classify(xid(code)).bucket for code in NVIDIA_RESTART_APP} == {Bucket.APPLICATION}
    # 43 is IGNORE in NVIDIA's catalog, and 45 is the driver tearing down a stopped process's
    # channels (WORKFLOW_XID_45: follow the Xid that came with it): neither is ever counted.
    assert {c: classify(xid(c)).bucket for c in NVIDIA_IGNORE} == dict.fromkeys(NVIDIA_IGNORE, Bucket.INFORMATIONAL)
    assert classify(xid(45)).bucket is Bucket.PROCESS_CLEANUP


def test_remaining_buckets() -> None:
    grades = {code: (classify(xid(code)).grade, classify(xid(code)).sticky) for code in NVIDIA_OTHER if code != 154}
    assert grades == {
        45: (Status.OK, Sticky.NO),
        48: (Status.CRITICAL, Sticky.UNTIL_RESET),
        54: (Status.CRITICAL, Sticky.UNTIL_REBOOT),
        74: (Status.CRITICAL, Sticky.UNTIL_RESET),
        78: (Status.WARNING, Sticky.NO),
        142: (Status.CRITICAL, Sticky.UNTIL_RESET),
        **{code: (Status.CRITICAL, Sticky.UNTIL_RESET) for code in range(144, 151)},
        151: (Status.CRITICAL, Sticky.UNTIL_REBOOT),
        159: (Status.WARNING, Sticky.NO),
    }
    assert {classify(xid(code)).grade for code in NVIDIA_UNUSED} == {Status.CRITICAL}
    assert classify(xid(48)).bucket is Bucket.UNCORRECTABLE_ECC
    assert classify(xid(64)).bucket is Bucket.ROW_REMAP_FAILURE
    assert classify(xid(119)).bucket is Bucket.GSP_ERROR


def test_unknown_xid_is_warning() -> None:
    for code in (164, 171, 12345):
        entry = classify(xid(code))
        assert (entry.grade, entry.bucket, entry.action) == (Status.WARNING, Bucket.UNKNOWN, XidAction.NONE)


def test_xids_167_to_169_are_graded_from_their_descriptions_until_a_gpu_reset() -> None:
    # No immediate action in the catalog; 169 is described as Xid 62 (RESET_GPU) is, 167 is fatal by
    # the driver's own name, 168 leaves the GPU with less memory (catalog.py's _DESCRIBED).
    for code in (167, 168, 169):
        entry = classify(xid(code))
        assert (entry.grade, entry.sticky, entry.bucket) == (Status.CRITICAL, Sticky.UNTIL_RESET, Bucket.RESET_GPU)
    assert (classify(xid(62)).grade, classify(xid(62)).sticky) == (Status.CRITICAL, Sticky.UNTIL_RESET)
    assert classify(xid(166)).grade is Status.WARNING and classify(xid(170)).grade is Status.WARNING


def test_power_smoothing_xids_are_graded_from_their_descriptions() -> None:
    disengaged, reengaged = classify(xid(163)), classify(xid(162))
    assert (disengaged.grade, disengaged.sticky, disengaged.bucket) == (Status.OK, Sticky.NO, Bucket.POWER_SMOOTHING)
    assert (reengaged.grade, reengaged.bucket) == (Status.OK, Bucket.POWER_SMOOTHING)
    assert {162: frozenset({163})} == CLEARS, "the one pair the catalog documents besides Xid 154"


def test_recovery_action_decides_xid_154() -> None:
    # nvmlDeviceGpuRecoveryAction_t in nvml.h, as pynvml names it.
    assert {a.name: a.value for a in RecoveryAction} == {
        "NONE": 0,
        "GPU_RESET": 1,
        "NODE_REBOOT": 2,
        "DRAIN_P2P": 3,
        "DRAIN_AND_RESET": 4,
        "RECOVER_IMEX_DOMAIN": 5,
        "BUS_RESET": 6,
        "SYSTEM_REBOOT": 7,
    }
    assert set(RECOVERY_ENTRIES) == set(RecoveryAction)
    grades = {a: classify(xid(154, recovery=RecoveryChange(0, a.value))) for a in RecoveryAction}
    assert (grades[RecoveryAction.NONE].grade, grades[RecoveryAction.NONE].sticky) == (Status.OK, Sticky.NO)
    until_reboot = {RecoveryAction.NODE_REBOOT, RecoveryAction.BUS_RESET, RecoveryAction.SYSTEM_REBOOT}
    for action in set(RecoveryAction) - {RecoveryAction.NONE}:
        expected = Sticky.UNTIL_REBOOT if action in until_reboot else Sticky.UNTIL_RESET
        assert (grades[action].grade, grades[action].sticky) == (Status.CRITICAL, expected), action
    assert classify(xid(154, recovery=RecoveryChange(0, 9))).grade is Status.WARNING


def test_pynvml_agrees_on_recovery_codes() -> None:
    pynvml = pytest.importorskip("pynvml")
    for action in RecoveryAction:
        assert getattr(pynvml, f"NVML_GPU_RECOVERY_ACTION_{action.name}") == action.value


def test_sxid_grades_and_overrides() -> None:
    def sxid(fatal: object) -> XidEvent:
        return XidEvent(LineKind.SXID, 20034, PCI, "", fatal=fatal)  # type: ignore[arg-type]

    assert classify(sxid(True)).grade is Status.CRITICAL
    assert classify(sxid(False)).grade is Status.OK
    assert classify(sxid(None)).grade is Status.WARNING
    assert classify(sxid(True), {"SXID_20034": Status.WARNING}).grade is Status.WARNING
    assert classify(sxid(True), {"20034": Status.OK}).grade is Status.CRITICAL  # a plain number is an Xid


def test_override_changes_grade_only() -> None:
    entry = classify(xid(63), {"63": Status.CRITICAL})
    assert entry.grade is Status.CRITICAL and entry.bucket is Bucket.INFORMATIONAL and entry.action is XidAction.IGNORE
    assert classify(xid(79), {"79": Status.WARNING}).sticky is Sticky.UNTIL_REBOOT


# -- docs/builtin-checks.md and docs/xid.md say what the code does ---------------------------------------------------


def _numbers(text: str) -> list[int]:
    """Xid numbers in prose: "46, 62, 144-150" (an en dash in the docs) -> [46, 62, 144, ..., 150]."""
    codes: list[int] = []
    for first, last in re.findall(r"\b(\d{1,3})(?:[\u2013-](\d{1,3}))?\b", text):
        codes += range(int(first), int(last or first) + 1)
    return codes


def _bullet(readme: str, start: str) -> str:
    at = readme.index(f"\n- {start}")
    end = readme.find("\n- ", at + 1)
    return readme[at:end]


def test_docs_table_grades_each_xid_as_the_catalog() -> None:
    rows = [line.split("|")[1:4] for line in (REPO / "docs" / "xid.md").read_text().splitlines()]
    checked = 0
    for actions_text, codes_text, grade_text in (row for row in rows if len(row) == 3):
        actions = {a.strip() for a in actions_text.split(",")}
        if not actions <= {a.value for a in XidAction} or actions == {"XID_154"}:
            continue
        grade = grade_text.split()[0].rstrip(";")
        for code in _numbers(codes_text):
            entry = classify(xid(code))
            assert entry.action.value in actions, (code, actions)
            if grade in Status.__members__:
                assert entry.grade is Status[grade], (code, grade)
            checked += 1
    assert checked >= 150


def test_check_reference_examples_grade_as_the_catalog() -> None:
    """Xid 94 is RESTART_APP in NVIDIA's catalog: the check reference once listed it as CRITICAL until a reset."""
    readme = (REPO / "docs" / "builtin-checks.md").read_text()
    reset = [c for c in _numbers(_bullet(readme, "CRITICAL until a GPU reset").split("(for example")[1]) if c != 154]
    assert reset and all(classify(xid(c)).sticky is Sticky.UNTIL_RESET for c in reset)
    assert all(classify(xid(c)).grade is Status.CRITICAL for c in reset)
    counted = _numbers(_bullet(readme, "OK, but counted").split("(")[1].split(")")[0])
    assert 94 in counted
    assert all((classify(xid(c)).grade, classify(xid(c)).bucket) == (Status.OK, Bucket.APPLICATION) for c in counted)
    informational = _numbers(_bullet(readme, "OK: IGNORE").split("(")[1].split(")")[0])
    assert informational and all(classify(xid(c)).grade is Status.OK for c in informational)
    entry = classify(xid(94))
    assert (entry.action, entry.grade, entry.sticky) == (XidAction.RESTART_APP, Status.OK, Sticky.NO)
