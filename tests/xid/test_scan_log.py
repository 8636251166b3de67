"""``healthd scan-log`` over saved dumps in each format: JSON fields and the Nagios exit code."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from healthd.cli import EX_CONFIG, main

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kernlog"


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


def test_config_overrides_apply(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "healthd.toml"
    config.write_text(private(tmp_path) + '[checks.xid]\noverrides = { "63" = "WARNING" }\n')
    code, document = scan(capsys, "--config", str(config), str(FIXTURES / "dmesg.txt"))
    assert code == 1 and document["events"][2]["grade"] == "WARNING"
    config.write_text(private(tmp_path) + '[checks.xid]\noverrides = { "sixty-three" = "WARNING" }\n')
    assert main(["scan-log", "--config", str(config), str(FIXTURES / "dmesg.txt")]) == EX_CONFIG
    assert "checks.xid.overrides" in capsys.readouterr().err


def test_default_config_applies_without_config_option(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    default = tmp_path / "healthd.toml"
    default.write_text(private(tmp_path) + '[checks.xid]\noverrides = { "63" = "CRITICAL" }\n')
    monkeypatch.setattr("healthd.config.DEFAULT_CONFIG_PATH", default)
    code, document = scan(capsys, str(FIXTURES / "dmesg.txt"))
    assert code == 2 and document["events"][2]["grade"] == "CRITICAL"
    monkeypatch.setattr("healthd.config.DEFAULT_CONFIG_PATH", tmp_path / "absent.toml")
    assert scan(capsys, str(FIXTURES / "dmesg.txt"))[0] == 0


def test_unreadable_file_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["scan-log", str(tmp_path / "nope.log")]) == 3
    assert f"cannot read {tmp_path / 'nope.log'}" in capsys.readouterr().err
    assert main(["scan-log", str(tmp_path)]) == 3


def test_garbage_file_is_not_a_crash(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "garbage.bin"
    path.write_bytes(bytes(range(256)) * 50 + b"\nNVRM: Xid (PCI:0000:3b:00): \xff\xfe 79\n")
    code, document = scan(capsys, str(path))
    assert code == 0 and document["events"] == []
