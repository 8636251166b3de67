"""``healthd import-nhc``: NHC's documented syntax in, healthd TOML that the real loader accepts out."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from healthd_testkit.paths import FIXTURES
from hypothesis import given
from hypothesis import strategies as st

from healthd.config import load_config
from healthd.engine import settings_models
from healthd.nhcimport import convert
from healthd.plugin import discover

NHC_CONF = FIXTURES / "nhc" / "nhc.conf"


def _import(cli: Callable[..., tuple[int, str, str]], tmp_path: Path) -> tuple[Path, str]:
    out = tmp_path / "imported.toml"
    code, stdout, err = cli("import-nhc", str(NHC_CONF), "--output", str(out))
    assert code == 0 and stdout == ""
    out.chmod(0o644)
    return out, err


def test_the_converted_config_loads_and_means_what_nhc_conf_said(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    imported, _ = _import(cli, tmp_path)
    # The generated TOML with a private state directory, as the suite requires of every config.
    config = write_config(imported.read_text())
    models = settings_models(discover())

    node = load_config(config, models, "node17").check_settings
    mounts = {m.path: (m.fstype, m.source, m.rw) for m in node["mounts"].expect}
    assert mounts == {
        "/": (None, None, True),
        "/dev/shm": ("tmpfs", None, True),
        "/home": ("nfs", "nfs1:/export/home", True),
        "/net/scratch1": ("lustre", None, True),  # its source was a match string
        "/net/scratch2": ("lustre", None, True),
        "/usr/share/datasets": (None, None, False),
        "/apps": ("nfs", "apps1:/export/apps", None),
    }
    assert node["mounts"].min_free_percent == 2.0
    assert node["services"].expect == ["sshd", "munge", "slurmd"]
    assert node["services"].process_names == {"munge": ["munged"]}
    assert node["infiniband"].expect_rate_gbps is None

    gpu = load_config(config, models, "gpu042").check_settings
    assert gpu["infiniband"].expect_rates_gbps == {"mlx5_0:1": 200}
    assert gpu["infiniband"].expect_ports == ["mlx5_0:1"]
    assert [m.path for m in gpu["mounts"].expect] == [*mounts, "/raid"], "a host's lines add to the common ones"
    host = gpu["host"]
    assert (host.expect_sockets, host.expect_cpus, host.expect_threads_per_core) == (2, 224, 2)
    assert host.expect_memory_gib == 1900.0
    assert host.expect_ethernet == ["eth0"], "check_hw_eth, on every node but the login nodes"
    assert load_config(config, models, "login1").check_settings["host"].expect_ethernet == []

    assert load_config(config, models, "cpu12").check_settings["services"].expect == [
        "sshd",
        "munge",
        "slurmd",
        "chronyd",
    ]
    assert load_config(config, models, "login1").check_settings["mounts"].min_free_percent == 10.0


def test_every_line_not_converted_is_named_with_its_reason(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    _, err = _import(cli, tmp_path)
    lines = NHC_CONF.read_text().splitlines()

    notes = re.findall(r": line (\d+): .*\n  not converted: (.*)", err)

    def reported(fragment: str, reason: str) -> bool:
        number = next(i for i, line in enumerate(lines, 1) if fragment in line)
        return any(int(n) == number and reason in why for n, why in notes)

    assert reported("check_fs_free /tmp 128MB", "is a size")
    assert reported("-k telnetd", "NOT run")
    assert reported("check_ps_unauth_users", "check_ps_unauth_users has no healthd equivalent")
    assert reported("NVIDIA_HEALTHMON", "an NHC variable")
    assert reported("check_hw_eth eth0", "eth0 must also be up in healthd")
    assert reported("no separator", "no 'TARGET || CHECK' separator")
    assert reported("-Z /bad", "unknown option -Z")
    assert reported('-s "fs[0-9]', "NHC match string")
    assert reported('-s "fs[0-9]', "-e (run on failure) is left out")
    assert reported("-u root -S sshd", "-S (start or restart the service) is left out")
    assert not reported("-r -d munged", "remount")
    assert reported("check_hw_physmem 1900GB 2TB", "the maximum 2TB is left out")
    assert reported("check_hw_mem 1024", "check_hw_mem has no healthd equivalent")
    assert "converted 17 check(s)" in err


def test_check_hw_eth_takes_one_plain_interface_name() -> None:
    imported = convert("* || check_hw_eth eno1\n* || check_hw_eth eth*\n* || check_hw_eth\n* || check_hw_eth eno1\n")
    assert imported.document["checks"]["host"] == {"expect_ethernet": ["eno1"]}
    reasons = [note.reason for note in imported.notes]
    assert "'eth*' is not a plain network interface name" in reasons
    assert "expected one network interface name" in reasons


def test_an_unreadable_file_is_named(cli: Callable[..., tuple[int, str, str]], tmp_path: Path) -> None:
    code, _, err = cli("import-nhc", str(tmp_path / "missing.conf"))
    assert code == 66 and "missing.conf" in err


@given(st.text(max_size=400))
def test_any_text_converts_without_crashing(text: str) -> None:
    imported = convert(text)
    assert imported.converted + len(imported.notes) >= 0
    assert all(note.line >= 1 for note in imported.notes)


def test_nhc_lines_about_one_mount_become_one_expectation() -> None:
    # healthd refuses two expectations of one mount path; NHC checks each line on its own.
    imported = convert(
        "* || check_fs_mount_rw -f /data\n* || check_fs_mount -t nfs -f /data/\n* || check_fs_mount_ro -f /data\n"
    )
    assert imported.document["checks"]["mounts"] == {"expect": [{"path": "/data", "rw": True, "fstype": "nfs"}]}
    assert [note.reason for note in imported.notes] == [
        "/data: rw False contradicts True from an earlier line: kept that"
    ]
    settings_models(discover())["mounts"].model_validate(imported.document["checks"]["mounts"])


def test_check_hw_ib_gives_each_named_device_its_own_rate() -> None:
    # NDR400 compute HCAs beside NDR200 storage ones: one rate for all would fail the storage ports.
    imported = convert(
        "* || check_hw_ib 400 mlx5_0\n* || check_hw_ib 200 mlx5_8\n* || check_hw_ib 400 mlx5_0\n"
        "* || check_hw_ib 400\n* || check_hw_ib 200\n* || check_hw_ib 0 mlx5_1\n* || check_hw_ib 400 mlx5_2:1\n"
    )
    table = imported.document["checks"]["infiniband"]
    assert table == {
        "expect_ports": ["mlx5_0:1", "mlx5_8:1"],
        "expect_rates_gbps": {"mlx5_0:1": 400, "mlx5_8:1": 200},
        "expect_rate_gbps": 400,
    }
    reasons = {note.line: note.reason for note in imported.notes if "is taken as its port 1" not in note.reason}
    assert reasons == {
        5: "healthd has one rate for all ports, already 400; name the device to give this one its own",
        6: "rate 0 is not a positive number of Gb/s",
        7: "device 'mlx5_2:1' is not a device name such as mlx5_0",
    }
    settings_models(discover())["infiniband"].model_validate(table)
