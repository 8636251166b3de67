"""The nvlink check: fabric registration per GPU, Fabric Manager only where NVSwitches are, and the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import pynvml
import pytest
from healthd_testkit.checks import check_context
from healthd_testkit.nvml import SYSFS_H100, FakeNvml, fabric_info, nvml_error
from healthd_testkit.paths import FIXTURES
from hypothesis import given
from hypothesis import strategies as st

from healthd.checks.plugin import JudgeContext, NotApplicable
from healthd.cycle.acks import AckStore
from healthd.model import Status
from healthd.plan.acks import Ack, FindingRef
from healthd.store.state import StateFile
from healthd_checks.nvlink.check import CHECK, NvlinkObservation, baseline, judge, judge_links, judge_registration
from healthd_checks.nvlink.settings import NvlinkSettings
from healthd_checks.nvml.snapshot import SnapshotFile, parse_snapshot
from healthd_checks.nvml.source import (
    FabricInfo,
    FabricReading,
    GpuFabric,
    LinkState,
    NvmlError,
    NvmlLibrary,
    snapshot_document,
)

NVML = FIXTURES / "nvml"
BASE = FIXTURES / "sysfs/base"
GPU_NODE = FIXTURES / "procfs/gpu-node"
NO_FABRIC_MANAGER = FIXTURES / "procfs/services"  # root's munged and others, no nv-fabricmanager
ZERO = "00000000-0000-0000-0000-000000000000"


def run(
    tmp_path: Path,
    snapshot: Optional[str] = "h100-healthy",
    sysfs: Path = BASE,
    procfs: Path = GPU_NODE,
    **settings: Any,
) -> list[tuple[str, Status, str]]:
    nvlink = NvlinkSettings(snapshot=NVML / f"{snapshot}.json" if snapshot else None, **settings)
    ctx = check_context("nvlink", nvlink, tmp_path, sysfs=sysfs, procfs=procfs)
    return sorted((f.code, f.status, f.subject) for f in CHECK.run(ctx))


def pcie_only_sysfs(tmp_path: Path) -> Path:
    """The fixture node's PCI bus without its NVSwitches: a PCIe H100 server."""
    root = tmp_path / "sysfs"
    for part in ("bus/pci", "devices"):  # the bus and the device directories its links name
        shutil.copytree(BASE / part, root / part, symlinks=True, ignore=shutil.ignore_patterns("system"))
    for address in ("0000:45:00.0", "0000:46:00.0", "0000:47:00.0", "0000:48:00.0"):
        os.unlink(root / "bus/pci/devices" / address)
    return root


def test_healthy_hgx_node_has_no_findings(tmp_path: Path) -> None:
    assert run(tmp_path, expect_nvswitches=4) == []


def test_fabric_manager_down_on_nvswitch_node_is_critical_and_gpus_unregistered(tmp_path: Path) -> None:
    found = run(tmp_path, "h100-fabric-not-started", procfs=NO_FABRIC_MANAGER)
    assert ("FABRIC_MANAGER_DOWN", Status.CRITICAL, "nv-fabricmanager") in found
    registered = [f for f in found if f[0] == "NVLINK_FABRIC_NOT_REGISTERED"]
    assert registered == sorted(("NVLINK_FABRIC_NOT_REGISTERED", Status.CRITICAL, f"gpu{i}") for i in range(8))


def test_failed_and_in_progress_registration(tmp_path: Path) -> None:
    assert run(tmp_path, "h100-fabric-failed") == [
        ("NVLINK_FABRIC_FAILED", Status.CRITICAL, "gpu3"),
        ("NVLINK_FABRIC_IN_PROGRESS", Status.WARNING, "gpu5"),
    ]


def test_pcie_node_without_fabric_manager_is_not_applicable(tmp_path: Path) -> None:
    # gpud's false positive: Fabric Manager demanded on PCIe H100 / GH200, which have no NVSwitch.
    sysfs = pcie_only_sysfs(tmp_path)
    reading = SnapshotFile(NVML / "h100-healthy.json").read()
    unsupported = [GpuFabric(g.index, g.pci_bus_id, g.uuid, FabricInfo(0, "SUCCESS", ZERO, 0, 0)) for g in reading.gpus]
    observed = NvlinkObservation((), FabricReading(None, tuple(unsupported)))
    with pytest.raises(NotApplicable):
        judge(observed, JudgeContext("nvlink", NvlinkSettings(), 0.0))
    with pytest.raises(NotApplicable):
        run(tmp_path, None, sysfs=sysfs, procfs=NO_FABRIC_MANAGER)  # no driver here: NVML cannot start


