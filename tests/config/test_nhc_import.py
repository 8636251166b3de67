"""``healthd import-nhc``: NHC's documented syntax in, a config that judges what NHC judges out.

Each NHC rule is the check's own code in NHC 1.4.3 (scripts/lbnl_*.nhc); the configs here
are written from its README's syntax, or are public nhc.conf files (fixtures/nhc/README.md).
"""

from __future__ import annotations

import functools
import json
import re
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.paths import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from healthd.checks.plugin import JudgeContext, discover, settings_models
from healthd.config.cache import load_checks
from healthd.config.defaults import toml_module
from healthd.config.nhcimport import AZURE_CHECKS, CONVERTERS, NHC_143_CHECKS, REFUSED, convert
from healthd.config.tomlwrite import dumps
from healthd_checks.common.mountinfo import parse_mountinfo
from healthd_checks.mounts.check import MountsObservation
from healthd_checks.mounts.check import judge as judge_mounts
from healthd_checks.mounts.fsprobe import Usage

tomllib = toml_module()
NHC_CONF = FIXTURES / "nhc" / "nhc.conf"
AZURE = FIXTURES / "nhc" / "azure"


def checks(text: str) -> dict[str, Any]:
    """The file-wide tables of a conversion, after a round trip through the TOML writer and reader."""
    return dict(tomllib.loads(dumps(convert(text).document))["checks"])


def reasons(text: str) -> list[str]:
    return [note.reason for note in convert(text).notes if note.lost]


def validate(document: dict[str, Any], check: str) -> Any:
    return settings_models(discover())[check].model_validate(document["checks"][check])


# -- check_hw_ib: dev:port, as NHC builds HW_IB_DEV from the sysfs path (lbnl_hw.nhc) ---------------


def test_check_hw_ib_takes_nhcs_device_port_with_a_rate_per_port() -> None:
    imported = convert(
        "* || check_hw_ib 400 mlx5_ib0:1\n* || check_hw_ib 400 mlx5_ib1:1\n* || check_hw_ib 100 mlx5_an0:1\n"
    )
    table = imported.document["checks"]["infiniband"]
    assert table["expect_ports"] == ["mlx5_ib0:1", "mlx5_ib1:1", "mlx5_an0:1"]
    assert table["expect_rates_gbps"] == {"mlx5_ib0:1": 400, "mlx5_ib1:1": 400, "mlx5_an0:1": 100}
    assert imported.lost == 0
    validate(imported.document, "infiniband")


def test_check_hw_ib_refuses_what_nhc_could_never_pass_or_would_judge_otherwise() -> None:
    assert reasons("* || check_hw_ib 400 mlx5_0\n") == [
        "'mlx5_0' is not DEVICE:PORT: NHC compares it with device:port names (mlx5_0:1), so this line fails"
        " on every node"
    ]
    (why,) = reasons("* || check_hw_ib 400\n")
    assert "any one port" in why and "every port" in why
    assert checks("* || check_hw_ib 400\n").get("infiniband") is None


# -- variables: never a literal $NAME in a config -------------------------------------------------


def test_an_unset_nhc_variable_is_refused_by_name_never_copied() -> None:
    text = "* || check_fs_mount_rw -t $NHC_TMP_FS -f /tmp\n"
    assert reasons(text) == ["$NHC_TMP_FS is not assigned earlier in this file and has no default in NHC 1.4.3"]
    assert "$" not in dumps(convert(text).document)


def test_variables_take_the_files_earlier_value_or_nhcs_default() -> None:
    text = (
        "* || export NHC_TMP_FS=tmpfs MARK_OFFLINE=1\n"
        "* || check_fs_mount_rw -t $NHC_TMP_FS -f /tmp\n"
        '* || check_fs_mount_ro -s "${DATA_SRC}" -f /data\n'
        "* || DATA_SRC=nfs1:/export/data\n"
        "gpu* || LOCAL=xfs\n"
        "gpu* || check_fs_mount_rw -t ${LOCAL} -f /raid\n"
        "* || check_fs_mount_rw -t $LOCAL -f /scratch\n"
        "* || check_fs_mount_rw -t ${X:-xfs} -f /x\n"
        "* || check_fs_mount_rw -s $HOSTNAME:/export -f /y\n"
        "* || check_fs_mount_ro -s '$NOT_EXPANDED' -f $INCDIR\n"
    )
    imported = convert(text)
    expect = {m["path"]: m for m in imported.document["checks"]["mounts"]["expect"]}
    assert expect["/tmp"]["fstype"] == "tmpfs", "assigned on an earlier line"
    assert "/data" not in expect, "assigned only after the line that uses it, as NHC evaluates in order"
    assert imported.document["hosts"][0]["checks"]["mounts"]["expect"] == [
        {"path": "/raid", "fstype": "xfs", "rw": True}
    ]
    assert "/scratch" not in expect, "assigned for gpu* only"
    assert expect["/etc/nhc/scripts"]["source"] == "$NOT_EXPANDED", "single quotes keep the text, as in bash"
    assert [n.reason for n in imported.notes if n.lost] == [
        "$DATA_SRC is not assigned earlier in this file and has no default in NHC 1.4.3",
        "$LOCAL is assigned only for target 'gpu*', not for this line's nodes",
        "'${X:-xfs}' asks NHC's shell for an expansion (such as $(...) or ${X:-y})",
        "$HOSTNAME is set by NHC on each node as it runs: no one value holds for the file",
    ]


def test_mark_offline_0_is_named_nhc_would_not_drain() -> None:
    assert reasons("* || export MARK_OFFLINE=0\n") == [
        "MARK_OFFLINE=0: NHC does not drain on a failure; [policy] dry_run = true does that"
    ]


# -- check_hw_physmem MIN MAX FUDGE -----------------------------------------------------------------


