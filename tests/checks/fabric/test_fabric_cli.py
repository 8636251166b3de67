"""End-to-end: fixture trees through ``healthd check --once --json --only infiniband,pcie``."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from healthd_testkit.paths import HEALTHD

Capsys = pytest.CaptureFixture[str]
IB_PORTS = [f"mlx5_{i}:1" for i in range(8)]


def test_healthy_base_tree_has_no_findings(node: Any, capsys: Capsys) -> None:
    out = node.check_once(capsys)
    assert out.code == 0
    assert out.document["status"] == "OK"
    assert out.findings() == set()
    assert out.state("infiniband") == "ran"
    assert out.state("pcie") == "ran"


# Each variant names exactly the degraded port or device; the other seven (and the
# foreign Intel NIC and the ConnectX virtual function in the base tree) are never named.
SINGLE_PASS = [
    ("ib-port-down", "", {("CRITICAL", "IB_PORT_DOWN", "mlx5_5:1")}, 2),
    ("ib-port-polling", "", {("CRITICAL", "IB_PORT_DOWN", "mlx5_2:1")}, 2),
    ("ib-rate-200", "", {("WARNING", "IB_RATE_DEGRADED", "mlx5_6:1")}, 1),
    ("ib-rate-200", "expect_rate_gbps = 400", {("CRITICAL", "IB_RATE_MISMATCH", "mlx5_6:1")}, 2),
    ("ib-counter-na", "", {("OK", "IB_COUNTERS_UNAVAILABLE", "mlx5_7:1")}, 0),
    # By default only InfiniBand-layer ports are judged: the RoCE port is left alone.
    ("roce-storage", "", set(), 0),
    ("roce-storage", 'expect_link_layer = "InfiniBand"', set(), 0),
    (
        "roce-storage",
        f'expect_ports = {json.dumps([*IB_PORTS, "mlx5_8:1"])}\nexpect_link_layer = "InfiniBand"',
        {("CRITICAL", "IB_LINK_LAYER", "mlx5_8:1")},
        2,
    ),
    ("pcie-gpu-x8", "", {("CRITICAL", "PCIE_WIDTH_DEGRADED", "0000:5d:00.0")}, 2),
    ("pcie-gpu-idle", "", set(), 0),
    ("pcie-nic-gen4", "", {("WARNING", "PCIE_SPEED_DEGRADED", "0000:29:00.0")}, 1),
    # A link trains no better than its upstream port allows: not a degradation.
    ("pcie-gpu-x8-slot", "", set(), 0),
    ("pcie-nic-gen4-slot", "", set(), 0),
    # A GPU's audio and USB-C functions and NVSwitches are not judged by default.
    ("pcie-nvidia-other-functions", "", set(), 0),
]


@pytest.mark.parametrize(("overlay", "infiniband_toml", "expected", "exit_code"), SINGLE_PASS)
def test_variant_names_exactly_the_degraded_part(
    node_with: Any, capsys: Capsys, overlay: str, infiniband_toml: str, expected: set[Any], exit_code: int
) -> None:
    node = node_with(overlay)
    node.infiniband_toml = infiniband_toml
    out = node.check_once(capsys)
    assert out.findings() == expected
    assert out.code == exit_code


def test_down_and_polling_messages_say_what_the_port_reads(node_with: Any, capsys: Capsys) -> None:
    out = node_with("ib-port-down", "ib-port-polling").check_once(capsys)
    assert "DOWN/Disabled" in out.finding("IB_PORT_DOWN", "mlx5_5:1")["message"]
    polling = out.finding("IB_PORT_DOWN", "mlx5_2:1")
    assert "DOWN/Polling" in polling["message"]
    assert polling["details"] == {"state": "DOWN", "phys_state": "Polling"}


def test_rate_mismatch_reports_both_rates(node_with: Any, capsys: Capsys) -> None:
    node = node_with("ib-rate-200")
    node.infiniband_toml = "expect_rate_gbps = 400"
    details = node.check_once(capsys).finding("IB_RATE_MISMATCH", "mlx5_6:1")["details"]
    assert details == {"rate_gbps": 200.0, "expected_gbps": 400}


def test_uncabled_ethernet_port_is_not_judged_by_default(node_with: Any, capsys: Capsys) -> None:
    node = node_with("roce-storage")
    node.write("class/infiniband/mlx5_8/ports/1/state", "1: DOWN\n")
    node.write("class/infiniband/mlx5_8/ports/1/phys_state", "3: Disabled\n")
    assert node.check_once(capsys).findings() == set()
    node.infiniband_toml = 'expect_link_layer = "Ethernet"'
    assert node.check_once(capsys).findings() == {("CRITICAL", "IB_PORT_DOWN", "mlx5_8:1")}
    node.infiniband_toml = f"expect_ports = {json.dumps([*IB_PORTS, 'mlx5_8:1'])}"
    assert node.check_once(capsys).findings() == {("CRITICAL", "IB_PORT_DOWN", "mlx5_8:1")}


def test_node_with_only_ethernet_ports_is_not_applicable(node: Any, capsys: Capsys) -> None:
    for i in range(8):
        node.write(f"class/infiniband/mlx5_{i}/ports/1/link_layer", "Ethernet\n")
    out = node.check_once(capsys)
    assert out.state("infiniband") == "not_applicable"
    assert "mlx5_0:1 (Ethernet)" in next(c for c in out.document["checks"] if c["name"] == "infiniband")["reason"]


def test_unreadable_link_layer_keeps_the_port_and_names_the_file(node: Any, capsys: Capsys) -> None:
    path = node.write("class/infiniband/mlx5_3/ports/1/link_layer", "\xff\n")
    finding = node.check_once(capsys).finding("IB_SYSFS_UNREADABLE", "mlx5_3:1")
    assert finding["details"]["file"] == str(path)


def test_width_is_judged_against_the_slot(node_with: Any, capsys: Capsys) -> None:
    node = node_with("pcie-gpu-x8-slot")
    node.write("bus/pci/devices/0000:5d:00.0/current_link_width", "4\n")
    finding = node.check_once(capsys).finding("PCIE_WIDTH_DEGRADED", "0000:5d:00.0")
    assert "x4 of x8" in finding["message"]
    assert finding["details"] == {
        "current_width": 4,
        "max_width": 8,
        "device_max_width": 16,
        "port_max_width": 8,
        "upstream_port": "0000:5b:01.0",
    }


def test_speed_is_judged_against_the_slot(node_with: Any, capsys: Capsys) -> None:
    node = node_with("pcie-nic-gen4-slot")
    node.write("bus/pci/devices/0000:29:00.0/current_link_speed", "8.0 GT/s PCIe\n")
    finding = node.check_once(capsys).finding("PCIE_SPEED_DEGRADED", "0000:29:00.0")
    assert finding["details"] == {
        "current_gts": 8.0,
        "max_gts": 16.0,
        "device_max_gts": 32.0,
        "port_max_gts": 16.0,
        "upstream_port": "0000:28:00.0",
    }


def test_unreadable_upstream_port_is_unknown_naming_its_file(node: Any, capsys: Capsys) -> None:
    port = node.sysfs / "devices/pci0000:59/0000:59:01.0/0000:5a:00.0/0000:5b:01.0/max_link_width"
    port.write_text("sixteen\n")
    out = node.check_once(capsys)
    assert out.findings() == {("UNKNOWN", "PCIE_SYSFS_UNREADABLE", "0000:5d:00.0")}
    assert out.finding("PCIE_SYSFS_UNREADABLE", "0000:5d:00.0")["details"]["file"] == str(port.resolve())


def test_plain_directories_without_upstream_ports_use_the_device_maximum(node: Any, capsys: Capsys) -> None:
    devices = node.sysfs / "bus/pci/devices"
    for entry in devices.iterdir():
        target = entry.resolve()
        entry.unlink()
        shutil.copytree(target, entry)
    node.write("bus/pci/devices/0000:5d:00.0/current_link_width", "8\n")
    assert node.check_once(capsys).findings() == {("CRITICAL", "PCIE_WIDTH_DEGRADED", "0000:5d:00.0")}


def test_required_port_and_device_that_do_not_exist(node: Any, capsys: Capsys, ports: list[str]) -> None:
    node.infiniband_toml = f"expect_ports = {json.dumps([*ports, 'mlx5_9:1'])}"
    node.pcie_toml = 'expect_devices = ["0000:18:00.0", "0000:C1:00.0", "3a:00.0", "not-an-address"]'
    out = node.check_once(capsys)
    assert out.findings() == {
        ("CRITICAL", "IB_PORT_MISSING", "mlx5_9:1"),
        ("CRITICAL", "PCIE_DEVICE_MISSING", "0000:c1:00.0"),
        ("UNKNOWN", "PCIE_BAD_ADDRESS", "not-an-address"),
    }
    assert out.code == 2


def test_configured_subset_judges_only_those(node_with: Any, capsys: Capsys) -> None:
    node = node_with("ib-port-down", "pcie-gpu-x8")
    node.infiniband_toml = 'expect_ports = ["mlx5_0:1", "mlx5_1:1"]'
    node.pcie_toml = 'expect_devices = ["0000:18:00.0"]'
    assert node.check_once(capsys).findings() == set()


def test_no_devices_is_not_applicable(tmp_path: Path, node: Any, capsys: Capsys) -> None:
    import shutil

    shutil.rmtree(node.sysfs)
    node.sysfs.mkdir()
    out = node.check_once(capsys)
    assert out.code == 0
    assert out.state("infiniband") == "not_applicable"
    assert out.state("pcie") == "not_applicable"


def test_no_devices_but_ports_expected_is_critical(node: Any, capsys: Capsys) -> None:
    import shutil

    shutil.rmtree(node.sysfs / "class")
    node.infiniband_toml = 'expect_ports = ["mlx5_0:1"]'
    out = node.check_once(capsys)
    assert out.findings() == {("CRITICAL", "IB_PORT_MISSING", "mlx5_0:1")}


TWO_PASS = [
    (
        "ib-counters-rising",
        {
            ("WARNING", "IB_COUNTER_RATE", "mlx5_1:1"),
            ("CRITICAL", "IB_LINK_DOWNED", "mlx5_1:1"),
            ("WARNING", "IB_COUNTER_RATE", "mlx5_4:1"),
        },
    ),
    ("pcie-aer-fatal", {("CRITICAL", "PCIE_AER_FATAL", "0000:9a:00.0")}),
    ("pcie-aer-nonfatal", {("WARNING", "PCIE_AER_NONFATAL", "0000:17:00.0")}),
]


@pytest.mark.parametrize(("overlay", "expected"), TWO_PASS)
def test_counters_rising_between_two_captures(node: Any, capsys: Capsys, overlay: str, expected: set[Any]) -> None:
    assert node.check_once(capsys).findings() == set()
    node.overlay(overlay)
    assert node.check_once(capsys).findings() == expected


def test_counter_details(node: Any, capsys: Capsys) -> None:
    node.check_once(capsys)
    node.overlay("ib-counters-rising")
    node.overlay("pcie-aer-fatal")
    out = node.check_once(capsys)
    downed = out.finding("IB_LINK_DOWNED", "mlx5_1:1")
    assert downed["details"]["increase"] == 1
    assert "link_downed 1 -> 2" in downed["message"]
    rates = [f for c in out.document["checks"] for f in c["findings"] if f["code"] == "IB_COUNTER_RATE"]
    assert {(f["subject"], f["details"]["counter"], f["details"]["increase"]) for f in rates} == {
        ("mlx5_1:1", "symbol_error", 500),
        ("mlx5_4:1", "link_error_recovery", 20),
    }
    aer = out.finding("PCIE_AER_FATAL", "0000:9a:00.0")
    assert aer["details"]["errors"] == "SDES"
    assert aer["details"]["increase"] == 1


def test_totals_alone_never_alarm_and_increases_are_reported_once(node: Any, capsys: Capsys) -> None:
    # A first pass over raised counters has no baseline: totals are not judged.
    node.overlay("ib-counters-rising")
    node.overlay("pcie-aer-fatal")
    assert node.check_once(capsys).findings() == set()
    assert node.check_once(capsys).findings() == set()


def test_aer_increase_is_reported_in_the_pass_that_sees_it(node: Any, capsys: Capsys) -> None:
    node.check_once(capsys)
    node.overlay("pcie-aer-fatal")
    assert node.check_once(capsys).code == 2
    assert node.check_once(capsys).findings() == set()


def test_reboot_resets_baselines(node: Any, capsys: Capsys) -> None:
    node.overlay("ib-counters-rising")
    node.overlay("pcie-aer-fatal")
    node.check_once(capsys)
    # After a reboot the counters restart low and climb again, past the old values.
    node.reboot("0f4e6d2c-1a3b-4c5d-8e9f-a0b1c2d3e4f5")
    node.write("class/infiniband/mlx5_1/ports/1/counters/link_downed", "3\n")
    assert node.check_once(capsys).findings() == set()


def test_lower_value_is_a_new_baseline(node: Any, capsys: Capsys) -> None:
    node.overlay("ib-counters-rising")
    node.check_once(capsys)
    node.write("class/infiniband/mlx5_1/ports/1/counters/link_downed", "0\n")
    node.write("class/infiniband/mlx5_1/ports/1/counters/symbol_error", "0\n")
    assert node.check_once(capsys).findings() == set()
    node.write("class/infiniband/mlx5_1/ports/1/counters/link_downed", "1\n")
    assert node.check_once(capsys).findings() == {("CRITICAL", "IB_LINK_DOWNED", "mlx5_1:1")}


def test_subprocess_exit_code_and_json(node_with: Any) -> None:
    node = node_with("ib-port-down", "pcie-gpu-x8")
    healthd = HEALTHD
    argv = [str(healthd), "check", "--once", "--json", "--dry-run", "--only", "infiniband,pcie"]
    proc = subprocess.run([*argv, "--config", str(node.config())], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    document = json.loads(proc.stdout)
    assert document["status"] == "CRITICAL"
    found = {(f["code"], f["subject"]) for c in document["checks"] for f in c["findings"]}
    assert found == {("IB_PORT_DOWN", "mlx5_5:1"), ("PCIE_WIDTH_DEGRADED", "0000:5d:00.0")}


def test_unknown_setting_is_a_config_error(node: Any, capsys: Capsys) -> None:
    node.checks_toml = "[checks.infiniband.per_hour]\nsymbol_errors = 5\n"
    from healthd.cli.main import main

    assert main(["check", "--once", "--json", "--only", "infiniband", "--config", str(node.config())]) == 78
    assert "checks.infiniband.per_hour.symbol_errors: unknown key" in capsys.readouterr().err