def test_missing_nvswitch_and_fabric_manager_required_without_switches(tmp_path: Path) -> None:
    sysfs = pcie_only_sysfs(tmp_path)
    found = run(tmp_path, sysfs=sysfs, procfs=NO_FABRIC_MANAGER, expect_nvswitches=4, fabric_manager="required")
    assert found == [
        ("FABRIC_MANAGER_DOWN", Status.CRITICAL, "nv-fabricmanager"),
        ("NVSWITCH_MISSING", Status.CRITICAL, "nvswitches"),
    ]


def test_fabric_manager_off_is_never_looked_for(tmp_path: Path) -> None:
    assert run(tmp_path, procfs=NO_FABRIC_MANAGER, fabric_manager="off") == []


def test_a_users_process_named_like_the_daemon_does_not_count(tmp_path: Path) -> None:
    procfs = tmp_path / "proc"
    shutil.copytree(GPU_NODE, procfs, symlinks=True)
    status = procfs / "2210/status"
    status.write_text(status.read_text().replace("Uid:\t0\t0\t0\t0", "Uid:\t1001\t1001\t1001\t1001"))
    assert run(tmp_path, procfs=procfs) == [("FABRIC_MANAGER_DOWN", Status.CRITICAL, "nv-fabricmanager")]


def test_unreadable_process_table_is_unknown(tmp_path: Path) -> None:
    found = run(tmp_path, procfs=tmp_path / "no-proc")
    assert found == [("PROCESSES_UNREADABLE", Status.UNKNOWN, str(tmp_path / "no-proc"))]


def test_old_snapshot_without_fabric_is_unknown_where_switches_are(tmp_path: Path) -> None:
    found = run(tmp_path, "h100-ecc-uncorrected")
    assert {(code, status) for code, status, _ in found} == {("NVLINK_FABRIC_UNREADABLE", Status.UNKNOWN)}
    assert len(found) == 8


def _jc(**settings: Any) -> JudgeContext[NvlinkSettings]:
    return JudgeContext("nvlink", NvlinkSettings(**settings), 0.0)


GPU = GpuFabric(0, "00000000:18:00.0", "GPU-0", NvmlError("NOT_RECORDED"))


@pytest.mark.parametrize(
    ("info", "settings", "expected"),
    [
        (FabricInfo(3, "SUCCESS", ZERO, 0, 0), {}, []),
        (FabricInfo(3, "SUCCESS", ZERO, 0, None), {"expect_cluster_uuid": True}, ["NVLINK_FABRIC_NO_CLUSTER"]),
        (FabricInfo(3, "SUCCESS", "6c4e-1", 7, None), {"expect_cluster_uuid": True}, []),
        (FabricInfo(3, "SUCCESS", ZERO, 0, 1), {}, ["NVLINK_FABRIC_DEGRADED_BW"]),
        (FabricInfo(3, "SUCCESS", ZERO, 0, 2 | 1 << 4), {}, ["NVLINK_FABRIC_ROUTE_UNHEALTHY"]),
        (FabricInfo(3, "SUCCESS", ZERO, 0, 5 << 8), {}, ["NVLINK_FABRIC_MISCONFIGURED"]),
        (FabricInfo(3, "SUCCESS", ZERO, 0, 1 << 8), {}, []),
        (FabricInfo(3, "UNKNOWN", ZERO, 0, 0), {}, ["NVLINK_FABRIC_FAILED"]),
        (FabricInfo(1, "SUCCESS", ZERO, 0, 0), {}, ["NVLINK_FABRIC_NOT_REGISTERED"]),
        (FabricInfo(9, "SUCCESS", ZERO, 0, 0), {}, ["NVLINK_FABRIC_STATE_UNKNOWN"]),
    ],
)
def test_registration_grades(info: FabricInfo, settings: dict[str, Any], expected: list[str]) -> None:
    assert [f.code for f in judge_registration(GPU, info, NvlinkSettings(**settings), _jc())] == expected


FABRICS = st.builds(
    FabricInfo,
    state=st.integers(0, 2**32 - 1),
    status=st.sampled_from(["SUCCESS", "UNKNOWN", "NOT_SUPPORTED", "GPU_IS_LOST"]),
    cluster_uuid=st.uuids().map(str),
    clique_id=st.integers(0, 2**32 - 1),
    health_mask=st.one_of(st.none(), st.integers(0, 2**32 - 1)),
)


