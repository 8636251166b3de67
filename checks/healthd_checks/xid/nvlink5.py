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
from typing import Mapping, NamedTuple, Optional

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


# --- Xids 144-150: NVLink5 errors (GB200, B100) -------------------------------------------
#
# NVIDIA's Xid catalog sends every Xid 144-150 to WORKFLOW_NVLINK5_ERR: decode the line
#   Xid (PCI:...): <xid>, <unit> <Fatal|Nonfatal> XC<n> i<n> Link <n> (<intrInfo> <errorStatus> <debug>...)
# with its "XID 144-150 Decode" sheet (formerly "Customer Doc 144-150";
# docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html and the spreadsheet it
# links, docs.nvidia.com/Xid-Catalog.xlsx). Each row names a unit, an IntrInfo bit
# pattern in two encodings (V1 for drivers before R575: the unit in bits 9:5 and the Xid
# in bits 4:0; V2 from R575: the unit in bits 6:0; both with a link-down reason in bits
# 25:20), an error status and the "Data Center Recovery Action". ``NVLINK5_ROWS`` is that
# sheet, row for row. The line does not say which driver branch printed it, so a line is
# matched against both encodings; for one unit name they never overlap (V1's low five
# bits name the Xid, V2's seven bits the unit).


class Resolution(enum.Enum):
    """The sheet's "Resolution Bucket (Data Center Recovery Action)" for a row."""

    IGNORE = "IGNORE"
    RESET_GPU = "RESET_GPU"
    # "If an XID 154 is seen along with this error, take that action. If no XID 154 present, RESTART_APP"
    XID_154_EVAL = "XID_154_EVAL"


class Nvlink5Row(NamedTuple):
    """One row of the "XID 144-150 Decode" sheet.

    ``v1`` and ``v2`` are the IntrInfo bits the sheet prints for each encoding, lowest bit
    last (its "-" bits, left to the user, are not compared); ``reason`` is IntrInfo[25:20].
    ``statuses`` empty: the sheet gives no error status (the row holds for any).
    """

    xid: int
    unit: str  # as the sheet prints it: "V1 name/V2 name" where the two differ
    v1: str
    v2: str
    reason: int
    statuses: tuple[int, ...]
    resolution: Resolution
    severity: str
    investigate: str

    @property
    def names(self) -> frozenset[str]:
        """The unit names a line may print: either encoding's, or the sheet's ``V1/V2``."""
        return frozenset((self.unit, *self.unit.split("/")))

    def matches_intrinfo(self, intrinfo: int) -> Optional[str]:
        """ "V1" or "V2" when ``intrinfo`` has this row's bits in that encoding, else None."""
        if intrinfo >> 20 & 0x3F != self.reason:
            return None
        for name, bits in (("V1", self.v1), ("V2", self.v2)):
            if intrinfo & ((1 << len(bits)) - 1) == int(bits, 2):
                return name
        return None


_R, _I, _E = Resolution.RESET_GPU, Resolution.IGNORE, Resolution.XID_154_EVAL
_NF, _F, _CS, _IG = "Non-fatal", "Fatal", "CONTACT_SUPPORT", "IGNORE"
_SW_SIDE = 0x80000000  # status 0x80000000: a software-reported non-fatal event in every unit that lists it

