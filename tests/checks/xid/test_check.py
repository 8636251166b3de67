"""The xid check over a fake /dev/kmsg file (real record format): cursors, restarts, boots, floods, stickiness."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from healthd_testkit.paths import file_holding
from healthd_testkit.xid import BOOT_A, BOOT_B, X79, Node, by_code
from hypothesis import given, settings
from hypothesis import strategies as st

from healthd.checks.plugin import JudgeContext
from healthd.config.models import ConfigError, parse_config
from healthd.model import Status
from healthd_checks.kernlog.source import LogUnavailable, read_boot_time, read_kmsg
from healthd_checks.xid.check import driver_uuids, gather, judge
from healthd_checks.xid.settings import XidSettings


def test_no_xid_means_no_findings(node: Node) -> None:
    node.log("EXT4-fs (vda): mounted filesystem", level=6)
    assert node.run() == []


def test_judging_is_pure_and_leaves_what_was_gathered_as_it_was(node: Node) -> None:
    node.gpu("0000:3b:00.0")
    node.log(X79)
    node.run()  # a saved state that already holds an event
    node.log(X79, "NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE")
    ctx = node.context()
    observed = gather(ctx)
    before = copy.deepcopy(observed)
    jc = JudgeContext("xid", ctx.settings, node.now)
    first, second = judge(observed, jc), judge(observed, jc)
    assert observed == before
    assert first == second and first.state == second.state
    assert [(f.code, f.subject, f.details["count"]) for f in first.findings] == [
        ("XID_48", "gpu0", 1),
        ("XID_79", "gpu0", 2),
    ]


def test_restart_neither_misses_nor_rereads(node: Node) -> None:
    node.log(X79)
    first = by_code(node.run())["XID_79@0000:3b:00"]
    assert first.status is Status.CRITICAL
    assert first.details["count"] == 1 and first.details["event"] == f"{BOOT_A}:1000"
    again = by_code(node.run())["XID_79@0000:3b:00"]  # a new run, same state dir: nothing re-read
    assert again.details["count"] == 1 and again.details["event"] == first.details["event"]
    node.log("NVRM: Xid (PCI:0000:5e:00): 48, pid=1, name=x, DBE")
    found = by_code(node.run())
    assert found["XID_79@0000:3b:00"].details["count"] == 1
    assert found["XID_48@0000:5e:00"].details["count"] == 1
    assert found["XID_48@0000:5e:00"].status is Status.CRITICAL


def test_flood_is_one_event_per_window_counting_every_line(node: Node) -> None:
    node.log(*(["NVRM: Xid (PCI:0000:3b:00): 95, pid=1, name=x, Uncontained: LTC"] * 500))
    findings = node.run(window=600)
    assert len(findings) == 1
    assert findings[0].details["count"] == 500 and findings[0].details["event"] == f"{BOOT_A}:1000"
    node.now += 100
    node.log("NVRM: Xid (PCI:0000:3b:00): 95, pid=1, name=x, Uncontained: LTC")
    assert node.run(window=600)[0].details["event"] == f"{BOOT_A}:1000"
    node.now += 600
    node.log("NVRM: Xid (PCI:0000:3b:00): 95, pid=1, name=x, Uncontained: LTC")
    later = node.run(window=600)
    assert len(later) == 1
    assert later[0].details["event"] == f"{BOOT_A}:502000" and later[0].details["count"] == 502


def test_new_boot_starts_over(node: Node) -> None:
    node.log(X79)
    assert by_code(node.run())["XID_79@0000:3b:00"].status is Status.CRITICAL
    node.new_boot(BOOT_B)
    node.log("6,1,1,-;nothing to see", level=6)
    assert node.run() == []
    node.log(X79)
    finding = by_code(node.run())["XID_79@0000:3b:00"]
    assert finding.details["event"] == f"{BOOT_B}:2000" and finding.details["count"] == 1


def test_reset_xid_sticks_until_recovery_action_none(node: Node) -> None:
    node.log("NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE")
    node.now += 10 * 86400  # long after any window
    assert by_code(node.run())["XID_48@0000:3b:00"].status is Status.CRITICAL
    node.log("NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)")
    found = by_code(node.run())
    assert found["XID_154@0000:3b:00"].status is Status.CRITICAL
    assert found["XID_154@0000:3b:00"].details["recovery_action"] == "GPU_RESET"
    node.log("NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)")
    found = by_code(node.run())
    assert found["XID_48@0000:3b:00"].status is Status.OK
    assert found["XID_154@0000:3b:00"].status is Status.OK
    node.log("NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE again")
    found = by_code(node.run())
    assert found["XID_48@0000:3b:00"].status is Status.CRITICAL
    assert found["XID_48@0000:3b:00"].details["event"] == f"{BOOT_A}:4000"


def test_non_sticky_failure_expires_after_the_window(node: Node) -> None:
    node.log("NVRM: Xid (PCI:0000:3b:00): 999, pid=1, name=x, new kind of Xid")
    assert node.run(window=60)[0].status is Status.WARNING
    node.now += 61
    finding = node.run(window=60)[0]
    assert finding.status is Status.OK and finding.details["count"] == 1


def test_overrides_regrade(node: Node) -> None:
    node.log("NVRM: Xid (PCI:0000:3b:00): 63, pid=1, name=x, Row Remapper: New row marked")
    assert node.run()[0].status is Status.OK
    node.new_boot(BOOT_B)
    node.log("NVRM: Xid (PCI:0000:3b:00): 63, pid=1, name=x, Row Remapper: New row marked")
    assert node.run(overrides={"63": "critical"})[0].status is Status.CRITICAL


def test_gpu_index_and_uuid_from_sysfs_and_driver_lines(node: Node) -> None:
    node.gpu("0000:5e:00.0")
    node.gpu("0000:3b:00.0", "0x030000")
    node.gpu("0000:c2:00.0", "0x068000")  # an NVSwitch is not a GPU
    node.log(
        "NVRM: GPU at PCI:0000:5e:00: GPU-1d2e3f40-5162-7384-95a6-b7c8d9eaf0b1",
        "NVRM: Xid (PCI:0000:5e:00): 79, GPU has fallen off the bus.",
        "nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Fatal, Link 28 LTSSM Fault Up",
    )
    found = by_code(node.run())
    gpu = found["XID_79@gpu1"]
    assert gpu.details["gpu"] == 1 and gpu.details["pci"] == "0000:5e:00"
    assert gpu.details["uuid"] == "GPU-1d2e3f40-5162-7384-95a6-b7c8d9eaf0b1"
    assert found["SXID_20034@nvswitch0"].status is Status.CRITICAL
    # The GPU falls off the bus and leaves sysfs: numbering captured this boot stays.
    for child in (node.root / "sys" / "bus" / "pci" / "devices" / "0000:3b:00.0").iterdir():
        child.unlink()
    (node.root / "sys" / "bus" / "pci" / "devices" / "0000:3b:00.0").rmdir()
    assert "XID_79@gpu1" in by_code(node.run())


def test_every_xid_finding_carries_the_ack_details(node: Node) -> None:
    node.log(
        X79,
        "NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=x, Graphics Exception",
        "nvidia-nvswitch4: SXid (PCI:0000:c6:00.0): 19084, Non-fatal, Link 29 AN1 Heartbeat Timeout Error",
        "NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.",
    )
    findings = node.run()
    assert len(findings) == 4
    for finding in findings:
        assert {"event", "xid", "gpu", "pci", "count", "bucket"} <= set(finding.details)
        assert "\n" not in finding.message
    assert len({f.details["event"] for f in findings}) == 4


def test_overwritten_records_are_reported(node: Node) -> None:
    node.log(X79)
    node.run()
    node.kmsg.write_text(f"4,50,1,-;{X79}\n")  # records 2..49 were lost
    found = by_code(node.run())
    assert found[f"KERNEL_LOG_OVERRUN@{node.kmsg}"].status is Status.UNKNOWN
    assert found["XID_79@0000:3b:00"].details["count"] == 2


def test_unreadable_kmsg_is_unknown_never_ok(node: Node) -> None:
    node.kmsg.unlink()
    findings = node.run()
    assert [(f.status, f.code) for f in findings] == [(Status.UNKNOWN, "KERNEL_LOG_UNREADABLE")]
    assert str(node.kmsg) in findings[0].message
    (node.root / "proc" / "sys" / "kernel" / "random" / "boot_id").unlink()
    assert node.run()[0].status is Status.UNKNOWN


def test_unreadable_kmsg_keeps_reporting_known_sticky_events(node: Node) -> None:
    node.log(X79)
    node.run()
    node.kmsg.unlink()
    codes = {(f.status, f.code) for f in node.run()}
    assert codes == {(Status.UNKNOWN, "KERNEL_LOG_UNREADABLE"), (Status.CRITICAL, "XID_79")}


def test_journal_source_falls_back_to_kmsg_and_says_so(node: Node) -> None:
    node.log(X79)
    findings = node.run(source="journal", journal_directory=node.root / "no-journal")
    assert [(f.status, f.code) for f in findings] == [
        (Status.OK, "KERNEL_LOG_JOURNAL_UNREADABLE"),
        (Status.CRITICAL, "XID_79"),
    ]
    note = findings[0]
    assert note.subject == str(node.root / "no-journal") and str(node.kmsg) in note.message
    assert note.details["reason"]


def test_corrupt_state_starts_over_without_crashing(node: Node) -> None:
    node.log(X79)
    (node.root / "state").mkdir()
    (node.root / "state" / "check-xid.json").write_text(
        json.dumps({"version": 1, "boot_id": BOOT_A, "cursor": "x", "groups": {"a": {"bogus": 1}}, "uuids": 3})
    )
    assert [f.details["count"] for f in node.run()] == [1]


def test_override_keys_are_validated_naming_the_key() -> None:
    models = {"xid": XidSettings}
    loaded = parse_config('[checks.xid]\noverrides = { "63" = "critical", "SXID_20034" = "OK" }\n', "t.toml", models)
    assert loaded.check_settings["xid"].overrides == {"63": Status.CRITICAL, "SXID_20034": Status.OK}
    with pytest.raises(ConfigError, match=r"checks\.xid\.overrides.*'gpu'"):
        parse_config('[checks.xid]\noverrides = { "gpu" = "CRITICAL" }\n', "t.toml", models)
    with pytest.raises(ConfigError, match=r"checks\.xid\.overrides.*63.*BAD"):
        parse_config('[checks.xid]\noverrides = { "63" = "BAD" }\n', "t.toml", models)


def test_read_kmsg_reports_missing_path(tmp_path: Path) -> None:
    with pytest.raises(LogUnavailable, match="missing"):
        read_kmsg(tmp_path / "missing", None)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=2000))
def test_read_kmsg_survives_any_bytes(data: bytes) -> None:
    with file_holding(data, "kmsg") as path:
        result = read_kmsg(path, None)
    assert all(line.record_id.isdigit() for line in result.lines)


SXID_FATAL = [
    "nvidia-nvswitch3: SXid (PCI:0000:0a:00.0): 22013, Fatal, Link 55 Minion Link DLREQ interrupt",
    "nvidia-nvswitch3: SXid (PCI:0000:0a:00.0): 22013, Severity 5 Engine instance 55 Sub-engine instance 00",
    "nvidia-nvswitch3: SXid (PCI:0000:0a:00.0): 22013, Data {0x00000037, 0x00000037, 0x00000000, 0x80005302}",
]
SXID_NONFATAL = [line.replace("Fatal,", "Non-fatal,").replace("Severity 5", "Severity 0") for line in SXID_FATAL]


def test_sxid_triple_is_one_event_graded_by_its_fatal_line(node: Node) -> None:
    node.log(*SXID_FATAL)
    (fatal,) = node.run()
    assert (fatal.code, fatal.subject, fatal.status) == ("SXID_22013", "nvswitch3", Status.CRITICAL)
    assert fatal.details["count"] == 1 and fatal.details["event"] == f"{BOOT_A}:1000" and fatal.details["sticky"]
    # A non-fatal report of the same SXid inside the window does not lower the event.
    node.log(*SXID_NONFATAL)
    (again,) = node.run()
    assert again.status is Status.CRITICAL and again.details["event"] == f"{BOOT_A}:1000"
    assert again.details["count"] == 2
    node.new_boot(BOOT_B)
    node.log(*SXID_NONFATAL, *SXID_NONFATAL)
    (benign,) = node.run()
    assert (
        benign.status is Status.OK and benign.details["count"] == 2 and benign.details["bucket"] == "nvswitch_nonfatal"
    )


def test_old_records_read_late_keep_their_age(node: Node) -> None:
    """healthd installed on a node up for 90 days: what happened a month ago is judged a month old."""
    node.now = 1_700_000_000.0
    node.booted_at(int(node.now) - 90 * 86400)
    month_ago = 60 * 86400
    crash = "NVRM: Xid (PCI:0000:3b:00): 13, pid={}, name=x, Graphics Exception"
    node.log(crash.format(1), at=month_ago)
    node.log(crash.format(2), at=month_ago + 60)
    node.log(crash.format(3), at=month_ago + 120)
    node.log("NVRM: Xid (PCI:0000:3b:00): 999, pid=1, name=x, something new", at=month_ago)
    node.log("NVRM: Xid (PCI:0000:5e:00): 48, pid=1, name=x, DBE", at=month_ago)
    found = by_code(node.run(app_repeat_count=3))
    assert found["XID_13@0000:3b:00"].status is Status.OK and found["XID_13@0000:3b:00"].details["count"] == 3
    assert found["XID_999@0000:3b:00"].status is Status.OK  # its window ended long ago
    assert found["XID_48@0000:5e:00"].status is Status.CRITICAL  # the GPU still needs its reset


def test_xid_154_new_actions_and_what_none_clears(node: Node) -> None:
    node.log(X79, "NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE")
    node.log("NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x6 (Bus Reset)")
    found = by_code(node.run())
    assert found["XID_154@0000:3b:00"].status is Status.CRITICAL
    assert found["XID_154@0000:3b:00"].details["recovery_action"] == "BUS_RESET"
    assert found["XID_154@0000:3b:00"].details["sticky"] is True
    node.log("NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x6 to 0x7 (System Reboot)")
    assert by_code(node.run())["XID_154@0000:3b:00"].details["recovery_action"] == "SYSTEM_REBOOT"
    node.log("NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x7 to 0x0 (None)")
    found = by_code(node.run())
    assert found["XID_48@0000:3b:00"].status is Status.OK  # a GPU reset cleared it
    assert found["XID_79@0000:3b:00"].status is Status.CRITICAL  # only a reboot (or an ack) clears 79
    assert found["XID_79@0000:3b:00"].details["sticky"] is True
    recovered = found["XID_154@0000:3b:00"]
    assert recovered.status is Status.OK and recovered.details["sticky"] is False
    node.log("NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 to 0x5 (Recover IMEX Domain)")
    assert by_code(node.run())["XID_154@0000:3b:00"].status is Status.CRITICAL


def test_xid_162_clears_an_earlier_163_on_the_same_gpu_only(node: Node) -> None:
    node.log(
        "NVRM: Xid (PCI:0000:3b:00): 163, Power Smoothing HW Circuitry capability disengaged",
        "NVRM: Xid (PCI:0000:5e:00): 163, Power Smoothing HW Circuitry capability disengaged",
    )
    found = by_code(node.run())
    assert found["XID_163@0000:3b:00"].status is Status.OK, "a note, never a drain"
    assert "cleared" not in found["XID_163@0000:3b:00"].message
    node.log("NVRM: Xid (PCI:0000:3b:00): 162, Power Smoothing HW Circuitry capability reengaged")
    found = by_code(node.run())
    assert found["XID_162@0000:3b:00"].status is Status.OK
    cleared = found["XID_163@0000:3b:00"]
    assert cleared.status is Status.OK and "cleared by Xid 162" in cleared.message
    still = found["XID_163@0000:5e:00"]
    assert still.status is Status.OK and "cleared" not in still.message, "another GPU's circuitry is still disengaged"
    node.log("NVRM: Xid (PCI:0000:3b:00): 163, Power Smoothing HW Circuitry capability disengaged")
    again = by_code(node.run())["XID_163@0000:3b:00"]
    assert "cleared" not in again.message and again.details["event"] != cleared.details["event"]


def test_first_read_of_a_wrapped_ring_buffer_is_a_note_once(node: Node) -> None:
    node.kmsg.write_text(f"4,50,50000,-;{X79}\n6,51,51000,-;eth0: link up\n")
    found = by_code(node.run())
    note = found[f"KERNEL_LOG_TRUNCATED@{node.kmsg}"]
    assert note.status is Status.OK and note.details["first_seq"] == 50
    assert found["XID_79@0000:3b:00"].status is Status.CRITICAL
    assert [f.code for f in node.run()] == ["XID_79"]


def test_a_link_number_in_other_digits_neither_crashes_nor_decodes(node: Node) -> None:
    node.gpu("0000:3b:00.0")
    # "٣" is an Arabic-Indic three: a Unicode \\d takes it and int() reads it as 3, a link the line never named.
    node.log("NVRM: Xid (PCI:0000:3b:00): 74, pid=7, name=x, NVLink: fatal error detected on link \u0663(0x0, 0x10000)")
    (finding,) = node.run()
    assert finding.code == "XID_74" and "nvlink" not in finding.details
    # A state file that holds one ("²" passes str.isdigit, which int() refuses) is not trusted: no crash.
    node.log("NVRM: Xid (PCI:0000:3b:00): 74, pid=7, name=x, NVLink: fatal error detected on link 4(0x0, 0x10000)")
    assert [f.details["nvlink"] for f in node.run()] == [4]
    state = node.root / "state" / "check-xid.json"
    document = json.loads(state.read_text())
    for group in document["groups"].values():
        group.update(nvlink="\u00b2:0x0,0x10000", gpu="\u00b2")
    state.write_text(json.dumps(document))
    assert node.run() == []  # the damaged group is dropped; its line was read before
    node.log("NVRM: Xid (PCI:0000:3b:00): 74, pid=7, name=x, NVLink: fatal error detected on link 4(0x0, 0x10000)")
    (finding,) = node.run()
    assert (finding.details["nvlink"], finding.details["gpu"]) == (4, 0)


def test_changing_source_keeps_events_and_counts(node: Node) -> None:
    node.log(X79, "NVRM: Xid (PCI:0000:5e:00): 48, pid=1, name=x, DBE")
    before = {k: (f.details["event"], f.details["count"]) for k, f in by_code(node.run()).items()}
    # The last passes read the journal (it folded the same records); now only kmsg can be read,
    # and the ring buffer has since lost the 79 record.
    state = node.root / "state" / "check-xid.json"
    document = json.loads(state.read_text())
    state.write_text(json.dumps({**document, "source": "journal", "cursor": "s=abc;i=2"}))
    node.kmsg.write_text("4,1,2000,-;NVRM: Xid (PCI:0000:5e:00): 48, pid=1, name=x, DBE\n")
    node.seq = 1
    node.log("NVRM: Xid (PCI:0000:5e:00): 48, pid=1, name=x, DBE again")
    after = by_code(node.run())
    assert after["XID_79@0000:3b:00"].status is Status.CRITICAL  # not forgotten
    assert after["XID_79@0000:3b:00"].details["event"] == before["XID_79@0000:3b:00"][0]
    assert after["XID_48@0000:5e:00"].details["event"] == before["XID_48@0000:5e:00"][0]
    assert after["XID_48@0000:5e:00"].details["count"] == 2  # the old record is not counted twice
    assert f"KERNEL_LOG_TRUNCATED@{node.kmsg}" not in after


def test_boot_time_from_procfs(tmp_path: Path) -> None:
    assert read_boot_time(tmp_path, 500.0) is None
    (tmp_path / "uptime").write_text("120.50 900.00\n")
    assert read_boot_time(tmp_path, 500.0) == 379.5
    (tmp_path / "stat").write_text("cpu 1 2\nbtime 1700000000\n")
    assert read_boot_time(tmp_path, 500.0) == 1_700_000_000.0
    (tmp_path / "stat").write_text("btime garbage\n")
    (tmp_path / "uptime").write_text("nonsense")
    assert read_boot_time(tmp_path, 500.0) is None


def test_xid_74_names_its_nvlink_and_registers(node: Node) -> None:
    node.gpu("0000:3b:00.0")
    node.log("NVRM: Xid (PCI:0000:3b:00): 74, pid=7, name=x, NVLink: fatal error detected on link 4(0x0, 0x10000, 0x0)")
    (finding,) = node.run()
    assert (finding.code, finding.status, finding.subject) == ("XID_74", Status.CRITICAL, "gpu0")
    assert (finding.details["nvlink"], finding.details["nvlink_registers"]) == (4, "0x0,0x10000,0x0")
    assert finding.details["nvlink_causes"] == "undocumented", "bit 16 of the second register is not in the table"
    # NVIDIA's example line: bit 16 of the third register.
    node.log(
        "NVRM: Xid (PCI:0000:3b:00): 74, NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"
    )
    (finding,) = node.run()
    assert (finding.details["nvlink"], finding.details["nvlink_causes"]) == (14, "diags_if_repeated")
    assert "on link 14 (run field diagnostics and report a bug if it repeats)" in finding.message
    assert finding.status is Status.CRITICAL, "the grade stays the catalog's: a reset clears Xid 74"


def test_driver_uuids_read_the_driver_procfs_and_say_nothing_they_cannot_read(tmp_path: Path) -> None:
    assert driver_uuids(tmp_path) == {}  # no driver loaded: no directory
    gpus = tmp_path / "driver" / "nvidia" / "gpus"
    for name, text in (
        ("0000:3b:00.0", "Model: \t\t NVIDIA H100\nGPU UUID: \t GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52\n"),
        ("0000:5e:00.0", "GPU UUID: \t not a uuid: GPU-1\n"),  # a value that is not a UUID is none
        ("0000:86:00.0", None),  # a directory without its file
        ("not-an-address", "GPU UUID: \t GPU-1234\n"),
    ):
        (gpus / name).mkdir(parents=True)
        if text is not None:
            (gpus / name / "information").write_text(text)
    assert driver_uuids(tmp_path) == {"0000:3b:00": "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"}
