"""The ``host`` check: the clock is synchronised, and the node has the CPUs, memory and versions it should.

``gather`` asks the kernel for its clock discipline state (adjtimex(2) with no modes
set: a read, allowed to any user) through ``TimexSource``, or replays a recorded
reading (``timex``); it reads the CPU topology under ``[paths].sysfs/devices/system/cpu``
(Documentation/admin-guide/cputopology.rst), ``[paths].procfs/meminfo``, the kernel
release (``sys/kernel/osrelease``), the NVIDIA driver's version
(``driver/nvidia/version``, else ``sysfs/module/nvidia/version``), the firmware
(``class/dmi/id/bios_version``) and the expected network interfaces' links
(``class/net/NAME/operstate`` and ``carrier``); for NHC's checks, ``cpuinfo`` counted as NHC
counts it (``cpu_count_as = "nhc"``), swap and free memory from ``meminfo``, ``loadavg``, and
the DMI strings under ``class/dmi/id``. ``judge`` compares them with the ``expect_*``,
``min_*``, ``max_*`` and ``*_dmi`` settings: only what is set is judged. See docs/host.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Protocol, Union

from healthd.checks.plugin import CheckSpec, NotApplicable, Staged, Unobserved, Verdict, read_parsed
from healthd.config.hosts import matcher
from healthd.config.nhcdmi import dmi_line, field_file
from healthd.config.view import updated
from healthd.model import DetailValue, Finding, Status
from healthd.text import one_line, read_kernel_text

from ..common.procs import read_processes, system_uid
from ..common.sysfs import SysfsError, read_value
from .parse import (
    ARPHRD_ETHER,
    NhcCpuCounts,
    link_up,
    parse_cpu_list,
    parse_cpuinfo_nhc,
    parse_driver_version,
    parse_loadavg,
    parse_meminfo,
    parse_operstate,
)

if TYPE_CHECKING:
    from healthd.checks.plugin import CheckContext, JudgeContext

    from .settings import HostSettings

# include/uapi/linux/timex.h
# A USB root hub's name in the device tree: usbN (usb_alloc_dev, drivers/usb/core/usb.c).
_USB_HUB = re.compile(r"usb[0-9]+")
STA_UNSYNC = 0x0040
TIME_ERROR = 5


class Timex(NamedTuple):
    """What adjtimex(2) says of the clock: its return value (clock state), status bits and error bounds (µs)."""

    state: int
    status: int
    maxerror_us: int
    esterror_us: int

    @property
    def synchronised(self) -> bool:
        # adjtimex returns TIME_ERROR while STA_UNSYNC is set (kernel/time/ntp.c); either says so.
        return not (self.status & STA_UNSYNC) and self.state != TIME_ERROR


class TimexSource(Protocol):
    """Anything that can tell the kernel's clock state."""

    def read(self) -> Timex: ...


class KernelTimex:
    """adjtimex(2) through libc, with ``modes`` 0: it changes nothing."""

    def read(self) -> Timex:
        import ctypes

        class _Timeval(ctypes.Structure):
            _fields_ = [("sec", ctypes.c_long), ("usec", ctypes.c_long)]

        # struct timex (include/uapi/linux/timex.h; glibc's sys/timex.h): longs and ints in this order.
        class _Timex(ctypes.Structure):
            _fields_ = [
                ("modes", ctypes.c_uint),
                ("offset", ctypes.c_long),
                ("freq", ctypes.c_long),
                ("maxerror", ctypes.c_long),
                ("esterror", ctypes.c_long),
                ("status", ctypes.c_int),
                ("constant", ctypes.c_long),
                ("precision", ctypes.c_long),
                ("tolerance", ctypes.c_long),
                ("time", _Timeval),
                ("tick", ctypes.c_long),
                ("ppsfreq", ctypes.c_long),
                ("jitter", ctypes.c_long),
                ("shift", ctypes.c_int),
                ("stabil", ctypes.c_long),
                ("jitcnt", ctypes.c_long),
                ("calcnt", ctypes.c_long),
                ("errcnt", ctypes.c_long),
                ("stbcnt", ctypes.c_long),
                ("tai", ctypes.c_int),
                ("padding", ctypes.c_int * 11),
            ]

        # The interpreter's own symbols, libc's among them (dlopen(3) of NULL: the program and the
        # libraries it loaded), not ctypes.util.find_library("c"): that imports tempfile, shutil and
        # subprocess and runs ldconfig, about 7 ms of a cold pass (bench/README.md).
        libc = ctypes.CDLL(None, use_errno=True)
        timex = _Timex()
        state = libc.adjtimex(ctypes.byref(timex))
        if state < 0:
            raise OSError(ctypes.get_errno(), "adjtimex failed")
        return Timex(state, timex.status, timex.maxerror, timex.esterror)


