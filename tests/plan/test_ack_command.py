"""``healthd ack`` through the real CLI: without a name it lists and changes nothing, ``--all`` acknowledges the
node's last whole pass (never a partial one), and every acknowledgement says what it covered."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.checks import only_checks

from healthd.exitcodes import EX_NOINPUT, EX_USAGE

CLI = Callable[..., tuple[int, str, str]]


def _body(*paths: str) -> str:
    expect = ", ".join(f'{{ path = "{path}" }}' for path in paths)
    return f'[slurm]\nnode_name = "n1"\n[checks.mounts]\nexpect = [{expect}]\n{only_checks("mounts")}'


def _acked_keys(state: Path) -> list[str]:
    acks: Any = json.loads((state / "acks.json").read_text())["acks"] if (state / "acks.json").exists() else []
    return [entry["key"] for entry in acks]


def test_ack_without_all_lists_the_findings_and_acknowledges_nothing(
    write_config: Callable[..., Path], cli: CLI, tmp_path: Path
) -> None:
    config = str(write_config(_body("/definitely-not-mounted")))
    assert cli("check", "--once", "-c", config)[0] == 2
    code, out, err = cli("ack", "-c", config)
    assert code == EX_USAGE
    lines = out.splitlines()
    assert lines[0].startswith(f"the last whole pass ({tmp_path}/state/last-pass.json, started ")
    assert lines[1:] == [
        "  CRITICAL mounts MOUNT_MISSING /definitely-not-mounted",
        "1 of them CRITICAL: acknowledged, a CRITICAL finding no longer keeps the node out of service",
    ]
    assert "nothing acknowledged: --all acknowledges these" in err
    assert _acked_keys(tmp_path / "state") == []
    assert cli("check", "--once", "-c", config)[0] == 2, "still CRITICAL: nothing was acknowledged"


def test_ack_all_acknowledges_the_whole_pass_and_says_what(
    write_config: Callable[..., Path], cli: CLI, tmp_path: Path
) -> None:
    config = str(write_config(_body("/definitely-not-mounted", "/not-mounted-either")))
    assert cli("check", "--once", "-c", config)[0] == 2
    code, out, err = cli("ack", "--all", "-c", config)
    assert code == 0, err
    assert out.splitlines() == [
        "acknowledged CRITICAL mounts MOUNT_MISSING /definitely-not-mounted",
        "acknowledged CRITICAL mounts MOUNT_MISSING /not-mounted-either",
    ]
    assert cli("check", "--once", "-c", config)[0] == 0, "both findings acknowledged"


def test_ack_all_never_takes_a_partial_pass_that_status_does_not_show(
    write_config: Callable[..., Path], cli: CLI, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    config = str(write_config(_body("/definitely-not-mounted")))
    assert cli("check", "--once", "-c", config)[0] == 2
    write_config(_body("/seen-only-by-a-partial-pass"))
    assert cli("check", "--once", "--only", "mounts", "-c", config)[0] == 2  # saved as other-pass.json
    code, out, _ = cli("ack", "-c", config)
    assert code == EX_USAGE and "/seen-only-by-a-partial-pass" not in out and "/definitely-not-mounted" in out
    code, out, _ = cli("ack", "--all", "-c", config)
    assert code == 0 and out == "acknowledged CRITICAL mounts MOUNT_MISSING /definitely-not-mounted\n"
    assert _acked_keys(state) == ["mounts/MOUNT_MISSING//definitely-not-mounted"]
    # A finding named by its code is taken from the latest pass, a partial one included: the operator named it.
    code, out, _ = cli("ack", "MOUNT_MISSING", "-c", config)
    assert code == 0 and out == "acknowledged CRITICAL mounts MOUNT_MISSING /seen-only-by-a-partial-pass\n"
    assert "mounts/MOUNT_MISSING//seen-only-by-a-partial-pass" in _acked_keys(state)


def test_ack_all_without_a_whole_pass_acknowledges_nothing(write_config: Callable[..., Path], cli: CLI) -> None:
    config = str(write_config(_body("/definitely-not-mounted")))
    assert cli("check", "--once", "--only", "mounts", "-c", config)[0] == 2
    for args in (["ack"], ["ack", "--all"]):
        code, out, err = cli(*args, "-c", config)
        assert (code, out) == (EX_NOINPUT, ""), args
        assert "no recorded whole pass in " in err and "one run with --only or --active is not" in err


@pytest.mark.parametrize(
    "args",
    [["ack", "--all", "mounts"], ["ack", "--repaired", "GPU-1", "--all"], ["ack", "--repaired", "GPU-1", "mounts"]],
)
def test_ack_refuses_a_command_line_that_mixes_its_ways(
    args: list[str], write_config: Callable[..., Path], cli: CLI, tmp_path: Path
) -> None:
    config = str(write_config(_body("/definitely-not-mounted")))
    assert cli("check", "--once", "-c", config)[0] == 2
    code, out, _ = cli(*args, "-c", config)
    assert (code, out) == (EX_USAGE, "")
    assert _acked_keys(tmp_path / "state") == []
