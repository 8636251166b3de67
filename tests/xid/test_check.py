"""The xid check over a fake /dev/kmsg file (real record format): cursors, restarts, boots, floods, stickiness."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from healthd.config import ConfigError, NodeSpec, Paths, parse_config
from healthd.model import Finding, Status
from healthd.plugin import CheckContext
from healthd.state import StateFile
from healthd_checks.kernlog import LogUnavailable, read_kmsg
from healthd_checks.xid import CHECK, XidSettings

BOOT_A = "11111111-2222-3333-4444-555555555555"
BOOT_B = "99999999-2222-3333-4444-555555555555"
X79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


class Node:
    """A fake node root: procfs with a boot id, sysfs with NVIDIA GPUs, a kmsg dump, a state dir."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.seq = 0
        self.now = 1_000_000.0
        self.boot(BOOT_A)
        (root / "sys" / "bus" / "pci" / "devices").mkdir(parents=True)
        self.kmsg.write_text("")

    @property
    def kmsg(self) -> Path:
        return self.root / "kmsg"

    def boot(self, boot_id: str) -> None:
        path = self.root / "proc" / "sys" / "kernel" / "random"
        path.mkdir(parents=True, exist_ok=True)
        (path / "boot_id").write_text(boot_id + "\n")

    def new_boot(self, boot_id: str) -> None:
        self.boot(boot_id)
        self.seq = 0
        self.kmsg.write_text("")

    def gpu(self, bdf: str, pci_class: str = "0x030200") -> None:
        device = self.root / "sys" / "bus" / "pci" / "devices" / bdf
        device.mkdir()
        (device / "vendor").write_text("0x10de\n")
        (device / "class").write_text(pci_class + "\n")

    def log(self, *messages: str, level: int = 4) -> None:
        with self.kmsg.open("a") as handle:
            for message in messages:
                self.seq += 1
                handle.write(f"{level},{self.seq},{self.seq * 1000},-;{message}\n SUBSYSTEM=pci\n")

    def run(self, **options: Any) -> list[Finding]:
        paths = Paths(sysfs=self.root / "sys", procfs=self.root / "proc", kmsg=self.kmsg, state_dir=self.root / "state")
        ctx = CheckContext(
            name="xid",
            settings=XidSettings(**{"source": "kmsg", **options}),
            node=NodeSpec(),
            paths=paths,
            state=StateFile(self.root / "state", "check-xid"),
            clock=lambda: self.now,
        )
        return list(CHECK.run(ctx))


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def by_code(findings: list[Finding]) -> dict[str, Finding]:
    return {f"{f.code}@{f.subject}": f for f in findings}


def test_no_xid_means_no_findings(node: Node) -> None:
    node.log("EXT4-fs (vda): mounted filesystem", level=6)
    assert node.run() == []


def test_restart_neither_misses_nor_rereads(node: Node) -> None:
    node.log(X79)
    first = by_code(node.run())["XID_79@0000:3b:00"]
    assert first.status is Status.CRITICAL
    assert first.details["count"] == 1 and first.details["event"] == f"{BOOT_A}:1"
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
    assert findings[0].details["count"] == 500 and findings[0].details["event"] == f"{BOOT_A}:1"
    node.now += 100
    node.log("NVRM: Xid (PCI:0000:3b:00): 95, pid=1, name=x, Uncontained: LTC")
    assert node.run(window=600)[0].details["event"] == f"{BOOT_A}:1"
    node.now += 600
    node.log("NVRM: Xid (PCI:0000:3b:00): 95, pid=1, name=x, Uncontained: LTC")
    later = node.run(window=600)
    assert len(later) == 1
    assert later[0].details["event"] == f"{BOOT_A}:502" and later[0].details["count"] == 502


def test_new_boot_starts_over(node: Node) -> None:
    node.log(X79)
    assert by_code(node.run())["XID_79@0000:3b:00"].status is Status.CRITICAL
    node.new_boot(BOOT_B)
    node.log("6,1,1,-;nothing to see", level=6)
    assert node.run() == []
    node.log(X79)
    finding = by_code(node.run())["XID_79@0000:3b:00"]
    assert finding.details["event"] == f"{BOOT_B}:2" and finding.details["count"] == 1


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
    assert found["XID_48@0000:3b:00"].details["event"] == f"{BOOT_A}:4"


def test_non_sticky_failure_expires_after_the_window(node: Node) -> None:
    node.log("NVRM: Xid (PCI:0000:3b:00): 999, pid=1, name=x, new kind of Xid")
    assert node.run(window=60)[0].status is Status.WARNING
    node.now += 61
    finding = node.run(window=60)[0]
    assert finding.status is Status.OK and finding.details["count"] == 1


def test_application_xid_escalates_only_on_repeats(node: Node) -> None:
    node.log("NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=x, Graphics Exception")
    node.log("NVRM: Xid (PCI:0000:5e:00): 13, pid=1, name=x, Graphics Exception")
    assert {f.status for f in node.run(app_repeat_count=3)} == {Status.OK}
    node.now += 10
    node.log("NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=x, Graphics Exception")
    node.now += 10
    node.log("NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=x, Graphics Exception")
    found = by_code(node.run(app_repeat_count=3, app_repeat_window=300))
    assert found["XID_13@0000:3b:00"].status is Status.WARNING
    assert found["XID_13@0000:5e:00"].status is Status.OK
    node.now += 301
    assert by_code(node.run(app_repeat_count=3, app_repeat_window=300))["XID_13@0000:3b:00"].status is Status.OK


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


def test_journal_source_falls_back_to_kmsg(node: Node) -> None:
    node.log(X79)
    findings = node.run(source="journal", journal_directory=node.root / "no-journal")
    assert [f.code for f in findings] == ["XID_79"]


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
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kmsg"
        path.write_bytes(data)
        result = read_kmsg(path, None)
        assert all(line.record_id.isdigit() for line in result.lines)
        os.unlink(path)