@given(FABRICS)
def test_any_registration_round_trips_through_a_snapshot_and_is_judged(info: FabricInfo) -> None:
    reading = SnapshotFile(NVML / "h100-healthy.json").read()
    gpu = reading.gpus[0]
    changed = type(reading)(
        reading.init_error,
        reading.driver_version,
        reading.device_count,
        (type(gpu)(**{**gpu.__dict__, "fabric": info}),),
    )
    again = parse_snapshot(json.dumps(snapshot_document(changed, "test")), "x")
    assert again.gpus[0].fabric == info
    for finding in judge_registration(GPU, info, NvlinkSettings(expect_cluster_uuid=True), _jc()):
        assert finding.code.startswith("NVLINK_FABRIC_") and finding.subject == "gpu0"
        assert (finding.status is Status.OK) is False


def test_library_reads_fabric_through_the_versioned_call(mocker: Any) -> None:
    fake = FakeNvml().install(mocker)
    fake.gpus[2]["nvmlDeviceGetGpuFabricInfoV"] = fabric_info(state=2, cluster=bytes(range(16)), health_mask=1)
    fake.gpus[4]["nvmlDeviceGetGpuFabricInfoV"] = nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
    reading = NvmlLibrary().read_fabric()
    assert reading.init_error is None and len(reading.gpus) == 8
    assert reading.gpus[0].fabric == FabricInfo(3, "SUCCESS", ZERO, 0, 0)
    assert reading.gpus[2].fabric == FabricInfo(2, "SUCCESS", "00010203-0405-0607-0809-0a0b0c0d0e0f", 0, 1)
    assert reading.gpus[4].fabric == NvmlError("GPU_IS_LOST", "GPU is lost")
    assert reading.gpus[1].pci_bus_id == "00000000:2A:00.0" and fake.shutdowns == 1
    whole = NvmlLibrary().read()
    assert whole.gpus[2].fabric == reading.gpus[2].fabric


def test_library_without_the_versioned_call_falls_back(mocker: Any) -> None:
    fake = FakeNvml().install(mocker)
    not_found = nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    for gpu in fake.gpus:
        gpu["nvmlDeviceGetGpuFabricInfoV"] = not_found

    def legacy(handle: Any, reference: Any) -> int:
        reference._obj.state = 0
        return pynvml.NVML_SUCCESS

    mocker.patch.object(pynvml, "nvmlDeviceGetGpuFabricInfo", side_effect=legacy, create=True)
    reading = NvmlLibrary().read_fabric()
    assert reading.gpus[0].fabric == FabricInfo(0, "SUCCESS", ZERO, 0, None)


def test_cli_on_the_fixture_node(check_outcome: Callable[[str, str], tuple[str, set[str]]]) -> None:
    config = (
        f'[paths]\nsysfs = "{SYSFS_H100}"\nprocfs = "{NO_FABRIC_MANAGER}"\n'
        f'[checks.nvlink]\nsnapshot = "{NVML / "h100-fabric-not-started.json"}"\n'
    )
    expected = {"FABRIC_MANAGER_DOWN", "NVLINK_FABRIC_NOT_REGISTERED"}
    assert check_outcome("nvlink", config) == ("CRITICAL", expected)


# --- NVLinks up or down (moved here from the gpu check, with [checks.gpu] nvlinks_expected) ---------------------

UP = tuple(LinkState(link, True) for link in range(18))


def _links(links: tuple[LinkState, ...], expected: Optional[int] = None) -> list[tuple[str, Status]]:
    return [(f.code, f.status) for f in judge_links(GPU, links, expected, _jc(expect_active_links=expected))]


def test_links_down_against_the_expected_count() -> None:
    assert _links(UP, 18) == [] and _links(UP) == []
    fewer = UP[:12]  # six links gone from NVML's list altogether
    assert _links(fewer) == []
    assert _links(fewer, 18) == [("NVLINK_DOWN", Status.CRITICAL)]
    all_down = tuple(LinkState(link.link, False) for link in UP)
    assert _links(all_down) == [], "all inactive and nothing expected: a GPU without NVLink"
    assert _links(all_down, 18) == [("NVLINK_DOWN", Status.CRITICAL)]
    two_down = tuple(LinkState(link.link, link.link not in (4, 11)) for link in UP)
    (finding,) = judge_links(GPU, two_down, None, _jc())
    assert (finding.code, finding.subject, finding.details["links_down"], finding.details["active"]) == (
        "NVLINK_DOWN",
        "gpu0",
        "4,11",
        16,
    )


