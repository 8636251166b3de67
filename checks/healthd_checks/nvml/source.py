"""Where the gpu check gets its NVML readings: the real library, or a recorded JSON snapshot.

``GpuSource`` is the one small interface: ``read() -> NodeReading``. ``NvmlLibrary``
calls NVML through ``pynvml`` (NVIDIA's ``nvidia-ml-py`` binding) and records every
per-call error as an ``NvmlError`` value instead of raising, so one lost GPU or one
field a driver does not support never hides the rest. ``SnapshotFile`` replays a
reading saved by ``healthd record-gpus`` (or written by hand as a fixture); its
format is versioned and validated, and a bad file raises ``SnapshotError`` naming
the file and the key. Nothing here judges health: that is ``healthd_checks.gpu.check``.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, TypeVar, Union

if TYPE_CHECKING:
    from types import ModuleType

SNAPSHOT_FORMAT = "healthd-nvml-snapshot"
SNAPSHOT_VERSION = 1

T = TypeVar("T")


@dataclass(frozen=True)
class NvmlError:
    """An NVML call that failed: the error's stable name (``GPU_IS_LOST``) and NVML's text."""

    code: str
    message: str = ""


# A reading is either the value NVML returned or the error it returned instead.
Reading = Union[T, NvmlError]

# NVML error names (NVML_ERROR_<name> in nvml.h) that the gpu check relies on.
NOT_SUPPORTED = "NOT_SUPPORTED"
GPU_IS_LOST = "GPU_IS_LOST"
RESET_REQUIRED = "RESET_REQUIRED"
LIB_RM_VERSION_MISMATCH = "LIB_RM_VERSION_MISMATCH"
FUNCTION_NOT_FOUND = "FUNCTION_NOT_FOUND"
# Not an NVML error: a snapshot recorded before a field was read stands for it with this.
NOT_RECORDED = "NOT_RECORDED"


@dataclass(frozen=True)
class RemappedRows:
    """``nvmlDeviceGetRemappedRows`` (Ampere and later): a pending remap needs a GPU reset."""

    corrected: int
    uncorrected: int
    pending: bool
    failure: bool


@dataclass(frozen=True)
class NvLinkReading:
    """One NVLink: whether it is up and its cumulative error counters."""

    link: int
    active: Reading[bool]
    replay_errors: Reading[int]
    recovery_errors: Reading[int]
    crc_flit_errors: Reading[int]
    crc_data_errors: Reading[int]


@dataclass(frozen=True)
class LinkState:
    """One NVLink's state (``nvmlDeviceGetNvLinkState``): up, down, or the error NVML gave."""

    link: int
    active: Reading[bool]


@dataclass(frozen=True)
class FabricInfo:
    """``nvmlDeviceGetGpuFabricInfoV`` (Hopper and later): the GPU's registration with the NVLink fabric.

    ``state`` is ``nvmlGpuFabricState_t`` (0 not supported, 1 not started, 2 in progress,
    3 completed); ``status`` the name of the ``nvmlReturn_t`` the registration ended with
    (``SUCCESS``); ``cluster_uuid`` and ``clique_id`` what Fabric Manager assigned (zero
    where the platform assigns none); ``health_mask`` the v2 structure's bit fields, None
    where only the first version of the call exists.
    """

    state: int
    status: str
    cluster_uuid: str
    clique_id: int
    health_mask: Optional[int] = None