# (xid, unit, V1 bits, V2 bits) -> its rows as (error status, resolution, severity, investigatory action).
_Outcome = tuple[int, Resolution, str, str]
_FLOW = "CHECK_NVLINK_FAILURE_FLOW"
_BER = "INVESTIGATE_LINK_SI_AND_CABLES"
_TLW: tuple[_Outcome, ...] = ((0x1, _I, _NF, _IG), (0x2, _I, _NF, _CS), (0x4, _R, _F, _CS), (_SW_SIDE, _I, _NF, _CS))
_UNITS: tuple[tuple[tuple[int, str, str, str], tuple[_Outcome, ...]], ...] = (
    (
        (144, "SAW_MVB", "0000100001", "0000001"),
        ((0x1, _I, _NF, _CS), (0x2, _R, _F, _CS), (0x4, _I, _NF, _IG), (0x8, _I, _NF, _CS), (0x10, _R, _F, _CS)),
    ),
    ((144, "SAW_MVB", "0000100001", "0000001"), ((0x20, _I, _NF, _IG),)),
    ((145, "RLW_CTRL", "0001100010", "0000011"), ((_SW_SIDE, _I, _NF, _CS),)),
    (
        (145, "RLW_REMAP", "0010000010", "0000100"),
        ((0x1, _E, _NF, _CS), (0x2, _E, _NF, _CS), (0x4, _E, _NF, _FLOW), (0x8, _E, _NF, _FLOW)),
    ),
    (
        (145, "RLW_REMAP", "0010000010", "0000100"),
        ((0x10, _E, _NF, _FLOW), (0x20, _E, _NF, _FLOW), (0x40, _R, _F, _CS), (0x80, _R, _F, _CS)),
    ),
    ((145, "RLW_REMAP", "0010000010", "0000100"), ((0x100, _I, _NF, _IG), (0x200, _I, _NF, _IG))),
    ((145, "RLW_REMAP", "0010000010", "0000100"), ((_SW_SIDE, _I, _NF, _CS),)),
    ((145, "RLW_RSPCOL", "0010100010", "0000101"), ((0x1, _I, _NF, _IG), (0x2, _R, _F, _CS), (_SW_SIDE, _I, _NF, _CS))),
    # Statuses 0x1, 0x2, 0x4 are "Non-fatal*": promotable. The sheet's "Decode for action 2"
    # sets IntrInfo bit 10 (V1) or bit 7 (V2), and then the action is RESET_GPU.
    ((145, "RLW_RXPIPE", "00011000010", "00000110"), tuple((s, _I, "Non-fatal*", _CS) for s in (0x1, 0x2, 0x4))),
    ((145, "RLW_RXPIPE", "10011000010", "10000110"), tuple((s, _R, "Non-fatal* (action 2)", _CS) for s in (1, 2, 4))),
    ((145, "RLW_RXPIPE", "0011000010", "0000110"), ((0x8, _I, _NF, _CS), (_SW_SIDE, _I, _NF, _CS))),
    (
        (145, "RLW_SRC_TRACK", "0011100010", "0000111"),
        ((0x1, _R, _F, _CS), (0x2, _I, _NF, _IG), (0x4, _E, _NF, _IG), (0x8, _E, _NF, _IG), (0x10, _R, _F, _CS)),
    ),
    ((145, "RLW_SRC_TRACK", "0011100010", "0000111"), ((0x20, _R, _F, _CS), (_SW_SIDE, _I, _NF, _CS))),
    (
        (145, "RLW_TAGSTATE", "0100000010", "0001000"),
        ((0x1, _I, _NF, _IG), (0x2, _R, _F, _CS), (0x10000, _I, _NF, _IG), (0x20000, _R, _F, _CS)),
    ),
    ((145, "RLW_TAGSTATE", "0100000010", "0001000"), ((0x100000, _R, _F, _CS), (_SW_SIDE, _I, _NF, _CS))),
    ((146, "TLW_CTRL", "0100100011", "0001001"), _TLW),
    ((146, "TLW_RX/TLW_RX_PIPE0", "0101000011", "0001010"), _TLW),
    ((146, "TLW_RX/TLW_RX_PIPE1", "0101000011", "0001011"), _TLW),
    ((146, "TLW_TX/TLW_TX_PIPE0", "0101100011", "0001100"), _TLW),
    ((146, "TLW_TX/TLW_TX_PIPE1", "0101100011", "0001101"), _TLW),
    ((147, "TREX", "0110000100", "0001110"), ((0x1, _I, _NF, _CS), (_SW_SIDE, _I, _NF, _CS))),
    ((148, "NVLPW_CTRL/NVLPW", "0000000101", "0001111"), ((_SW_SIDE, _I, _NF, _CS),)),
    ((149, "NETIR_BER_EVENT", "1000100110", "0010011"), tuple((s, _I, _NF, _BER) for s in range(4))),
    (
        (149, "NETIR_MFDE_EVENT", "1001000110", "0010100"),
        ((0x1, _R, "Fatal**", _CS), (0x3, _I, _NF, _IG), (0x4, _R, "Fatal**", _CS), (0x5, _R, "Fatal**", _CS)),
    ),
    ((149, "NETIR_MFDE_EVENT", "1001000110", "0010100"), ((0x7, _R, "Fatal**", _CS),)),
    ((150, "MSE Degraded", "0000000000", "0000000"), ((0x0, _R, _F, _CS), (0xFFFFFFFF, _R, _F, _CS))),
    ((150, "MSE_WATCHDOG", "0000000000", "0000000"), ((0x0, _R, _F, _CS),)),
)