class RecordedTimex(NamedTuple):
    """A reading saved as JSON ``{"state": 0, "status": 8193, "maxerror_us": 1500, "esterror_us": 20}``."""

    path: Path

    def read(self) -> Timex:
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise OSError(f"{self.path}: {exc}") from None
        values = {}
        for key in ("state", "status", "maxerror_us", "esterror_us"):
            value = document.get(key) if isinstance(document, dict) else None
            if not isinstance(value, int) or isinstance(value, bool):
                raise OSError(f"{self.path}: {key}: expected an integer, got {value!r}")
            values[key] = value
        return Timex(**values)


class Topology(NamedTuple):
    """Online CPUs, the sockets they sit in, and the most hardware threads one core has."""

    cpus: int
    sockets: int
    threads_per_core: int


class Interface(NamedTuple):
    """A network interface under ``class/net``: present or not, its operstate, whether its link is up.

    ``problem`` says why the state could not be read (``up`` is then None).
    """

    name: str
    present: bool
    operstate: str = ""
    up: Optional[bool] = None
    speed_mbps: Optional[int] = None
    problem: str = ""


class HostObservation(NamedTuple):
    timex: Union[Timex, Unobserved, None]
    topology: Union[Topology, Unobserved, None]
    meminfo: Union[dict[str, int], Unobserved, None]
    kernel: Union[str, Unobserved, None]
    driver: Union[str, Unobserved, None]
    bios: Union[str, Unobserved, None]
    ethernet: Union[tuple[Interface, ...], Unobserved, None] = None
    # Asked only of an unsynchronised clock under clock_sync "when_disciplined": the time daemon
    # found running ("" for none).
    time_daemon: Union[str, Unobserved, None] = None
    loadavg: Union[tuple[float, float, float], Unobserved, None] = None
    # dmi-id file -> its string, or why it could not be read.
    dmi: Union[dict[str, Union[str, Unobserved]], Unobserved, None] = None


def read_topology(sysfs: Path) -> Topology:
    """From ``devices/system/cpu``: ``online``, and each online CPU's package id and thread siblings."""
    root = sysfs / "devices/system/cpu"
    online = parse_cpu_list(read_value(root / "online"), str(root / "online"))
    packages: set[str] = set()
    threads = 1
    for cpu in sorted(online):
        topology = root / f"cpu{cpu}/topology"
        packages.add(read_value(topology / "physical_package_id").strip())
        siblings = topology / "thread_siblings_list"
        # Siblings taken offline (SMT switched off) are not threads this node can use.
        threads = max(threads, len(parse_cpu_list(read_value(siblings), str(siblings)) & online))
    return Topology(len(online), len(packages), threads)


def nhc_topology(counts: NhcCpuCounts) -> Topology:
    """NHC's counts as a topology: its threads are the CPUs; threads per core only where cores divide them
    (0 otherwise, which no expected count equals: NHC's own core count would differ too)."""
    per_core = counts.threads // counts.cores if counts.cores and counts.threads % counts.cores == 0 else 0
    return Topology(counts.threads, counts.sockets, per_core)


def _read_topology(ctx: CheckContext[HostSettings]) -> Union[Topology, Unobserved]:
    if ctx.settings.cpu_count_as == "nhc":
        counts = read_parsed(ctx.paths.procfs / "cpuinfo", parse_cpuinfo_nhc, "CPUINFO", "replace")
        return counts if isinstance(counts, Unobserved) else nhc_topology(counts)
    try:
        return read_topology(ctx.paths.sysfs)
    except (SysfsError, ValueError) as exc:
        return Unobserved("CPU_TOPOLOGY_UNREADABLE", "cpu", str(exc))


def _first_line(path: Path, code: str) -> Union[str, Unobserved]:
    try:
        return one_line(read_value(path).strip().partition("\n")[0], 120)
    except SysfsError as exc:
        return Unobserved(code, str(path), str(exc))


