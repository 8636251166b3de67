"""The host check: the clock's state (the real adjtimex and recorded ones), inventory and versions."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.checks import check_context
from healthd_testkit.paths import FIXTURES
from healthd_testkit.processes import Start
from hypothesis import given
from hypothesis import strategies as st

from healthd.checks.plugin import JudgeContext, NotApplicable
from healthd.model import Finding, Status
from healthd_checks.host.check import (
    CHECK,
    HostObservation,
    KernelTimex,
    Timex,
    find_time_daemon,
    judge,
    physical_ethernet,
)
from healthd_checks.host.parse import (
    OPERSTATES,
    link_up,
    parse_cpu_list,
    parse_cpuinfo_nhc,
    parse_driver_version,
    parse_meminfo,
    parse_operstate,
    valid_interface_name,
)
from healthd_checks.host.settings import HostSettings

BASE = FIXTURES / "sysfs/base"
GPU_NODE = FIXTURES / "procfs/gpu-node"
SYNCED = FIXTURES / "host/timex-synced.json"
UNSYNCED = FIXTURES / "host/timex-unsynced.json"
EXPECT = {
    "expect_cpus": 224,
    "expect_sockets": 2,
    "expect_threads_per_core": 2,
    "expect_memory_gib": 1900,
    "expect_hugepages": 0,
    "expect_kernel": ["6.1.0-18-amd64"],
    "expect_driver": ["550.54.15"],
    "expect_bios": ["2.1.5"],
    "expect_ethernet": ["eno1"],
}


def run(tmp_path: Path, sysfs: Path = BASE, procfs: Path = GPU_NODE, **settings: Any) -> list[Finding]:
    settings.setdefault("timex", SYNCED)
    ctx = check_context("host", HostSettings(**settings), tmp_path, sysfs=sysfs, procfs=procfs)
    return list(CHECK.run(ctx))


def codes(findings: list[Finding]) -> list[tuple[str, Status, str]]:
    return sorted(((f.code, f.status, f.subject) for f in findings), key=lambda t: (t[0], t[2]))


def test_the_fixture_node_is_as_expected(tmp_path: Path) -> None:
    assert run(tmp_path, **EXPECT) == []


def test_unsynchronised_clock(tmp_path: Path) -> None:
    (finding,) = run(tmp_path, timex=UNSYNCED, clock_sync="required")
    assert (finding.code, finding.status) == ("CLOCK_UNSYNCHRONISED", Status.WARNING)
    assert finding.details["timex_status"] == "0x0041"
    (finding,) = run(tmp_path, timex=SYNCED, clock_max_error_ms=1.0)
    assert finding.code == "CLOCK_ERROR_LARGE"


def _process_table(tmp_path: Path, name: str, uid: int) -> Path:
    """The fixture node's process table with one more process, ``name``, owned by ``uid`` as /proc shows it."""
    procfs = tmp_path / "proc"
    shutil.copytree(GPU_NODE, procfs, symlinks=True)
    process = procfs / "812"
    process.mkdir()
    status = (GPU_NODE / "2210/status").read_text().replace("nv-fabricmanage", name)
    (process / "status").write_text(status.replace("Uid:\t0\t0\t0\t0", f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}"))
    (process / "comm").write_text(f"{name[:15]}\n")
    (process / "exe").symlink_to(f"/usr/sbin/{name}")
    os.chown(process, uid, uid)  # the owner /proc gives a process's directory is its own
    return procfs


def test_a_clock_no_daemon_disciplines_is_a_note_not_a_fault(tmp_path: Path) -> None:
    # A VM or a laptop without NTP: the first run of a new operator must end healthy.
    (finding,) = run(tmp_path, timex=UNSYNCED)
    assert (finding.code, finding.status) == ("CLOCK_UNDISCIPLINED", Status.OK)
    assert 'clock_sync = "required"' in finding.message


def test_an_unsynchronised_clock_under_a_running_time_daemon_is_judged(tmp_path: Path) -> None:
    procfs = _process_table(tmp_path, "chronyd", 105)  # Debian's _chrony is a system account
    (finding,) = run(tmp_path, procfs=procfs, timex=UNSYNCED)
    assert (finding.code, finding.status) == ("CLOCK_UNSYNCHRONISED", Status.WARNING)
    assert "chronyd runs but has not synchronised it" in finding.message
    assert run(tmp_path, procfs=procfs, timex=SYNCED) == []


def test_a_users_process_named_like_a_time_daemon_is_not_one(tmp_path: Path) -> None:
    # Otherwise a user could have a VM's unsynchronised clock judged, and the node drained.
    procfs = _process_table(tmp_path, "chronyd", 1000)
    (finding,) = run(tmp_path, procfs=procfs, timex=UNSYNCED)
    assert (finding.code, finding.status) == ("CLOCK_UNDISCIPLINED", Status.OK)


def _no_time_daemon_here() -> None:
    if find_time_daemon(Path("/proc")) != "":
        pytest.skip("this machine runs a time daemon of its own")


def test_a_time_daemon_is_known_by_its_command_name_cut_to_15_characters(start_process: Start) -> None:
    # The kernel names the task after the file run, cut to 15 characters: the executable is "sleep".
    _no_time_daemon_here()
    start_process("sleep", called="systemd-timesyncd")
    assert find_time_daemon(Path("/proc")) == "systemd-timesyncd"


def test_a_time_daemon_is_known_by_its_executable_under_another_command_name(start_process: Start) -> None:
    _no_time_daemon_here()
    start_process("chronyd", called="worker")
    assert find_time_daemon(Path("/proc")) == "chronyd"


def test_a_real_users_process_named_like_a_time_daemon_is_not_one(
    start_process: Start, user: pwd.struct_passwd
) -> None:
    # Named so by both its command name and its executable, and still a user's: the same copy run by root counts.
    _no_time_daemon_here()
    start_process("chronyd", user=user)
    assert find_time_daemon(Path("/proc")) == ""
    start_process("chronyd")
    assert find_time_daemon(Path("/proc")) == "chronyd"


def test_an_unreadable_process_table_leaves_the_clock_unknown(tmp_path: Path) -> None:
    (finding,) = run(tmp_path, procfs=tmp_path / "missing", timex=UNSYNCED)
    assert (finding.code, finding.status) == ("CLOCK_DAEMON_UNREADABLE", Status.UNKNOWN)


def test_a_synchronised_node_baselines_a_required_clock(tmp_path: Path) -> None:
    ctx = check_context("host", HostSettings(timex=SYNCED), tmp_path, sysfs=BASE, procfs=GPU_NODE)
    assert CHECK.baseline is not None and CHECK.baseline(ctx)["clock_sync"] == "required"
    ctx = check_context("host", HostSettings(timex=UNSYNCED), tmp_path, sysfs=BASE, procfs=GPU_NODE)
    assert "clock_sync" not in CHECK.baseline(ctx)


def test_the_kernels_own_clock_state_is_read() -> None:
    # The real adjtimex(2): a read any user may make. Whatever this machine's clock does,
    # the status bits and TIME_ERROR agree (kernel/time/ntp.c), and the bounds are sane.
    reading = KernelTimex().read()
    assert 0 <= reading.state <= 5 and reading.maxerror_us >= 0
    assert reading.synchronised == (not reading.status & 0x40 and reading.state != 5)


def test_missing_cpus_memory_and_wrong_versions(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    shutil.copytree(BASE / "devices/system/cpu", sysfs / "devices/system/cpu")
    (sysfs / "devices/system/cpu/online").write_text("0-111\n")  # hyperthreads switched off
    procfs = tmp_path / "proc"
    shutil.copytree(GPU_NODE, procfs, symlinks=True)
    meminfo = procfs / "meminfo"
    meminfo.write_text(meminfo.read_text().replace("MemTotal:       2113442644 kB", "MemTotal:       1585081983 kB"))
    (procfs / "driver/nvidia/version").unlink()
    found = codes(
        run(
            tmp_path,
            sysfs=sysfs,
            procfs=procfs,
            **{**EXPECT, "expect_bios": [], "expect_kernel": ["6.9"], "expect_ethernet": []},
        )
    )
    assert found == [
        ("CPU_TOPOLOGY", Status.CRITICAL, "cpus"),
        ("CPU_TOPOLOGY", Status.CRITICAL, "threads_per_core"),
        ("KERNEL_VERSION", Status.WARNING, "kernel"),
        ("MEMORY_MISSING", Status.CRITICAL, "memory"),
        ("NVIDIA_DRIVER_UNREADABLE", Status.UNKNOWN, str(sysfs / "module/nvidia/version")),
    ]


def test_malformed_meminfo_is_unknown_naming_the_line(tmp_path: Path) -> None:
    procfs = tmp_path / "proc"
    procfs.mkdir()
    (procfs / "meminfo").write_text("MemTotal: 12 kB\nbroken line\n")
    (finding,) = run(tmp_path, procfs=procfs, clock_sync="off", expect_memory_gib=1)
    assert (finding.code, finding.status) == ("MEMINFO_MALFORMED", Status.UNKNOWN)
    assert ":2:" in finding.message


def test_nothing_to_judge_is_not_applicable(tmp_path: Path) -> None:
    with pytest.raises(NotApplicable):
        run(tmp_path, clock_sync="off")
    with pytest.raises(NotApplicable):
        judge(HostObservation(None, None, None, None, None, None, None), JudgeContext("host", HostSettings(), 0.0))


def test_clock_judged_on_plain_values() -> None:
    jc = JudgeContext("host", HostSettings(clock_severity="CRITICAL"), 0.0)
    observed = HostObservation(Timex(5, 0x40, 16_000_000, 16_000_000), None, None, None, None, None)
    (finding,) = judge(observed, jc).findings
    assert finding.status is Status.CRITICAL


@given(st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 64)), max_size=20))
def test_cpu_lists_round_trip(ranges: list[tuple[int, int]]) -> None:
    text = ",".join(f"{a}-{a + n}" if n else str(a) for a, n in ranges)
    expected = {cpu for a, n in ranges for cpu in range(a, a + n + 1)}
    assert parse_cpu_list(text) == expected


