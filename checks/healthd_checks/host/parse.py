"""Pure parsers for the ``host`` check: CPU lists, /proc/meminfo, the NVIDIA driver's version file, network links.

No I/O here; each accepts any text and raises ValueError (naming ``source`` and the
line) for what its format does not allow.
"""

from __future__ import annotations

import re
from typing import Optional

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
