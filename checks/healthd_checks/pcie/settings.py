"""``[checks.pcie]``: the ``pcie`` check's settings model (pydantic: imported only to validate a config)."""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from healthd.checks.settings import CheckSettings
from healthd.config.models import moved_from_node


class PcieSettings(CheckSettings):
    """``[checks.pcie]``: the devices to judge."""

    expect_devices: Optional[list[str]] = Field(
        default=None,
        description="PCI addresses of the devices to judge (a missing one is CRITICAL); "
        "default: NVIDIA GPUs and NVIDIA/Mellanox network controllers",
        json_schema_extra=moved_from_node("pcie_devices"),
    )