def _driver(ctx: CheckContext[HostSettings]) -> Union[str, Unobserved]:
    proc = ctx.paths.procfs / "driver/nvidia/version"
    try:
        version = parse_driver_version(read_kernel_text(proc))
    except OSError:
        version = None
    if version is not None:
        return version
    return _first_line(ctx.paths.sysfs / "module/nvidia/version", "NVIDIA_DRIVER_UNREADABLE")


def _optional(path: Path) -> Optional[str]:
    """A value file that the kernel may refuse to read: ``carrier`` and ``speed`` fail (EINVAL) on a link set down."""
    try:
        return read_value(path).strip()
    except SysfsError:
        return None


def read_interface(net: Path, name: str) -> Interface:
    """``class/net/NAME``: absent, or its operstate, carrier and speed (sysfs-class-net)."""
    root = net / name
    if not root.exists():
        return Interface(name, present=False)
    try:
        operstate = parse_operstate(read_value(root / "operstate"), str(root / "operstate"))
    except (SysfsError, ValueError) as exc:
        return Interface(name, present=True, problem=str(exc))
    speed = _optional(root / "speed")
    # speed reads -1 where the driver does not know it (a link that is down).
    mbps = int(speed) if speed is not None and speed.isdigit() and len(speed) < 8 else None
    return Interface(name, True, operstate, link_up(operstate, _optional(root / "carrier")), mbps)


def _ethernet(ctx: CheckContext[HostSettings]) -> Union[tuple[Interface, ...], Unobserved]:
    net = ctx.paths.sysfs / "class/net"
    if not net.is_dir():
        # Every Linux machine has class/net (the loopback interface at least): its absence is not "no interfaces".
        return Unobserved("NET_SYSFS_UNREADABLE", str(net), f"cannot list network interfaces: no directory {net}")
    names = dict.fromkeys([*ctx.settings.expect_ethernet, *ctx.settings.expect_interfaces])
    return tuple(read_interface(net, name) for name in names)


def _node_nic(sysfs: Path, device: Path) -> bool:
    """Whether the ``device`` of a network interface is a NIC of the node's own, worth expecting on every node like it.

    Not a USB one: a BMC's network over USB (cdc_ether ``usb0``, Ethernet too) comes
    and goes with the BMC, and a USB device sits under a ``usbN`` root hub in the
    device tree. Not an SR-IOV virtual function (it has ``physfn``, the link to its
    physical function; Documentation/PCI/pci-iov-howto.rst): VFs are made and
    handed to guests or containers at run time, not part of the hardware.
    """
    if (device / "physfn").exists():
        return False
    resolved = device.resolve()
    inside = resolved.relative_to(sysfs.resolve()) if resolved.is_relative_to(sysfs.resolve()) else resolved
    return not any(_USB_HUB.fullmatch(part) for part in inside.parts)


def physical_ethernet(sysfs: Path) -> list[str]:
    """The up Ethernet interfaces that have a NIC of the node behind them.

    Virtual ones (lo, bridges, veth, docker0) have no ``device`` link; IPoIB and
    loopback are other ``type``s than Ethernet; USB network interfaces and SR-IOV
    virtual functions are left out (``_node_nic``).
    """
    net = sysfs / "class/net"
    names: list[str] = []
    for entry in sorted(net.iterdir()) if net.is_dir() else ():
        device = entry / "device"
        if not device.exists() or _optional(entry / "type") != str(ARPHRD_ETHER) or not _node_nic(sysfs, device):
            continue
        if read_interface(net, entry.name).up:
            names.append(entry.name)
    return names


# The daemons that discipline the kernel's clock and clear STA_UNSYNC once they have a source
# (chrony's, ntpd's and ntpsec's sys_linux drivers, systemd-timesyncd, linuxptp's phc2sys),
# by the command name the kernel keeps (15 characters) or the executable's file name.
TIME_DAEMONS = ("chronyd", "ntpd", "systemd-timesyncd", "phc2sys", "ptp4l", "timemaster", "openntpd")


def find_time_daemon(procfs: Path) -> Union[str, Unobserved]:
    """The name of a time daemon running as root or a system account, "" for none.

    A process a user started, under any name, is not one: otherwise a user could name a
    process ``chronyd`` on a machine without NTP and have its unsynchronised clock judged.
    """
    try:
        table = read_processes(procfs, TIME_DAEMONS)
    except OSError as exc:
        return Unobserved("CLOCK_DAEMON_UNREADABLE", "clock", one_line(f"cannot read the process table: {exc}"))
    for process in table.processes:
        # The owner of /proc/PID, which no process writes, and the real uid must both be the system's.
        if process.alive and not process.users and system_uid(process.status.real_uid):
            for name in TIME_DAEMONS:
                if process.named(name):
                    return name
    return ""


