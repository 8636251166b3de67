"""``[checks.host]``: the ``host`` check's settings model (pydantic: imported only to validate a config)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from healthd.checks.settings import CheckSettings, SettingPath
from healthd.config.hosts import HostMatchError, matcher
from healthd.config.nhcdmi import field_file

from .parse import valid_interface_name

Grade = Literal["WARNING", "CRITICAL"]


class HostSettings(CheckSettings):
    """``[checks.host]``."""

    # "when_disciplined": a machine no time daemon disciplines (a VM or a laptop trying healthd)
    # always shows STA_UNSYNC, which says nothing about a fault; a node where one runs and has
    # lost its sources is judged. `healthd baseline` on a synchronised node writes "required".
    clock_sync: Literal["required", "when_disciplined", "off"] = Field(
        default="when_disciplined",
        description="judge the kernel's clock state: always, where a time daemon runs, never",
    )
    clock_severity: Grade = Field(default="WARNING", description="grade of an unsynchronised clock")
    clock_max_error_ms: Optional[float] = Field(default=None, gt=0, description="largest maxerror tolerated")
    timex: Optional[SettingPath] = Field(default=None, description="replay this recorded adjtimex reading (JSON)")
    expect_cpus: Optional[int] = Field(default=None, ge=1, description="online CPUs (hardware threads)")
    expect_sockets: Optional[int] = Field(default=None, ge=1, description="CPU packages (physical_package_id)")
    expect_threads_per_core: Optional[int] = Field(default=None, ge=1, description="hardware threads per core")
    # NHC's check_hw_cpuinfo (scripts/lbnl_hw.nhc) counts /proc/cpuinfo, not the topology: where no
    # line has a "physical id" (arm64, NVIDIA Grace) every processor is a socket, so an nhc.conf
    # for such a node says 128 sockets where sysfs has 1 or 2 packages.
    cpu_count_as: Literal["topology", "nhc"] = Field(
        default="topology",
        description='count CPUs from sysfs topology, or as NHC\'s check_hw_cpuinfo counts /proc/cpuinfo ("nhc":'
        " sockets are distinct physical ids, or every processor where none is given, as on arm64)",
    )
    expect_memory_gib: Optional[float] = Field(default=None, gt=0, description="MemTotal at least this")
    expect_memory_max_gib: Optional[float] = Field(default=None, gt=0, description="MemTotal at most this")
    # NHC's check_hw_physmem fudge (scripts/lbnl_hw.nhc): a percentage of the MemTotal read,
    # added before the minimum is compared and taken off before the maximum is.
    memory_tolerance_percent: float = Field(
        default=0.0, ge=0, lt=100, description="percent of MemTotal allowed either side of the expected memory"
    )
    # NHC's check_hw_swap, check_hw_swap_free, check_hw_mem_free (scripts/lbnl_hw.nhc) and
    # check_ps_loadavg (scripts/lbnl_ps.nhc). Free memory and load are what jobs use: they are
    # judged only where set, and graded usage_severity.
    expect_swap_gib: Optional[float] = Field(default=None, ge=0, description="SwapTotal at least this")
    expect_swap_max_gib: Optional[float] = Field(default=None, ge=0, description="SwapTotal at most this (0: no swap)")
    min_free_swap_gib: Optional[float] = Field(default=None, ge=0, description="SwapFree at least this")
    min_free_memory_gib: Optional[float] = Field(
        default=None, ge=0, description="MemFree + Buffers + Cached + SwapFree at least this (NHC's free memory)"
    )
    max_load_1m: Optional[float] = Field(default=None, gt=0, description="the 1-minute load average stays below this")
    max_load_5m: Optional[float] = Field(default=None, gt=0, description="the 5-minute load average stays below this")
    max_load_15m: Optional[float] = Field(default=None, gt=0, description="the 15-minute load average stays below this")
    usage_severity: Grade = Field(
        default="WARNING", description="grade of too little free swap or memory, or high load"
    )
    expect_hugepages: Optional[int] = Field(default=None, ge=0, description="HugePages_Total (default page size)")
    expect_kernel: list[str] = Field(default_factory=list, description="kernel releases allowed (uname -r)")
    expect_driver: list[str] = Field(default_factory=list, description="NVIDIA driver versions allowed")
    expect_bios: list[str] = Field(default_factory=list, description="BIOS versions allowed")
    # NHC's check_dmi_data_match (scripts/lbnl_dmi.nhc), on the strings /sys/class/dmi/id exports.
    expect_dmi: list[str] = Field(
        default_factory=list,
        description="NHC match strings ('BIOS Information: Version: 2.11.0', a glob, or '/^TYPE: FIELD: regex/')"
        " that a DMI line must match, the line made from /sys/class/dmi/id as NHC makes it from dmidecode",
    )
    forbid_dmi: list[str] = Field(
        default_factory=list, description="NHC match strings that the DMI line they name must not match (NHC's -n)"
    )
    expect_ethernet: list[str] = Field(default_factory=list, description="network interfaces that must exist and be up")
    expect_interfaces: list[str] = Field(
        default_factory=list, description="network interfaces that must exist, up or not (NHC's check_hw_eth)"
    )
    inventory_severity: Grade = Field(default="CRITICAL", description="grade of missing CPUs or memory")
    # A link that is down for one pass may be a flap (a switch reboot, a cable reseated):
    # CRITICAL would take the node out at once and kill its jobs; WARNING drains it after them.
    ethernet_severity: Grade = Field(
        default="WARNING", description="grade of an expected network interface missing or down"
    )
    version_severity: Grade = Field(default="WARNING", description="grade of an unexpected version")

    @field_validator("expect_dmi", "forbid_dmi")
    @classmethod
    def _dmi_matches(cls, matches: list[str]) -> list[str]:
        for match in matches:
            field_file(match)
            try:
                matcher(match)
            except HostMatchError as exc:
                raise ValueError(str(exc)) from None
        return matches

    @field_validator("expect_ethernet", "expect_interfaces")
    @classmethod
    def _interface_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not valid_interface_name(name):
                raise ValueError(f"{name!r} is not a network interface name (1-15 characters, no '/', ':' or space)")
        return names