@dataclass(frozen=True)
class GpuReading:
    """Everything read from one GPU handle; each field is a value or the call's error."""

    index: int
    uuid: Reading[str]
    serial: Reading[str]
    pci_bus_id: Reading[str]
    name: Reading[str]
    ecc_mode_current: Reading[bool]
    ecc_mode_pending: Reading[bool]
    ecc_volatile_corrected: Reading[int]
    ecc_volatile_uncorrected: Reading[int]
    ecc_aggregate_corrected: Reading[int]
    ecc_aggregate_uncorrected: Reading[int]
    retired_pages_sbe: Reading[int]
    retired_pages_dbe: Reading[int]
    retired_pages_pending: Reading[bool]
    remapped_rows: Reading[RemappedRows]
    pcie_gen_current: Reading[int]
    pcie_gen_max: Reading[int]
    pcie_width_current: Reading[int]
    pcie_width_max: Reading[int]
    pcie_replay_counter: Reading[int]
    clock_event_reasons: Reading[int]
    utilization_gpu: Reading[int]
    nvlinks: Reading[tuple[NvLinkReading, ...]]
    recovery_action: Reading[int]
    # Read from snapshot version 1 files recorded before the fabric was: NOT_RECORDED.
    fabric: Reading[FabricInfo] = NvmlError(NOT_RECORDED, "not in this snapshot")
    # nvmlDeviceGetVbiosVersion; NOT_RECORDED in snapshots recorded before it was read.
    vbios_version: Reading[str] = NvmlError(NOT_RECORDED, "not in this snapshot")
    # Why nvmlDeviceGetHandleByIndex failed for this index (None: the GPU was opened). Its
    # own field, so that no reading's error, however ordinary, stands for the whole GPU.
    handle_error: Optional[NvmlError] = None

    @classmethod
    def unreachable(cls, index: int, error: NvmlError) -> GpuReading:
        """A GPU whose handle could not be obtained: ``handle_error`` and every reading carry that error."""
        values: dict[str, Any] = {name: error for name in _gpu_fields()}
        values["index"] = index
        return cls(**values)


def _gpu_fields() -> tuple[str, ...]:
    return tuple(f.name for f in fields(GpuReading))


@dataclass(frozen=True)
class NodeReading:
    """One reading of the whole node. ``init_error`` set means NVML itself was unusable."""

    init_error: Optional[NvmlError]
    driver_version: Reading[str]
    device_count: Reading[int]
    gpus: tuple[GpuReading, ...]


@dataclass(frozen=True)
class GpuFabric:
    """What the nvlink check reads of one GPU: its fabric registration and its NVLinks' states, with what names it."""

    index: int
    pci_bus_id: Reading[str]
    uuid: Reading[str]
    fabric: Reading[FabricInfo]
    links: Reading[tuple[LinkState, ...]] = ()


@dataclass(frozen=True)
class FabricReading:
    """Each GPU's fabric registration and link states. ``init_error`` set means NVML itself was unusable."""

    init_error: Optional[NvmlError]
    gpus: tuple[GpuFabric, ...] = ()


def fabric_of(reading: NodeReading) -> FabricReading:
    """The nvlink check's part of a whole reading (a snapshot's)."""
    if reading.init_error is not None:
        return FabricReading(reading.init_error)
    return FabricReading(
        None,
        tuple(GpuFabric(g.index, g.pci_bus_id, g.uuid, g.fabric, _map(g.nvlinks, _states)) for g in reading.gpus),
    )


def _states(links: tuple[NvLinkReading, ...]) -> tuple[LinkState, ...]:
    return tuple(LinkState(link.link, link.active) for link in links)


class GpuSource(Protocol):
    """Anything that can produce a ``NodeReading``."""

    def read(self) -> NodeReading: ...


class SnapshotError(Exception):
    """A snapshot file that cannot be used; ``str()`` names the file and the key."""


# ---------------------------------------------------------------------------------------
# The real library.


def _error_names(pynvml: ModuleType) -> dict[int, str]:
    return {getattr(pynvml, name): name[len("NVML_ERROR_") :] for name in dir(pynvml) if name.startswith("NVML_ERROR_")}


