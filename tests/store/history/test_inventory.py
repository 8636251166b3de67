"""The gpu check hands each boot's GPU inventory to the history through a real pass, serials included.

NVML is faked at its boundary (``healthd_testkit.nvml``); the engine, the pipeline and
the SQLite store are the real ones, and the boot id is read from a private procfs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from healthd_testkit.nvml import SYSFS_H100, FakeNvml

from healthd.config.cache import load_checks
from healthd.cycle.engine import Engine
from healthd.cycle.pipeline import run_pass
from healthd.model import Device
from healthd.store.history import History
from healthd.store.historyschema import Kind
from healthd_checks.gpu.check import CHECK

# Boot ids as the kernel writes them (proc(5)): anything else is a boot the pass cannot name.
BOOT_1 = "11111111-1111-4111-8111-111111111111"
BOOT_2 = "22222222-2222-4222-8222-222222222222"


def _boot(procfs: Path, boot_id: str) -> None:
    path = procfs / "sys" / "kernel" / "random" / "boot_id"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(boot_id + "\n")


def test_each_boot_records_the_gpus_it_has_and_names_a_swapped_one(
    mocker: Any, tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    nvml = FakeNvml().install(mocker)
    procfs = tmp_path / "proc"
    _boot(procfs, BOOT_1)
    config = write_config(f'[paths]\nsysfs = "{SYSFS_H100}"\nprocfs = "{procfs}"\n[checks.gpu]\nexpect_gpus = 8\n')
    engine = Engine(*load_checks(config, specs=[CHECK], store=False))

    first = run_pass(engine)
    assert first.exit_code == 0, first.result.findings
    state_dir = engine.config.paths.state_dir
    with History.open(state_dir) as history:
        (boot,) = history.boots()
    assert boot.boot_id == BOOT_1
    assert len(boot.gpus) == 8
    assert boot.gpus[3] == Device("gpu", 3, "0000:5d:00.0", "GPU-00000003-1111-2222-3333-444455556666", "1650000000003")

    # The GPU in slot 3 is swapped while the node is down: a new boot, a new UUID and serial.
    nvml.gpus[3]["nvmlDeviceGetUUID"] = "GPU-replacement"
    nvml.gpus[3]["nvmlDeviceGetSerial"] = "1659999999999"
    _boot(procfs, BOOT_2)
    run_pass(engine)
    with History.open(state_dir) as history:
        boots = history.boots()
        (event,) = [e for e in history.events(kinds=[Kind.BOOT]) if e.subject == BOOT_2]
    assert [b.boot_id for b in boots] == [BOOT_1, BOOT_2]
    assert boots[1].gpus[3] == Device("gpu", 3, "0000:5d:00.0", "GPU-replacement", "1659999999999")
    assert "0000:5d:00.0 GPU-00000003-1111-2222-3333-444455556666 -> GPU-replacement" in event.message


def test_a_gpu_without_a_serial_is_still_inventoried_and_healthy(
    mocker: Any, tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    import pynvml

    nvml = FakeNvml(gpus=2).install(mocker)
    for gpu in nvml.gpus:
        gpu["nvmlDeviceGetSerial"] = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    procfs = tmp_path / "proc"
    _boot(procfs, BOOT_1)
    no_sysfs = tmp_path / "nosys"
    config = write_config(f'[paths]\nprocfs = "{procfs}"\nsysfs = "{no_sysfs}"\n[checks.gpu]\nexpect_gpus = 2\n')
    engine = Engine(*load_checks(config, specs=[CHECK], store=False))

    outcome = run_pass(engine)
    assert outcome.exit_code == 0, outcome.result.findings
    with History.open(engine.config.paths.state_dir) as history:
        (boot,) = history.boots()
    assert [(g.index, g.serial) for g in boot.gpus] == [(0, None), (1, None)]
    assert all(g.uuid for g in boot.gpus)
