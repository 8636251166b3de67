"""Small readers for sysfs value files and pure parsers for the formats the fabric checks read.

Reading and parsing are separate: each ``parse_*`` function takes text and raises
``ValueError`` saying what it expected; ``read_value`` fetches a file and ``read``
joins the two, turning any problem into a ``SysfsError`` that names the file.
Formats follow the kernel's sysfs ABI documentation
(Documentation/ABI/stable/sysfs-class-infiniband, Documentation/ABI/testing/sysfs-bus-pci
and sysfs-bus-pci-devices-aer_stats).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, TypeVar

T = TypeVar("T")

# Real sysfs attributes fit in one page; anything longer is not a value file.
_MAX_BYTES = 4096
_U64_MAX = 2**64 - 1
# Fastest InfiniBand port today is 12X XDR (2400 Gb/s); PCIe 7.0 runs at 128 GT/s.
# Values far beyond these are garbage, and taking them as real would make every
# healthy port look "slower than the others".
_MAX_RATE_GBPS = 10_000.0
_MAX_PCIE_GTS = 1_000.0


class SysfsError(Exception):
    """A sysfs file that could not be read or did not hold what it should; names the file."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class SysfsMissing(SysfsError):
    """The file does not exist (the attribute is not offered by this kernel or device)."""


@dataclass(frozen=True)
class NumberedState:
    """A ``state`` or ``phys_state`` value: the number is the ABI, the name is for people."""

    number: int
    name: str


@dataclass(frozen=True)
class IbRate:
    """A port ``rate``: total Gb/s, lane count and the speed name (``NDR``; may be empty)."""

    gbps: float
    lanes: int
    speed: str


def read_value(path: Path) -> str:
    """The file's text without the trailing newline; ``SysfsError`` naming it otherwise."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(_MAX_BYTES + 1)
    except FileNotFoundError:
        raise SysfsMissing(path, "does not exist") from None
    except OSError as exc:
        raise SysfsError(path, f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > _MAX_BYTES:
        raise SysfsError(path, f"longer than {_MAX_BYTES} bytes, not a sysfs value")
    try:
        return raw.decode("ascii").rstrip("\n")
    except UnicodeDecodeError:
        raise SysfsError(path, f"not ASCII text: {_shorten(raw.decode('ascii', 'replace'))}") from None


def read(path: Path, parse: Callable[[str], T]) -> T:
    """``parse(read_value(path))``; a parse failure becomes a ``SysfsError`` naming the file."""
    text = read_value(path)
    try:
        return parse(text)
    except ValueError as exc:
        raise SysfsError(path, f"{exc} (reads {_shorten(text)})") from None


def read_boot_id(procfs: Path) -> Optional[str]:
    """This boot's id (``sys/kernel/random/boot_id`` under procfs), or ``None`` when unreadable.

    Hardware counters restart at boot; a changed id tells a reset from a value that merely went down.
    """
    try:
        return (procfs / "sys" / "kernel" / "random" / "boot_id").read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _shorten(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


_NUMBERED = re.compile(r"(\d{1,3}): ([A-Za-z_][A-Za-z_ ]*|<unknown>)")


def parse_numbered_state(text: str) -> NumberedState:
    """``4: ACTIVE`` or ``5: LinkUp`` (the kernel prints ``%d: %s``)."""
    match = _NUMBERED.fullmatch(text.strip())
    if not match:
        raise ValueError("expected 'N: NAME' such as '4: ACTIVE' or '5: LinkUp'")
    return NumberedState(int(match.group(1)), match.group(2))


_RATE = re.compile(r"(\d+(?:\.\d+)?) Gb/sec \((\d+)X(?: ?([A-Za-z0-9]+))?\)")


def parse_ib_rate(text: str) -> IbRate:
    """``400 Gb/sec (4X NDR)``; old kernels print ``10 Gb/sec (4X)`` without the speed name."""
    match = _RATE.fullmatch(text.strip())
    if not match:
        raise ValueError("expected a rate such as '400 Gb/sec (4X NDR)'")
    gbps = float(match.group(1))
    if not 0 < gbps <= _MAX_RATE_GBPS:
        raise ValueError(f"rate {gbps:g} Gb/sec is not plausible")
    return IbRate(gbps=gbps, lanes=int(match.group(2)), speed=match.group(3) or "")


def parse_word(text: str) -> str:
    """A single token such as a ``link_layer`` (``InfiniBand``, ``Ethernet``)."""
    value = text.strip()
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,31}", value):
        raise ValueError("expected a single word")
    return value


def parse_counter(text: str) -> Optional[int]:
    """A port counter; ``None`` where the device has no Performance Management Agent.

    The kernel prints ``N/A (no PMA)`` for counters a device cannot report
    (drivers/infiniband/core/sysfs.c); that is "not offered", not an error.
    """
    value = text.strip()
    if value.startswith("N/A"):
        return None
    return _unsigned(value, _U64_MAX, "counter")


def parse_width(text: str) -> int:
    """``current_link_width``/``max_link_width``: a decimal lane count (a 6-bit field in the PCIe spec)."""
    return _unsigned(text.strip(), 63, "link width")


_PCIE_SPEED = re.compile(r"(\d+(?:\.\d+)?) GT/s(?: PCIe)?")


def parse_pcie_speed(text: str) -> Optional[float]:
    """``16.0 GT/s PCIe`` (``8 GT/s`` on old kernels); ``None`` for the kernel's ``Unknown``."""
    value = text.strip()
    if value in ("Unknown", "Unknown speed"):
        return None
    match = _PCIE_SPEED.fullmatch(value)
    if not match:
        raise ValueError("expected a speed such as '16.0 GT/s PCIe'")
    speed = float(match.group(1))
    if not 0 < speed <= _MAX_PCIE_GTS:
        raise ValueError(f"speed {speed:g} GT/s is not plausible")
    return speed


def parse_hex(text: str) -> int:
    """``vendor``, ``device`` and ``class`` files: ``0x10de``, ``0x030200``."""
    value = text.strip()
    if not re.fullmatch(r"0x[0-9a-fA-F]{1,8}", value):
        raise ValueError("expected a hexadecimal value such as '0x10de'")
    return int(value, 16)


def parse_aer_counts(text: str) -> dict[str, int]:
    """An ``aer_dev_*`` file: one ``NAME COUNT`` line per error type plus a ``TOTAL_ERR_*`` line."""
    counts: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"line {number} is not 'NAME COUNT'")
        name, count = parts
        if name in counts:
            raise ValueError(f"line {number} repeats {name}")
        counts[name] = _unsigned(count, _U64_MAX, f"line {number} count")
    if not counts:
        raise ValueError("no 'NAME COUNT' lines")
    return counts


def _unsigned(value: str, maximum: int, what: str) -> int:
    if not value.isascii() or not value.isdigit():
        raise ValueError(f"{what} is not a non-negative decimal integer")
    if len(value) > 20 or int(value) > maximum:
        raise ValueError(f"{what} exceeds {maximum}")
    return int(value)
