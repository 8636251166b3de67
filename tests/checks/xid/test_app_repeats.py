"""Application Xids: OK notes that escalate only where the operator asks, counted by process and location."""

from __future__ import annotations

import json

from healthd_testkit.xid import Node, by_code

from healthd.model import Status
from healthd_checks.xid.settings import XidSettings

GPU = "0000:3b:00"


def _crash(xid: int, pid: int, text: str = "Ch 00000010") -> str:
    return f"NVRM: Xid (PCI:{GPU}): {xid}, pid={pid}, name=python, {text}"


def test_repeats_are_off_by_default() -> None:
    assert XidSettings().app_repeat_count == 0


def test_killed_jobs_xid_43_and_45_never_escalate(node: Node) -> None:
    """Three short jobs ended by scancel or their time limit: the driver logs 45 and 43 for each."""
    node.booted_at(int(node.now) - 3000)
    for pid, at in ((100, 1000), (101, 1600), (102, 2200)):
        node.log(_crash(45, pid), at=at)
        node.log(_crash(43, pid), at=at + 0.2)
    for options in ({}, {"app_repeat_count": 2}):
        found = by_code(node.run(**options))
        assert {key: f.status for key, f in found.items()} == {f"XID_43@{GPU}": Status.OK, f"XID_45@{GPU}": Status.OK}
        assert found[f"XID_43@{GPU}"].details["bucket"] == "informational"
        assert found[f"XID_45@{GPU}"].details["bucket"] == "process_cleanup"
        assert found[f"XID_45@{GPU}"].details["count"] == 3


def test_application_xids_stay_ok_without_app_repeat_count(node: Node) -> None:
    node.booted_at(int(node.now) - 3000)
    for pid in range(1, 7):
        node.log(_crash(31, pid, "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 faulted"), at=1000 + 60 * pid)
    (finding,) = node.run()
    assert (finding.code, finding.status, finding.details["count"]) == ("XID_31", Status.OK, 6)


def test_one_process_is_one_occurrence_however_often_it_faults(node: Node) -> None:
    node.booted_at(int(node.now) - 5000)
    for at in (1000, 2000, 3000, 4000):  # a long-running service faulting again and again
        node.log(_crash(31, 77), _crash(31, 77), at=at)
    (finding,) = node.run(app_repeat_count=3)
    assert finding.status is Status.OK and finding.details["count"] == 8
    node.log(_crash(31, 78), at=4100)
    node.log(_crash(31, 79), at=4200)
    (finding,) = node.run(app_repeat_count=3)
    assert finding.status is Status.WARNING
    assert "3 processes hit it within 3600s" in finding.message


def test_distinct_processes_escalate_within_the_window_only(node: Node) -> None:
    node.booted_at(int(node.now) - 1000)
    node.log(_crash(31, 1), at=1000)
    node.log("NVRM: Xid (PCI:0000:5e:00): 31, pid=1, name=x, Ch 00000010", at=1000)
    assert {f.status for f in node.run(app_repeat_count=3)} == {Status.OK}
    node.now += 20
    node.log(_crash(31, 2), at=1010)  # read in one pass, each counts at its own time
    node.log(_crash(31, 3), at=1020)
    found = by_code(node.run(app_repeat_count=3, app_repeat_window=300))
    assert found[f"XID_31@{GPU}"].status is Status.WARNING
    assert found["XID_31@0000:5e:00"].status is Status.OK
    node.now += 301
    assert by_code(node.run(app_repeat_count=3, app_repeat_window=300))[f"XID_31@{GPU}"].status is Status.OK


def test_lines_without_a_pid_count_one_per_burst(node: Node) -> None:
    node.booted_at(int(node.now) - 1000)
    bare = f"NVRM: Xid ({GPU}): 31, Ch 0000000b, engmask 00000120, intr 10000000"
    node.log(bare, bare, bare, at=900)
    assert node.run(app_repeat_count=2)[0].status is Status.OK
    node.log(bare, at=950)
    assert node.run(app_repeat_count=2)[0].status is Status.WARNING


def _xid13(pid: int, gpc: int, tpc: int) -> tuple[str, str]:
    """One Xid 13 fault as the driver prints it: the SM's location, then the engine's status register."""
    return (
        _crash(13, pid, f"Graphics SM Warp Exception on (GPC {gpc}, TPC {tpc}, SM 0): Out Of Range Address"),
        _crash(13, pid, "Graphics Exception: ESR 0x504648=0x102000e 0x504650=0x0"),
    )


def test_xid_13_escalates_only_at_one_gpc_tpc(node: Node) -> None:
    node.booted_at(int(node.now) - 3000)
    for pid, tpc in ((10, 0), (11, 1), (12, 2)):  # three programs' bugs, each somewhere else
        node.log(*_xid13(pid, 0, tpc), at=1000 + pid)
    (finding,) = node.run(app_repeat_count=3)
    assert finding.status is Status.OK and finding.details["count"] == 6
    for pid in (20, 21):  # two more processes at GPC 0 TPC 2: three there now
        node.log(*reversed(_xid13(pid, 0, 2)), at=1000 + pid)
    (finding,) = node.run(app_repeat_count=3)
    assert finding.status is Status.WARNING
    assert "3 processes hit it at GPC 0 TPC 2 within 3600s" in finding.message


def test_xid_13_without_a_location_counts_by_process(node: Node) -> None:
    node.booted_at(int(node.now) - 3000)
    for pid in (1, 2, 3):
        node.log(_crash(13, pid, "Graphics Exception: ESR 0x404600=0x80000002"), at=1000 + pid)
    assert node.run(app_repeat_count=3)[0].status is Status.WARNING


def test_a_state_from_before_process_counting_keeps_its_events(node: Node) -> None:
    node.booted_at(int(node.now) - 3000)
    node.log("NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE", _crash(31, 5), at=1000)
    node.run(app_repeat_count=3)
    state = node.root / "state" / "check-xid.json"
    document = json.loads(state.read_text())
    for group in document["groups"].values():
        group["recent"] = [1000.0, 1001.0, 1002.0]  # the old form: times of lines
    state.write_text(json.dumps(document))
    found = by_code(node.run(app_repeat_count=3))
    assert found[f"XID_48@{GPU}"].status is Status.CRITICAL
    assert found[f"XID_31@{GPU}"].status is Status.OK
    node.log(_crash(31, 6), _crash(31, 7), at=1100)
    assert by_code(node.run(app_repeat_count=3))[f"XID_31@{GPU}"].status is Status.OK  # 5's line was forgotten


def test_xid_13_faults_without_a_location_are_counted_apart_from_located_ones(node: Node) -> None:
    node.booted_at(int(node.now) - 3000)
    esr = "Graphics Exception: ESR 0x404600=0x80000002"
    node.log(_crash(13, 1, esr), at=1001)
    node.log(_crash(13, 2, esr), at=1002)
    for pid, tpc in ((10, 0), (11, 1), (12, 2)):  # their ESR lines belong to their locations
        node.log(*_xid13(pid, 0, tpc), at=1000 + pid)
    assert node.run(app_repeat_count=3)[0].status is Status.OK
    node.log(_crash(13, 3, esr), at=1030)
    (finding,) = node.run(app_repeat_count=3)
    assert finding.status is Status.WARNING and "3 processes hit it within 3600s" in finding.message
