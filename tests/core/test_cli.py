from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from healthd import __version__
from healthd.schema import PassOut, json_schema

REPO = Path(__file__).resolve().parents[2]


def test_version(cli: Callable[..., tuple[int, str, str]]) -> None:
    with pytest.raises(SystemExit) as info:
        cli("--version")
    assert info.value.code == 0


def test_list_checks_names_every_builtin(cli: Callable[..., tuple[int, str, str]]) -> None:
    _code, out, _ = cli("list-checks", "--json")
    rows = json.loads(out)
    assert {"mounts", "services"} <= {r["name"] for r in rows}
    assert all(r["description"] for r in rows)


def test_json_output_validates_against_the_documented_schema(
    write_config: Callable[[str], Path], cli_json: Any
) -> None:
    path = write_config('[node]\nmounts = [{ path = "/definitely-not-mounted" }]\n')
    code, doc = cli_json("check", "--once", "--json", "--only", "mounts,services", "--config", str(path), "--dry-run")
    parsed = PassOut.model_validate(doc)
    assert parsed.exit_code == code == 2
    assert parsed.healthd_version == __version__
    assert [c.name for c in parsed.checks] == ["mounts", "services"]


def test_schema_file_is_up_to_date() -> None:
    assert (REPO / "docs/check-output.schema.json").read_text() == json_schema()


def test_table_output_lists_checks_and_findings(
    write_config: Callable[[str], Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    path = write_config('[node]\nmounts = [{ path = "/definitely-not-mounted" }]\n')
    code, out, _ = cli("check", "--once", "--only", "mounts", "--config", str(path), "--dry-run")
    assert code == 2
    lines = out.splitlines()
    assert lines[0].split() == ["CHECK", "STATUS", "TIME", "DETAIL"]
    assert lines[1].split()[:2] == ["mounts", "CRITICAL"]
    assert "MOUNT_MISSING /definitely-not-mounted" in out


def test_unknown_only_name_is_a_usage_error(cli: Callable[..., tuple[int, str, str]], write_config: Any) -> None:
    code, out, err = cli("check", "--once", "--only", "mounts,gpus", "--config", str(write_config("")))
    assert code == 64 and out == "" and "unknown check(s) gpus" in err


def test_module_entry_point_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "healthd", "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == f"healthd {__version__}"


def test_table_counts_notes_but_lists_only_problems() -> None:
    from healthd.model import CheckResult, Finding, PassResult, RunState, Status
    from healthd.report import render_table

    findings = (
        Finding("xid", Status.OK, "XID_63", "gpu1", "row remapping recorded"),
        Finding("xid", Status.CRITICAL, "XID_79", "gpu3", "fallen off the bus"),
    )
    table = render_table(PassResult("n1", 0.0, 0.1, (CheckResult("xid", RunState.RAN, findings, 0.01),)))
    assert "1 problem(s), 1 note(s)" in table
    assert "XID_79 gpu3" in table and "XID_63" not in table
