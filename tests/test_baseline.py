"""``healthd baseline``: the fixture node's own config, read from the node, expects exactly what it has."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.paths import REPO

from healthd.config.defaults import toml_module
from healthd.config.hosts import merge
from healthd.config.tomlwrite import dumps

# The fixture node (fixtures/h100-node.toml) with its paths and replayed sources, but no expectations.
BARE = """
[paths]
sysfs = "fixtures/sysfs/base"
procfs = "fixtures/procfs/gpu-node"
kmsg = "fixtures/kernlog/kmsg-healthy.txt"
[checks.mounts]
include_root = false
probe_usage = false
[checks.services]
manager = "process"
[checks.gpu]
snapshot = "fixtures/nvml/h100-healthy.json"
[checks.nvlink]
snapshot = "fixtures/nvml/h100-healthy.json"
[checks.host]
timex = "fixtures/host/timex-synced.json"
"""


@pytest.fixture
def at_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)


def _baseline(cli: Callable[..., tuple[int, str, str]], config: Path, out: Path, *extra: str) -> dict[str, Any]:
    code, _, err = cli("baseline", str(out), "--config", str(config), *extra)
    assert code == 0, err
    return toml_module().loads(out.read_text())


def test_the_baseline_expects_what_the_node_has_and_then_passes(
    at_repo: None, cli: Callable[..., tuple[int, str, str]], write_config: Callable[..., Path], tmp_path: Path
) -> None:
    config = write_config(BARE)
    found = _baseline(cli, config, tmp_path / "baseline.toml")["checks"]
    assert found["gpu"] == {
        "expect_gpus": 8,
        "expect_model": "NVIDIA H100 80GB HBM3",
        "expect_vbios": ["96.00.99.00.01"],
    }
    assert found["nvlink"] == {"expect_nvswitches": 4, "expect_active_links": 18}
    assert found["infiniband"]["expect_rate_gbps"] == 400
    assert len(found["infiniband"]["expect_ports"]) == 8
    mounts = {m["path"]: m for m in found["mounts"]["expect"]}
    assert mounts["/home"] == {"path": "/home", "fstype": "nfs4", "source": "storage01:/export/home", "rw": True}
    assert mounts["/scratch"]["fstype"] == "lustre"
    assert "/proc" not in mounts and "/sys" not in mounts
    assert {"nvidia", "nvidia_uvm", "mlx5_ib"} <= set(found["services"]["expect_kernel_modules"])
    host = found["host"]
    assert (host["expect_cpus"], host["expect_sockets"], host["expect_threads_per_core"]) == (224, 2, 2)
    assert host["expect_kernel"] == ["6.1.0-18-amd64"] and host["expect_driver"] == ["550.54.15"]
    assert host["expect_ethernet"] == ["eno1"], "up, with a device behind it: not lo or docker0"
    assert 1800 < host["expect_memory_gib"] < 2048

    # The bare config with the baseline laid over it: every expectation holds on this node ...
    combined = merge(toml_module().loads(config.read_text()), {"checks": found})
    config.write_text(dumps(combined))
    baselined = ",".join(sorted(found))
    code, out, _ = cli("check", "--once", "--json", "--only", baselined, "--config", str(config))
    document = json.loads(out)
    assert sorted(c["name"] for c in document["checks"]) == sorted(found)
    assert code == 0 and document["status"] == "OK", [c for c in document["checks"] if c["status"] != "OK"]
    # ... and fails where the node no longer has what it had: a GPU gone from NVML, and
    # (from a snapshot recorded before the VBIOS and fabric were read) the VBIOS unknown.
    config.write_text(config.read_text().replace("h100-healthy.json", "h100-gpu-missing.json"))
    code, out, _ = cli("check", "--once", "--json", "--only", "gpu", "--config", str(config))
    codes = {f["code"] for c in json.loads(out)["checks"] for f in c["findings"]}
    assert code == 2 and {"GPU_MISSING", "VBIOS_UNREADABLE"} <= codes


def test_a_baseline_for_a_node_group_is_a_host_section(
    at_repo: None, cli: Callable[..., tuple[int, str, str]], write_config: Callable[..., Path], tmp_path: Path
) -> None:
    config = write_config(BARE)
    section = tmp_path / "section.toml"
    found = _baseline(cli, config, section, "--match", "{gpu[001-064]}")
    (entry,) = found["hosts"]
    assert entry["match"] == "{gpu[001-064]}" and entry["checks"]["gpu"]["expect_gpus"] == 8
    config.write_text(config.read_text() + "\n" + section.read_text())
    code, out, _ = cli("config", "validate", "--config", str(config), "--host", "gpu007")
    assert code == 0 and "hosts[0] (match '{gpu[001-064]}')" in out
    code, _, err = cli("baseline", str(section), "--config", str(config))
    assert code == 73 and "cannot create" in err, "an existing file is never overwritten"
