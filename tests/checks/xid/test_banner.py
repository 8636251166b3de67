"""Every form of "fallen off the bus" through the xid check, over /dev/kmsg files in the kernel's record format.

The driver prints the banner ``NVRM: The NVIDIA GPU ...`` / ``NVRM: (PCI ID: ...)
installed in this system has`` / ``NVRM: fallen off the bus ...`` in one call: the
kernel keeps it as one record with escaped newlines (kmsg-banner.txt), while older
kernels and tools give each line its own record, between which other lines may fall
(kmsg-banner-split.txt). Both, and ``NVRM: GPU 2a:00.0: GPU has fallen off the bus.``
without a PCI domain, mean what Xid 79 means.
"""

from __future__ import annotations

import json

from healthd_testkit.xid import BOOT_A, BOOT_B, FIXTURES, X79, Node, by_code

from healthd.model import Status

LINE1 = "NVRM: The NVIDIA GPU 0000:3b:00.0"
LINE2 = "NVRM: (PCI ID: 10de:2330) installed in this system has"
LINE3 = "NVRM: fallen off the bus and is not responding to commands."


def xids(node: Node, **options: object) -> dict[str, object]:
    return {key: f for key, f in by_code(node.run(**options)).items() if key.startswith("XID_")}


def test_one_record_banner_and_domainless_line_are_xid_79(node: Node) -> None:
    node.gpu("0000:18:00.0")
    node.gpu("0000:2a:00.0")
    node.append((FIXTURES / "kmsg-banner.txt").read_text())
    found = by_code(node.run())
    banner, bare = found["XID_79@gpu0"], found["XID_79@gpu1"]
    assert banner.status is Status.CRITICAL and banner.details["sticky"] is True
    assert banner.details["bucket"] == "fallen_off_bus" and banner.details["pci"] == "0000:18:00"
    assert banner.details["uuid"] == "GPU-5f2a7c1e-0b3d-4c6e-8f9a-1b2c3d4e5f60"
    assert banner.details["event"] == f"{BOOT_A}:86400000000"
    assert bare.status is Status.CRITICAL and bare.details["pci"] == "0000:2a:00"
    assert "not responding to commands" in banner.message


def test_banner_over_records_interrupted_by_others_is_one_event_at_its_last_line(node: Node) -> None:
    """Neither a userspace record nor a line inside another record's message completes the banner."""
    node.append((FIXTURES / "kmsg-banner-split.txt").read_text())
    for options in ({}, {"accept_userspace_kmsg": True}):
        node.new_boot(BOOT_A)
        node.append((FIXTURES / "kmsg-banner-split.txt").read_text())
        (state := node.root / "state" / "check-xid.json").unlink(missing_ok=True)
        found = xids(node, **options)
        assert list(found) == ["XID_79@0000:3b:00"]
        finding = found["XID_79@0000:3b:00"]
        assert finding.details["event"] == f"{BOOT_A}:90000000400", options  # record 306, not 304 or 305
        assert finding.details["count"] == 1 and "userspace_records" not in finding.details
        assert finding.details["uuid"] == "GPU-8f3c1a2b-5d6e-7f80-91a2-b3c4d5e6f708"
        assert json.loads(state.read_text())["banner"] is None


def test_banner_split_across_passes_is_completed_from_the_state(node: Node) -> None:
    node.log(LINE1, level=3)
    assert xids(node) == {}
    assert json.loads((node.root / "state" / "check-xid.json").read_text())["banner"]["text"] == LINE1[6:]
    node.log("EXT4-fs (nvme0n1p2): re-mounted", level=6)
    node.log(LINE2, level=3)
    assert xids(node) == {}
    node.log(LINE3, level=3)
    found = xids(node)
    assert found["XID_79@0000:3b:00"].details["event"] == f"{BOOT_A}:4000"
    node.log(LINE3, level=3)  # a stray last line on its own is nothing
    assert xids(node)["XID_79@0000:3b:00"].details["count"] == 1


def test_a_new_boot_drops_a_pending_banner(node: Node) -> None:
    node.log(LINE1, LINE2, level=3)
    assert xids(node) == {}
    node.new_boot(BOOT_B)
    node.log(LINE3, level=3)
    assert xids(node) == {}


def test_a_banner_stalled_by_other_driver_lines_is_dropped(node: Node) -> None:
    node.log(LINE1, LINE2, level=3)
    node.log(*["NVRM: GPU at PCI:0000:5e:00: GPU-1d2e3f40-5162-7384-95a6-b7c8d9eaf0b1"] * 9, level=6)
    node.log(LINE3, level=3)
    assert xids(node) == {}


def test_a_banner_written_by_userspace_counts_only_with_the_switch(node: Node) -> None:
    node.log(LINE1, LINE2, LINE3, facility=1)
    node.log(f"{LINE1}\\x0a{LINE2}\\x0a{LINE3}", facility=1)
    assert xids(node) == {}
    node.new_boot(BOOT_B)
    node.log(LINE1, LINE2, LINE3, facility=1)
    finding = xids(node, accept_userspace_kmsg=True)["XID_79@0000:3b:00"]
    assert finding.details["userspace_records"] == 1 and finding.details["count"] == 1
    # A kernel banner is not completed by a userspace line, even with the switch on.
    node.log(LINE1, LINE2, level=3)
    node.log(LINE3, facility=1)
    assert xids(node, accept_userspace_kmsg=True)["XID_79@0000:3b:00"].details["count"] == 1


def test_banner_and_xid_79_of_one_gpu_are_one_event(node: Node) -> None:
    node.log(f"{LINE1}\\x0a{LINE2}\\x0a{LINE3}", X79, level=3)
    (finding,) = xids(node).values()
    assert finding.details["count"] == 2 and finding.details["event"] == f"{BOOT_A}:1000"


def test_a_damaged_banner_in_the_state_is_dropped(node: Node) -> None:
    node.log(LINE1, level=3)
    node.run()
    state = node.root / "state" / "check-xid.json"
    for damaged in ("garbage", {"text": 5, "origin": "kernel", "waited": 0}, {"text": "x", "origin": "?", "waited": 0}):
        state.write_text(json.dumps({**json.loads(state.read_text()), "banner": damaged}))
        assert xids(node) == {}
        assert json.loads(state.read_text())["banner"] is None