class NvmlLibrary:
    """Reads the node through NVML. Imports ``pynvml`` only when ``read()`` runs."""

    def read(self) -> NodeReading:
        def whole(call: _Caller) -> NodeReading:
            driver = call(str, "nvmlSystemGetDriverVersion")
            count = call(int, "nvmlDeviceGetCount")
            gpus = tuple(self._gpu(call, i) for i in range(count)) if isinstance(count, int) else ()
            return NodeReading(init_error=None, driver_version=driver, device_count=count, gpus=gpus)

        def failed(error: NvmlError) -> NodeReading:
            return NodeReading(init_error=error, driver_version=error, device_count=error, gpus=())

        return _session(whole, failed)

    def read_fabric(self) -> FabricReading:
        """Only what the nvlink check needs: each GPU's address, UUID and fabric registration."""

        def fabric(call: _Caller) -> FabricReading:
            count = call(int, "nvmlDeviceGetCount")
            if isinstance(count, NvmlError):
                return FabricReading(init_error=count)
            return FabricReading(None, tuple(_gpu_fabric(call, index) for index in range(count)))

        return _session(fabric, lambda error: FabricReading(init_error=error))

    def _gpu(self, call: _Caller, index: int) -> GpuReading:
        pynvml = call.pynvml
        handle = call(object, "nvmlDeviceGetHandleByIndex", index)
        if isinstance(handle, NvmlError):
            return GpuReading.unreachable(index, handle)
        ecc_mode: Reading[list[int]] = call(list, "nvmlDeviceGetEccMode", handle)
        corrected, uncorrected = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        volatile, aggregate = pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC
        pci = call(object, "nvmlDeviceGetPciInfo", handle)
        utilization = call(object, "nvmlDeviceGetUtilizationRates", handle)
        rows = call(tuple, "nvmlDeviceGetRemappedRows", handle)
        return GpuReading(
            index=index,
            uuid=_map(call(str, "nvmlDeviceGetUUID", handle), _text),
            # The board serial (nvmlDeviceGetSerial, NVML API reference): it names the part
            # in a hardware ticket and tells a replaced GPU from a repaired one.
            serial=_map(call(str, "nvmlDeviceGetSerial", handle), _text),
            pci_bus_id=_map(pci, lambda p: _text(p.busId)),
            name=_map(call(str, "nvmlDeviceGetName", handle), _text),
            ecc_mode_current=_map(ecc_mode, lambda m: bool(m[0])),
            ecc_mode_pending=_map(ecc_mode, lambda m: bool(m[1])),
            ecc_volatile_corrected=call(int, "nvmlDeviceGetTotalEccErrors", handle, corrected, volatile),
            ecc_volatile_uncorrected=call(int, "nvmlDeviceGetTotalEccErrors", handle, uncorrected, volatile),
            ecc_aggregate_corrected=call(int, "nvmlDeviceGetTotalEccErrors", handle, corrected, aggregate),
            ecc_aggregate_uncorrected=call(int, "nvmlDeviceGetTotalEccErrors", handle, uncorrected, aggregate),
            retired_pages_sbe=_map(
                call(
                    list,
                    "nvmlDeviceGetRetiredPages",
                    handle,
                    pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                ),
                len,
            ),
            retired_pages_dbe=_map(
                call(list, "nvmlDeviceGetRetiredPages", handle, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
                len,
            ),
            retired_pages_pending=_map(call(int, "nvmlDeviceGetRetiredPagesPendingStatus", handle), bool),
            remapped_rows=_map(rows, lambda r: RemappedRows(int(r[0]), int(r[1]), bool(r[2]), bool(r[3]))),
            pcie_gen_current=call(int, "nvmlDeviceGetCurrPcieLinkGeneration", handle),
            pcie_gen_max=call(int, "nvmlDeviceGetMaxPcieLinkGeneration", handle),
            pcie_width_current=call(int, "nvmlDeviceGetCurrPcieLinkWidth", handle),
            pcie_width_max=call(int, "nvmlDeviceGetMaxPcieLinkWidth", handle),
            pcie_replay_counter=call(int, "nvmlDeviceGetPcieReplayCounter", handle),
            clock_event_reasons=self._clock_reasons(call, handle),
            utilization_gpu=_map(utilization, lambda u: int(u.gpu)),
            nvlinks=self._nvlinks(call, handle),
            recovery_action=self._recovery_action(call, handle),
            fabric=read_fabric(call, handle),
            # The board's firmware (NVML API reference: nvmlDeviceGetVbiosVersion), which a
            # fleet keeps at one version per model; a board flashed otherwise behaves otherwise.
            vbios_version=_map(call(str, "nvmlDeviceGetVbiosVersion", handle), _text),
        )

    @staticmethod
    def _clock_reasons(call: _Caller, handle: object) -> Reading[int]:
        # Drivers from R535 name these "clock event reasons"; older bindings and drivers
        # only have the "throttle reasons" call, which returns the same bit mask.
        reasons = call(int, "nvmlDeviceGetCurrentClocksEventReasons", handle)
        if isinstance(reasons, NvmlError) and reasons.code == FUNCTION_NOT_FOUND:
            reasons = call(int, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return reasons

    @staticmethod
    def _nvlinks(call: _Caller, handle: object) -> Reading[tuple[NvLinkReading, ...]]:
        pynvml = call.pynvml
        states = link_states(call, handle)
        if isinstance(states, NvmlError):
            return states
        links: list[NvLinkReading] = []
        for state in states:
            if isinstance(state.active, NvmlError):
                error = state.active
                links.append(NvLinkReading(state.link, error, error, error, error, error))
                continue

            def counter(which: int, link: int = state.link) -> Reading[int]:
                return call(int, "nvmlDeviceGetNvLinkErrorCounter", handle, link, which)

            links.append(
                NvLinkReading(
                    link=state.link,
                    active=state.active,
                    replay_errors=counter(pynvml.NVML_NVLINK_ERROR_DL_REPLAY),
                    recovery_errors=counter(pynvml.NVML_NVLINK_ERROR_DL_RECOVERY),
                    crc_flit_errors=counter(pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT),
                    crc_data_errors=counter(pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA),
                )
            )
        return tuple(links)

    @staticmethod
    def _recovery_action(call: _Caller, handle: object) -> Reading[int]:
        field_id = getattr(call.pynvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
        if field_id is None:
            return NvmlError(FUNCTION_NOT_FOUND, "this nvidia-ml-py has no NVML_FI_DEV_GET_GPU_RECOVERY_ACTION")
        values: Reading[list[Any]] = call(list, "nvmlDeviceGetFieldValues", handle, [field_id])
        if isinstance(values, NvmlError):
            return values
        value = values[0]
        if value.nvmlReturn != call.pynvml.NVML_SUCCESS:
            code = call.names.get(int(value.nvmlReturn), f"ERROR_{int(value.nvmlReturn)}")
            return NvmlError(code, f"field {field_id} returned {code}")
        return int(value.value.uiVal)


def _session(body: Callable[[_Caller], T], failed: Callable[[NvmlError], T]) -> T:
    """``body`` between nvmlInit and nvmlShutdown; ``failed(error)`` when NVML cannot start."""
    import pynvml

    names = _error_names(pynvml)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return failed(_as_error(exc, names))
    try:
        return body(_Caller(pynvml, names))
    finally:
        # A failed shutdown changes nothing: the reading is complete either way.
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _gpu_fabric(call: _Caller, index: int) -> GpuFabric:
    handle = call(object, "nvmlDeviceGetHandleByIndex", index)
    if isinstance(handle, NvmlError):
        return GpuFabric(index, handle, handle, handle, handle)
    pci = call(object, "nvmlDeviceGetPciInfo", handle)
    return GpuFabric(
        index,
        pci_bus_id=_map(pci, lambda p: _text(p.busId)),
        uuid=_map(call(str, "nvmlDeviceGetUUID", handle), _text),
        fabric=read_fabric(call, handle),
        links=link_states(call, handle),
    )


# Links are probed from 0 up to the binding's NVML_NVLINK_MAX_LINKS; a GPU answers
# NOT_SUPPORTED or INVALID_ARGUMENT for a link index it does not have.
_NO_SUCH_LINK = frozenset({NOT_SUPPORTED, "INVALID_ARGUMENT", "NOT_FOUND"})


def link_states(call: _Caller, handle: object) -> Reading[tuple[LinkState, ...]]:
    """Each NVLink the GPU has, up or down; the GPU's own error when its first link cannot be read."""
    states: list[LinkState] = []
    for link in range(int(getattr(call.pynvml, "NVML_NVLINK_MAX_LINKS", 18))):
        state = call(int, "nvmlDeviceGetNvLinkState", handle, link)
        if isinstance(state, NvmlError):
            if state.code in _NO_SUCH_LINK:
                continue
            if not states:
                return state  # the GPU itself failed (lost, reset required): say so once
            states.append(LinkState(link, state))
            continue
        states.append(LinkState(link, bool(state)))
    return tuple(states)


def read_fabric(call: _Caller, handle: object) -> Reading[FabricInfo]:
    """The GPU's fabric registration: the versioned call (with the health mask), else the first version."""
    import ctypes

    pynvml = call.pynvml
    versioned = getattr(pynvml, "c_nvmlGpuFabricInfo_v2_t", None)
    if versioned is not None:
        info = versioned()
        done: Reading[int] = call(int, "nvmlDeviceGetGpuFabricInfoV", handle, ctypes.byref(info))
        if not isinstance(done, NvmlError):
            return _fabric_info(info, call.names, int(info.healthMask))
        if done.code != FUNCTION_NOT_FOUND:
            return done
    info = pynvml.c_nvmlGpuFabricInfo_t()
    done = call(int, "nvmlDeviceGetGpuFabricInfo", handle, ctypes.byref(info))
    return done if isinstance(done, NvmlError) else _fabric_info(info, call.names, None)


def _fabric_info(info: Any, names: dict[int, str], health_mask: Optional[int]) -> FabricInfo:
    status = int(info.status)
    raw = bytes(info.clusterUuid).hex()
    uuid = f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:]}"
    # nvmlReturn_t 0 is NVML_SUCCESS, which the error names do not list.
    name = names.get(status, "SUCCESS" if status == 0 else f"ERROR_{status}")
    return FabricInfo(int(info.state), name, uuid, int(info.cliqueId), health_mask)


class _Caller:
    """Calls one pynvml function, turning an ``NVMLError`` into an ``NvmlError`` value."""

    def __init__(self, pynvml: Any, names: dict[int, str]) -> None:
        self.pynvml = pynvml
        self.names = names

    def __call__(self, _kind: Callable[..., T], function: str, *args: Any) -> Reading[T]:
        fn = getattr(self.pynvml, function, None)
        if fn is None:
            return NvmlError(FUNCTION_NOT_FOUND, f"this nvidia-ml-py has no {function}")
        try:
            result: T = fn(*args)
        except self.pynvml.NVMLError as exc:
            return _as_error(exc, self.names)
        return result


def _as_error(exc: Any, names: dict[int, str]) -> NvmlError:
    value = getattr(exc, "value", None)
    code = names.get(value, f"ERROR_{value}") if isinstance(value, int) else type(exc).__name__
    try:
        message = str(exc)
    except Exception:  # pynvml asks the library for unknown codes' text; it may be gone
        message = ""
    return NvmlError(code, message)


def _map(reading: Reading[Any], fn: Callable[[Any], T]) -> Reading[T]:
    return reading if isinstance(reading, NvmlError) else fn(reading)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _to_json(value: Any) -> Any:
    if isinstance(value, NvmlError):
        return {"error": value.code, "message": value.message} if value.message else {"error": value.code}
    if isinstance(value, (RemappedRows, FabricInfo)):
        return asdict(value)
    if isinstance(value, tuple):
        return [{f.name: _to_json(getattr(link, f.name)) for f in fields(NvLinkReading)} for link in value]
    return value


def snapshot_document(reading: NodeReading, source: str, recorded_at: Optional[str] = None) -> dict[str, Any]:
    """The JSON document (version 1) for ``reading``; ``parse_snapshot`` reads it back unchanged."""
    return {
        "format": SNAPSHOT_FORMAT,
        "version": SNAPSHOT_VERSION,
        "source": source,
        "recorded_at": recorded_at,
        "init_error": _to_json(reading.init_error) if reading.init_error is not None else None,
        "driver_version": _to_json(reading.driver_version),
        "device_count": _to_json(reading.device_count),
        "gpus": [
            {name: _to_json(getattr(gpu, name)) for name in _gpu_fields() if not _unrecorded(name, getattr(gpu, name))}
            for gpu in reading.gpus
        ],
    }


# Fields that snapshots recorded before they were read lack.
_OPTIONAL = frozenset({"fabric", "vbios_version"})


def _unrecorded(name: str, value: Any) -> bool:
    """An optional field a reading does not have: left out, so an old snapshot is written back as it was.

    ``handle_error`` is written only for a GPU that could not be opened.
    """
    if name == "handle_error":
        return value is None
    return name in _OPTIONAL and isinstance(value, NvmlError) and value.code == NOT_RECORDED
