"""Small readers for sysfs value files and pure parsers for the formats the fabric checks read.

Reading and parsing are separate: each ``parse_*`` function takes text and raises
``ValueError`` saying what it expected; ``read_value`` fetches a file and ``read``
joins the two, turning any problem into a ``SysfsError`` that names the file.
``scan_pci`` is the one scanner of PCI functions under ``bus/pci/devices`` that the
GPU and fabric checks share. Formats follow the kernel's sysfs ABI documentation
(Documentation/ABI/stable/sysfs-class-infiniband, Documentation/ABI/testing/sysfs-bus-pci
and sysfs-bus-pci-devices-aer_stats).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, NamedTuple, Optional, TypeVar

from healthd.boot import BootIdUnreadable, read_boot_id
from healthd.text import records

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


class NumberedState(NamedTuple):
    """A ``state`` or ``phys_state`` value: the number is the ABI, the name is for people."""

    number: int
    name: str


class IbRate(NamedTuple):
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


def boot_id_or_none(procfs: Path) -> Optional[str]:
    """The boot id, or None when unreadable: counter baselines are then kept
    (``healthd.checks.counters.BootScoped``)."""
    try:
        return read_boot_id(procfs)
    except BootIdUnreadable:
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
    if not re.fullmatch(r"0[xX][0-9a-fA-F]{1,8}", value):
        raise ValueError("expected a hexadecimal value such as '0x10de'")
    return int(value, 16)


_PCI_ADDRESS = re.compile(r"(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])")


def normalize_pci_address(text: str) -> Optional[str]:
    """A PCI address as sysfs names it (``0000:3a:00.0``); ``None`` if ``text`` is not one.

    Accepts upper case, a missing domain (``3a:00.0`` means domain 0) and NVML's
    eight-digit domain (``00000000:3A:00.0``), so addresses from NVML, the kernel log
    and configuration compare equal.
    """
    match = _PCI_ADDRESS.fullmatch(text.strip().lower())
    if not match:
        return None
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function}"


# PCI vendor ids (PCI-SIG) and base class codes (PCI Code and ID Assignment spec).
VENDOR_NVIDIA = 0x10DE
VENDOR_MELLANOX = 0x15B3
BASE_CLASS_NETWORK = 0x02
BASE_CLASS_DISPLAY = 0x03
# Base class 0x06 (bridge), subclass 0x80 ("other bridge"): what NVIDIA's NVSwitches of HGX and
# DGX baseboards (A100, H100, H200; device ids 0x1af1, 0x22a3, ...) present on the host's bus.
CLASS_OTHER_BRIDGE = 0x0680


class PciFunction(NamedTuple):
    """One function under ``bus/pci/devices``; ``path`` is its directory there (not resolved)."""

    address: str
    vendor: int
    device: int
    pci_class: int
    virtual: bool
    path: Path

    @property
    def is_nvidia_gpu(self) -> bool:
        """An NVIDIA display-class function (0x03xxxx: VGA 0x0300, 3D controller 0x0302).

        Excludes the other functions of NVIDIA devices: HD audio (0x0403), USB-C
        (0x0c03) and NVSwitches (bridges, 0x0680).
        """
        return self.vendor == VENDOR_NVIDIA and self.pci_class >> 16 == BASE_CLASS_DISPLAY

    @property
    def is_nvswitch(self) -> bool:
        """An NVIDIA function of class 0x0680 (other bridge): an NVSwitch on an HGX/DGX baseboard."""
        return self.vendor == VENDOR_NVIDIA and self.pci_class >> 8 == CLASS_OTHER_BRIDGE

    @property
    def is_fabric_nic(self) -> bool:
        """A Mellanox/NVIDIA network-class function (0x02xxxx): ConnectX and BlueField ports."""
        return self.vendor in (VENDOR_NVIDIA, VENDOR_MELLANOX) and self.pci_class >> 16 == BASE_CLASS_NETWORK


class PciScan(NamedTuple):
    """Functions in address order, and the files that could not be read or parsed.

    ``present`` is False when ``bus/pci/devices`` does not exist (no sysfs tree at
    all), which is not the same as a bus without the devices looked for.
    """

    present: bool
    functions: tuple[PciFunction, ...] = ()
    errors: tuple[SysfsError, ...] = ()

    @property
    def nvidia_gpus(self) -> tuple[PciFunction, ...]:
        return tuple(function for function in self.functions if function.is_nvidia_gpu)


def read_pci_function(directory: Path, vendors: Optional[frozenset[int]] = None) -> Optional[PciFunction]:
    """The function in ``directory``; ``None`` when its vendor is not in ``vendors`` (None: any).

    Raises ``SysfsError`` naming the file (``SysfsMissing`` when there is no such file).
    """
    vendor = read(directory / "vendor", parse_hex)
    if vendors is not None and vendor not in vendors:
        return None
    return PciFunction(
        address=directory.name,
        vendor=vendor,
        device=read(directory / "device", parse_hex),
        pci_class=read(directory / "class", parse_hex),
        # SR-IOV virtual functions link to their physical function (sysfs-bus-pci: physfn).
        virtual=(directory / "physfn").exists(),
        path=directory,
    )


def scan_pci(sysfs: Path, vendors: Optional[frozenset[int]] = None) -> PciScan:
    """Every function under ``sysfs``/bus/pci/devices whose vendor is in ``vendors`` (None: any).

    Only the ``vendor`` file of other functions is read. Unreadable or malformed files
    are kept in ``errors`` and the scan goes on.
    """
    devices = sysfs / "bus" / "pci" / "devices"
    try:
        entries = sorted(devices.iterdir(), key=lambda path: path.name)
    except FileNotFoundError:
        return PciScan(present=False)
    except OSError as exc:
        return PciScan(present=True, errors=(SysfsError(devices, f"cannot list: {exc.strerror or exc}"),))
    functions: list[PciFunction] = []
    errors: list[SysfsError] = []
    for entry in entries:
        try:
            function = read_pci_function(entry, vendors)
        except SysfsError as exc:
            # An entry without a vendor file is not a PCI function (a stray file or link).
            if not (isinstance(exc, SysfsMissing) and exc.path.name == "vendor"):
                errors.append(exc)
            continue
        if function is not None:
            functions.append(function)
    return PciScan(present=True, functions=tuple(functions), errors=tuple(errors))


def parse_aer_counts(text: str) -> dict[str, int]:
    """An ``aer_dev_*`` file: one ``NAME COUNT`` line per error type plus a ``TOTAL_ERR_*`` line."""
    counts: dict[str, int] = {}
    for number, line in enumerate(records(text), start=1):
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
