"""Every pass records itself in the node's history: findings raised and cleared, acks, problems as findings."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path
from typing import Any, Callable

import pytest

MISSING = '[checks.mounts]\nexpect = [{ path = "/no/such/history/mount" }]\n'


def _events(cli: Callable[..., tuple[int, str, str]], config: Path) -> list[dict[str, Any]]:
    code, out, err = cli("history", "--json", "--config", str(config))
    assert code == 0, err
    return list(json.loads(out)["events"])


def test_a_pass_records_raised_and_cleared_findings_and_the_boot(
    write_config: Callable[..., Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    config = write_config(MISSING)
    code, _, _ = cli("check", "--once", "--only", "mounts", "--config", str(config))
    assert code == 2
    cli("check", "--once", "--only", "mounts", "--config", str(config))
    events = _events(cli, config)
    assert [e["kind"] for e in events] == ["boot", "raised"], "an unchanged finding is recorded once"
    raised = events[1]
    assert (raised["check"], raised["code"], raised["subject"], raised["status"]) == (
        "mounts",
        "MOUNT_MISSING",
        "/no/such/history/mount",
        "CRITICAL",
    )
    config.write_text(config.read_text().replace(MISSING, ""))
    assert cli("check", "--once", "--only", "mounts", "--config", str(config))[0] == 0
    assert [e["kind"] for e in _events(cli, config)] == ["boot", "raised", "cleared"]


def test_an_ack_is_recorded_and_the_finding_changes_to_ok(
    write_config: Callable[..., Path], cli: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SUDO_USER", raising=False)
    config = write_config(MISSING)
    cli("check", "--once", "--only", "mounts", "--config", str(config))
    code, out, _ = cli("ack", "MOUNT_MISSING", "--config", str(config))
    assert code == 0 and "acknowledged" in out
    assert cli("check", "--once", "--only", "mounts", "--config", str(config))[0] == 0
    events = _events(cli, config)
    assert [e["kind"] for e in events] == ["boot", "raised", "ack", "changed"]
    me = pwd.getpwuid(os.getuid()).pw_name  # the real uid's name: no SUDO_USER here
    assert (events[2]["details"]["by"], events[2]["details"]["status"]) == (me, "CRITICAL")
    assert events[3]["status"] == "OK" and events[3]["details"]["acknowledged"] is True


def test_a_corrupt_history_is_set_aside_and_reported_and_the_pass_goes_on(
    write_config: Callable[..., Path], cli_json: Any, tmp_path: Path
) -> None:
    config = write_config(MISSING)
    state = tmp_path / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    database = state / "history.sqlite"
    database.write_bytes(b"this is not an SQLite database, it is what a bad disk left behind" * 100)
    database.chmod(0o600)
    code, document = cli_json("check", "--once", "--only", "mounts", "--json", "--config", str(config))
    assert code == 2, "the pass is reported as usual: the mount is missing"
    problems = [f for c in document["checks"] if c["name"] == "healthd" for f in c["findings"]]
    assert [(f["status"], f["code"]) for f in problems] == [("UNKNOWN", "HISTORY_PROBLEM")]
    assert "corrupt" in problems[0]["message"] or "not a database" in problems[0]["message"]
    assert list(state.glob("history.sqlite.corrupt-*")), "the corrupt database is kept for a post-mortem"
    # healthd's own problems are never acted on: the decision names the mount only.
    assert document["action"]["reason"] == "healthd: MOUNT_MISSING /no/such/history/mount"
    assert [c["key"] for c in document["action"]["causes"]] == ["mounts/MOUNT_MISSING//no/such/history/mount"]