def _read_clock(ctx: CheckContext[HostSettings]) -> tuple[Union[Timex, Unobserved, None], Union[str, Unobserved, None]]:
    settings = ctx.settings
    if settings.clock_sync == "off":
        return None, None
    source: TimexSource = RecordedTimex(settings.timex) if settings.timex else KernelTimex()
    try:
        timex = source.read()
    except OSError as exc:
        return Unobserved("CLOCK_UNREADABLE", "clock", one_line(f"cannot read the clock state: {exc}")), None
    if timex.synchronised or settings.clock_sync == "required":
        return timex, None
    return timex, find_time_daemon(ctx.paths.procfs)


def gather(ctx: CheckContext[HostSettings]) -> HostObservation:
    settings = ctx.settings
    timex, time_daemon = _read_clock(ctx)
    topology: Union[Topology, Unobserved, None] = None
    if settings.expect_cpus or settings.expect_sockets or settings.expect_threads_per_core:
        topology = _read_topology(ctx)
    meminfo: Union[dict[str, int], Unobserved, None] = None
    memory = (settings.expect_memory_gib, settings.expect_memory_max_gib, settings.expect_hugepages, *_swap(settings))
    if any(value is not None for value in memory):
        meminfo = read_parsed(ctx.paths.procfs / "meminfo", parse_meminfo, "MEMINFO", "replace")
    kernel = bios = driver = None
    if settings.expect_kernel:
        kernel = _first_line(ctx.paths.procfs / "sys/kernel/osrelease", "KERNEL_RELEASE_UNREADABLE")
    if settings.expect_driver:
        driver = _driver(ctx)
    if settings.expect_bios:
        bios = _first_line(ctx.paths.sysfs / "class/dmi/id/bios_version", "BIOS_VERSION_UNREADABLE")
    ethernet = _ethernet(ctx) if settings.expect_ethernet or settings.expect_interfaces else None
    loadavg = None
    if any(limit is not None for limit in _load_limits(settings)):
        loadavg = read_parsed(ctx.paths.procfs / "loadavg", parse_loadavg, "LOADAVG")
    dmi = _read_dmi(ctx) if settings.expect_dmi or settings.forbid_dmi else None
    return HostObservation(timex, topology, meminfo, kernel, driver, bios, ethernet, time_daemon, loadavg, dmi)


def _read_dmi(ctx: CheckContext[HostSettings]) -> Union[dict[str, Union[str, Unobserved]], Unobserved]:
    root = ctx.paths.sysfs / "class/dmi/id"
    if not root.is_dir():
        # No SMBIOS table reached the kernel (many arm64 boards, some VMs): NHC's dmidecode finds no
        # handle there and fails the line; healthd cannot observe it.
        return Unobserved("DMI_UNREADABLE", str(root), f"no DMI strings: no directory {root}")
    found: dict[str, Union[str, Unobserved]] = {}
    for match in (*ctx.settings.expect_dmi, *ctx.settings.forbid_dmi):
        name = field_file(match)[2]
        try:
            # dmi-id.c writes the string and a newline; the string is kept as the firmware gave it.
            found[name] = read_value(root / name)
        except SysfsError as exc:
            found[name] = Unobserved("DMI_UNREADABLE", str(root / name), one_line(str(exc)))
    return found


def _judge_dmi(values: dict[str, Union[str, Unobserved]], jc: JudgeContext[HostSettings]) -> list[Finding]:
    """NHC's check_dmi_data_match (scripts/lbnl_dmi.nhc): a match string must (``-n``: must not) match the
    line ``TYPE: FIELD: value``, NHC's way (healthd.config.hosts.matcher)."""
    findings: list[Finding] = []
    reported: set[str] = set()
    for match, wanted in [(m, True) for m in jc.settings.expect_dmi] + [(m, False) for m in jc.settings.forbid_dmi]:
        type_string, field, name = field_file(match)
        value = values[name]
        if isinstance(value, Unobserved):
            findings += [] if name in reported else [value.finding(jc)]
            reported.add(name)
            continue
        line = dmi_line(type_string, field, value)
        if matcher(match)(line) != wanted:
            verb = "does not match" if wanted else "matches"
            message = one_line(f"DMI {line!r} {verb} {match!r}")
            status = Status[jc.settings.version_severity]
            findings.append(jc.finding(status, "DMI_MISMATCH", name, message, found=one_line(value, 120)))
    return findings