@given(st.text(max_size=100))
def test_cpu_list_parser_fails_only_with_valueerror(text: str) -> None:
    try:
        cpus = parse_cpu_list(text, "SRC")
    except ValueError as exc:
        assert str(exc).startswith("SRC: ")
        return
    assert all(cpu >= 0 for cpu in cpus)


@given(st.dictionaries(st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,20}", fullmatch=True), st.integers(0, 2**60)))
def test_meminfo_parses_the_proc_format(values: dict[str, int]) -> None:
    values = {"MemTotal": 1024, **values}
    text = "".join(f"{name}:{' ' * 8}{value} kB\n" for name, value in values.items())
    assert parse_meminfo(text, "m") == values


def test_driver_version_lines() -> None:
    assert parse_driver_version((GPU_NODE / "driver/nvidia/version").read_text()) == "550.54.15"
    open_module = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build  (dvs-builder@U16)"
    assert parse_driver_version(open_module) == "560.35.03"
    assert parse_driver_version("something else 550.54.15") is None


def test_cli(check_outcome: Callable[[str, str], tuple[str, set[str]]]) -> None:
    host = f'timex = "{UNSYNCED}"\nclock_sync = "required"\nexpect_cpus = 256\n'
    body = f'[paths]\nsysfs = "{BASE}"\nprocfs = "{GPU_NODE}"\n[checks.host]\n{host}'
    assert check_outcome("host", body) == ("CRITICAL", {"CLOCK_UNSYNCHRONISED", "CPU_TOPOLOGY"})


# --- Ethernet interfaces (NHC's check_hw_eth) -------------------------------------------------------------------


def _net_tree(tmp_path: Path) -> Path:
    """The fixture node's sysfs, copied so that a test can change its interfaces."""
    sysfs = tmp_path / "sys"
    for part in ("class/net", "devices/virtual/net", "devices/pci0000:00"):  # the interfaces and what they link to
        shutil.copytree(BASE / part, sysfs / part, symlinks=True)
    return sysfs


def _interface(
    sysfs: Path,
    name: str,
    operstate: str,
    kind: int = 1,
    device: bool = True,
    device_link: str = "../../../devices/pci0000:00/0000:00:1c.0/0000:01:00.0",
) -> Path:
    """A network interface: with a device, a directory whose ``device`` links to the NIC's PCI function
    (as in the fixture tree); without, a link into devices/virtual/net, as the kernel makes for bridges."""
    root = sysfs / "class/net" / name if device else sysfs / "devices/virtual/net" / name
    root.mkdir(parents=True)
    (root / "operstate").write_text(operstate + "\n")
    (root / "type").write_text(f"{kind}\n")
    if operstate == "up":
        (root / "carrier").write_text("1\n")
    if device:
        (root / "device").symlink_to(device_link)
    else:
        (sysfs / "class/net" / name).symlink_to(f"../../devices/virtual/net/{name}")
    return root


def test_ethernet_missing_down_and_unreadable(tmp_path: Path) -> None:
    sysfs = _net_tree(tmp_path)
    _interface(sysfs, "eno2", "down")
    broken = _interface(sysfs, "eno3", "up")
    (broken / "operstate").write_text("sideways\n")
    found = run(tmp_path, sysfs, expect_ethernet=["eno1", "eno2", "eno3", "eth9"])
    # WARNING by default: a link down for one pass may be a flap, which must drain after jobs, not kill them.
    assert codes(found) == [
        ("ETHERNET_DOWN", Status.WARNING, "eno2"),
        ("ETHERNET_MISSING", Status.WARNING, "eth9"),
        ("ETHERNET_UNREADABLE", Status.UNKNOWN, "eno3"),
    ]
    (down,) = [f for f in found if f.code == "ETHERNET_DOWN"]
    assert down.details["operstate"] == "down"
    assert codes(run(tmp_path, sysfs, expect_ethernet=["eth9"], ethernet_severity="CRITICAL")) == [
        ("ETHERNET_MISSING", Status.CRITICAL, "eth9")
    ]
    # Missing CPUs or memory keep their own grade.
    assert codes(run(tmp_path, sysfs, expect_ethernet=["eth9"], inventory_severity="WARNING")) == [
        ("ETHERNET_MISSING", Status.WARNING, "eth9")
    ]


def test_ethernet_without_class_net_is_unknown_not_missing(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    (finding,) = run(tmp_path, sysfs, clock_sync="off", expect_ethernet=["eno1"])
    assert (finding.code, finding.status) == ("NET_SYSFS_UNREADABLE", Status.UNKNOWN)
    with pytest.raises(NotApplicable):
        run(tmp_path, sysfs, clock_sync="off")  # nothing expected: nothing read


def test_baseline_records_up_ethernet_with_a_device_only(tmp_path: Path) -> None:
    sysfs = _net_tree(tmp_path)
    assert physical_ethernet(sysfs) == ["eno1"]  # lo and docker0 have no device; docker0 is down too
    _interface(sysfs, "br0", "up", device=False)  # a bridge: virtual
    _interface(sysfs, "ibp23s0", "up", kind=32)  # IPoIB: a device, but not Ethernet
    _interface(sysfs, "eno2", "down")
    _interface(sysfs, "ens1f0", "unknown")  # a driver that leaves operstate unknown, without carrier
    assert physical_ethernet(sysfs) == ["eno1"]
    _interface(sysfs, "ens2", "up")
    assert physical_ethernet(sysfs) == ["eno1", "ens2"]
    assert physical_ethernet(tmp_path / "nowhere") == []


def test_baseline_leaves_out_usb_network_and_sr_iov_virtual_functions(tmp_path: Path) -> None:
    sysfs = _net_tree(tmp_path)
    # A BMC's network over USB (cdc_ether usb0): Ethernet with a device, under a USB root hub.
    hub = "devices/pci0000:00/0000:00:14.0/usb1/1-3/1-3:1.0"
    (sysfs / hub).mkdir(parents=True)
    _interface(sysfs, "usb0", "up", device_link=f"../../../{hub}")
    # An SR-IOV virtual function of the NIC: its PCI function links to the physical one (physfn).
    vf = sysfs / "devices/pci0000:00/0000:00:1c.0/0000:01:00.2"
    vf.mkdir()
    (vf / "physfn").symlink_to("../0000:01:00.0")
    _interface(sysfs, "ens1f0v0", "up", device_link="../../../devices/pci0000:00/0000:00:1c.0/0000:01:00.2")
    _interface(sysfs, "ens2", "up")
    assert physical_ethernet(sysfs) == ["eno1", "ens2"]


@given(st.sampled_from(sorted(OPERSTATES)) | st.text(max_size=20), st.none() | st.sampled_from(["0", "1", "1\n", ""]))
def test_operstate_parser_and_link_up(text: str, carrier: Any) -> None:
    try:
        state = parse_operstate(text + "\n", "SRC")
    except ValueError as exc:
        assert str(exc).startswith("SRC: ") and text.strip() not in OPERSTATES
        return
    assert state in OPERSTATES
    up = link_up(state, carrier)
    assert up == (state == "up" or (state == "unknown" and carrier is not None and carrier.strip() == "1"))


@given(st.text(max_size=20))
def test_interface_names_the_kernel_would_refuse_are_refused(name: str) -> None:
    if valid_interface_name(name):
        assert 1 <= len(name) <= 15 and "/" not in name and name not in (".", "..")
        assert HostSettings(expect_ethernet=[name]).expect_ethernet == [name]
    else:
        with pytest.raises(ValueError, match="not a network interface name"):
            HostSettings(expect_ethernet=[name])


def test_reading_the_clock_state_runs_no_ldconfig_and_imports_no_ctypes_util() -> None:
    # ctypes.util.find_library runs ldconfig and imports tempfile, shutil and subprocess: about
    # 7 ms of every cold pass with the host check on (bench/README.md). libc comes from the
    # interpreter's own symbols instead.
    code = (
        "import sys; from healthd_checks.host.check import KernelTimex; KernelTimex().read(); "
        "print(sorted(m for m in ('ctypes.util', 'tempfile', 'subprocess') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "[]"


# /proc/cpuinfo as arm64 writes it (arch/arm64/kernel/cpuinfo.c, c_show): no "physical id".
_GRACE_CPU = (
    "processor\t: {n}\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32\n"
    "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd4f\nCPU revision\t: 0\n\n"
)
# As x86 writes it (arch/x86/kernel/cpu/proc.c, show_cpuinfo): two sockets of 2 cores, 2 threads each.
_X86_CPU = "processor\t: {n}\nphysical id\t: {socket}\ncpu cores\t: 2\nsiblings\t: 4\ncpu MHz\t\t: 2400.000\n\n"


def test_nhc_counts_every_arm64_processor_a_socket() -> None:
    grace = "".join(_GRACE_CPU.format(n=n) for n in range(128))
    assert parse_cpuinfo_nhc(grace) == (128, 128, 128)
    x86 = "".join(_X86_CPU.format(n=n, socket=n // 4) for n in range(8))
    assert parse_cpuinfo_nhc(x86) == (2, 4, 8)
    # No processor line and no physical id: NHC says one of each.
    assert parse_cpuinfo_nhc("") == (1, 1, 1)
    with pytest.raises(ValueError, match="no count"):
        parse_cpuinfo_nhc("processor : 0\nphysical id : 0\ncpu cores : two\n")


def test_a_grace_node_meets_its_nhc_cpu_counts_only_when_counted_as_nhc_counts(tmp_path: Path) -> None:
    """A GB200 file's `check_hw_cpuinfo 128 128 128`: sysfs has one package there, NHC 128 sockets."""
    procfs = tmp_path / "proc"
    procfs.mkdir()
    (procfs / "cpuinfo").write_text("".join(_GRACE_CPU.format(n=n) for n in range(128)))
    expect = {"clock_sync": "off", "expect_sockets": 128, "expect_cpus": 128, "expect_threads_per_core": 1}
    assert run(tmp_path, procfs=procfs, cpu_count_as="nhc", **expect) == []
    found = codes(run(tmp_path, procfs=procfs, cpu_count_as="nhc", **{**expect, "expect_sockets": 2}))
    assert found == [("CPU_TOPOLOGY", Status.CRITICAL, "sockets")]
    (unread,) = run(tmp_path, procfs=tmp_path, cpu_count_as="nhc", **expect)
    assert (unread.code, unread.status) == ("CPUINFO_UNREADABLE", Status.UNKNOWN)


def test_swap_free_memory_and_load_as_nhc_reads_them(tmp_path: Path) -> None:
    """check_hw_swap, check_hw_swap_free, check_hw_mem_free (lbnl_hw.nhc), check_ps_loadavg (lbnl_ps.nhc)."""
    procfs = tmp_path / "proc"
    procfs.mkdir()
    (procfs / "meminfo").write_text(
        "MemTotal: 4194304 kB\nMemFree: 1048576 kB\nBuffers: 0 kB\nCached: 1048576 kB\n"
        "SwapTotal: 2097152 kB\nSwapFree: 1048576 kB\n"
    )
    (procfs / "loadavg").write_text("7.00 6.72 6.59 7/176 26174\n")
    base = {"clock_sync": "off"}
    passing = {"expect_swap_gib": 2, "expect_swap_max_gib": 2, "min_free_swap_gib": 1, "min_free_memory_gib": 3}
    assert run(tmp_path, procfs=procfs, **base, **passing, max_load_1m=8, max_load_15m=7) == []
    failing = {"expect_swap_max_gib": 0, "min_free_swap_gib": 1.5, "min_free_memory_gib": 3.5}
    found = codes(run(tmp_path, procfs=procfs, **base, **failing, max_load_1m=7, max_load_15m=6))
    assert found == [
        ("LOAD_HIGH", Status.WARNING, "load_15m"),
        ("LOAD_HIGH", Status.WARNING, "load_1m"),
        ("MEMORY_FREE_LOW", Status.WARNING, "memory"),
        ("SWAP_FREE_LOW", Status.WARNING, "swap"),
        ("SWAP_SIZE", Status.CRITICAL, "swap"),
    ]
    (procfs / "loadavg").write_text("seven\n")
    (unread,) = run(tmp_path, procfs=procfs, **base, max_load_1m=8)
    assert (unread.code, unread.status) == ("LOADAVG_MALFORMED", Status.UNKNOWN)


def test_dmi_matches_are_judged_on_the_line_nhc_makes(tmp_path: Path) -> None:
    """check_dmi_data_match (lbnl_dmi.nhc) on dmidecode's 'BIOS Information: Version: 2.11.0', here from sysfs."""
    sysfs = tmp_path / "sys"
    dmi = sysfs / "class/dmi/id"
    dmi.mkdir(parents=True)
    (dmi / "bios_version").write_text("2.11.0\n")
    (dmi / "product_name").write_text("PowerEdge XE9680\n")
    base = {"clock_sync": "off"}
    expect = ["BIOS Information: Version: 2.11.0", "System Information: Product Name: PowerEdge*"]
    forbid = ["/^BIOS Information: Version: 1\\./"]
    assert run(tmp_path, sysfs=sysfs, **base, expect_dmi=expect, forbid_dmi=forbid) == []
    found = run(tmp_path, sysfs=sysfs, **base, expect_dmi=["BIOS Information: Version: 2.9.4"], forbid_dmi=expect[1:])
    assert codes(found) == [
        ("DMI_MISMATCH", Status.WARNING, "bios_version"),
        ("DMI_MISMATCH", Status.WARNING, "product_name"),
    ]
    (missing,) = run(tmp_path, sysfs=sysfs, **base, expect_dmi=["Base Board Information: Version: 1"])
    assert (missing.code, missing.status) == ("DMI_UNREADABLE", Status.UNKNOWN)
    (absent,) = run(tmp_path, sysfs=tmp_path / "none", **base, expect_dmi=expect)
    assert (absent.code, absent.status) == ("DMI_UNREADABLE", Status.UNKNOWN)
    with pytest.raises(ValueError, match="could match lines"):
        HostSettings(expect_dmi=["*Version: 2.11.0"])
