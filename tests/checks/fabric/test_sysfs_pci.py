"""The shared PCI scanner and address parser in ``healthd_checks.common.sysfs``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from healthd_checks.common.sysfs import (
    VENDOR_MELLANOX,
    VENDOR_NVIDIA,
    normalize_pci_address,
    scan_pci,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0000:3a:00.0", "0000:3a:00.0"),
        ("0000:3A:00.0", "0000:3a:00.0"),
        ("3a:00.0", "0000:3a:00.0"),
        ("00000000:3A:00.0", "0000:3a:00.0"),  # NVML's busId
        ("10000:01:00.0", "10000:01:00.0"),  # a VMD domain
        (" 0000:18:00.1\n", "0000:18:00.1"),
        ("0000:3a:00.8", None),
        ("0000:3a:00", None),
        ("mlx5_0", None),
        ("", None),
    ],
)
def test_normalize_pci_address(text: str, expected: Any) -> None:
    assert normalize_pci_address(text) == expected


@given(st.text(max_size=40))
def test_normalize_pci_address_never_raises(text: str) -> None:
    normalize_pci_address(text)


def test_scan_of_the_fixture_node(node: Any, gpus: list[str], nics: list[str]) -> None:
    scan = scan_pci(node.sysfs, frozenset({VENDOR_NVIDIA, VENDOR_MELLANOX}))
    assert scan.present and scan.errors == ()
    assert [f.address for f in scan.nvidia_gpus] == gpus
    assert [f.address for f in scan.functions if f.is_fabric_nic and not f.virtual] == nics
    (vf,) = [f for f in scan.functions if f.virtual]
    assert (vf.address, vf.vendor, vf.device, vf.pci_class) == ("0000:17:00.1", 0x15B3, 0x101E, 0x020700)
    assert vf.path == node.sysfs / "bus/pci/devices/0000:17:00.1"
    # Without a vendor filter the bridges and the Intel NIC are there too, in address order.
    everything = [f.address for f in scan_pci(node.sysfs).functions]
    assert everything == sorted(everything) and "0000:14:01.0" in everything and "0000:01:00.0" in everything


def test_scan_reads_only_the_vendor_of_other_devices(node: Any) -> None:
    node.write("bus/pci/devices/0000:01:00.0/class", "garbage\n")  # the Intel NIC
    assert scan_pci(node.sysfs, frozenset({VENDOR_NVIDIA})).errors == ()
    (error,) = scan_pci(node.sysfs).errors
    assert error.path == node.sysfs / "bus/pci/devices/0000:01:00.0/class"


def test_scan_names_unreadable_files_and_goes_on(node: Any, gpus: list[str]) -> None:
    vendor = node.write("bus/pci/devices/0000:5d:00.0/vendor", "0x10de0x\n")
    (node.sysfs / "bus/pci/devices/0000:9a:00.0/device").unlink()
    (node.sysfs / "bus/pci/devices/stray").mkdir()  # no vendor file: not a function
    scan = scan_pci(node.sysfs, frozenset({VENDOR_NVIDIA}))
    assert [str(e.path) for e in scan.errors] == [
        str(vendor),
        str(node.sysfs / "bus/pci/devices/0000:9a:00.0/device"),
    ]
    assert [f.address for f in scan.nvidia_gpus] == [g for g in gpus if g not in ("0000:5d:00.0", "0000:9a:00.0")]


def test_no_tree_and_unlistable_tree(tmp_path: Path) -> None:
    assert not scan_pci(tmp_path).present
    (tmp_path / "bus/pci").mkdir(parents=True)
    (tmp_path / "bus/pci/devices").write_text("not a directory")
    scan = scan_pci(tmp_path)
    assert scan.present and scan.functions == ()
    assert scan.errors[0].path == tmp_path / "bus/pci/devices"