# NETIR_INT and NETIR_LINK_DOWN rows give no error status: the link-down reason in
# IntrInfo[25:20] selects the row. reason -> (resolution, severity, investigatory action).
_LINK_DOWN: Mapping[int, tuple[Resolution, str, str]] = {
    0b000000: (_R, "Link Fatal", "SYMPATHETIC_REPORT_SOLO"),
    0b000001: (_R, "Link Fatal", "REPORT_ISSUE (if seen >1 per day)"),
    **{reason: (_R, "Link Fatal", "INVESTIGATE_LINK_SI") for reason in (0b000010, 0b000100, 0b001010)},
    **{reason: (_R, "Link Fatal", "INVESTIGATE_SW_USER") for reason in (0b001111, 0b010001, 0b010110)},
    **{reason: (_R, "Link Fatal", "INVESTIGATE_SW_USER_LINK_SI") for reason in (0b010000, 0b010010)},
    **{reason: (_R, "Link Fatal", "INVESTIGATE_PEER_DEVICE") for reason in (0b010101, *range(0b100000, 0b100110))},
    0b100110: (_I, "Link Fatal", "INVESTIGATE_SW/USER"),
    0b101000: (_I, "Fatal", "INVESTIGATE_HOST"),
    **{reason: (_R, "Link Fatal?", "INVESTIGATE_LINK_SI_AND_CABLES") for reason in (0b101010, 0b101011)},
}

NVLINK5_ROWS: tuple[Nvlink5Row, ...] = (
    *(
        Nvlink5Row(xid, unit, v1, v2, 0, (status,), resolution, severity, investigate)
        for (xid, unit, v1, v2), rows in _UNITS
        for status, resolution, severity, investigate in rows
    ),
    Nvlink5Row(149, "NETIR/NETIR_INT", "0000000110", "0011000", 0, (), _R, "Link Fatal", "SYMPATHETIC_REPORT_SOLO"),
    *(
        Nvlink5Row(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "0111000110", "0010001", reason, (), *row)
        for reason, row in _LINK_DOWN.items()
    ),
)

# The driver's line, after "<xid>, " and any "pid=..., name=..., ": the unit (one name, or
# the sheet's "V1/V2" form; Xid 150 also "MSE Degraded"), the driver's severity word, the
# cross-contain and injection flags, the link (-1: not one link) and the registers, of which
# the first two are IntrInfo and the error status (the driver pads some fields with more
# than one space). Anchored at the start: a process name
# (at most 15 characters) cannot hold a whole decode to shadow the driver's.
_NVLINK5 = re.compile(
    r"([A-Z][A-Z0-9_]{0,40}(?:/[A-Z][A-Z0-9_]{0,40})?(?: Degraded)?) +(Fatal|Nonfatal) +XC(\d) +i(\d) +"
    r"Link +(-?\d{1,3}) +\((0x[0-9a-fA-F]{1,8}) +(0x[0-9a-fA-F]{1,8})(?: +0x[0-9a-fA-F]{1,8}){0,6}\)",
    re.ASCII,
)


# The head of the driver's line alone: the unit and the driver's severity word, for a line whose
# registers are missing (cut when pasted, or a driver that prints fewer).
_NVLINK5_WORD = re.compile(
    r"([A-Z][A-Z0-9_]{0,40}(?:/[A-Z][A-Z0-9_]{0,40})?(?: Degraded)?) +(Fatal|Nonfatal)\b", re.ASCII
)


def driver_word(text: str) -> Optional[bool]:
    """Whether an Xid 144-150 line's text (after pid/name) says ``Fatal`` (True) or ``Nonfatal`` (False), else None."""
    match = _NVLINK5_WORD.match(text)
    return None if match is None else match.group(2) == "Fatal"


class Nvlink5Line(NamedTuple):
    """What an Xid 144-150 line says, and the sheet's row for it (None: a combination the sheet lacks)."""

    unit: str
    fatal: bool
    link: int
    intrinfo: int
    status: int
    row: Optional[Nvlink5Row]
    encoding: str  # "V1", "V2", or "" without a row


def decode_nvlink5(xid: int, text: str) -> Optional[Nvlink5Line]:
    """The decode of an Xid 144-150 line's text (after pid/name); None when it is not in the driver's form."""
    match = _NVLINK5.match(text)
    if match is None:
        return None
    unit, word, _, _, link, intrinfo_text, status_text = match.groups()
    intrinfo, status = int(intrinfo_text, 16), int(status_text, 16)
    for row in NVLINK5_ROWS:
        if row.xid != xid or unit not in row.names or (row.statuses and status not in row.statuses):
            continue
        encoding = row.matches_intrinfo(intrinfo)
        if encoding is not None:
            return Nvlink5Line(unit, word == "Fatal", int(link), intrinfo, status, row, encoding)
    return Nvlink5Line(unit, word == "Fatal", int(link), intrinfo, status, None, "")
