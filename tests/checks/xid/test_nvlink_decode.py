"""Xid 74's registers decoded with NVIDIA's WORKFLOW_NVLINK_ERR table (Hopper)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from healthd_checks.xid.nvlink5 import BITS, DESCRIPTIONS, Cause, causes, parse_registers, set_bits


def test_the_catalogs_groups() -> None:
    assert causes((0x1,)) == (Cause.IGNORABLE,)  # first register, bit 0
    assert causes((0x30,)) == (Cause.ECC_PARITY,)  # bits 4 and 5
    assert causes((1 << 21, 0, 0, 0, 1 << 26)) == (Cause.MARGINAL_SIGNAL, Cause.ECC_THRESHOLD)
    assert causes((0, 0, 1 << 13, 1 << 18, 0, 0, 0)) == (Cause.SECONDARY_FABRIC_RESET, Cause.UNEXPECTED)
    assert causes((0, 0x1, 0, 0, 0, 0, 0)) == (Cause.UNDOCUMENTED,), "the second register is not valid on Hopper"
    assert causes((0,) * 7) == ()
    # 18 bits of the first register, 9 of the third, 3 of the fourth, 12 of the fifth: none in two groups.
    assert len(BITS) == 42 and {register for register, _ in BITS} == {1, 3, 4, 5}
    assert set(DESCRIPTIONS) == set(Cause)


@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=16))
def test_every_set_bit_has_a_cause_and_registers_round_trip(registers: list[int]) -> None:
    found = causes(tuple(registers))
    bits = set_bits(tuple(registers))
    assert set(found) == {BITS.get(bit, Cause.UNDOCUMENTED) for bit in bits}
    assert len(found) == len(set(found))
    assert parse_registers(",".join(f"0x{r:x}" for r in registers)) == tuple(registers)


@given(st.text(max_size=40))
def test_register_text_that_is_not_healthds_is_refused(text: str) -> None:
    try:
        values = parse_registers(text)
    except ValueError as exc:
        assert "not NVLink registers" in str(exc)
        return
    parts = text.split(",")
    assert len(values) == len(parts) and all(part.startswith("0x") for part in parts)
    assert values == tuple(int(part, 16) for part in parts)
