"""Xid 74's NVLink error registers decoded into causes, as far as NVIDIA publishes their bits.

NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
its "Fault Resolution Buckets" sheet, row WORKFLOW_NVLINK_ERR) says how to read
``NVLink: fatal error detected on link N(r1, r2, r3, r4, r5, r6, r7)``: seven
registers, unused ones printed as ``0x0``; on Hopper-based products the first,
third, fourth and fifth are valid, and it groups their bits by what they mean and
what to do. ``BITS`` is that table, one entry per group, keyed by register (counted
from 1, as the catalog does) and bit. The catalog names causes, not the hardware
counters behind each bit (no "replay" or "CRC" bit is named), so neither does healthd.
It gives no table for the A100, the other GPU that logs Xid 74; there the same
decode is only a guess, which the docs say. Pure: no I/O.
"""

from __future__ import annotations

import enum
import re
from typing import Mapping

_REGISTER = re.compile(r"0x[0-9a-f]{1,16}")


class Cause(enum.Enum):
    """What a group of Xid 74 bits means, in the catalog's words (shortened)."""

    IGNORABLE = "ignorable"
    SECONDARY = "secondary"
    SECONDARY_FABRIC_RESET = "secondary_fabric_reset"
    ECC_PARITY = "ecc_parity"
    LINK_HARDWARE = "link_hardware"
    MARGINAL_SIGNAL = "marginal_signal"
    ECC_THRESHOLD = "ecc_threshold"
    REPEAT_BUG = "report_if_repeated"
    REPEAT_DIAGS = "diags_if_repeated"
    UNEXPECTED = "unexpected"
    UNDOCUMENTED = "undocumented"


# What each cause means and what NVIDIA says to do, for the finding's message.
DESCRIPTIONS: Mapping[Cause, str] = {
    Cause.IGNORABLE: "can be safely ignored",
    Cause.SECONDARY: "secondary to another error (follow the other Xid; alone: report a bug)",
    Cause.SECONDARY_FABRIC_RESET: "secondary to another error, the fabric needs a reset",
    Cause.ECC_PARITY: "ECC/parity error, likely hardware (more than twice on one link: report a bug)",
    Cause.LINK_HARDWARE: "possibly hardware: check and reseat the link's connections, run diagnostics",
    Cause.MARGINAL_SIGNAL: "marginal channel signal integrity: check the link's connections, run field diagnostics",
    Cause.ECC_THRESHOLD: "ECC error threshold exceeded, no uncorrectable error (operation may continue)",
    Cause.REPEAT_BUG: "report a bug if it repeats",
    Cause.REPEAT_DIAGS: "run field diagnostics and report a bug if it repeats",
    Cause.UNEXPECTED: "not expected in production: report a bug",
    Cause.UNDOCUMENTED: "a bit NVIDIA's table does not list: report a bug",
}

_GROUPS: tuple[tuple[int, tuple[int, ...], Cause], ...] = (
    (1, (0, 23, 30), Cause.IGNORABLE),
    (1, (1, 20), Cause.SECONDARY),
    (1, (4, 5), Cause.ECC_PARITY),
    (1, (8, 9, 12, 16, 17, 24, 28), Cause.LINK_HARDWARE),
    (1, (21, 22), Cause.MARGINAL_SIGNAL),
    (1, (27, 29), Cause.REPEAT_BUG),
    (3, (0, 1, 2, 6), Cause.ECC_PARITY),
    (3, (13,), Cause.UNEXPECTED),
    (3, (16, 19), Cause.REPEAT_DIAGS),
    (3, (17, 18), Cause.REPEAT_BUG),
    (4, (16, 17), Cause.SECONDARY),
    (4, (18,), Cause.SECONDARY_FABRIC_RESET),
    (5, (18, 19, 21, 22, 24, 25, 27, 28), Cause.ECC_PARITY),
    (5, (20, 23, 26, 29), Cause.ECC_THRESHOLD),
)

# (register from 1, bit) -> cause: the catalog's WORKFLOW_NVLINK_ERR table for Hopper.
BITS: Mapping[tuple[int, int], Cause] = {(register, bit): cause for register, bits, cause in _GROUPS for bit in bits}


def set_bits(registers: tuple[int, ...]) -> list[tuple[int, int]]:
    """(register from 1, bit) of every bit set, in order."""
    return [(n, bit) for n, value in enumerate(registers, 1) for bit in range(value.bit_length()) if value >> bit & 1]


def causes(registers: tuple[int, ...]) -> tuple[Cause, ...]:
    """The causes the set bits name, each once, in the table's order; UNDOCUMENTED for any bit it lacks."""
    found = {BITS.get(bit, Cause.UNDOCUMENTED) for bit in set_bits(registers)}
    return tuple(cause for cause in Cause if cause in found)


def parse_registers(text: str) -> tuple[int, ...]:
    """Registers as healthd keeps them (``0x0,0x10000``); ValueError for anything else."""
    values = text.split(",")
    if len(values) > 16 or not all(_REGISTER.fullmatch(value) for value in values):
        raise ValueError(f"not NVLink registers: {text[:60]!r}")
    return tuple(int(value, 16) for value in values)
