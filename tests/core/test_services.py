from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from healthd_checks.services import ModulesError, parse_modules


@pytest.fixture
def fake_service() -> Iterator[str]:
    """A real process whose argv[0] is a service name, as a daemon's would be."""
    name = "healthd-test-svc"
    process = subprocess.Popen([name, "60"], executable="/bin/sleep")
    yield name
    process.kill()
    process.wait()


def services_config(fixtures: Path, body: str) -> str:
    return f'[paths]\nprocfs = "{fixtures / "procfs/gpu-node"}"\n[checks.services]\nmanager = "process"\n' + body


def findings(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    (result,) = [c for c in doc["checks"] if c["name"] == "services"]
    return sorted((f["status"], f["code"], f["subject"]) for f in result["findings"])


def test_running_and_missing_services_and_modules(
    fake_service: str, fixtures: Path, write_config: Callable[[str], Path], cli_json: Any
) -> None:
    body = services_config(
        fixtures,
        f'severities = {{ "healthd-absent-b" = "WARNING" }}\n'
        f'[node]\nservices = ["{fake_service}", "healthd-absent-a", "healthd-absent-b"]\n'
        'kernel_modules = ["nvidia", "nvidia-peermem", "mlx5_ib", "nvidia_fs"]\n',
    )
    code, doc = cli_json("check", "--once", "--json", "--only", "services", "--config", str(write_config(body)))
    assert code == 2
    assert findings(doc) == [
        ("CRITICAL", "MODULE_NOT_LOADED", "nvidia_fs"),
        ("CRITICAL", "SERVICE_INACTIVE", "healthd-absent-a"),
        ("WARNING", "SERVICE_INACTIVE", "healthd-absent-b"),
    ]


def test_process_names_map_a_unit_to_its_daemon(
    fake_service: str, fixtures: Path, write_config: Callable[[str], Path], cli_json: Any
) -> None:
    body = services_config(
        fixtures, f'process_names = {{ "fabricmanager" = ["{fake_service}"] }}\n[node]\nservices = ["fabricmanager"]\n'
    )
    code, doc = cli_json("check", "--once", "--json", "--only", "services", "--config", str(write_config(body)))
    assert code == 0 and findings(doc) == []


def test_nothing_configured_is_not_applicable(write_config: Callable[[str], Path], cli_json: Any) -> None:
    code, doc = cli_json("check", "--once", "--json", "--only", "services", "--config", str(write_config("")))
    assert code == 0 and doc["checks"][0]["state"] == "not_applicable"


def test_malformed_modules_file_names_the_line(
    fixtures: Path, write_config: Callable[[str], Path], cli_json: Any
) -> None:
    body = f'[paths]\nprocfs = "{fixtures / "procfs/broken"}"\n[node]\nkernel_modules = ["nvidia"]\n'
    code, doc = cli_json("check", "--once", "--json", "--only", "services", "--config", str(write_config(body)))
    (finding,) = doc["checks"][0]["findings"]
    assert code == 3 and finding["code"] == "MODULES_MALFORMED"
    assert f"{fixtures / 'procfs/broken/modules'}:2:" in finding["message"]


@given(st.text())
def test_modules_parser_raises_only_its_error(text: str) -> None:
    try:
        parse_modules(text, "fuzz")
    except ModulesError as exc:
        assert str(exc).startswith("fuzz:")