def test_check_hw_physmem_keeps_nhcs_fudge_and_maximum() -> None:
    host = checks("* || check_hw_physmem 128gb 128gb 5%\n")["host"]
    assert host == {"memory_tolerance_percent": 5.0, "expect_memory_gib": 128.0, "expect_memory_max_gib": 128.0}
    # A fudge given as a size widens both ends by it (MemTotal + FUDGE >= MIN, MemTotal - FUDGE <= MAX).
    # 1 GiB less a 1 GiB fudge is no minimum at all.
    assert checks("* || check_hw_physmem 1048576 1048576 1G\n")["host"] == {"expect_memory_max_gib": 2.0}
    assert reasons("* || check_hw_physmem 1.5GB 2GB\n") == [
        "size '1.5GB' is not a whole number of kB, or of K, M, G, T, P, E (NHC's sizes)"
    ]


def _meminfo(tmp_path: Path, kib: int) -> Path:
    procfs = tmp_path / "procfs"
    procfs.mkdir(exist_ok=True)
    (procfs / "meminfo").write_text(f"MemTotal:       {kib} kB\nHugePages_Total:       0\n")
    return procfs


def test_a_node_nhc_passes_for_memory_is_not_missing_memory(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    document = convert("* || check_hw_physmem 128gb 128gb 5%\n").document
    document["checks"]["host"]["clock_sync"] = "off"

    def codes(kib: int) -> list[str]:
        procfs = _meminfo(tmp_path, kib)
        config = write_config(f'[paths]\nprocfs = "{procfs}"\n' + dumps(document))
        _, out, _ = cli("check", "--once", "--json", "--dry-run", "--only", "host", "--config", str(config))
        result = json.loads(out)
        return [f["code"] for r in result["checks"] if r["name"] == "host" for f in r["findings"]]

    # 125.5 GiB visible: 125.5 + 5% of it is over 128, and NHC passes the node.
    assert codes(int(125.5 * 2**20)) == []
    assert codes(120 * 2**20) == ["MEMORY_MISSING"]
    assert codes(140 * 2**20) == ["MEMORY_EXCESS"]


# -- check_ps_service and check_ps_daemon ------------------------------------------------------------


def test_check_ps_service_means_a_process_and_s_k_E_mean_it_must_not_run() -> None:
    services = checks(
        "* || check_ps_service -d rpc.statd nfslock\n"
        "* || check_ps_service -u root -S sshd\n"
        "* || check_ps_service -m '*munged' munge\n"
        "* || check_ps_service -E 'logger found it' telnetd\n"
        "* || check_ps_service -k rshd\n"
        "* || check_ps_service -s cups\n"
        "* || check_ps_daemon slurmd\n"
        "* || check_ps_blacklist ypbind\n"
    )["services"]
    assert services == {
        "expect_processes": ["rpc.statd", "sshd", "munged", "slurmd"],
        "forbid_processes": ["telnetd", "rshd", "cups", "ypbind"],
        "process_owners": {"sshd": ["root"]},
    }
    assert "expect" not in services, "NHC looks for processes, not systemd units (nfslock is no Ubuntu unit)"


def test_check_ps_service_argv_matches_and_non_fatal_lines_are_refused() -> None:
    assert reasons("* || check_ps_service -m 'sshd:' -S sshd\n") == [
        "-m 'sshd:' matches a process's argv, which healthd does not read (any process can rewrite its own);"
        " name the daemon's executable with -d instead"
    ]
    assert reasons("* || check_ps_service -0 -S sshd\n") == [
        "-0: NHC only logs this check's failure; every healthd finding drains, so it is not converted"
    ]
    assert "argv" in reasons("* || check_ps_service -f -m '*slurmd -D' slurmd\n")[0]


def _process(procfs: Path, pid: int, name: str, uid: int) -> None:
    (procfs / str(pid)).mkdir(parents=True)
    (procfs / str(pid) / "status").write_text(
        f"Name:\t{name}\nState:\tS (sleeping)\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
    )


def test_the_services_check_judges_imported_processes_as_nhc_does(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    document = convert(
        "* || check_ps_service -d rpc.statd nfslock\n* || check_ps_service -E 'true' telnetd\n"
        "* || check_ps_service -k rshd\n"
    ).document
    procfs = tmp_path / "procfs"
    _process(procfs, 700, "rpc.statd", 107)  # statd runs as a system account
    _process(procfs, 9000, "telnetd", 1001)  # a user's process named telnetd is not the daemon
    config = write_config(f'[paths]\nprocfs = "{procfs}"\n' + dumps(document))

    def findings() -> list[tuple[str, str]]:
        _, out, _ = cli("check", "--once", "--json", "--dry-run", "--only", "services", "--config", str(config))
        checks = json.loads(out)["checks"]
        return [(f["code"], f["subject"]) for r in checks if r["name"] == "services" for f in r["findings"]]

    assert findings() == []
    _process(procfs, 800, "rshd", 0)
    assert findings() == [("PROCESS_FORBIDDEN", "rshd")]
    (procfs / "700" / "status").unlink()
    (procfs / "700").rmdir()
    assert findings() == [("PROCESS_MISSING", "rpc.statd"), ("PROCESS_FORBIDDEN", "rshd")]


def test_check_ps_service_u_keeps_the_owner_nhc_requires(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    imported = convert(
        "* || check_ps_service -u 107 -d munged munge\n* || check_ps_service -u root slurmd\n"
        "* || check_ps_daemon sshd root\n* || check_ps_service -k -u root telnetd\n"
    )
    services = imported.document["checks"]["services"]
    assert services["process_owners"] == {"munged": [107], "slurmd": ["root"], "sshd": ["root"], "telnetd": ["root"]}
    assert "process_users" not in services and imported.lost == 0
    procfs = tmp_path / "procfs"
    _process(procfs, 600, "munged", 0)  # munged as root, where the file says uid 107
    _process(procfs, 700, "slurmd", 0)
    _process(procfs, 800, "sshd", 0)
    _process(procfs, 900, "telnetd", 107)  # a system account's telnetd: NHC asked about root's only
    config = write_config(f'[paths]\nprocfs = "{procfs}"\n' + dumps(imported.document))
    _, out, _ = cli("check", "--once", "--json", "--dry-run", "--only", "services", "--config", str(config))
    found = [
        (f["code"], f["subject"]) for r in json.loads(out)["checks"] if r["name"] == "services" for f in r["findings"]
    ]
    assert found == [("PROCESS_MISSING", "munged")]


def test_an_owner_healthd_cannot_hold_as_nhc_does_is_refused() -> None:
    assert reasons("* || check_ps_daemon slurmd 0\n") == [
        "owner 0: NHC compares the owner's name, so a uid fails this line on every node"
    ]
    assert "an earlier line" in reasons("* || check_ps_service -u root sshd\n* || check_ps_service -u nobody sshd\n")[0]
    (why,) = reasons("* || check_ps_blacklist telnetd alice\n")
    assert why.startswith("owner alice: healthd counts a forbidden process only when a system account owns it")


# -- check_hw_eth: the interface exists --------------------------------------------------------------


def test_check_hw_eth_asks_only_that_the_interface_exists(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    imported = convert(
        "* || check_hw_eth docker0\n* || check_hw_eth lo\n* || check_hw_eth eth9\n* || check_hw_eth eth*\n"
    )
    assert imported.document["checks"]["host"] == {"expect_interfaces": ["docker0", "lo", "eth9"]}
    assert [n.reason for n in imported.notes] == ["'eth*' is not one interface name (NHC compares it as a glob)"]
    imported.document["checks"]["host"]["clock_sync"] = "off"
    sysfs = FIXTURES / "sysfs" / "base"  # docker0 is down, as a bridge with nothing on it is
    config = write_config(f'[paths]\nsysfs = "{sysfs}"\n' + dumps(imported.document))
    _, out, _ = cli("check", "--once", "--json", "--dry-run", "--only", "host", "--config", str(config))
    found = [(f["code"], f["subject"]) for r in json.loads(out)["checks"] for f in r["findings"]]
    assert found == [("ETHERNET_MISSING", "eth9")]


# -- check_fs_used and friends: the mount the line names ----------------------------------------------


def test_check_fs_used_limits_only_the_mount_it_names() -> None:
    imported = convert(
        "* || check_fs_used / 90%\n* || check_fs_free /tmp 20%\n* || check_fs_iused /home 95%\n"
        "* || check_fs_ifree /home 10%\n* || check_fs_free /var 1GB\n"
    )
    mounts = imported.document["checks"]["mounts"]
    assert mounts["usage_limits"] == [
        # Used >= 90% (df's Use%, a whole number) fails: free (100 - Use%) under 11.
        {"path": "/", "min_free_percent": 11.0},
        {"path": "/tmp", "min_free_percent": 20.0},
        {"path": "/home", "min_free_inodes_percent": 10.0},
        # A size is df's Avail in kB (lbnl_fs.nhc, nhc_common_parse_size).
        {"path": "/var", "min_free_kib": 2**20},
    ]
    assert (mounts["min_free_percent"], mounts["min_free_inodes_percent"]) == (0.0, 0.0)
    assert mounts["free_space_as"] == "df"
    assert [n.reason for n in imported.notes if n.lost] == []
    settings = validate(imported.document, "mounts")
    mountinfo = (
        "29 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n"
        "300 29 7:3 / /snap/core22/1380 ro,nodev,relatime shared:200 - squashfs /dev/loop3 ro\n"
    )
    entries = parse_mountinfo(mountinfo, "mountinfo").entries
    full = Usage(0.0, 0.0, 1 << 30, df_used_percent=100, df_inodes_used_percent=100)

    def used(percent: int) -> Usage:
        # Root's reserve: statvfs's free fraction is well under df's.
        return Usage((95 - percent) / 100, 0.5, 1 << 30, df_used_percent=percent, df_inodes_used_percent=50)

    jc = JudgeContext("mounts", settings, 0.0)

    def codes(root: Usage) -> list[str]:
        observed = MountsObservation(Path("mountinfo"), entries, outcomes=(("/", root), ("/snap/core22/1380", full)))
        return [f.code for f in judge_mounts(observed, jc).findings]

    # A read-only squashfs is always full; NHC does not look at it, and neither does the config.
    assert codes(used(50)) == []
    assert codes(used(89)) == []
    assert codes(used(90)) == ["MOUNT_SPACE_LOW"]
    # /var's size: judged on df's Avail, a free KiB under the limit is low.
    var = (("/var", Usage(0.5, 0.5, 1 << 31, free_kib=2**20 - 1, free_inodes=10)),)
    observed = MountsObservation(Path("mountinfo"), entries, outcomes=var)
    assert [(f.code, f.subject) for f in judge_mounts(observed, jc).findings] == [("MOUNT_SPACE_LOW", "/var")]


def test_a_template_is_named_and_what_its_renderer_decides_is_not_converted() -> None:
    # The shape of Ansible roles' nhc.conf.j2 (NVIDIA DeepOps' among them) and of Helm charts.
    imported = convert(
        "# {{ ansible_managed }}\n"
        " {{ ansible_hostname }} || check_hw_cpuinfo 2 {{ cores }} 256\n"
        " * || check_fs_mount_rw -f /\n"
        "{% if gpus > 0 %}\n"
        " * || check_nvsmi_healthmon\n"
        "{% endif %}\n"
        "{{- if .Values.ib }}\n"
        " * || check_hw_ib 400 mlx5_0:1\n"
        "{{- end }}\n"
        " * || check_hw_eth eth0\n"
    )
    assert imported.notes[0].line == 1 and imported.notes[0].reason.startswith("this file is a template")
    lost = {note.line: note.reason for note in imported.notes[1:] if note.lost}
    assert sorted(lost) == [2, 4, 5, 6, 7, 8, 9]
    assert lost[5] == "inside the template's 'if' block of line 4: its renderer decides whether NHC sees it"
    assert lost[8] == "inside the template's 'if' block of line 7: its renderer decides whether NHC sees it"
    checks = imported.document["checks"]
    assert checks["mounts"]["expect"] == [{"path": "/", "rw": True}] and "gpu" not in checks
    assert checks["host"] == {"expect_interfaces": ["eth0"]} and "hosts" not in imported.document


@pytest.mark.parametrize(
    "line",
    [
        "check_nv_drv_version 450.51.06",
        "check_nv_pcie_link_width 16",
        "check_nv_dcgmi_diag",
        "check_ipoib_up ibp12s0",
        "check_ib_link_ber mlx5_0",
        "check_num_numa_nodes 8",
        "check_num_nvme_devices 10",
    ],
)
def test_deepops_checks_without_an_equivalent_are_refused_with_their_reason(line: str) -> None:
    (why,) = reasons(f"* || {line}\n")
    assert why.startswith(f"{line.split()[0]} has no healthd equivalent: ") and len(why) > 60


def test_deepops_gpu_count_is_the_gpu_checks_count() -> None:
    assert checks("* || check_nv_gpu_count 8\n")["gpu"] == {"expect_gpus": 8}


def test_deepops_nvme_count_and_xids_are_the_disks_and_xid_checks() -> None:
    assert checks("* || check_num_nvme_devs 10\n")["disks"] == {"expect_nvme": 10}
    assert checks("* || check_xid_errors\n")["xid"] == {"enabled": True}
    # The example config's name for it is defined nowhere: NHC passes the line, healthd says so.
    (why,) = reasons("* || check_num_nvme_devices 10\n")
    assert "NHC 1.4.3 runs no such function and passes the line on every node" in why


# -- targets, the checks healthd has, and the output --------------------------------------------------


def test_an_invalid_regex_target_is_refused_before_it_is_written(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    imported = convert("/gpu[0-9+/ || check_hw_eth eth0\n/^cpu[0-9]+$/ || check_hw_eth eth1\n")
    assert [h["match"] for h in imported.document.get("hosts", [])] == ["/^cpu[0-9]+$/"]
    (why,) = [n.reason for n in imported.notes]
    assert why.startswith("the target is not a valid NHC match string: '/gpu[0-9+/': not a regular expression")
    config = write_config(dumps(imported.document))
    assert cli("config", "validate", "--config", str(config))[0] == 0


@pytest.mark.parametrize(
    ("line", "check", "more"),
    [
        ("check_gpu_xid", "xid", {}),
        # NHC fails a node whose GPU health tool finds no GPU: so does at least one.
        ("check_nv_healthmon", "gpu", {"min_gpus": 1}),
        ("check_nvsmi_healthmon", "gpu", {"min_gpus": 1}),
        ("check_nv_retired_pages", "gpu", {}),
        ("check_hw_mcelog", "edac", {}),
    ],
)
def test_checks_healthd_has_are_converted_to_them(line: str, check: str, more: dict[str, Any]) -> None:
    imported = convert(f"* || {line}\n")
    assert imported.document["checks"][check] == {"enabled": True, **more}
    assert imported.converted == 1 and imported.lost == 0


def test_arrays_are_written_one_item_per_line_when_long() -> None:
    imported = convert((AZURE / "nd96isr_h100_v5.conf").read_text())
    text = dumps(imported.document)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert '    "mlx5_ib7:1",' in text.splitlines()


def _import(cli: Callable[..., tuple[int, str, str]], conf: Path, out: Path, *extra: str) -> tuple[int, str]:
    code, stdout, err = cli("import-nhc", str(conf), "--output", str(out), *extra)
    assert stdout == ""
    return code, err


def test_the_exit_code_says_whether_everything_was_converted(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    whole = tmp_path / "whole.conf"
    whole.write_text("* || check_hw_ib 400 mlx5_0:1\n* || check_ps_service -S sshd\n")
    code, err = _import(cli, whole, tmp_path / "whole.toml")
    assert code == 0 and "converted 2 check(s)" in err and "0 line(s) or option(s) not converted" in err

    code, err = _import(cli, NHC_CONF, tmp_path / "partial.toml")
    assert code == 65 and "--allow-partial" in err
    assert (tmp_path / "partial.toml").exists(), "written for review all the same"
    code, _ = _import(cli, NHC_CONF, tmp_path / "accepted.toml", "--allow-partial")
    assert code == 0


def test_the_fixture_config_loads_and_means_what_nhc_conf_said(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    out = tmp_path / "imported.toml"
    _import(cli, NHC_CONF, out, "--allow-partial")
    config = write_config(out.read_text())
    node = load_checks(config, host="node17")[0].check_settings
    mounts = {m.path: (m.fstype, m.source, m.rw) for m in node["mounts"].expect}
    assert mounts["/net/scratch1"] == ("lustre", None, True), "its source was a match string"
    assert node["services"].expect_processes == ["sshd", "munged", "slurmd"]
    assert node["services"].forbid_processes == ["telnetd"]
    gpu = load_checks(config, host="gpu042")[0].check_settings
    assert gpu["infiniband"].expect_rates_gbps == {"mlx5_0:1": 200}
    assert (gpu["host"].expect_memory_gib, gpu["host"].expect_memory_max_gib) == (1900.0, 2048.0)
    assert gpu["host"].expect_interfaces == ["eth0"]
    assert load_checks(config, host="login1")[0].check_settings["host"].expect_interfaces == []


def test_an_unreadable_file_is_named(cli: Callable[..., tuple[int, str, str]], tmp_path: Path) -> None:
    code, _, err = cli("import-nhc", str(tmp_path / "missing.conf"))
    assert code == 66 and "missing.conf" in err


@given(st.text(max_size=400))
def test_any_text_converts_without_crashing(text: str) -> None:
    imported = convert(text)
    assert all(note.line >= 1 for note in imported.notes)
    assert "$" not in json.dumps(imported.document) or "$" in text


# -- linear time --------------------------------------------------------------------------------------


def _seconds(text: str) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        convert(text)
        best = min(best, time.perf_counter() - started)
    return best


@pytest.mark.parametrize(
    "shape",
    [
        lambda n: "* || check_fs_mount_rw -f " + " /m" * (n // 3) + "\n",  # one huge line
        lambda n: "* || check_hw_eth e \\\n" * (n // 20) + "\n",  # one line of continuations
        lambda n: "* || check_hw_eth eth0\n" * (n // 440),  # many lines (a twentieth: each is converted)
        lambda n: '* || check_fs_mount_rw -s "' + "x" * n + '" -f /a\n',  # one long quoted word
    ],
)
def test_conversion_time_grows_linearly_with_the_input(shape: Callable[[int], str]) -> None:
    # Ten times the input must take about ten times as long, not a hundred (the old reader's
    # quadratic joins and option parsing took 47 s for 2 MB). Below 10 ms a run measures the
    # memory, not the algorithm. The absolute figure is in bench/bench_nhc_import.py.
    small, large = _seconds(shape(2_000_000)), _seconds(shape(20_000_000))
    assert large / max(small, 0.01) < 30, (small, large)


def test_the_real_public_configs_convert_what_healthd_has(tmp_path: Path, write_config: Callable[..., Path]) -> None:
    for conf in sorted(AZURE.glob("*.conf")):
        imported = convert(conf.read_text())
        lost = {re.sub(r" .*", "", n.text.split("|| ")[1]) for n in imported.notes if n.lost}
        # Only Azure's GPU and memory benchmarks, its topology file and AMD's GPUs have no healthd
        # equivalent (docs/nhc.md); its NCCL and InfiniBand bandwidth lines become active checks.
        assert lost <= {
            "check_hw_topology",
            "check_cuda_bw",
            "check_gpu_bw",
            "check_gpu_count",  # with rocm
            "check_rccl_allreduce",
            "check_cpu_stream",
        }, conf.name
        config = write_config(dumps(imported.document))
        load_checks(config, host="node1")


def test_deepops_dgx_config_converts_but_for_their_documented_refusals(
    write_config: Callable[..., Path],
) -> None:
    expected = {
        FIXTURES / "nhc" / "deepops" / "dgxa100.conf": {
            "check_num_numa_nodes",
            "check_ipoib_up",
            "check_ib_link_ber",
            "check_num_nvme_devices",
            "check_nv_pcie_link_width",
            "check_nv_dcgmi_diag",
            "check_cmd_output",
        },
    }
    for conf, refused in expected.items():
        imported = convert(conf.read_text())
        lost = {re.sub(r" .*", "", n.text.split("|| ")[1]) for n in imported.notes if n.lost}
        assert lost == refused, conf.name
        load_checks(write_config(dumps(imported.document)), host="node1")


# -- azurehpc-health-checks (customTests/azure_*.nhc) -----------------------------------------------------


@pytest.mark.parametrize("name", AZURE_CHECKS)
def test_every_azure_check_converts_or_is_refused_with_a_reason_in_the_docs(name: str) -> None:
    assert name in CONVERTERS or REFUSED.get(name), name
    assert f"`{name}`" in (FIXTURES.parent / "docs" / "nhc.md").read_text()


@pytest.mark.parametrize(
    ("line", "tables"),
    [
        # Row remaps and uncorrected errors are the gpu check's own; the DRAM limit a lifetime count.
        ("check_gpu_ecc 20000000 10000", {"gpu": {"enabled": True, "ecc_aggregate_corrected_max": 20000000}}),
        ("check_gpu_ecc", {"gpu": {"enabled": True}}),
        # Azure's check only logs a throttled GPU: NHC never fails on it, so nothing is added.
        ("check_gpu_clock_throttling", {}),
        ("check_nvlink_status", {"nvlink": {"enabled": True}}),
        # Azure's defaults: 5 flaps in 24 hours, counted with >= as healthd counts them.
        ("check_ib_link_flapping", {"infiniband": {"enabled": True, "flap_window": 86400.0, "flap_downs": 5}}),
        ("check_ib_link_flapping 6 3", {"infiniband": {"enabled": True, "flap_window": 21600.0, "flap_downs": 3}}),
        ("check_nvme_count 8", {"disks": {"expect_nvme": 8}}),
        ("check_vbios_version 96.00.89.00.01", {"gpu": {"expect_vbios": ["96.00.89.00.01"]}}),
        ("check_gpu_count 8", {"gpu": {"expect_gpus": 8}}),
    ],
)
def test_azures_passive_checks_become_healthds_own(line: str, tables: dict[str, Any]) -> None:
    imported = convert(f"* || {line}\n")
    assert imported.converted == 1 and imported.lost == 0, [n.reason for n in imported.notes]
    found = {name: table for name, table in checks(f"* || {line}\n").items() if name != "mounts"}
    assert found == tables
    for name in tables:
        validate(imported.document, name)


# The active checks' settings for Azure's benchmark lines (customTests/azure_nccl_allreduce*.nhc and
# azure_ib_write_bw_*.nhc at commit 0e0a1ac; TOPO before SIZE is its earlier order, commit 0611432).
ACTIVE_LINES = [
    (
        "check_nccl_allreduce 460.0 1 /opt/microsoft/ndv5-topo.xml 16G",
        {"nccl": {"min_busbw_gbps": 460.0, "topo_file": "/opt/microsoft/ndv5-topo.xml", "size_min": "16G",
                  "size_max": "16G"}},
    ),
    ("check_nccl_allreduce 208.0 1 16G", {"nccl": {"min_busbw_gbps": 208.0, "size_min": "16G", "size_max": "16G"}}),
    # Azure's wrapper sets $AZ_NHC_ROOT, NHC does not: the topology file is left out, with a note.
    (
        "check_nccl_allreduce 228.0 1 8G $AZ_NHC_ROOT/topofiles/ndv4-topo.xml",
        {"nccl": {"min_busbw_gbps": 228.0, "size_min": "8G", "size_max": "8G"}},
    ),
    ("check_nccl_allreduce 110.0 3", {"nccl": {"min_busbw_gbps": 110.0, "retries": 2}}),
    # Ten repeats: healthd runs five at most, in a timeout that holds them.
    ("check_nccl_allreduce 110.0 10", {"nccl": {"min_busbw_gbps": 110.0, "retries": 4}}),
    ("check_nccl_allreduce_ib_loopback 18.0 1 16G", {"nccl": {"ib_loopback_min_busbw_gbps": 18.0, "size_min": "16G",
                                                              "size_max": "16G"}}),
    ("check_ib_bw_gdr 375 nd96isr_v5", {"ib_bandwidth": {"use_cuda": True, "min_gbps": 375.0,
                                                         "message_size": 8388608}}),
    ("check_ib_bw_gdr 180.0", {"ib_bandwidth": {"use_cuda": True, "min_gbps": 180.0, "message_size": 8388608}}),
    (
        "check_ib_bw_non_gdr 390",
        {"ib_bandwidth": {"use_cuda": False, "min_gbps": 390.0, "message_size": 1048576, "duration": 10,
                          "queue_pairs": 2}},
    ),
    (
        "check_ib_bw_non_gdr 78 65536",
        {"ib_bandwidth": {"use_cuda": False, "min_gbps": 78.0, "message_size": 65536, "duration": 10,
                          "queue_pairs": 2}},
    ),
]  # fmt: skip


@pytest.mark.parametrize(("line", "tables"), ACTIVE_LINES)
def test_azures_bandwidth_benchmarks_become_active_checks(line: str, tables: dict[str, Any]) -> None:
    imported = convert(f"* || {line}\n")
    assert imported.converted == 1 and imported.lost == 0, [n.reason for n in imported.notes]
    found = {name: table for name, table in checks(f"* || {line}\n").items() if name != "mounts"}
    assert found == tables
    assert any("active check, run only on a drained, idle node" in note.reason for note in imported.notes)
    for name in tables:
        validate(imported.document, name)


def test_both_nccl_lines_make_one_check_whose_runs_fit_its_timeout() -> None:
    text = "* || check_nccl_allreduce 460.0 3 16G\n* || check_nccl_allreduce_ib_loopback 40.0 3 16G\n"
    imported = convert(text)
    assert imported.converted == 2 and imported.lost == 0
    assert checks(text)["nccl"] == {
        "min_busbw_gbps": 460.0, "ib_loopback_min_busbw_gbps": 40.0, "size_min": "16G", "size_max": "16G",
        "retries": 2, "timeout": 360.0,
    }  # fmt: skip
    validate(imported.document, "nccl")


def test_one_file_measures_its_hcas_one_way() -> None:
    (reason,) = reasons("* || check_ib_bw_gdr 375\n* || check_ib_bw_non_gdr 390\n")
    assert "the other way (with or without GPUDirect)" in reason


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("check_gpu_bw 48 335", "[checks.dcgm] level = 2"),
        ("check_cuda_bw 52", "[checks.dcgm] level = 2"),
        ("check_nccl_allreduce", "expected a bandwidth in GB/s above 0 first, not ''"),
        ("check_nccl_allreduce fast 1 16G", "expected a bandwidth in GB/s above 0 first, not 'fast'"),
        ("check_nccl_allreduce 0 1 16G", "above 0"),
        ("check_nccl_allreduce 460 0 16G", "argument 2 '0': expected a whole number from 1 to 1000"),
        ("check_nccl_allreduce 460 1 16X", "'16X' is neither a message size nccl-tests reads"),
        ("check_nccl_allreduce 460 1 16G topo/ndv5.xml", "topology file 'topo/ndv5.xml' is not an absolute path"),
        ("check_nccl_allreduce_ib_loopback 18 1 16G /t.xml more", "a topology file at most"),
        ("check_nccl_allreduce 460 1 16G $UNSET", "$UNSET is not assigned earlier"),
        ("check_ib_bw_gdr -375", "expected a bandwidth in Gb/s above 0 first"),
        ("check_ib_bw_non_gdr 390 big", "argument 2 'big': expected a whole number"),
        ("check_ib_bw_gdr 375 nd96isr_v5 18510", "a bandwidth and one more word at most"),
        ("check_cpu_stream 665500", "STREAM"),
        ("check_hw_topology", "[checks.pcie] expect_devices"),
        ("check_gpu_persistence", "a repair"),
        ("check_app_gpu_clocks", "a repair"),
        ("check_gpu_count 8 rocm", "AMD GPUs"),
        ("check_rccl_allreduce 314 1 16G", "AMD GPUs"),
        ("check_gpu_xgmi", "AMD GPUs"),
        ("check_nvme_count", "expected one whole number of NVMe drives"),
        ("check_ib_link_flapping 200", "argument 1 '200': expected a whole number from 1 to 168"),
        ("check_gpu_ecc lots", "argument 1 'lots': expected a whole number"),
    ],
)
def test_azures_benchmarks_and_amd_checks_are_refused_with_their_reason(line: str, why: str) -> None:
    (reason,) = reasons(f"* || {line}\n")
    assert why in reason, reason


def test_a_refused_azure_line_is_named_by_file_and_line(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    conf = AZURE / "nd96isr_h200_v5.conf"
    code, _, err = cli("import-nhc", str(conf), "-o", str(tmp_path / "out.toml"))
    assert code == 65
    assert f"{conf}: line 50: * || check_gpu_bw 48 335\n  not converted: check_gpu_bw has no healthd" in err
    assert f"{conf}: line 61: * || check_ib_bw_gdr 360\n  note: converted to [checks.ib_bandwidth]" in err
    assert f"{conf}: line 51: * || check_gpu_ecc 20000000 10000\n  note: converted to healthd's gpu check" in err


FIXTURE_NODE_NHC = """\
# The fixture node (fixtures/sysfs/base, fixtures/procfs/gpu-node) in NHC's documented syntax.
* || check_fs_mount_rw -t ext4 -f /
* || check_fs_mount_rw -t nfs4 -s storage01:/export/home -f /home
* || check_fs_mount_ro -f /datasets
* || check_fs_used / 90%
* || check_hw_physmem 2016gb 2016gb 3%
* || check_hw_ib 400 mlx5_0:1
* || check_hw_ib 400 mlx5_7:1
* || check_hw_eth lo
* || check_hw_eth eno1
* || check_hw_eth docker0
* || check_ps_service -d nv-fabricmanager nvidia-fabricmanager
* || check_ps_service -k telnetd
"""


def test_a_converted_config_does_not_drain_a_fixture_node_nhc_passes(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    imported = convert(FIXTURE_NODE_NHC)
    assert imported.lost == 0 and imported.converted == 12
    document = imported.document
    # The clock is healthd's own check, and statvfs would probe this machine's paths, not the fixture's.
    document["checks"]["host"]["clock_sync"] = "off"
    document["checks"]["mounts"]["probe_usage"] = False
    sysfs, procfs = FIXTURES / "sysfs" / "base", FIXTURES / "procfs" / "gpu-node"
    config = write_config(f'[paths]\nsysfs = "{sysfs}"\nprocfs = "{procfs}"\n' + dumps(document))
    only = "host,mounts,services,infiniband"
    _, out, err = cli("check", "--once", "--json", "--dry-run", "--only", only, "--config", str(config))
    result = json.loads(out)
    ran = {r["name"]: [f["code"] for f in r["findings"]] for r in result["checks"] if r["name"] in only.split(",")}
    # MemTotal is 2015.5 GiB: under 2016, but within NHC's 3% fudge; docker0 is down and only needs to exist.
    assert ran == {"host": [], "mounts": [], "services": [], "infiniband": []}, err
    assert result["action"]["decision"] == "none"


def test_words_are_split_and_shown_as_bash_and_a_terminal_would_need() -> None:
    imported = convert(
        '* || IFACES="eth0 eth1"\n* || check_hw_eth $IFACES\n'
        "* || check_hw_ib 400 \x1b[31mmlx5_0:1\n"
        "* || check_fs_mount_rw /a nfs1:/a nfs extra\n"
        "* || check_hw_eth eth0; rm -rf /\n"
    )
    notes = {note.line: note for note in imported.notes}
    assert notes[2].reason.startswith("'$IFACES' expands to several words outside quotes")
    assert "\x1b" not in str(notes[3]) and notes[3].lost, "no control character reaches the terminal"
    assert not notes[4].lost and "words NHC ignores" in notes[4].reason
    assert notes[5].reason.startswith("';' outside quotes")
    assert imported.document["checks"]["mounts"]["expect"] == [
        {"path": "/a", "source": "nfs1:/a", "fstype": "nfs", "rw": True}
    ]


_CHECK_NAMES = st.sampled_from(
    [
        *("check_fs_mount_rw", "check_fs_mount", "check_fs_used", "check_fs_ifree", "check_ps_service"),
        *("check_ps_daemon", "check_ps_blacklist", "check_hw_ib", "check_hw_physmem", "check_hw_eth"),
        *("check_hw_cpuinfo", "check_gpu_count", "check_hw_swap", "check_hw_swap_free", "check_hw_mem_free"),
        *("check_ps_loadavg", "check_dmi_data_match", "check_fs_free"),
    ]
)
_ARGS = st.lists(
    st.one_of(
        st.sampled_from(["-f", "-t", "-s", "-d", "-m", "-u", "-E", "-k", "/", "/data", "90%", "5%", "400", "2TB"]),
        st.sampled_from(["mlx5_0:1", "mlx5_0", "eth0", "root", "sshd", "x$", "'*sshd'", "$X", "nfs", "1G", "0"]),
        st.sampled_from(["'BIOS Information: Version: 2*'", "-n", "!", "'/^BIOS Information: Vendor: x/'", "3%"]),
        st.text(st.characters(codec="utf-8", exclude_characters="\n\r|\\"), max_size=8),
    ),
    max_size=6,
)


@functools.cache
def _models() -> dict[str, Any]:
    return dict(settings_models(discover()))


# The first example builds the settings models, importing every check's settings module.
@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["*", "gpu*", "{n[1-4]}", "/^a/"]), _CHECK_NAMES, _ARGS), max_size=6))
def test_whatever_it_converts_is_a_valid_config(lines: list[tuple[str, str, list[str]]]) -> None:
    text = "".join(f"{target} || {check} {' '.join(args)}\n" for target, check, args in lines)
    document = tomllib.loads(dumps(convert(text).document))
    models = _models()
    for tables in [document["checks"], *(host["checks"] for host in document.get("hosts", []))]:
        for name, table in tables.items():
            models[name].model_validate(table)


def test_a_cpu_count_of_zero_is_refused_not_written(cli: Callable[..., tuple[int, str, str]], tmp_path: Path) -> None:
    """Found by the property below: `check_hw_cpuinfo 0` fails every node in NHC, and healthd's
    `expect_sockets` must be at least 1, so the line is refused with the reason."""
    conf = tmp_path / "nhc.conf"
    conf.write_text("* || check_hw_cpuinfo 0\n* || check_hw_cpuinfo 2 0 64\n")
    code, err = _import(cli, conf, tmp_path / "out.toml")
    assert code == 65, err
    assert err.count("matches no running node") == 2
    assert "expect_sockets" not in (tmp_path / "out.toml").read_text()


def test_a_bound_no_node_can_meet_is_left_out_or_refused(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    """Found by the property below: `check_hw_physmem 400 400` (kB) made a minimum of 0.0 GiB,
    which healthd's `expect_memory_gib` refuses; a maximum of 0 fails every node in NHC."""
    conf = tmp_path / "nhc.conf"
    conf.write_text("* || check_hw_physmem 400 400\n")
    code, err = _import(cli, conf, tmp_path / "out.toml")
    assert code == 0, err
    written = (tmp_path / "out.toml").read_text()
    assert "expect_memory_gib" not in written and "expect_memory_max_gib = 0.001" in written
    conf.write_text("* || check_gpu_count 400\n")
    code, err = _import(cli, conf, tmp_path / "gpus.toml")
    assert code == 65 and "no node has more than 64" in err
    conf.write_text("* || check_hw_physmem 0 0\n")
    code, err = _import(cli, conf, tmp_path / "zero.toml")
    assert code == 65 and "matches no running node" in err


def test_a_grace_nodes_cpu_counts_are_counted_as_nhc_counts_them() -> None:
    """A GB200 file's `check_hw_cpuinfo 128 128 128`: NHC counts each arm64 processor a socket
    (scripts/lbnl_hw.nhc), so the host check must count so too, not sysfs's one or two packages."""
    host = checks("* || check_hw_cpuinfo 128 128 128\n")["host"]
    assert host == {"cpu_count_as": "nhc", "expect_sockets": 128, "expect_cpus": 128, "expect_threads_per_core": 1}


def test_swap_free_memory_and_load_convert_exactly() -> None:
    """lbnl_hw.nhc's sizes are kB: the bounds are written exactly, a size fudge widening them."""
    host = checks(
        "* || check_hw_swap 1G 4G 1M\n* || check_hw_swap_free 512M\n* || check_hw_mem_free 2G\n"
        "* || check_ps_loadavg 300 '' 200\n"
    )["host"]
    assert host == {
        "expect_swap_gib": (2**20 - 2**10) / 2**20,
        "expect_swap_max_gib": (4 * 2**20 + 2**10) / 2**20,
        "min_free_swap_gib": 0.5,
        "min_free_memory_gib": 2.0,
        "max_load_1m": 300.0,
        "max_load_15m": 200.0,
    }
    # Azure's "no swap": a percentage fudge of nothing is nothing.
    assert checks("* || check_hw_swap 0kB 0kB 3%\n")["host"] == {"expect_swap_max_gib": 0.0}
    lost = convert("* || check_hw_swap 1G 2G 3%\n* || check_ps_loadavg 0\n* || check_ps_loadavg 2.5\n").notes
    assert [note.line for note in lost if note.lost] == [1, 2, 3]


def test_dmi_matches_convert_where_sysfs_has_the_line() -> None:
    host = checks(
        '* || check_dmi_data_match "BIOS Information: Version: 2.11.0"\n'
        "* || check_dmi_data_match -t 1 'System Information: Product Name: R*'\n"
        "* || check_dmi_data_match -n BIOS Information: Vendor: Bad\n"
        "* || check_dmi_data_match ! '/^BIOS Information: Version: 1\\./'\n"
    )["host"]
    assert host == {
        "expect_dmi": ["BIOS Information: Version: 2.11.0", "System Information: Product Name: R*"],
        # NHC reads the file with read without -r: the backslash is gone before the regex sees it.
        "forbid_dmi": ["BIOS Information: Vendor: Bad", "/^BIOS Information: Version: 1./"],
    }
    refused = convert(
        "* || check_dmi_data_match 'Memory Device: Size: 64 GB'\n"
        "* || check_dmi_data_match -h 0x0000 'BIOS Information: Version: 2'\n"
        "* || check_dmi_data_match -t 2 'BIOS Information: Version: 2'\n"
        "* || check_dmi_data_match '/Version: 2/'\n"
        "* || check_dmi_raw_data_match 'Version: 2'\n"
    ).notes
    assert [note.line for note in refused if note.lost] == [1, 2, 3, 4, 5]


def test_free_space_and_inodes_given_as_sizes_convert() -> None:
    """lbnl_fs.nhc: a size is df's Avail in kB (nhc_common_parse_size), a count is IFree (K = 1000)."""
    mounts = checks("* || check_fs_free /tmp 1GB\n* || check_fs_ifree /tmp 2k\n* || check_fs_ifree / 5\n")["mounts"]
    assert mounts["usage_limits"] == [
        {"path": "/tmp", "min_free_kib": 2**20, "min_free_inodes": 2000},
        {"path": "/", "min_free_inodes": 5},
    ]
    assert [n.line for n in convert("* || check_fs_ifree /tmp 2kB\n").notes if n.lost] == [1]


@pytest.mark.parametrize("name", NHC_143_CHECKS)
def test_every_nhc_check_converts_or_is_refused_with_a_reason_in_the_docs(name: str) -> None:
    assert name in CONVERTERS or REFUSED.get(name), name
    assert f"`{name}`" in (FIXTURES.parent / "docs" / "nhc.md").read_text()
    if name not in CONVERTERS:
        (note,) = convert(f"* || {name} x\n").notes
        assert note.lost and REFUSED[name] in note.reason


# -- check_file_test, check_file_contents, check_file_stat (lbnl_file.nhc) -> [checks.files] ---------------


def test_file_checks_become_one_expectation_per_file() -> None:
    imported = convert(
        "* || check_file_test -f -r /etc/slurm/slurm.conf /etc/munge/munge.key\n"
        "* || check_file_stat -u 0 -G munge -m 0400 -n 3600 /etc/munge/munge.key\n"
        "* || check_file_contents /etc/hosts '/^10[.]/' '!*bad*'\n"
        "* || check_file_contents /var/log/oops '!*panic*'\n"
        "* || check_file_test -! -e /var/run/nologin\n"
    )
    table = imported.document["checks"]["files"]
    assert table["expect_files"] == [
        {"path": "/etc/slurm/slurm.conf", "severity": "CRITICAL", "type": "file", "readable": True},
        {"path": "/etc/munge/munge.key", "severity": "CRITICAL", "type": "file", "readable": True, "follow": False,
         "owner": "0", "group": "munge", "mode": "0400", "max_age_s": 3600.0},
        {"path": "/etc/hosts", "severity": "CRITICAL", "lines": ["/^10[.]/", "!*bad*"]},
        {"path": "/var/log/oops", "severity": "CRITICAL", "exists": "optional", "lines": ["!*panic*"]},
        {"path": "/var/run/nologin", "severity": "CRITICAL", "exists": False},
    ]  # fmt: skip
    assert imported.lost == 0 and imported.converted == 5
    validate(imported.document, "files")


def test_file_modes_are_bash_numbers_as_nhc_compares_them() -> None:
    # NHC compares "0%a" with -m in bash arithmetic: 644 is decimal 644, 0o1204.
    assert checks("* || check_file_stat -m 644 /f\n")["files"]["expect_files"][0]["mode"] == "1204"
    assert checks("* || check_file_stat -M 0x1ed /f\n")["files"]["expect_files"][0]["mode_includes"] == "0755"


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("check_file_test -O /f", "-O"),
        ("check_file_test -f -d /f", "one type"),
        ("check_file_test -! -e /a /b", "-!"),
        ("check_file_test /f", "Missing parameters"),
        ("check_file_test -e etc/f", "absolute"),
        ("check_file_stat -N 60 /f", "ctime"),
        ("check_file_stat -m 99999 /f", "no file has such permissions"),
        ("check_file_stat -m 08 /f", "not a number"),
        ("check_file_contents /f", "match string"),
        ("check_file_contents /f '/(/'", "regular expression"),
    ],
)
def test_file_lines_healthd_cannot_say_are_refused_with_a_reason(line: str, why: str) -> None:
    (reason,) = reasons(f"* || {line}\n")
    assert why in reason
