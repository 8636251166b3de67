"""The snapshot format: round trips, and bad files giving SnapshotError naming file and key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from healthd_testkit.paths import FIXTURES as ALL_FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from healthd_checks.nvml.snapshot import SnapshotFile, parse_snapshot
from healthd_checks.nvml.source import NodeReading, SnapshotError, snapshot_document

FIXTURES = ALL_FIXTURES / "nvml"
HEALTHY = json.loads((FIXTURES / "h100-healthy.json").read_text())


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_document_round_trip(path: Path) -> None:
    reading = SnapshotFile(path).read()
    document = json.loads(path.read_text())
    again = snapshot_document(reading, document["source"], document["recorded_at"])
    assert again == document
    assert parse_snapshot(json.dumps(again), "x") == reading


def _bad(tmp_path: Path, document: Any) -> str:
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(document))
    with pytest.raises(SnapshotError) as info:
        SnapshotFile(path).read()
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    return message


def test_wrong_type_names_the_key(tmp_path: Path) -> None:
    document = json.loads(json.dumps(HEALTHY))
    document["gpus"][3]["pcie_width_current"] = "16"
    message = _bad(tmp_path, document)
    assert "gpus[3].pcie_width_current: Input should be a valid integer" in message
    assert 'or an {"error": "NAME"} object' in message


def test_bool_is_not_a_count(tmp_path: Path) -> None:
    document = json.loads(json.dumps(HEALTHY))
    document["gpus"][0]["ecc_volatile_uncorrected"] = True
    assert "gpus[0].ecc_volatile_uncorrected" in _bad(tmp_path, document)


def test_unknown_and_missing_keys(tmp_path: Path) -> None:
    document = json.loads(json.dumps(HEALTHY))
    document["gpus"][0]["temperature"] = 40
    del document["gpus"][1]["nvlinks"][2]["crc_data_errors"]
    message = _bad(tmp_path, document)
    assert "gpus[0].temperature: unknown key" in message
    assert "gpus[1].nvlinks[2].crc_data_errors: Field required" in message


def test_other_version_is_refused_clearly(tmp_path: Path) -> None:
    assert "version: snapshot version 2 is not supported" in _bad(tmp_path, dict(HEALTHY, version=2))


def test_not_json_and_not_utf8_and_missing(tmp_path: Path) -> None:
    path = tmp_path / "snap.json"
    path.write_text("{not json")
    with pytest.raises(SnapshotError, match="not valid JSON"):
        SnapshotFile(path).read()
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(SnapshotError, match="not UTF-8"):
        SnapshotFile(path).read()
    with pytest.raises(SnapshotError, match="cannot read"):
        SnapshotFile(tmp_path / "absent.json").read()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def _only_snapshot_error(text: str) -> None:
    try:
        reading = parse_snapshot(text, "fuzz.json")
    except SnapshotError as exc:
        assert str(exc).startswith("fuzz.json: ")
    else:
        assert isinstance(reading, NodeReading)


@settings(max_examples=150, deadline=None)
@given(JSON)
def test_arbitrary_json_gives_only_snapshot_error(value: Any) -> None:
    _only_snapshot_error(json.dumps(value))


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=40))
def test_arbitrary_text_gives_only_snapshot_error(text: str) -> None:
    _only_snapshot_error(text)


GPU_KEYS = sorted(HEALTHY["gpus"][0])


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(GPU_KEYS), JSON, st.integers(min_value=0, max_value=7))
def test_one_corrupted_gpu_field_gives_only_snapshot_error(key: str, value: Any, index: int) -> None:
    document = json.loads(json.dumps(HEALTHY))
    document["gpus"][index][key] = value
    _only_snapshot_error(json.dumps(document))