def _load_limits(settings: HostSettings) -> tuple[Optional[float], Optional[float], Optional[float]]:
    return settings.max_load_1m, settings.max_load_5m, settings.max_load_15m


def _swap(settings: HostSettings) -> tuple[Optional[float], ...]:
    return (
        settings.expect_swap_gib,
        settings.expect_swap_max_gib,
        settings.min_free_swap_gib,
        settings.min_free_memory_gib,
    )


_GIB = 2**20  # kB in a GiB: /proc/meminfo counts in kB (proc(5))


def _judge_usage(meminfo: dict[str, int], jc: JudgeContext[HostSettings]) -> list[Finding]:
    """Swap and free memory as NHC 1.4.3 reads them from /proc/meminfo (scripts/lbnl_hw.nhc):
    ``check_hw_swap`` SwapTotal within a range, ``check_hw_swap_free`` SwapFree, and
    ``check_hw_mem_free`` MemFree + Buffers + Cached + SwapFree, each at least its minimum."""
    settings = jc.settings
    swap = meminfo.get("SwapTotal", 0) / _GIB
    free_swap = meminfo.get("SwapFree", 0) / _GIB
    free = sum(meminfo.get(name, 0) for name in ("MemFree", "Buffers", "Cached", "SwapFree")) / _GIB
    inventory, usage = Status[settings.inventory_severity], Status[settings.usage_severity]
    findings: list[Finding] = []
    for grade, code, subject, have, low, high in (
        (inventory, "SWAP_SIZE", "swap", swap, settings.expect_swap_gib, settings.expect_swap_max_gib),
        (usage, "SWAP_FREE_LOW", "swap", free_swap, settings.min_free_swap_gib, None),
        (usage, "MEMORY_FREE_LOW", "memory", free, settings.min_free_memory_gib, None),
    ):
        if low is not None and have < low:
            message = f"{have:.3f} GiB {code.lower().replace('_', ' ')}, at least {low:g} GiB expected"
            findings.append(jc.finding(grade, code, subject, message, found_gib=round(have, 3), expected_gib=low))
        elif high is not None and have > high:
            message = f"{have:.3f} GiB swap, at most {high:g} GiB expected"
            findings.append(jc.finding(grade, code, subject, message, found_gib=round(have, 3), expected_max_gib=high))
    return findings


def _judge_load(loadavg: tuple[float, float, float], jc: JudgeContext[HostSettings]) -> list[Finding]:
    """NHC's check_ps_loadavg (scripts/lbnl_ps.nhc) fails when a load average, cut to a whole number, reaches
    its limit: for a whole-number limit, when the load itself reaches it."""
    findings: list[Finding] = []
    for minutes, load, limit in zip((1, 5, 15), loadavg, _load_limits(jc.settings)):
        if limit is not None and load >= limit:
            message = f"{minutes}-minute load average {load:g}, limit {limit:g}"
            status = Status[jc.settings.usage_severity]
            findings.append(jc.finding(status, "LOAD_HIGH", f"load_{minutes}m", message, found=load, limit=limit))
    return findings


def _judge_clock(timex: Timex, time_daemon: Optional[str], jc: JudgeContext[HostSettings]) -> list[Finding]:
    settings = jc.settings
    details: dict[str, DetailValue] = {
        "state": timex.state,
        "timex_status": f"0x{timex.status:04x}",
        "maxerror_ms": timex.maxerror_us / 1000,
    }
    if not timex.synchronised and time_daemon == "":
        message = (
            "no time daemon runs, so the kernel's clock is not disciplined (adjtimex: STA_UNSYNC); not judged: "
            'set [checks.host] clock_sync = "required" where every node must keep time'
        )
        return [jc.finding(Status.OK, "CLOCK_UNDISCIPLINED", "clock", message, **details)]
    if not timex.synchronised:
        cause = f"{time_daemon} runs but has not synchronised it" if time_daemon else "is chronyd or ntpd running?"
        message = f"the kernel's clock is not synchronised (adjtimex: STA_UNSYNC): {cause}"
        return [jc.finding(Status[settings.clock_severity], "CLOCK_UNSYNCHRONISED", "clock", message, **details)]
    limit = settings.clock_max_error_ms
    if limit is not None and timex.maxerror_us / 1000 > limit:
        message = f"the clock's maximum error is {timex.maxerror_us / 1000:g} ms, above {limit:g} ms"
        return [jc.finding(Status[settings.clock_severity], "CLOCK_ERROR_LARGE", "clock", message, **details)]
    return []


