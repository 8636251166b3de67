"""The NVML snapshot format's strict pydantic models and their parser (see docs/gpu.md).

Kept apart from ``healthd_checks.nvml.source`` so that a pass reading the real
library never imports pydantic; only replaying a snapshot does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, NamedTuple, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from .source import (
    NOT_RECORDED,
    SNAPSHOT_FORMAT,
    SNAPSHOT_VERSION,
    FabricInfo,
    FabricReading,
    GpuReading,
    NodeReading,
    NvLinkReading,
    NvmlError,
    RemappedRows,
    SnapshotError,
    _gpu_fields,
    fabric_of,
)

# Strict types: true is not 1, "8" is not 8.


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _ErrorModel(_Model):
    error: StrictStr = Field(min_length=1)
    message: StrictStr = ""


class _RowsModel(_Model):
    corrected: StrictInt = Field(ge=0)
    uncorrected: StrictInt = Field(ge=0)
    pending: StrictBool
    failure: StrictBool


class _LinkModel(_Model):
    link: StrictInt = Field(ge=0)
    active: Union[StrictBool, _ErrorModel]
    replay_errors: Union[StrictInt, _ErrorModel]
    recovery_errors: Union[StrictInt, _ErrorModel]
    crc_flit_errors: Union[StrictInt, _ErrorModel]
    crc_data_errors: Union[StrictInt, _ErrorModel]


class _FabricModel(_Model):
    state: StrictInt = Field(ge=0)
    status: StrictStr = Field(min_length=1)
    cluster_uuid: StrictStr
    clique_id: StrictInt = Field(ge=0)
    health_mask: Optional[StrictInt] = None


class _GpuModel(_Model):
    index: StrictInt = Field(ge=0)
    uuid: Union[StrictStr, _ErrorModel]
    # Snapshots recorded before serials were read have none: that reads as a failed call.
    serial: Union[StrictStr, _ErrorModel] = _ErrorModel(error=NOT_RECORDED, message="not in this snapshot")
    pci_bus_id: Union[StrictStr, _ErrorModel]
    name: Union[StrictStr, _ErrorModel]
    ecc_mode_current: Union[StrictBool, _ErrorModel]
    ecc_mode_pending: Union[StrictBool, _ErrorModel]
    ecc_volatile_corrected: Union[StrictInt, _ErrorModel]
    ecc_volatile_uncorrected: Union[StrictInt, _ErrorModel]
    ecc_aggregate_corrected: Union[StrictInt, _ErrorModel]
    ecc_aggregate_uncorrected: Union[StrictInt, _ErrorModel]
    retired_pages_sbe: Union[StrictInt, _ErrorModel]
    retired_pages_dbe: Union[StrictInt, _ErrorModel]
    retired_pages_pending: Union[StrictBool, _ErrorModel]
    remapped_rows: Union[_RowsModel, _ErrorModel]
    pcie_gen_current: Union[StrictInt, _ErrorModel]
    pcie_gen_max: Union[StrictInt, _ErrorModel]
    pcie_width_current: Union[StrictInt, _ErrorModel]
    pcie_width_max: Union[StrictInt, _ErrorModel]
    pcie_replay_counter: Union[StrictInt, _ErrorModel]
    clock_event_reasons: Union[StrictInt, _ErrorModel]
    utilization_gpu: Union[StrictInt, _ErrorModel]
    nvlinks: Union[list[_LinkModel], _ErrorModel]
    recovery_action: Union[StrictInt, _ErrorModel]
    # Optional: snapshots recorded before fabric registration was read still load.
    fabric: Union[_FabricModel, _ErrorModel] = _ErrorModel(error=NOT_RECORDED, message="not in this snapshot")
    vbios_version: Union[StrictStr, _ErrorModel] = _ErrorModel(error=NOT_RECORDED, message="not in this snapshot")
    # Only for a GPU NVML could not open (nvmlDeviceGetHandleByIndex failed).
    handle_error: Optional[_ErrorModel] = None


class _SnapshotModel(_Model):
    format: Literal["healthd-nvml-snapshot"]
    version: Literal[1]
    source: StrictStr = Field(min_length=1, description="where the readings came from (host, or what they model)")
    recorded_at: Optional[StrictStr] = None
    init_error: Optional[_ErrorModel] = None
    driver_version: Union[StrictStr, _ErrorModel]
    device_count: Union[StrictInt, _ErrorModel]
    gpus: list[_GpuModel]


def _from_model(value: Any) -> Any:
    if isinstance(value, _ErrorModel):
        return NvmlError(value.error, value.message)
    if isinstance(value, _RowsModel):
        return RemappedRows(value.corrected, value.uncorrected, value.pending, value.failure)
    if isinstance(value, _FabricModel):
        return FabricInfo(value.state, value.status, value.cluster_uuid, value.clique_id, value.health_mask)
    if isinstance(value, list):
        return tuple(
            NvLinkReading(**{name: _from_model(getattr(link, name)) for name in _LinkModel.model_fields})
            for link in value
        )
    return value


def _gpu_from_model(gpu: _GpuModel) -> GpuReading:
    return GpuReading(**{name: _from_model(getattr(gpu, name)) for name in _gpu_fields()})


# Pydantic names the branch of a union it tried inside an error's location; people
# need only the key, plus a hint that an error object was also acceptable there.
_UNION_TAGS = frozenset({"str", "int", "bool", "list[_LinkModel]", "_ErrorModel", "_RowsModel", "_FabricModel"})


def _describe(errors: list[Any]) -> list[str]:
    by_key: dict[str, list[str]] = {}
    for error in errors:
        loc = tuple(error["loc"])
        key = ""
        for item in loc:
            if isinstance(item, int):
                key += f"[{item}]"
            elif item not in _UNION_TAGS:
                key += f".{item}" if key else str(item)
        if "_ErrorModel" in loc and error["type"] == "model_type":
            message = 'or an {"error": "NAME"} object'
        elif error["type"] == "extra_forbidden":
            message = "unknown key"
        else:
            message = str(error["msg"])
        messages = by_key.setdefault(key or "(top level)", [])
        if message not in messages:
            messages.append(message)
    return [f"{key}: {', '.join(messages)}" for key, messages in by_key.items()]


def parse_snapshot(text: str, source: str) -> NodeReading:
    """Parse snapshot JSON ``text``; ``source`` (the file name) prefixes every error."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise SnapshotError(f"{source}: not valid JSON: {exc}") from None
    if isinstance(raw, dict) and raw.get("format") == SNAPSHOT_FORMAT and raw.get("version") != SNAPSHOT_VERSION:
        raise SnapshotError(
            f"{source}: version: snapshot version {raw.get('version')!r} is not supported (expected {SNAPSHOT_VERSION})"
        )
    try:
        model = _SnapshotModel.model_validate(raw)
    except ValidationError as exc:
        seen = _describe(list(exc.errors()))
        shown = "; ".join(seen[:5]) + (f"; and {len(seen) - 5} more" if len(seen) > 5 else "")
        raise SnapshotError(f"{source}: {shown}") from None
    return NodeReading(
        init_error=_from_model(model.init_error) if model.init_error is not None else None,
        driver_version=_from_model(model.driver_version),
        device_count=_from_model(model.device_count),
        gpus=tuple(_gpu_from_model(g) for g in model.gpus),
    )


class SnapshotFile(NamedTuple):
    """Replays a snapshot file; every ``read()`` loads it again (it may be replaced)."""

    path: Path

    def read(self) -> NodeReading:
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise SnapshotError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SnapshotError(f"{self.path}: not UTF-8 text: {exc}") from None
        return parse_snapshot(text, str(self.path))

    def read_fabric(self) -> FabricReading:
        return fabric_of(self.read())
