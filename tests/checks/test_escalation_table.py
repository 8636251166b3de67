"""docs/escalation.md's table of codes says what the checks declare (``CheckSpec.hardware``), and no more."""

from __future__ import annotations

import re
from typing import Any

import pytest
from healthd_testkit.paths import REPO

from healthd.checks.plugin import CheckSpec, discover

TABLE = REPO / "docs" / "escalation.md"
_ROW = re.compile(r"^\| ([a-z_, ]+) \| (.+?) \| (yes|no) \| .+ \|$")


def _rows() -> list[tuple[tuple[str, ...], tuple[str, ...], bool]]:
    """(checks, concrete codes, escalates) of each row; a code with a ``*`` stands for a family and is left out."""
    rows = []
    for line in TABLE.read_text().splitlines():
        match = _ROW.match(line)
        if match:
            checks = tuple(c.strip() for c in match.group(1).split(","))
            codes = tuple(c for c in re.findall(r"`([A-Z0-9_*<>]+)`", match.group(2)) if re.fullmatch(r"[A-Z0-9_]+", c))
            rows.append((checks, codes, match.group(3) == "yes"))
    return rows


def _specs() -> dict[str, CheckSpec[Any]]:
    return {spec.name: spec for spec in discover() if isinstance(spec, CheckSpec)}


def test_every_installed_check_has_a_row() -> None:
    documented = {check for checks, _, _ in _rows() for check in checks}
    assert set(_specs()) <= documented


@pytest.mark.parametrize(("checks", "codes", "escalates"), _rows())
def test_each_row_says_what_its_check_declares(
    checks: tuple[str, ...], codes: tuple[str, ...], escalates: bool
) -> None:
    specs = _specs()
    for check in checks:
        for code in codes:
            assert specs[check].is_hardware(code) is escalates, f"{check} {code}"


def test_every_declared_code_is_in_the_table_as_escalating() -> None:
    rows = _rows()
    for name, spec in _specs().items():
        if isinstance(spec.hardware, frozenset):
            listed = {code for checks, codes, yes in rows if name in checks and yes for code in codes}
            assert spec.hardware <= listed, f"{name}: {sorted(spec.hardware - listed)} not in {TABLE.name}"