def test_unreadable_links_are_unknown_not_down() -> None:
    unread = tuple(LinkState(link.link, NvmlError("UNKNOWN") if link.link == 7 else True) for link in UP)
    assert _links(unread, 18) == [("NVLINK_STATE_UNREADABLE", Status.UNKNOWN)], "the unread link may be up"
    one_down = tuple(LinkState(i, False) if i == 3 else link for i, link in enumerate(unread))
    assert _links(one_down, 18) == [("NVLINK_STATE_UNREADABLE", Status.UNKNOWN), ("NVLINK_DOWN", Status.CRITICAL)]


@given(st.lists(st.sampled_from([True, False, NvmlError("UNKNOWN")]), max_size=36), st.none() | st.integers(0, 36))
def test_link_judgement_is_consistent(states: list[Any], expected: Optional[int]) -> None:
    links = tuple(LinkState(i, state) for i, state in enumerate(states))
    codes = [code for code, _ in _links(links, expected)]
    active = states.count(True)
    unread = sum(1 for s in states if isinstance(s, NvmlError))
    assert ("NVLINK_STATE_UNREADABLE" in codes) == bool(unread)
    if expected is not None:
        assert ("NVLINK_DOWN" in codes) == (active + unread < expected)
    else:
        assert ("NVLINK_DOWN" in codes) == (active > 0 and False in states)


def test_links_down_read_from_a_snapshot_and_from_nvml(tmp_path: Path, mocker: Any) -> None:
    assert run(tmp_path, expect_active_links=18) == []
    document = json.loads((NVML / "h100-healthy.json").read_text())
    document["gpus"][3]["nvlinks"][7]["active"] = False
    (tmp_path / "link-down.json").write_text(json.dumps(document))
    nvlink = NvlinkSettings(snapshot=tmp_path / "link-down.json", expect_active_links=18)
    ctx = check_context("nvlink", nvlink, tmp_path, sysfs=BASE, procfs=GPU_NODE)
    (finding,) = CHECK.run(ctx)
    assert (finding.code, finding.subject, finding.details["links_down"]) == ("NVLINK_DOWN", "gpu3", "7")
    fake = FakeNvml().install(mocker)

    def state(link: int) -> int:
        if link >= 18:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(link not in (4, 11))

    fake.gpus[5]["nvmlDeviceGetNvLinkState"] = state
    assert run(tmp_path, None) == [("NVLINK_DOWN", Status.CRITICAL, "gpu5")]
    fake.handle_errors[2] = nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
    found = run(tmp_path, None, expect_active_links=18)
    assert ("NVLINK_STATE_UNREADABLE", Status.UNKNOWN, "gpu2") in found


def test_an_ack_saved_before_the_upgrade_holds_through_the_cli(
    check_once: Callable[[str, str], dict[str, Any]], write_config: Callable[..., Path], tmp_path: Path
) -> None:
    """An administrator's resume saved ``gpu/NVLINK_DOWN/gpu3`` before the finding moved here (CheckSpec.adopts)."""
    document = json.loads((NVML / "h100-healthy.json").read_text())
    document["gpus"][3]["nvlinks"][7]["active"] = False
    snapshot = tmp_path / "link-down.json"
    snapshot.write_text(json.dumps(document))
    config = (
        f'[paths]\nsysfs = "{SYSFS_H100}"\nprocfs = "{GPU_NODE}"\n'
        f'[checks.nvlink]\nsnapshot = "{snapshot}"\nexpect_active_links = 18\n'
    )
    assert check_once("nvlink", config)["status"] == "CRITICAL", "the fault the ack covers"
    acks = AckStore(StateFile(tmp_path / "state", "acks"))
    acks.save([Ack(FindingRef("gpu/NVLINK_DOWN/gpu3"), 10.0, "slurm-resume")])
    check = check_once("nvlink", config)
    assert check["status"] == "OK"
    (finding,) = check["findings"]
    assert (finding["code"], finding["details"]["acknowledged"]) == ("NVLINK_DOWN", True)
    assert acks.load() == ((Ack(FindingRef("nvlink/NVLINK_DOWN/gpu3"), 10.0, "slurm-resume"),), ())


