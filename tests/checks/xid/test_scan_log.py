"""``healthd scan-log`` over saved dumps in each format: JSON fields and the Nagios exit code.

The driver-prefix rule applies to every format; the facility rule where the format
carries the facility: /dev/kmsg dumps, ``dmesg -x`` and ``dmesg -r`` (from ``<8>`` up).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from healthd_testkit.namespace import in_mount_namespace
from healthd_testkit.paths import FIXTURES as ALL_FIXTURES

from healthd.cli.main import main
from healthd.exitcodes import EX_CONFIG

FIXTURES = ALL_FIXTURES / "kernlog"


def scan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["scan-log", "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("name", "exit_code", "expected"),
    [
        (
            "dmesg.txt",
            0,
            [
                (6, "XID_13", "0000:5e:00", "OK"),
                (7, "XID_13", "0000:5e:00", "OK"),
                (8, "XID_63", "0000:3b:00", "OK"),
                (9, "SXID_22013", "nvswitch3", "OK"),  # its Severity and Data lines are not events of their own
            ],
        ),
        ("dmesg-r.txt", 2, [(3, "XID_48", "0000:3b:00", "CRITICAL"), (4, "XID_94", "0000:3b:00", "OK")]),
        (
            "journalctl-k.txt",
            2,
            [
                (2, "XID_79", "0000:3b:00", "CRITICAL"),
                (3, "XID_79", "0000:3b:00", "CRITICAL"),
                (4, "SXID_20034", "nvswitch0", "CRITICAL"),
                (5, "SXID_19084", "nvswitch4", "OK"),
            ],
        ),
        ("kmsg.txt", 2, [(4, "XID_154", "0000:9b:00", "CRITICAL"), (5, "XID_43", "0000:3b:00", "OK")]),
        ("kmsg-hostile.txt", 0, []),
        ("dmesg-hostile.txt", 0, []),
        ("dmesg-r-hostile.txt", 0, []),
        ("dmesg-x-hostile.txt", 0, []),
        ("kmsg-banner.txt", 2, [(7, "XID_79", "0000:18:00", "CRITICAL"), (8, "XID_79", "0000:2a:00", "CRITICAL")]),
        ("kmsg-banner-split.txt", 2, [(7, "XID_79", "0000:3b:00", "CRITICAL")]),
        ("dmesg-banner.txt", 2, [(4, "XID_79", "0000:18:00", "CRITICAL"), (5, "XID_79", "0000:2a:00", "CRITICAL")]),
        (
            "journalctl-k-banner.txt",
            2,
            [(4, "XID_79", "0000:18:00", "CRITICAL"), (5, "XID_79", "0000:2a:00", "CRITICAL")],
        ),
    ],
)
def test_dumps(capsys: pytest.CaptureFixture[str], name: str, exit_code: int, expected: list[tuple[Any, ...]]) -> None:
    code, document = scan(capsys, str(FIXTURES / name))
    assert code == exit_code == document["exit_code"]
    assert [(e["line"], e["code"], e["gpu"], e["grade"]) for e in document["events"]] == expected


def test_fields_of_one_event(capsys: pytest.CaptureFixture[str]) -> None:
    _, document = scan(capsys, str(FIXTURES / "dmesg-r.txt"))
    event = document["events"][0]
    assert event["format"] == "dmesg-raw"
    assert event["xid"] == 48 and event["bucket"] == "uncorrectable_ecc" and event["sticky"] == "until_reset"
    assert event["action"] == "WORKFLOW_XID_48"
    assert event["uuid"] == "GPU-8f3c1a2b-5d6e-7f80-91a2-b3c4d5e6f708"
    assert event["pid"] == 99 and event["process"] == "nccl"
    _, kmsg = scan(capsys, str(FIXTURES / "kmsg.txt"))
    assert kmsg["events"][0]["seq"] == 1522 and kmsg["events"][0]["recovery_action"] == 1


def test_stdin_and_table(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO((FIXTURES / "journalctl-k.txt").read_text()))
    assert main(["scan-log", "-"]) == 2
    out = capsys.readouterr().out
    assert "<stdin>:4: CRITICAL SXID_20034" in out and "4 event(s), CRITICAL" in out


def private(tmp_path: Path) -> str:
    """The tables every config a test writes has: its own state directory, Slurm off."""
    return f'[paths]\nstate_dir = "{tmp_path}/state"\n[slurm]\nenabled = false\n'


def test_xid_74_lists_its_link_registers_and_causes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    log = tmp_path / "nvlink.txt"
    log.write_text(
        "[449410.332316] NVRM: Xid (PCI:0000:3b:00): 74, pid='<unknown>', name=<unknown>, "
        "NVLink: fatal error detected on link 14(0x30, 0x0, 0x2000, 0x0, 0x0, 0x0, 0x0)\n"
    )
    code, document = scan(capsys, str(log))
    (event,) = document["events"]
    assert (code, event["nvlink"], event["nvlink_registers"]) == (
        2,
        14,
        ["0x30", "0x0", "0x2000", "0x0", "0x0", "0x0", "0x0"],
    )
    assert event["nvlink_causes"] == ["ecc_parity", "unexpected"]


def test_config_overrides_apply(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "healthd.toml"
    config.write_text(private(tmp_path) + '[checks.xid]\noverrides = { "63" = "WARNING" }\n')
    code, document = scan(capsys, "--config", str(config), str(FIXTURES / "dmesg.txt"))
    assert code == 1 and document["events"][2]["grade"] == "WARNING"
    config.write_text(private(tmp_path) + '[checks.xid]\noverrides = { "sixty-three" = "WARNING" }\n')
    assert main(["scan-log", "--config", str(config), str(FIXTURES / "dmesg.txt")]) == EX_CONFIG
    assert "checks.xid.overrides" in capsys.readouterr().err


def test_only_a_named_config_applies(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The node's default config is not scan-log's: a saved log grades the same on any machine.
    default = tmp_path / "healthd.toml"
    default.write_text(private(tmp_path) + '[checks.xid]\noverrides = { "63" = "CRITICAL" }\n')
    monkeypatch.setattr("healthd.config.load.DEFAULT_CONFIG_PATH", default)
    code, document = scan(capsys, str(FIXTURES / "dmesg.txt"))
    assert code == 0 and document["events"][2]["grade"] == "OK"
    code, document = scan(capsys, "--config", str(default), str(FIXTURES / "dmesg.txt"))
    assert code == 2 and document["events"][2]["grade"] == "CRITICAL"


def test_unreadable_file_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["scan-log", str(tmp_path / "nope.log")]) == 3
    assert f"cannot read {tmp_path / 'nope.log'}" in capsys.readouterr().err
    assert main(["scan-log", str(tmp_path)]) == 3


def test_garbage_file_is_not_a_crash(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "garbage.bin"
    path.write_bytes(bytes(range(256)) * 50 + b"\nNVRM: Xid (PCI:0000:3b:00): \xff\xfe 79\n")
    code, document = scan(capsys, str(path))
    assert code == 0 and document["events"] == []


USERSPACE = [("XID_79", "0000:3b:00"), ("SXID_20034", "nvswitch0"), ("XID_79", "0000:5e:00"), ("XID_79", "0000:86:00")]


@pytest.mark.parametrize("name", ["kmsg-hostile.txt", "dmesg-r-hostile.txt", "dmesg-x-hostile.txt"])
def test_the_switch_counts_userspace_records_and_marks_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    config = tmp_path / "healthd.toml"
    config.write_text("[checks.xid]\naccept_userspace_kmsg = true\n")
    code, document = scan(capsys, "--config", str(config), str(FIXTURES / name))
    assert code == 2 and document["accept_userspace_kmsg"] is True
    # The four /dev/kmsg writes (the banner among them); never the kernel's segfault reports.
    assert [(e["code"], e["gpu"]) for e in document["events"]] == USERSPACE
    assert {e["origin"] for e in document["events"]} == {"userspace"}
    assert main(["scan-log", "--config", str(config), str(FIXTURES / name)]) == 2
    out = capsys.readouterr().out
    assert "(written by userspace)" in out and "accept_userspace_kmsg" in out.splitlines()[-1]


def test_default_json_names_the_switch_and_each_origin(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "healthd.toml"
    config.write_text("")
    _, document = scan(capsys, "--config", str(config), str(FIXTURES / "kmsg.txt"))
    assert document["accept_userspace_kmsg"] is False
    assert [e["origin"] for e in document["events"]] == ["kernel", "kernel"]
    _, document = scan(capsys, "--config", str(config), str(FIXTURES / "dmesg.txt"))
    assert {e["origin"] for e in document["events"]} == {"unknown"}
    assert {e["format"] for e in document["events"]} == {"dmesg"}


def test_dmesg_r_of_util_linux_before_its_fix_cannot_tell_userspace(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Debian 12's dmesg -r printed this /dev/kmsg write (facility 1, level 4) as <5>: only the prefix rule is left.

    ``dmesg -x`` names the facility right on every version, so it is the dump to take.
    """
    dump = tmp_path / "dmesg-r-debian12.txt"
    dump.write_text("<5>[  616.685238] NVRM: Xid (PCI:0000:3b:00): 63, pid=1, name=capture, Row Remapper\n")
    _, document = scan(capsys, str(dump))
    assert [(e["code"], e["origin"]) for e in document["events"]] == [("XID_63", "unknown")]
    dump.write_text("user  :warn  : [  616.685238] NVRM: Xid (PCI:0000:3b:00): 63, pid=1, name=capture, Row\n")
    assert scan(capsys, str(dump))[1]["events"] == []


