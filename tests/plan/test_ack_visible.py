"""An acknowledgement is seen afterwards, through the real CLI: who gave it and when (sudo's caller named), in
``status`` at once and in the check table; ``ack --list`` lists them, ``ack --revoke`` takes them back."""

from __future__ import annotations

import json
import os
import pwd
import re
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.checks import only_checks

from healthd.exitcodes import EX_NO_MATCH, EX_TEMPFAIL, EX_USAGE
from healthd.store.lock import StateLock

CLI = Callable[..., tuple[int, str, str]]
MISSING = "/definitely-not-mounted"
BODY = f'[slurm]\nnode_name = "n1"\n[checks.mounts]\nexpect = [{{ path = "{MISSING}" }}]\n{only_checks("mounts")}'
FINDING = f"MOUNT_MISSING {MISSING}: "
WHEN = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


@pytest.fixture
def me(monkeypatch: pytest.MonkeyPatch) -> str:
    """The real uid's name; the tests run without sudo unless one sets SUDO_USER."""
    monkeypatch.delenv("SUDO_USER", raising=False)
    return pwd.getpwuid(os.getuid()).pw_name


def _line(out: str, text: str) -> str:
    (line,) = [line for line in out.splitlines() if text in line]
    return line


def _history(cli: CLI, config: str) -> list[dict[str, Any]]:
    code, out, err = cli("history", "--json", "-c", config)
    assert code == 0, err
    return [event for event in json.loads(out)["events"] if event["kind"] == "ack"]


def test_an_ack_through_sudo_is_seen_at_once_in_status_then_in_the_table_with_who_and_when(
    write_config: Callable[..., Path], cli: CLI, tmp_path: Path, me: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = str(write_config(BODY))
    assert cli("check", "--once", "-c", config)[0] == 2
    monkeypatch.setenv("SUDO_USER", "alice")  # as sudo(8) sets it for the user who ran it
    assert cli("ack", "--all", "-c", config)[0] == 0
    who = f"alice (sudo as {me})"
    code, out, _ = cli("status", "-c", config)
    # The exit code is still the recorded pass's: only the next pass runs the checks again.
    assert code == 2
    line = _line(out, FINDING)
    assert re.search(rf"^    CRITICAL .* \(acknowledged since this pass by {re.escape(who)} at {WHEN}\)$", line), line
    assert _line(out, "acknowledged since this pass:").startswith(
        "acknowledged since this pass: its finding; the next pass runs the checks again and, should they find no"
        " more than this, acts on none of them"
    )
    code, out, _ = cli("status", "--json", "-c", config)
    assert [(a["key"], a["by"]) for a in json.loads(out)["acknowledged_since"]] == [
        (f"mounts/MOUNT_MISSING/{MISSING}", who)
    ]
    code, out, _ = cli("check", "--once", "-c", config)
    assert code == 0
    assert re.search(r"^mounts +OK +\d+ms +1 acknowledged$", _line(out, "mounts ")), out
    acked = rf"\(acknowledged CRITICAL by {re.escape(who)} at {WHEN}\)$"
    assert re.search(rf"^  OK +MOUNT_MISSING {MISSING}: .*{acked}", _line(out, FINDING)), out
    code, out, _ = cli("status", "-c", config)
    assert code == 0 and re.search(rf"^    OK +MOUNT_MISSING {MISSING}: .*{acked}", _line(out, FINDING))
    assert "acknowledged since this pass" not in out
    stored = json.loads((tmp_path / "state" / "acks.json").read_text())["acks"]
    assert [a["by"] for a in stored] == [who]
    assert [(e["message"], e["details"]["by"]) for e in _history(cli, config)] == [(f"acknowledged by {who}", who)]


def test_ack_list_shows_what_is_acknowledged_and_revoke_takes_it_back(
    write_config: Callable[..., Path], cli: CLI, tmp_path: Path, me: str
) -> None:
    config = str(write_config(BODY))
    assert cli("check", "--once", "-c", config)[0] == 2
    assert cli("ack", "--list", "-c", config)[1] == f"no acknowledged finding in {tmp_path}/state/acks.json\n"
    assert cli("ack", "--all", "-c", config)[0] == 0
    code, out, _ = cli("ack", "--list", "-c", config)
    assert code == 0
    head, line = out.splitlines()
    assert head.startswith(f"1 acknowledged finding in {tmp_path}/state/acks.json; each lapses once its check runs")
    key = f"mounts/MOUNT_MISSING/{MISSING}"
    expected = rf"^  CRITICAL mounts MOUNT_MISSING {MISSING} by {me} at {WHEN} \[key {re.escape(key)}\]$"
    assert re.search(expected, line), line
    assert cli("check", "--once", "-c", config)[0] == 0
    code, _, err = cli("ack", "--revoke", "XID_79", "-c", config)
    assert code == EX_NO_MATCH and "no acknowledgement in" in err
    code, out, _ = cli("ack", "--revoke", key, "-c", config)
    assert code == 0 and out.startswith(f"revoked CRITICAL mounts MOUNT_MISSING {MISSING} by {me} at ")
    assert cli("ack", "--list", "-c", config)[1].startswith("no acknowledged finding")
    code, out, _ = cli("status", "-c", config)
    assert code == 0 and _line(out, FINDING).endswith("; no longer acknowledged: the next pass acts on it again)")
    events = _history(cli, config)
    assert [(e["status"], e["message"]) for e in events] == [
        ("", f"acknowledged by {me}"),
        ("revoked", f"acknowledgement revoked by {me}"),
    ]
    assert cli("check", "--once", "-c", config)[0] == 2, "revoked: the finding counts again"


def test_revoke_all_takes_back_every_ack(write_config: Callable[..., Path], cli: CLI, me: str) -> None:
    config = str(write_config(BODY))
    assert cli("check", "--once", "-c", config)[0] == 2
    assert cli("ack", "--all", "-c", config)[0] == 0
    code, out, _ = cli("ack", "--revoke", "--all", "-c", config)
    assert code == 0 and out.splitlines()[-1] == "the next pass acts on these findings again"
    assert cli("check", "--once", "-c", config)[0] == 2


@pytest.mark.parametrize(
    "args",
    [["--revoke"], ["--revoke", "--all", "mounts"], ["--list", "--all"], ["--list", "mounts"], ["--list", "--revoke"]],
)
def test_list_and_revoke_refuse_a_command_line_that_mixes_its_ways(
    args: list[str], write_config: Callable[..., Path], cli: CLI, tmp_path: Path
) -> None:
    config = str(write_config(BODY))
    assert cli("check", "--once", "-c", config)[0] == 2
    assert cli("ack", "--all", "-c", config)[0] == 0
    code, out, _ = cli("ack", *args, "-c", config)
    assert (code, out) == (EX_USAGE, "")
    assert len(json.loads((tmp_path / "state" / "acks.json").read_text())["acks"]) == 1


def test_revoke_while_a_pass_holds_the_lock_changes_nothing_and_says_try_again(
    write_config: Callable[..., Path], cli: CLI, tmp_path: Path
) -> None:
    config = str(write_config(BODY.replace("[slurm]\n", "[slurm]\nlock_timeout = 0.3\n", 1)))
    assert cli("check", "--once", "-c", config)[0] == 2
    assert cli("ack", "--all", "-c", config)[0] == 0
    with StateLock(tmp_path / "state", 1.0):
        code, out, err = cli("ack", "--revoke", "--all", "-c", config)
    assert (code, out) == (EX_TEMPFAIL, "") and "nothing revoked, try again" in err
    assert cli("ack", "--list", "-c", config)[1].startswith("1 acknowledged finding")