def test_a_gpu_whose_links_cannot_be_listed_is_unknown_where_links_are_expected(tmp_path: Path, mocker: Any) -> None:
    fake = FakeNvml().install(mocker)
    fake.handle_errors[2] = nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
    fake.gpus[5]["nvmlDeviceGetNvLinkState"] = nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    found = run(tmp_path, None, expect_active_links=18)
    unread = [(code, status, subject) for code, status, subject in found if code == "NVLINK_STATE_UNREADABLE"]
    assert unread == [("NVLINK_STATE_UNREADABLE", Status.UNKNOWN, f"gpu{i}") for i in (2, 5)]
    assert all(status is not Status.OK for _, status, _ in found)
    # Nothing expected: the same answers say "no NVLink on this GPU", which is no fault.
    assert "NVLINK_STATE_UNREADABLE" not in {code for code, _, _ in run(tmp_path, None)}


def test_a_pcie_node_without_nvlinks_is_not_applicable(tmp_path: Path, mocker: Any) -> None:
    fake = FakeNvml().install(mocker)
    for gpu in fake.gpus:
        gpu["nvmlDeviceGetNvLinkState"] = nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        gpu["nvmlDeviceGetGpuFabricInfoV"] = fabric_info(state=0)
    with pytest.raises(NotApplicable):
        run(tmp_path, None, sysfs=pcie_only_sysfs(tmp_path), procfs=NO_FABRIC_MANAGER)
    again = pcie_only_sysfs(tmp_path / "again")
    assert run(tmp_path, None, sysfs=again, procfs=NO_FABRIC_MANAGER, expect_active_links=0) == [], "applicable"


def test_baseline_expects_the_links_and_switches_it_sees(tmp_path: Path) -> None:
    nvlink = NvlinkSettings(snapshot=NVML / "h100-healthy.json")
    ctx = check_context("nvlink", nvlink, tmp_path, sysfs=BASE, procfs=GPU_NODE)
    assert baseline(ctx) == {"expect_nvswitches": 4, "expect_active_links": 18}


def no_nvidia_sysfs(tmp_path: Path) -> Path:
    """The fixture node's PCI bus without any NVIDIA function: a CPU node."""
    root = tmp_path / "sysfs"
    for part in ("bus/pci", "devices"):
        shutil.copytree(BASE / part, root / part, symlinks=True, ignore=shutil.ignore_patterns("system"))
    for link in (root / "bus/pci/devices").iterdir():
        if (link / "vendor").read_text().strip() == "0x10de":
            link.unlink()
    return root


def test_a_node_without_nvidia_devices_is_not_applicable_without_loading_nvml(tmp_path: Path) -> None:
    # pynvml's import is about 30 ms of a cold pass (bench/README.md); on a bus that a reading
    # shows holds no NVIDIA GPU or NVSwitch, NVML could only say there is nothing to judge.
    sysfs = no_nvidia_sysfs(tmp_path)
    code = (
        "import sys, pathlib; from healthd_testkit.checks import check_context; "
        "from healthd.checks.plugin import NotApplicable; from healthd_checks.nvlink.check import CHECK; "
        "from healthd_checks.nvlink.settings import NvlinkSettings; "
        f"ctx = check_context('nvlink', NvlinkSettings(), pathlib.Path({str(tmp_path)!r}), "
        f"sysfs=pathlib.Path({str(sysfs)!r}), procfs=pathlib.Path({str(NO_FABRIC_MANAGER)!r}))\n"
        "try:\n    CHECK.run(ctx)\nexcept NotApplicable as exc:\n    print('n/a', exc)\n"
        "print('pynvml' in sys.modules)"
    )
    tests = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(tests)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True)
    assert done.stdout.splitlines()[0].startswith("n/a no NVIDIA GPU or NVSwitch on the PCI bus")
    assert done.stdout.splitlines()[-1] == "False", done.stdout
    # Anything expected, or a snapshot, still asks NVML: no driver here, so that is UNKNOWN, not n/a.
    assert run(tmp_path, None, sysfs=sysfs, procfs=NO_FABRIC_MANAGER, expect_active_links=18) == [
        ("NVLINK_FABRIC_UNOBSERVED", Status.UNKNOWN, "nvml")
    ]
    assert run(tmp_path, "h100-healthy", sysfs=sysfs, procfs=NO_FABRIC_MANAGER) == []
