"""Pure parsers for the ``host`` check: CPU lists, /proc/meminfo, the NVIDIA driver's version file, network links.

No I/O here; each accepts any text and raises ValueError (naming ``source`` and the
line) for what its format does not allow.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from healthd.text import records

_RANGE = re.compile(r"(\d{1,6})(?:-(\d{1,6}))?")
_MEMINFO = re.compile(r"([A-Za-z0-9_()]{1,40}):\s+(\d{1,20})(?: kB)?")
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024"
# (/proc/driver/nvidia/version, written by the driver's nv-procfs.c); open modules say "Open Kernel Module".
_NVRM = re.compile(
    r"NVRM version: NVIDIA UNIX [^ ]+ (?:Open )?Kernel Module(?: for [^ ]+)?\s+(\d{1,4}(?:\.\d{1,4}){1,3})\b"
)


def parse_cpu_list(text: str, source: str = "cpu list") -> frozenset[int]:
    """A kernel CPU list (``0-3,8,10-11``: Documentation/admin-guide/cputopology.rst) as a set of CPU numbers."""
    value = text.strip()
    if not value:
        return frozenset()
    cpus: set[int] = set()
    for part in value.split(","):
        match = _RANGE.fullmatch(part)
        if match is None:
            raise ValueError(f"{source}: {part!r} is not a CPU number or range")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise ValueError(f"{source}: range {part!r} runs backwards")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def parse_meminfo(text: str, source: str) -> dict[str, int]:
    """``/proc/meminfo`` (proc(5)) as name -> value (kB for sizes, a count for HugePages_*)."""
    values: dict[str, int] = {}
    for number, line in enumerate(records(text), 1):
        if not line.strip():
            continue
        match = _MEMINFO.fullmatch(line.strip())
        if match is None:
            raise ValueError(f"{source}:{number}: not 'Name: value [kB]': {line[:60]!r}")
        values.setdefault(match.group(1), int(match.group(2)))
    if "MemTotal" not in values:
        raise ValueError(f"{source}: no MemTotal line")
    return values


def parse_driver_version(text: str) -> Optional[str]:
    """The driver version from /proc/driver/nvidia/version, or None when the first line is not the driver's."""
    match = _NVRM.match(text.partition("\n")[0])
    return match.group(1) if match else None


# RFC 2863's operational states, as net/core/net-sysfs.c writes them to operstate
# (Documentation/ABI/testing/sysfs-class-net).
OPERSTATES = frozenset({"unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up"})
# include/uapi/linux/if_arp.h: the ``type`` of an Ethernet interface (IPoIB is 32, loopback 772).
ARPHRD_ETHER = 1


def parse_operstate(text: str, source: str) -> str:
    """An interface's ``operstate``; ValueError for anything the kernel does not write there."""
    value = text.strip()
    if value not in OPERSTATES:
        raise ValueError(f"{source}: {value[:40]!r} is not an operational state")
    return value


def link_up(operstate: str, carrier: Optional[str]) -> bool:
    """Whether the link carries traffic: operstate ``up``, or ``unknown`` with carrier.

    Drivers that do not track the operational state leave it ``unknown``
    (sysfs-class-net); for them the carrier says whether a link is there.
    """
    return operstate == "up" or (operstate == "unknown" and (carrier or "").strip() == "1")


def valid_interface_name(name: str) -> bool:
    """A name the kernel accepts for a network interface (net/core/dev.c, dev_valid_name)."""
    return 0 < len(name) < 16 and name not in (".", "..") and not any(c in "/:" or c.isspace() for c in name)


class NhcCpuCounts(NamedTuple):
    """Sockets, cores and threads as LBNL NHC counts them from /proc/cpuinfo (check_hw_cpuinfo)."""

    sockets: int
    cores: int
    threads: int


def _cpuinfo_field(fields: list[str], name: str) -> Optional[str]:
    """The value of ``name : value`` in a line split on blanks, as bash's ``read -a`` splits it."""
    size = len(name.split())
    if fields[: size + 1] == [*name.split(), ":"]:
        return fields[size + 1] if len(fields) > size + 1 else ""
    return None


def parse_cpuinfo_nhc(text: str, source: str = "/proc/cpuinfo") -> NhcCpuCounts:
    """The counts NHC 1.4.3's ``nhc_hw_gather_data`` (scripts/lbnl_hw.nhc) makes of /proc/cpuinfo.

    Each distinct ``physical id`` is a socket; cores are sockets times the last ``cpu cores``,
    threads sockets times the last ``siblings``. Where no line gives a ``physical id`` (arm64,
    NVIDIA Grace: arch/arm64/kernel/cpuinfo.c writes none), every ``processor`` is a socket,
    a core and a thread. Where neither holds, NHC says one of each.
    """
    processors = 0
    sockets: set[str] = set()
    cores = siblings = ""
    for line in records(text):
        fields = line.split()
        if _cpuinfo_field(fields, "processor") is not None:
            processors += 1
        elif (value := _cpuinfo_field(fields, "physical id")) is not None:
            sockets.add(value)
        elif (value := _cpuinfo_field(fields, "siblings")) is not None:
            siblings = value
        elif (value := _cpuinfo_field(fields, "cpu cores")) is not None:
            cores = value
    if processors and not sockets:
        return NhcCpuCounts(processors, processors, processors)
    if cores:
        if not cores.isdigit() or (siblings and not siblings.isdigit()):
            raise ValueError(f"{source}: 'cpu cores' {cores[:20]!r} or 'siblings' {siblings[:20]!r} is no count")
        threads = len(sockets) * int(siblings) if siblings else 0
        return NhcCpuCounts(len(sockets), len(sockets) * int(cores), threads)
    return NhcCpuCounts(1, 1, 1)


def parse_loadavg(text: str, source: str) -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages from ``/proc/loadavg`` (proc(5): ``0.52 0.58 0.59 1/467 12345``)."""
    fields = text.split(" ")
    try:
        values = tuple(float(field) for field in fields[:3])
    except ValueError:
        values = ()
    if len(values) != 3 or not all(0 <= value < 1e9 for value in values):
        raise ValueError(f"{source}: not three load averages: {text[:60]!r}")
    return values[0], values[1], values[2]
