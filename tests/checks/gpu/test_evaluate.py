"""The judging rules, including rates across passes with a controlled clock."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable

from healthd_testkit.paths import FIXTURES as ALL_FIXTURES

from healthd.model import Finding, Status
from healthd_checks.common.sysfs import VENDOR_NVIDIA, PciScan, scan_pci
from healthd_checks.gpu.check import CHECK, evaluate
from healthd_checks.gpu.settings import GpuSettings
from healthd_checks.nvml.snapshot import SnapshotFile
from healthd_checks.nvml.source import (
    GpuReading,
    NodeReading,
    NvmlError,
    RemappedRows,
    snapshot_document,
)

FIXTURES = ALL_FIXTURES / "nvml"
HEALTHY = SnapshotFile(FIXTURES / "h100-healthy.json").read()
PCI = scan_pci(FIXTURES / "sysfs-h100", frozenset({VENDOR_NVIDIA}))
run = CHECK.run


def _make(status: Status, code: str, subject: str, message: str, **details: Any) -> Finding:
    return Finding("gpu", status, code, subject, message, details)


def _with(index: int, **changes: Any) -> NodeReading:
    gpus = list(HEALTHY.gpus)
    gpus[index] = dataclasses.replace(gpus[index], **changes)
    return dataclasses.replace(HEALTHY, gpus=tuple(gpus))


def _judge(reading: NodeReading, pci: PciScan = PCI, gpus: int = 8, **settings: Any) -> list[tuple[str, Status, str]]:
    judgement = evaluate(reading, pci, gpus, GpuSettings(**settings), {}, 0.0, _make)
    return [(f.code, f.status, f.subject) for f in judgement.findings]


def test_sysfs_scan_counts_gpus_not_nvswitches_or_nics() -> None:
    bus_ids = [function.address for function in PCI.nvidia_gpus]
    assert PCI.present and len(bus_ids) == 8
    assert "0000:05:00.0" not in bus_ids  # NVSwitch, class 0x0680
    assert {function.address for function in PCI.functions} - set(bus_ids) == {
        "0000:05:00.0",
        "0000:06:00.0",
        "0000:07:00.0",
        "0000:08:00.0",
    }
    assert PCI.errors == ()


def test_healthy_idle_gpus_at_gen1_are_fine() -> None:
    assert HEALTHY.gpus[5].pcie_gen_current == 1 and HEALTHY.gpus[5].utilization_gpu == 0
    assert _judge(HEALTHY) == []


def test_gen_below_max_only_counts_while_busy() -> None:
    assert _judge(_with(0, pcie_gen_current=3)) == [("PCIE_GEN_DEGRADED", Status.WARNING, "gpu0")]
    assert _judge(_with(0, pcie_gen_current=3, utilization_gpu=10)) == []
    assert _judge(_with(0, pcie_gen_current=3, utilization_gpu=10), busy_utilization_percent=5) != []


def test_hardware_clock_slowdown() -> None:
    assert _judge(_with(2, clock_event_reasons=0x40 | 0x01)) == [("CLOCK_HW_SLOWDOWN", Status.WARNING, "gpu2")]
    assert _judge(_with(2, clock_event_reasons=0x04)) == []  # software power cap is policy, not a fault


def test_ecc_disabled() -> None:
    assert _judge(_with(1, ecc_mode_current=False)) == [("ECC_DISABLED", Status.WARNING, "gpu1")]
    assert _judge(_with(1, ecc_mode_current=False), expect_ecc=False) == []


def test_aggregate_thresholds_are_configurable() -> None:
    reading = _with(4, ecc_aggregate_corrected=500, ecc_aggregate_uncorrected=3)
    assert _judge(reading) == []
    assert _judge(reading, ecc_aggregate_corrected_max=100, ecc_aggregate_uncorrected_max=2) == [
        ("ECC_AGGREGATE_CORRECTED", Status.WARNING, "gpu4"),
        ("ECC_AGGREGATE_UNCORRECTED", Status.WARNING, "gpu4"),
    ]


def test_pre_ampere_retired_pages() -> None:
    volta = _with(
        0,
        retired_pages_sbe=40,
        retired_pages_dbe=20,
        retired_pages_pending=True,
        remapped_rows=HEALTHY.gpus[0].retired_pages_sbe,
    )
    assert _judge(volta) == [
        ("RETIRED_PAGES_PENDING", Status.CRITICAL, "gpu0"),
        ("RETIRED_PAGES_LIMIT", Status.WARNING, "gpu0"),
    ]


def test_remap_failed_and_pending_together() -> None:
    reading = _with(3, remapped_rows=RemappedRows(1, 8, True, True))
    assert _judge(reading) == [
        ("ROW_REMAP_FAILED", Status.CRITICAL, "gpu3"),
        ("ROW_REMAP_PENDING", Status.WARNING, "gpu3"),
    ]


def test_a_contained_uncorrectable_error_drains_after_jobs_and_asks_for_a_reset() -> None:
    """Xid 94's aftermath: one volatile uncorrectable error, its row's remap pending (NVML: future work is safe)."""
    reading = _with(2, ecc_volatile_uncorrected=1, remapped_rows=RemappedRows(0, 1, True, False))
    findings = evaluate(reading, PCI, 8, GpuSettings(), {}, 0.0, _make).findings
    assert [(f.code, f.status) for f in findings] == [
        ("ECC_UNCORRECTED", Status.WARNING),
        ("ROW_REMAP_PENDING", Status.WARNING),
    ]
    pending = findings[1]
    assert (pending.details["remedy"], pending.details["pci"]) == ("reset", HEALTHY.gpus[2].pci_bus_id)
    assert "remedy" not in findings[0].details


def test_more_gpus_than_expected() -> None:
    assert _judge(HEALTHY, gpus=4) == [("GPU_COUNT_UNEXPECTED", Status.WARNING, "gpus")]


def test_gpu_missing_from_the_bus_too() -> None:
    assert _judge(HEALTHY, pci=PciScan(True, PCI.nvidia_gpus[:7])) == [("GPU_MISSING", Status.CRITICAL, "gpus")]


def test_links_down_are_not_the_gpu_checks() -> None:
    links = HEALTHY.gpus[0].nvlinks
    assert isinstance(links, tuple)
    half_down = _with(0, nvlinks=tuple(dataclasses.replace(link, active=link.link < 9) for link in links))
    assert _judge(half_down) == []  # the nvlink check's NVLINK_DOWN
    unread = _with(0, nvlinks=(dataclasses.replace(links[0], active=NvmlError("UNKNOWN")),))
    assert _judge(unread) == [], "whether a link is up is the nvlink check's to read"


def test_vbios_other_than_expected_is_a_warning() -> None:
    assert HEALTHY.gpus[2].vbios_version == "96.00.99.00.01"
    flashed = _with(2, vbios_version="96.00.61.00.01")
    assert _judge(flashed) == [], "judged only when a version is expected"
    assert _judge(flashed, expect_vbios=["96.00.99.00.01"]) == [("VBIOS_VERSION", Status.WARNING, "gpu2")]
    assert _judge(flashed, expect_vbios=["96.00.99.00.01", "96.00.61.00.01"]) == []
    # A snapshot recorded before the VBIOS was read still loads; its VBIOS reads NOT_RECORDED.
    old = SnapshotFile(FIXTURES / "h100-ecc-uncorrected.json").read()
    assert old.gpus[0].vbios_version == NvmlError("NOT_RECORDED", "not in this snapshot")
    found = _judge(_with(0, vbios_version=NvmlError("NOT_RECORDED")), expect_vbios=["96.00.99.00.01"])
    assert found == [("VBIOS_UNREADABLE", Status.UNKNOWN, "gpu0")]
    lost = _with(0, vbios_version=NvmlError("GPU_IS_LOST"))
    assert _judge(lost, expect_vbios=["96.00.99.00.01"]) == [], "a lost GPU is GPU_LOST, not an unread version"


def test_bad_sysfs_file_is_unknown_naming_it(tmp_path: Path) -> None:
    device = tmp_path / "bus" / "pci" / "devices" / "0000:18:00.0"
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x10de\n")
    (device / "device").write_text("0x2330\n")
    (device / "class").write_text("three-d controller\n")
    scan = scan_pci(tmp_path)
    assert scan.present and scan.functions == ()
    judgement = evaluate(HEALTHY, scan, 8, GpuSettings(), {}, 0.0, _make)
    finding = judgement.findings[0]
    assert (finding.code, finding.status, finding.subject) == ("PCI_SYSFS_UNREADABLE", Status.UNKNOWN, "pci")
    assert finding.details["file"] == str(device / "class") and str(device / "class") in finding.message


def test_other_functions_of_nvidia_devices_are_not_gpus(tmp_path: Path) -> None:
    devices = tmp_path / "bus" / "pci" / "devices"
    for address, pci_class in [
        ("0000:18:00.0", "0x030200"),  # H100: 3D controller
        ("0000:65:00.0", "0x030000"),  # workstation GPU: VGA
        ("0000:65:00.1", "0x040300"),  # its HD audio function
        ("0000:65:00.2", "0x0c0330"),  # its USB-C controller
        ("0000:05:00.0", "0x068000"),  # NVSwitch
    ]:
        (devices / address).mkdir(parents=True)
        for name, value in (("vendor", "0x10de"), ("device", "0x2330"), ("class", pci_class)):
            (devices / address / name).write_text(value + "\n")
    scan = scan_pci(tmp_path, frozenset({VENDOR_NVIDIA}))
    assert [function.address for function in scan.nvidia_gpus] == ["0000:18:00.0", "0000:65:00.0"]
    assert len(scan.functions) == 5 and scan.errors == ()


def test_no_sysfs_tree_is_not_an_empty_bus(tmp_path: Path) -> None:
    assert scan_pci(tmp_path / "absent") == PciScan(present=False)


# ---- rates across passes, through run() with snapshot files and a controlled clock ----


def _write(path: Path, reading: NodeReading) -> Path:
    path.write_text(json.dumps(snapshot_document(reading, "test")))
    return path


def _counters(gpu: GpuReading, replays: int, link_errors: tuple[Any, Any, Any, Any] = (0, 0, 0, 0)) -> GpuReading:
    assert isinstance(gpu.nvlinks, tuple)
    links = tuple(
        dataclasses.replace(
            link,
            replay_errors=link_errors[0],
            recovery_errors=link_errors[1],
            crc_flit_errors=link_errors[2],
            crc_data_errors=link_errors[3],
        )
        if link.link == 7
        else link
        for link in gpu.nvlinks
    )
    return dataclasses.replace(gpu, pcie_replay_counter=replays, nvlinks=links)


def _pass(
    make_ctx: Callable[..., Any],
    tmp_path: Path,
    replays: int,
    link_errors: tuple[Any, Any, Any, Any] = (0, 0, 0, 0),
    **settings: Any,
) -> list[tuple[str, str]]:
    gpus = list(HEALTHY.gpus)
    gpus[2] = _counters(gpus[2], replays, link_errors)
    snapshot = _write(tmp_path / "snap.json", dataclasses.replace(HEALTHY, gpus=tuple(gpus)))
    return [(f.code, f.subject) for f in run(make_ctx(snapshot=snapshot, **settings))]


def test_pcie_replay_rate_across_passes(make_ctx: Callable[..., Any], tmp_path: Path, clock: Any) -> None:
    assert _pass(make_ctx, tmp_path, 1000) == []  # first pass: a baseline, whatever the total
    clock.now += 60
    assert _pass(make_ctx, tmp_path, 1005) == []  # 5 a minute: below DCGM's 8
    clock.now += 60
    assert _pass(make_ctx, tmp_path, 1025) == [("PCIE_REPLAY_RATE", "gpu2")]  # 20 a minute
    clock.now += 120
    assert _pass(make_ctx, tmp_path, 1035) == []  # 5 a minute again
    clock.now += 60
    assert _pass(make_ctx, tmp_path, 3) == []  # counter reset (reboot): new baseline


def test_pcie_replay_rate_details(make_ctx: Callable[..., Any], tmp_path: Path, clock: Any) -> None:
    _pass(make_ctx, tmp_path, 0)
    clock.now += 30
    (finding,) = run(
        make_ctx(
            snapshot=_write(
                tmp_path / "b.json",
                dataclasses.replace(
                    HEALTHY,
                    gpus=(
                        _counters(HEALTHY.gpus[0], 0),
                        _counters(HEALTHY.gpus[1], 0),
                        _counters(HEALTHY.gpus[2], 10),
                        *HEALTHY.gpus[3:],
                    ),
                ),
            )
        )
    )
    # 10 replays in 30 s: judged over the 60 s rate window, 10 a minute.
    assert finding.details["rate_per_minute"] == 10.0
    assert (finding.details["increase"], finding.details["seconds"]) == (10, 30.0)
    assert finding.status is Status.WARNING


def test_a_pass_seconds_after_another_does_not_inflate_the_replay_rate(
    make_ctx: Callable[..., Any], tmp_path: Path, clock: Any
) -> None:
    # The daemon's pass, then an operator's `check --once` 5 s later sharing the state dir.
    assert _pass(make_ctx, tmp_path, 100) == []
    clock.now += 5
    assert _pass(make_ctx, tmp_path, 101) == []  # one replay is not "12 a minute"
    clock.now += 5
    assert _pass(make_ctx, tmp_path, 110) == [("PCIE_REPLAY_RATE", "gpu2")]  # 9 within a minute is
    clock.now += 300
    assert _pass(make_ctx, tmp_path, 150) == []  # 40 in 5 min: 8 a minute, at the limit
    clock.now += 5
    assert _pass(make_ctx, tmp_path, 150, rate_window=1) == []
    clock.now += 5
    assert _pass(make_ctx, tmp_path, 151, rate_window=1) == [("PCIE_REPLAY_RATE", "gpu2")]  # the old behaviour


def test_nvlink_errors_rising_across_passes(make_ctx: Callable[..., Any], tmp_path: Path, clock: Any) -> None:
    assert _pass(make_ctx, tmp_path, 0, (5, 0, 1000, 0)) == []
    clock.now += 300
    assert _pass(make_ctx, tmp_path, 0, (5, 0, 1500, 10)) == []  # CRC rate far below 100/s
    clock.now += 300
    assert _pass(make_ctx, tmp_path, 0, (5, 1, 1500, 10)) == [("NVLINK_ERRORS_RISING", "gpu2")]
    clock.now += 10
    assert _pass(make_ctx, tmp_path, 0, (5, 1, 3000, 10)) == []  # 1500 in 10 s: 25/s over the 60 s window
    clock.now += 10
    assert _pass(make_ctx, tmp_path, 0, (5, 1, 12000, 10)) == [("NVLINK_CRC_RATE", "gpu2")]  # 150/s


def test_each_nvlink_counter_is_judged_on_its_own(make_ctx: Callable[..., Any], tmp_path: Path, clock: Any) -> None:
    unsupported = NvmlError("NOT_SUPPORTED", "Not Supported")
    assert _pass(make_ctx, tmp_path, 0, (unsupported, 0, unsupported, 0)) == []
    clock.now += 300
    # The replay and CRC-flit counters are not offered; recovery and CRC-data still count.
    assert _pass(make_ctx, tmp_path, 0, (unsupported, 2, unsupported, 0)) == [("NVLINK_ERRORS_RISING", "gpu2")]
    clock.now += 10
    assert _pass(make_ctx, tmp_path, 0, (unsupported, 2, unsupported, 60_000)) == [("NVLINK_CRC_RATE", "gpu2")]
    clock.now += 300
    # A counter that becomes readable starts its own baseline; one that went down was reset.
    assert _pass(make_ctx, tmp_path, 0, (7, 1, unsupported, 60_000)) == []
    clock.now += 300
    assert _pass(make_ctx, tmp_path, 0, (8, 1, unsupported, 60_000)) == [("NVLINK_ERRORS_RISING", "gpu2")]


def test_nvlink_rising_message_names_the_counters(make_ctx: Callable[..., Any], tmp_path: Path, clock: Any) -> None:
    _pass(make_ctx, tmp_path, 0, (0, 0, 0, 0))
    clock.now += 300
    gpus = list(HEALTHY.gpus)
    gpus[2] = _counters(gpus[2], 0, (NvmlError("NOT_SUPPORTED"), 3, 0, 0))
    (finding,) = run(make_ctx(snapshot=_write(tmp_path / "snap.json", dataclasses.replace(HEALTHY, gpus=tuple(gpus)))))
    assert finding.message == "NVLink replay/recovery errors rising: link7: +3 recovery"


def test_corrupt_state_starts_over(make_ctx: Callable[..., Any], tmp_path: Path, clock: Any) -> None:
    ctx = make_ctx(snapshot=FIXTURES / "h100-healthy.json")
    ctx.state.save({"gpus": {HEALTHY.gpus[0].uuid: {"at": "yesterday", "pcie_replay": [1], "nvlink": {"7": "x"}}}})
    assert list(run(ctx)) == []
    ctx.state.path.write_text("{broken")
    assert list(run(ctx)) == []
    assert ctx.state.problems and "corrupt state file" in ctx.state.problems[0]
    assert isinstance(ctx.state.load()["gpus"], dict)


def test_unwritable_state_is_unknown(make_ctx: Callable[..., Any], tmp_path: Path) -> None:
    (tmp_path / "state").write_text("a file where the directory should be")
    findings = list(run(make_ctx(snapshot=FIXTURES / "h100-healthy.json")))
    assert [(f.code, f.status) for f in findings] == [("STATE_UNWRITABLE", Status.UNKNOWN)]
