"""``healthd status``: reads the recorded pass, says how old it is, exits with its status."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from healthd.cli import main


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, tz=dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _setup(tmp_path: Path, status: str = "CRITICAL", age: float = 5.0, interval: int = 300) -> Path:
    state = tmp_path / "state"
    state.mkdir()
    document: dict[str, Any] = {
        "schema_version": 1,
        "node": "gpu0001",
        "started_at": _iso(time.time() - age),
        "duration_seconds": 0.5,
        "status": status,
        "exit_code": {"OK": 0, "WARNING": 1, "CRITICAL": 2, "UNKNOWN": 3}[status],
        "checks": [
            {"name": "mounts", "status": "OK", "findings": []},
            {
                "name": "xid",
                "status": status,
                "findings": [{"status": status, "code": "XID_79", "subject": "gpu3", "message": "fallen off the bus"}],
            },
        ],
    }
    (state / "last-pass.json").write_text(json.dumps(document))
    config = tmp_path / "healthd.toml"
    config.write_text(f'[paths]\nstate_dir = "{state}"\n[slurm]\nenabled = false\n[daemon]\ninterval = {interval}\n')
    return config


def test_fresh_record_exits_with_its_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _setup(tmp_path, "CRITICAL", age=10)
    assert main(["status", "--config", str(config)]) == 2
    out = capsys.readouterr().out
    assert out.startswith("gpu0001: CRITICAL, last pass ")
    assert "XID_79 gpu3: fallen off the bus" in out


def test_json_output_carries_age_and_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _setup(tmp_path, "WARNING", age=20)
    assert main(["status", "--json", "--config", str(config)]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["exit_code"] == 1 and document["stale"] is False
    assert 15 < document["age_seconds"] < 60
    assert document["last_pass"]["node"] == "gpu0001"


def test_record_older_than_two_intervals_is_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _setup(tmp_path, "OK", age=700, interval=300)
    assert main(["status", "--config", str(config)]) == 3
    assert "more than two intervals (600s)" in capsys.readouterr().out


def test_missing_record_is_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "healthd.toml"
    config.write_text(f'[paths]\nstate_dir = "{tmp_path}/nothing"\n[slurm]\nenabled = false\n')
    assert main(["status", "--config", str(config)]) == 3
    assert "no pass recorded yet" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{truncated", "not a valid pass document"),
        ('{"status": "GREAT"}', "no known 'status'"),
    ],
)
def test_garbage_record_is_unknown_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    config = _setup(tmp_path)
    (tmp_path / "state" / "last-pass.json").write_text(text)
    assert main(["status", "--config", str(config)]) == 3
    err = capsys.readouterr().err
    assert expected in err and "last-pass.json" in err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[daemon\n", "not valid TOML"),
        ("[daemon]\ninterval = 'soon'\n", "daemon.interval"),
        ("[paths]\nstate_dir = 7\n", "paths.state_dir"),
    ],
)
def test_bad_config_names_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    config = tmp_path / "healthd.toml"
    config.write_text(text)
    assert main(["status", "--config", str(config)]) == 78
    err = capsys.readouterr().err
    assert expected in err and str(config) in err


def test_config_writable_by_others_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "healthd.toml"
    config.write_text(f'[paths]\nstate_dir = "{tmp_path}/state"\n[slurm]\nenabled = false\n')
    config.chmod(0o666)
    assert main(["status", "--config", str(config)]) == 78
    assert "refusing to load a config that others could have written" in capsys.readouterr().err


def test_status_loads_neither_pydantic_nor_plugins(tmp_path: Path) -> None:
    config = _setup(tmp_path, "OK")
    probe = (
        "import sys; from healthd.cli import main; code = main(['status', '--config', sys.argv[1]]);"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'healthd_checks', "
        "'prometheus_client') or m in ('healthd.plugin', 'healthd.engine', 'healthd.config'));"
        "print('HEAVY', heavy); sys.exit(code)"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(config)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stdout
