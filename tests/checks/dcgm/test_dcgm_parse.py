"""dcgmi's diagnostic JSON: the fixtures parse, and no input crashes the parser (only ValueError)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from healthd_testkit.paths import FIXTURES
from hypothesis import given
from hypothesis import strategies as st

from healthd_checks.dcgm.parse import parse_diag

FILES = sorted((FIXTURES / "dcgm").glob("*.json"))

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)
_result = st.fixed_dictionaries(
    {"status": st.sampled_from(["Pass", "Fail", "Warn", "Skip", "Not Run", 3])},
    optional={"gpu_ids": st.one_of(st.text(max_size=3), st.integers(), st.none()), "info": _json, "warnings": _json},
)
_shaped = st.fixed_dictionaries(
    {
        "DCGM GPU Diagnostic": st.fixed_dictionaries(
            {
                "test_categories": st.lists(
                    st.fixed_dictionaries(
                        {
                            "category": st.text(max_size=5),
                            "tests": st.lists(
                                st.fixed_dictionaries({"name": st.text(max_size=5), "results": st.lists(_result)}),
                                max_size=3,
                            ),
                        }
                    ),
                    max_size=3,
                )
            }
        )
    },
    optional={"GPU Device IDs": _json},
)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_fixture_says_it_is_modelled_and_parses(path: Any) -> None:
    assert "Modelled, not recorded" in json.loads(path.read_text())["source"]
    assert parse_diag(path.read_text(), path.name).results


def test_fixture_results_are_read_per_gpu() -> None:
    diag = parse_diag((FIXTURES / "dcgm/level2-pcie-fail.json").read_text(), "f")
    (pcie,) = [r for r in diag.results if r.test == "PCIe" and r.gpu == "1"]
    assert (pcie.category, pcie.status) == ("Integration", "fail")
    assert pcie.bandwidths() == (4.02, 3.91), "each direction; the bidirectional sum is not a link's"
    assert diag.failed() == {("PCIe", "1")}
    assert diag.device_id("1") == "2330"


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("", "f: not JSON"),
        ("[]", "f is not an object"),
        ("{}", "no 'DCGM GPU Diagnostic' object"),
        ('{"DCGM GPU Diagnostic": {"test_categories": []}}', "reports no test results"),
        (
            '{"DCGM GPU Diagnostic": {"test_categories": [{"category": "D", "tests": [{"name": "PCIe"}]}]}}',
            r"test_categories\[0\].tests\[0\].results is not a list",
        ),
        (
            json.dumps(
                {
                    "DCGM GPU Diagnostic": {
                        "test_categories": [{"category": "D", "tests": [{"name": "x", "results": [{}]}]}]
                    }
                }
            ),
            r"results\[0\] has no status",
        ),
        ("[" * 100000, "not JSON"),
    ],
)
def test_malformed_output_is_named(text: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_diag(text, "f")


@given(st.one_of(_json, _shaped))
def test_any_json_parses_or_raises_value_error(document: Any) -> None:
    try:
        diag = parse_diag(json.dumps(document), "f")
    except ValueError:
        return
    assert all(r.status in {"pass", "fail", "warn", "skip", "unknown"} for r in diag.results)


@given(st.text())
def test_any_text_parses_or_raises_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        parse_diag(text, "f")
