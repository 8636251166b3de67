"""Port rates on a node whose adapters run at different speeds: which ports are compared, and per-port rates.

The ``ib-storage-ndr200`` overlay adds two storage ports (mlx5_8, mlx5_9, on another
board) at ``200 Gb/sec (2X NDR)`` beside the eight NDR400 compute ports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.nvml import Clock

from healthd.config import tomlwrite
from healthd.config.defaults import toml_module
from healthd.model import Finding, Status
from healthd_checks.infiniband.check import CHECK
from healthd_checks.infiniband.settings import InfinibandSettings

Capsys = pytest.CaptureFixture[str]
STORAGE = "ib-storage-ndr200"


def run(node: Any, settings: InfinibandSettings | None = None) -> set[tuple[Status, str, str]]:
    found: list[Finding] = list(CHECK.run(node.context("infiniband", settings or InfinibandSettings(), Clock())))
    return {(f.status, f.code, f.subject) for f in found}


def set_rate(node: Any, device: str, rate: str) -> None:
    node.write(f"class/infiniband/{device}/ports/1/rate", rate + "\n")


def test_healthy_storage_ports_on_another_board_are_not_degraded(node_with: Any) -> None:
    assert run(node_with(STORAGE)) == set()


def test_a_port_slower_than_its_board_siblings_is_degraded(node_with: Any) -> None:
    node = node_with(STORAGE)
    set_rate(node, "mlx5_3", "200 Gb/sec (2X NDR)")  # a compute port that lost two lanes
    set_rate(node, "mlx5_9", "100 Gb/sec (1X NDR)")  # a storage port that lost one
    found = list(CHECK.run(node.context("infiniband", InfinibandSettings(), Clock())))
    assert {(f.status, f.code, f.subject) for f in found} == {
        (Status.WARNING, "IB_RATE_DEGRADED", "mlx5_3:1"),
        (Status.WARNING, "IB_RATE_DEGRADED", "mlx5_9:1"),
    }
    storage = next(f for f in found if f.subject == "mlx5_9:1")
    assert storage.details["fastest_gbps"] == 200.0, "compared with its storage sibling, not the compute ports"
    assert storage.details["compared_with"] == "ports on board MT_0000000834"
    assert "slower than the 200 Gb/sec of the other ports on board MT_0000000834" in storage.message


def test_without_a_board_id_the_lane_count_stands_in(node_with: Any) -> None:
    node = node_with(STORAGE, "ib-rate-200")
    for board_id in node.sysfs.glob("class/infiniband/*/board_id"):
        board_id.unlink()
    # The 2X storage ports are not judged against 4X ports; a 4X port at HDR among NDR still is.
    assert run(node) == {(Status.WARNING, "IB_RATE_DEGRADED", "mlx5_6:1")}


def test_an_unreadable_board_id_is_reported(node: Any) -> None:
    board_id = node.sysfs / "class/infiniband/mlx5_2/board_id"
    board_id.unlink()
    board_id.mkdir()
    assert run(node) == {(Status.UNKNOWN, "IB_SYSFS_UNREADABLE", "mlx5_2:1")}


def test_each_port_is_held_to_its_own_rate(node_with: Any) -> None:
    node = node_with(STORAGE)
    settings = InfinibandSettings(expect_rate_gbps=400, expect_rates_gbps={"mlx5_8:1": 200, "mlx5_9:1": 200})
    assert run(node, settings) == set()
    set_rate(node, "mlx5_9", "100 Gb/sec (1X NDR)")
    set_rate(node, "mlx5_2", "200 Gb/sec (2X NDR)")
    assert run(node, settings) == {
        (Status.CRITICAL, "IB_RATE_MISMATCH", "mlx5_9:1"),
        (Status.CRITICAL, "IB_RATE_MISMATCH", "mlx5_2:1"),
    }


def test_a_port_given_a_rate_is_required(node: Any) -> None:
    assert run(node, InfinibandSettings(expect_rates_gbps={"mlx5_9:1": 200})) == {
        (Status.CRITICAL, "IB_PORT_MISSING", "mlx5_9:1")
    }


def test_a_port_given_a_rate_is_judged_whatever_its_link_layer(node_with: Any) -> None:
    roce = node_with("roce-storage")  # mlx5_8 is an Ethernet port at 200 Gb/sec
    assert run(roce, InfinibandSettings(expect_rates_gbps={"mlx5_8:1": 400})) == {
        (Status.CRITICAL, "IB_RATE_MISMATCH", "mlx5_8:1")
    }


def test_the_baseline_of_a_mixed_node_passes_there_and_catches_a_downtrained_port(
    node_with: Any, cli: Callable[..., tuple[int, str, str]], tmp_path: Path, capsys: Capsys
) -> None:
    node = node_with(STORAGE)
    out = tmp_path / "baseline.toml"
    code, _, err = cli("baseline", str(out), "--config", str(node.config()))
    assert code == 0, err
    table = toml_module().loads(out.read_text())["checks"]["infiniband"]
    assert "expect_rate_gbps" not in table
    assert table["expect_rates_gbps"] == {**{f"mlx5_{i}:1": 400 for i in range(8)}, "mlx5_8:1": 200, "mlx5_9:1": 200}

    # The written table, as the node's [checks.infiniband] (quoted DEVICE:PORT keys and all).
    node.infiniband_toml = "\n".join(f"{tomlwrite.key(k)} = {tomlwrite.value(v)}" for k, v in table.items())
    assert node.check_once(capsys).findings() == set()
    set_rate(node, "mlx5_8", "100 Gb/sec (1X NDR)")
    assert node.check_once(capsys).findings() == {("CRITICAL", "IB_RATE_MISMATCH", "mlx5_8:1")}