def _judge_memory(gib: float, jc: JudgeContext[HostSettings]) -> list[Finding]:
    """MemTotal against the expected range, widened by ``memory_tolerance_percent`` of MemTotal.

    NHC's check_hw_physmem (scripts/lbnl_hw.nhc) fails when MemTotal plus its fudge is below
    the minimum, or MemTotal less the fudge above the maximum, the fudge a percentage of
    MemTotal: firmware and the kernel keep a little memory that moves between boots.
    """
    settings = jc.settings
    grade = Status[settings.inventory_severity]
    slack = gib * settings.memory_tolerance_percent / 100
    low, high = settings.expect_memory_gib, settings.expect_memory_max_gib
    tolerance = f" (tolerance {settings.memory_tolerance_percent:g}%)" if slack else ""
    details: dict[str, float] = {"found_gib": round(gib, 1)}
    if slack:
        details["tolerance_percent"] = settings.memory_tolerance_percent
    if low is not None and gib + slack < low:
        message = f"{gib:.1f} GiB of memory (MemTotal), at least {low:g} GiB expected{tolerance}"
        return [jc.finding(grade, "MEMORY_MISSING", "memory", message, expected_gib=low, **details)]
    if high is not None and gib - slack > high:
        message = f"{gib:.1f} GiB of memory (MemTotal), at most {high:g} GiB expected{tolerance}"
        return [jc.finding(grade, "MEMORY_EXCESS", "memory", message, expected_max_gib=high, **details)]
    return []


def _judge_inventory(observed: HostObservation, jc: JudgeContext[HostSettings]) -> list[Finding]:
    settings = jc.settings
    grade = Status[settings.inventory_severity]
    findings: list[Finding] = []
    topology = observed.topology
    if isinstance(topology, Topology):
        for name, have, want in (
            ("cpus", topology.cpus, settings.expect_cpus),
            ("sockets", topology.sockets, settings.expect_sockets),
            ("threads_per_core", topology.threads_per_core, settings.expect_threads_per_core),
        ):
            if want is not None and have != want:
                message = f"{have} {name.replace('_', ' ')} online, {want} expected"
                findings.append(jc.finding(grade, "CPU_TOPOLOGY", name, message, found=have, expected=want))
    meminfo = observed.meminfo
    if isinstance(meminfo, dict):
        findings += _judge_memory(meminfo["MemTotal"] / 2**20, jc)
        findings += _judge_usage(meminfo, jc)
        pages = meminfo.get("HugePages_Total")
        if settings.expect_hugepages is not None and pages != settings.expect_hugepages:
            message = f"{pages} huge pages, {settings.expect_hugepages} expected"
            findings.append(
                jc.finding(grade, "HUGEPAGES", "hugepages", message, found=pages, expected=settings.expect_hugepages)
            )
    return findings


def _judge_versions(observed: HostObservation, jc: JudgeContext[HostSettings]) -> list[Finding]:
    settings = jc.settings
    findings: list[Finding] = []
    for subject, code, have, allowed in (
        ("kernel", "KERNEL_VERSION", observed.kernel, settings.expect_kernel),
        ("nvidia_driver", "DRIVER_VERSION", observed.driver, settings.expect_driver),
        ("bios", "BIOS_VERSION", observed.bios, settings.expect_bios),
    ):
        if isinstance(have, str) and allowed and have not in allowed:
            message = f"{subject.replace('_', ' ')} version {have}, expected {' or '.join(allowed)}"
            findings.append(jc.finding(Status[settings.version_severity], code, subject, message, found=have))
    return findings


