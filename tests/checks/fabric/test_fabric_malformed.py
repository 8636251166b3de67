"""Malformed sysfs values: every one is an UNKNOWN finding naming the file, never a crash."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from healthd.checks.plugin import CheckSettings
from healthd.model import Finding, Status
from healthd_checks.common import sysfs
from healthd_checks.infiniband import check as infiniband
from healthd_checks.pcie import check as pcie

# Every sysfs value parser, found by name, so a new one is fuzzed without being listed here.
PARSERS: list[Callable[[str], Any]] = [value for name, value in vars(sysfs).items() if name.startswith("parse_")]


@contextlib.contextmanager
def _replaced(path: Path, data: bytes) -> Iterator[None]:
    """``path`` holds ``data`` inside the block, and its own bytes again after it."""
    original = path.read_bytes()
    path.write_bytes(data)
    try:
        yield
    finally:
        path.write_bytes(original)


malformed = st.one_of(
    st.sampled_from([b"", b"\n", b" ", b"garbage\n", b"-1\n", b"1e9\n", b"0x\n", b"\xff\xfe\n", b"4: \n", b"N/\n"]),
    st.integers(min_value=2**64, max_value=10**40).map(lambda n: f"{n}\n".encode()),
    st.integers(max_value=-1).map(lambda n: f"{n}\n".encode()),
    st.binary(max_size=40),
    st.text(max_size=40).map(lambda t: t.encode("utf-8")),
    st.just(b"7" * 5000),
)


@given(st.text(max_size=200))
@settings(max_examples=300)
def test_parsers_raise_only_value_error(text: str) -> None:
    assert len(PARSERS) >= 8  # the boot id has its own reader (healthd/boot.py, tests/test_boot.py)
    for parse in PARSERS:
        with contextlib.suppress(ValueError):
            parse(text)


@pytest.mark.parametrize(
    ("parse", "text", "expected"),
    [
        (sysfs.parse_numbered_state, "4: ACTIVE", (4, "ACTIVE")),
        (sysfs.parse_numbered_state, "5: LinkUp\n", (5, "LinkUp")),
        (sysfs.parse_numbered_state, "4: PortConfigurationTraining", (4, "PortConfigurationTraining")),
        (sysfs.parse_ib_rate, "400 Gb/sec (4X NDR)", (400.0, 4, "NDR")),
        (sysfs.parse_ib_rate, "2.5 Gb/sec (1X SDR)", (2.5, 1, "SDR")),
        (sysfs.parse_ib_rate, "10 Gb/sec (4X)", (10.0, 4, "")),
        (sysfs.parse_pcie_speed, "16.0 GT/s PCIe", 16.0),
        (sysfs.parse_pcie_speed, "8 GT/s", 8.0),
        (sysfs.parse_pcie_speed, "Unknown", None),
        (sysfs.parse_counter, "N/A (no PMA)", None),
        (sysfs.parse_counter, "18446744073709551615", 2**64 - 1),
        (sysfs.parse_hex, "0x030200", 0x030200),
        (sysfs.parse_width, "16", 16),
    ],
)
def test_parsers_read_real_values(parse: Callable[[str], Any], text: str, expected: Any) -> None:
    assert parse(text) == expected  # a record compares equal to the tuple of its fields


def test_aer_parser_keeps_every_line() -> None:
    counts = sysfs.parse_aer_counts("Undefined 0\nSDES 2\ndev_fatal_errs_bit[3] 1\nTOTAL_ERR_FATAL 3\n")
    assert counts == {"Undefined": 0, "SDES": 2, "dev_fatal_errs_bit[3]": 1, "TOTAL_ERR_FATAL": 3}


@pytest.mark.parametrize(
    "text", ["", "SDES\n", "SDES 1 2\n", "SDES x\n", "SDES 1\nSDES 1\n", f"TOTAL_ERR_FATAL {2**64}\n"]
)
def test_aer_parser_rejects_malformed_files(text: str) -> None:
    with pytest.raises(ValueError):
        sysfs.parse_aer_counts(text)


def _valid(data: bytes, parse: Callable[[str], Any]) -> bool:
    try:
        parse(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return False
    return len(data) <= 4096


def _run(check: Any, node: Any, check_settings: CheckSettings) -> list[Finding]:
    if node.state_dir.exists():
        shutil.rmtree(node.state_dir)
    found: list[Finding] = check.CHECK.run(node.context(check.CHECK.name, check_settings, lambda: 1_700_000_000.0))
    return found


IB_FILES = [
    ("state", sysfs.parse_numbered_state),
    ("phys_state", sysfs.parse_numbered_state),
    ("rate", sysfs.parse_ib_rate),
    ("link_layer", sysfs.parse_word),
    ("counters/symbol_error", sysfs.parse_counter),
    ("counters/link_downed", sysfs.parse_counter),
]


@pytest.mark.slow  # a whole check pass per example: seconds per case
@pytest.mark.parametrize(("name", "parse"), IB_FILES, ids=[name for name, _ in IB_FILES])
@given(data=malformed)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_malformed_ib_value_is_unknown_naming_the_file(
    node: Any, name: str, parse: Callable[[str], Any], data: bytes
) -> None:
    assume(not _valid(data, parse))
    path: Path = node.sysfs / "class/infiniband/mlx5_3/ports/1" / name
    with _replaced(path, data):
        found = _run(infiniband, node, infiniband.CHECK.settings_model()())
    unknown = [f for f in found if f.status is Status.UNKNOWN]
    assert len(unknown) == 1
    assert (unknown[0].code, unknown[0].subject, unknown[0].details["file"]) == (
        "IB_SYSFS_UNREADABLE",
        "mlx5_3:1",
        str(path),
    )
    assert str(path) in unknown[0].message
    # The other ports are still judged, and healthy ones are never named.
    assert {f.subject for f in found} == {"mlx5_3:1"}


PCI_FILES: list[tuple[str, str, Optional[Callable[[str], Any]]]] = [
    ("0000:5d:00.0", "current_link_width", sysfs.parse_width),
    ("0000:5d:00.0", "max_link_speed", sysfs.parse_pcie_speed),
    ("0000:5d:00.0", "class", sysfs.parse_hex),
    ("0000:5d:00.0", "aer_dev_fatal", sysfs.parse_aer_counts),
    ("0000:29:00.0", "current_link_speed", sysfs.parse_pcie_speed),
    ("0000:29:00.0", "aer_dev_nonfatal", sysfs.parse_aer_counts),
    ("0000:29:00.0", "class", sysfs.parse_hex),
    ("0000:29:00.0", "vendor", sysfs.parse_hex),
]


@pytest.mark.slow  # a whole check pass per example: seconds per case
@pytest.mark.parametrize(("address", "name", "parse"), PCI_FILES, ids=[f"{a}-{n}" for a, n, _ in PCI_FILES])
@given(data=malformed)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_malformed_pci_value_is_unknown_naming_the_file(
    node: Any, address: str, name: str, parse: Callable[[str], Any], data: bytes
) -> None:
    assume(not _valid(data, parse))
    path: Path = node.sysfs / "bus/pci/devices" / address / name
    with _replaced(path, data):
        found = _run(pcie, node, pcie.CHECK.settings_model()())
    assert [(f.status, f.code, f.subject, f.details["file"]) for f in found] == [
        (Status.UNKNOWN, "PCIE_SYSFS_UNREADABLE", address, str(path))
    ]
    assert str(path) in found[0].message


def test_malformed_value_on_second_pass_keeps_the_baseline(node: Any) -> None:
    ctx = node.context("infiniband", infiniband.CHECK.settings_model()(), lambda: 1_700_000_000.0)
    infiniband.CHECK.run(ctx)
    counter = node.write("class/infiniband/mlx5_3/ports/1/counters/link_downed", "lots\n")
    assert [f.code for f in infiniband.CHECK.run(ctx)] == ["IB_SYSFS_UNREADABLE"]
    counter.write_text("2\n")
    assert [(f.code, f.subject) for f in infiniband.CHECK.run(ctx)] == [("IB_LINK_DOWNED", "mlx5_3:1")]


def test_unreadable_file_is_unknown(node: Any) -> None:
    rate = node.sysfs / "class/infiniband/mlx5_0/ports/1/rate"
    rate.unlink()
    rate.mkdir()
    found = infiniband.CHECK.run(node.context("infiniband", infiniband.CHECK.settings_model()(), lambda: 0.0))
    assert [(f.status, f.code, f.subject) for f in found] == [(Status.UNKNOWN, "IB_SYSFS_UNREADABLE", "mlx5_0:1")]
    assert str(rate) in found[0].message