def test_a_flood_of_repeated_events_lists_each_line_as_its_own(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The same messages again and again, in two formats, on GPUs with and without a UUID, with
    # a user-written kmsg record of the same text (not counted) between them; more distinct
    # messages than the scanner and the writer remember, so both forget and read them again.
    # Expected: each line parsed on its own (``parse_line`` remembers nothing).
    from healthd_checks.xid.catalog import classify
    from healthd_checks.xid.parse import GpuIdentity, parse_line
    from healthd_checks.xid.scan import ScanEntry

    uuid = "6,1,1000,-;NVRM: GPU at PCI:0000:3b:00: GPU-12345678-1234-1234-1234-123456789abc\n"
    lines = [uuid]
    for n in range(2000):
        lines.append(f"[ {n}.0] NVRM: Xid (PCI:0000:{'3b' if n % 2 else '5e'}:00): 13, pid={n % 1500}, name=x, E\n")
        fallen = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
        lines.extend((f"14,{n},{n}000,-;{fallen}", f"{n % 8},{n},{n}000,-;{fallen}"))
    log = tmp_path / "flood.txt"
    log.write_text("".join(lines))
    uuids, found = {}, []
    for number, line in enumerate(lines, 1):
        record, event = parse_line(line)
        if isinstance(event, GpuIdentity):
            uuids[event.pci.key] = event.uuid
        elif event is not None:
            found.append((number, record, event))
    expected = [ScanEntry(n, r, e, classify(e), uuids.get(e.pci.key) if e.pci else None).to_dict() for n, r, e in found]
    code, document = scan(capsys, str(log))
    assert code == 2 and len(document["events"]) == 4000
    assert document["events"] == expected
    kinds = {(e["origin"], e["uuid"] is None) for e in expected}
    assert kinds == {("unknown", False), ("unknown", True), ("kernel", False)}


# In the namespace: what a node where healthd is installed and running has (its config, with
# an override, and its state directory), on tmpfs over an overlay of /etc and /var/lib whose
# upper layers are a tmpfs too, so that nothing reaches this machine's own directories.
NODE_SETUP = """set -e
mount -t tmpfs tmpfs "$WORK"
for dir in /etc /var/lib; do
  layer="$WORK/$(echo "$dir" | tr / _)"
  mkdir -p "$layer/upper" "$layer/work"
  mount -t overlay overlay -o "lowerdir=$dir,upperdir=$layer/upper,workdir=$layer/work" "$dir"
done
mkdir -p /etc/healthd /var/lib/healthd
mount -t tmpfs -o mode=0755 tmpfs /etc/healthd
mount -t tmpfs -o mode=0700 tmpfs /var/lib/healthd
printf '[checks.xid]\\noverrides = { "13" = "CRITICAL" }\\n' > /etc/healthd/healthd.toml
printf 'not a cache\\n' > /var/lib/healthd/config-cache.json
"""

# scan-log run in-process under an audit hook (PEP 578, as the host guard uses) that records
# every file opened or listed under the node's directories.
WATCHED_RUN = """
import json, os, sys
from healthd.cli.main import main
watched = ("/etc/healthd", "/var/lib/healthd")
touched = []
def hook(event, args):
    if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes)):
        path = os.path.abspath(os.fsdecode(args[0]))
        if path.startswith(watched):
            touched.append(path)
sys.addaudithook(hook)
code = main(["scan-log", "--json", *sys.argv[2:]])
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "touched": touched}, out)
"""


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare(1)")
def test_scan_log_reads_nothing_of_the_node_it_runs_on(tmp_path: Path) -> None:
    # A node where healthd runs has /etc/healthd and /var/lib/healthd: scan-log, an offline tool,
    # must read neither (the suite runs it there, under the host guard), and reads only the
    # config that --config names, never the state directory that config points at.
    log = tmp_path / "dmesg.txt"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:5e:00): 13, pid=1, name=python, Graphics Exception\n")
    (tmp_path / "work").mkdir()
    (tmp_path / "run.py").write_text(WATCHED_RUN)
    run = f'"{sys.executable}" "{tmp_path}/run.py"'
    script = (
        f'WORK="{tmp_path}/work"\n{NODE_SETUP}'
        f'{run} "{tmp_path}/plain.json" "{log}" > /dev/null\n'
        f'{run} "{tmp_path}/named.json" --config /etc/healthd/healthd.toml "{log}" > /dev/null\n'
        # As the README's install leaves a node: a state directory, no config file.
        f'rm /etc/healthd/healthd.toml\n{run} "{tmp_path}/bare.json" "{log}" > /dev/null\n'
    )
    done = in_mount_namespace(script, expected=0)
    assert done.returncode == 0, done.stdout + done.stderr
    plain = json.loads((tmp_path / "plain.json").read_text())
    named = json.loads((tmp_path / "named.json").read_text())
    # Without --config: the catalog's grade (Xid 13 is the application's, OK), nothing opened.
    assert plain == {"code": 0, "touched": []}
    # Named, the config applies (13 -> CRITICAL); the state directory is still not read.
    assert named == {"code": 2, "touched": ["/etc/healthd/healthd.toml"]}
    assert json.loads((tmp_path / "bare.json").read_text()) == {"code": 0, "touched": []}