def _judge_ethernet(interfaces: tuple[Interface, ...], jc: JudgeContext[HostSettings]) -> list[Finding]:
    """Each expected interface: missing or down is graded ``ethernet_severity``; unreadable is UNKNOWN.

    An interface only in ``expect_interfaces`` must exist and nothing more, as NHC's
    check_hw_eth asks (scripts/lbnl_hw.nhc: the names in /proc/net/dev): a bridge such as
    docker0 with nothing attached is down, and that is its normal state.
    """
    grade = Status[jc.settings.ethernet_severity]
    must_be_up = frozenset(jc.settings.expect_ethernet)
    findings: list[Finding] = []
    for interface in interfaces:
        name = interface.name
        if not interface.present:
            message = f"network interface {name} is missing (no class/net/{name})"
            findings.append(jc.finding(grade, "ETHERNET_MISSING", name, message))
        elif name not in must_be_up:
            continue
        elif interface.up is None:
            message = one_line(f"cannot read the state of network interface {name}: {interface.problem}")
            findings.append(jc.finding(Status.UNKNOWN, "ETHERNET_UNREADABLE", name, message))
        elif not interface.up:
            message = f"network interface {name} is not up (operstate {interface.operstate})"
            findings.append(jc.finding(grade, "ETHERNET_DOWN", name, message, operstate=interface.operstate))
    return findings


def judge(observed: HostObservation, jc: JudgeContext[HostSettings]) -> Verdict:
    parts = (
        observed.timex,
        observed.topology,
        observed.meminfo,
        observed.kernel,
        observed.driver,
        observed.bios,
        observed.ethernet,
        observed.loadavg,
        observed.dmi,
    )
    if all(part is None for part in parts):
        raise NotApplicable("clock_sync is off and nothing is expected in [checks.host]")
    findings = [part.finding(jc) for part in (*parts, observed.time_daemon) if isinstance(part, Unobserved)]
    if isinstance(observed.timex, Timex) and not isinstance(observed.time_daemon, Unobserved):
        findings += _judge_clock(observed.timex, observed.time_daemon, jc)
    findings += _judge_inventory(observed, jc) + _judge_versions(observed, jc)
    if observed.ethernet is not None and not isinstance(observed.ethernet, Unobserved):
        findings += _judge_ethernet(observed.ethernet, jc)
    if isinstance(observed.dmi, dict):
        findings += _judge_dmi(observed.dmi, jc)
    if observed.loadavg is not None and not isinstance(observed.loadavg, Unobserved):
        findings += _judge_load(observed.loadavg, jc)
    return Verdict(tuple(findings))


def baseline(ctx: CheckContext[HostSettings]) -> dict[str, Any]:
    """This node's CPUs, sockets and threads per core, memory, huge pages, its kernel, driver and BIOS, up Ethernet.

    A node whose clock is synchronised now gets ``clock_sync = "required"``: a known-good node
    keeps time, so every node built like it must.
    """
    probe = updated(
        ctx.settings,
        **{
            "clock_sync": "required",
            "expect_cpus": 1,
            "expect_memory_gib": 1.0,
            "expect_kernel": ["?"],
            "expect_driver": ["?"],
            "expect_bios": ["?"],
        },
    )
    observed = gather(replace(ctx, settings=probe))
    found: dict[str, Any] = {}
    if isinstance(observed.timex, Timex) and observed.timex.synchronised:
        found["clock_sync"] = "required"
    if isinstance(observed.topology, Topology):
        topology = observed.topology
        found.update(
            expect_cpus=topology.cpus,
            expect_sockets=topology.sockets,
            expect_threads_per_core=topology.threads_per_core,
        )
    if isinstance(observed.meminfo, dict) and "MemTotal" in observed.meminfo:
        # MemTotal moves a little between boots (firmware and kernel reservations): expect 97% of it.
        found["expect_memory_gib"] = round(observed.meminfo["MemTotal"] / 2**20 * 0.97, 1)
        found["expect_hugepages"] = observed.meminfo.get("HugePages_Total", 0)
    for key, value in (
        ("expect_kernel", observed.kernel),
        ("expect_driver", observed.driver),
        ("expect_bios", observed.bios),
    ):
        if isinstance(value, str):
            found[key] = [value]
    ethernet = physical_ethernet(ctx.paths.sysfs)
    if ethernet:
        found["expect_ethernet"] = ethernet
    return found


CHECK = CheckSpec(
    name="host",
    description="clock synchronised; CPUs, memory, huge pages, kernel, NVIDIA driver, BIOS, Ethernet as expected",
    settings="healthd_checks.host.settings:HostSettings",
    baseline=baseline,
    run=Staged(gather, judge),
)
