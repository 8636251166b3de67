"""The ``files`` check: its judge on plain values, and each branch through the real CLI.

Real files the test makes; a real hung FUSE mount (``hung_mount``) for a file that never
answers; a real unprivileged user (``intruder``) for a file a user may have planted.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.checks import check_context
from healthd_testkit.paths import run_healthd

from healthd.checks.plugin import JudgeContext, Unobserved
from healthd.model import Status
from healthd_checks.files.check import Files, FileSeen, Stat, file_lines, gather, judge
from healthd_checks.files.settings import FileExpectation, FilesSettings

NOW = 1_700_000_000.0
ROOT_FILE = Stat(0o100644, 0, 0, 12, NOW - 100, "root", "root")


def _judge(seen: Any, **want: Any) -> list[tuple[str, Status]]:
    settings = FilesSettings(expect_files=[FileExpectation(path="/f", **want)])
    verdict = judge(Files({"/f": seen}), JudgeContext("files", settings, NOW))
    return [(f.code, f.status) for f in verdict.findings]


def test_the_judge_on_plain_values() -> None:
    text = FileSeen("/f", ROOT_FILE, ROOT_FILE, (True, True, False), "a=1\n  b=2\t\n", False)
    assert _judge(text, type="file", owner="root", mode="0644", readable=True, lines=["b=2", "!/^c/"]) == []
    assert _judge(text, type="directory", executable=True) == [
        ("FILE_TYPE", Status.CRITICAL),
        ("FILE_ACCESS", Status.CRITICAL),
    ]
    assert _judge(text, mode="0600", mode_includes="0755", severity="WARNING") == [
        ("FILE_MODE", Status.WARNING),
        ("FILE_MODE", Status.WARNING),
    ]
    assert _judge(text, max_age_s=10) == [("FILE_AGE", Status.CRITICAL)]
    assert _judge(text, min_age_s=10, max_age_s=1000) == []
    assert _judge(text, lines=["!a=*"]) == _judge(text, lines=["c=3"]) == [("FILE_CONTENTS", Status.CRITICAL)]
    assert _judge(text, exists=False) == [("FILE_PRESENT", Status.CRITICAL)]
    absent = FileSeen("/f", None, None)
    assert _judge(absent) == [("FILE_MISSING", Status.CRITICAL)]
    assert _judge(absent, exists=False) == _judge(absent, exists="optional", lines=["!x"]) == []
    assert _judge(text, exists="optional", lines=["!a=*"]) == [("FILE_CONTENTS", Status.CRITICAL)]
    dangling = FileSeen("/f", Stat(0o120777, 0, 0, 4, NOW, "root", "root"), None)
    assert _judge(dangling) == [("FILE_MISSING", Status.CRITICAL)]
    assert _judge(dangling, type="symlink") == _judge(dangling, follow=False, mode="0777") == []
    assert _judge(dangling, follow=False, mode="0644") == [("FILE_MODE", Status.CRITICAL)]
    link = FileSeen("/f", dangling.link, ROOT_FILE, (True, True, False))
    assert _judge(link, mode="0644") == _judge(link, follow=False, mode="0777") == []


def test_a_file_a_user_owns_satisfies_and_fails_nothing_unless_any_owner_says_so() -> None:
    mine = Stat(0o100644, 1000, 1000, 1, NOW, "alice", "alice")
    planted = FileSeen("/f", mine, mine, (True, True, False), "ok\n", False)
    assert _judge(planted) == _judge(planted, lines=["ok"]) == [("FILE_FOREIGN", Status.UNKNOWN)]
    assert _judge(planted, exists=False) == _judge(planted, lines=["!ok"]) == [("FILE_FOREIGN", Status.UNKNOWN)]
    assert _judge(planted, lines=["ok"], any_owner=True) == _judge(planted, owner="alice") == []
    # A root-owned link to a user's file is the user's file.
    link = FileSeen("/f", Stat(0o120777, 0, 0, 4, NOW, "root", "root"), mine, (True, True, False), "ok\n")
    assert _judge(link, lines=["ok"]) == [("FILE_FOREIGN", Status.UNKNOWN)]


def test_what_could_not_be_seen_is_unknown() -> None:
    hung = Unobserved("FILE_HUNG", "/f", "no answer")
    assert _judge(hung) == [("FILE_HUNG", Status.UNKNOWN)]
    big = FileSeen("/f", ROOT_FILE, ROOT_FILE, (True, True, False), "a\n", True)
    assert _judge(big, lines=["a"]) == []
    assert _judge(big, lines=["b"]) == _judge(big, lines=["!b"]) == [("FILE_TOO_LARGE", Status.UNKNOWN)]
    directory = FileSeen("/f", ROOT_FILE._replace(mode=0o40755), ROOT_FILE._replace(mode=0o40755))
    assert _judge(directory, lines=["a"]) == [("FILE_UNREADABLE", Status.UNKNOWN)]


def test_lines_are_read_as_nhc_reads_them() -> None:
    assert file_lines("a\n  b \t\n\nc") == ["a", "b", "", "c"]
    assert file_lines("") == []


def test_settings_refuse_what_nhc_would_not_match() -> None:
    with pytest.raises(ValueError, match="absolute"):
        FileExpectation(path="etc/passwd")
    with pytest.raises(ValueError, match="octal"):
        FileExpectation(path="/f", mode="0855")
    with pytest.raises(ValueError, match="regular expression"):
        FileExpectation(path="/f", lines=["/(/"])


def _run(write_config: Callable[..., Path], table: str) -> tuple[str, str, list[str]]:
    config = write_config(f"[checks.files]\nread_timeout = 2\nexpect_files = [\n{table}\n]\n")
    done = run_healthd("check", "--once", "--json", "--only", "files", "--config", str(config))
    (check,) = json.loads(done.stdout)["checks"]
    return check["state"], check["status"], [f["code"] for f in check["findings"]]


@pytest.mark.parametrize(
    ("want", "seen"),
    [
        ('type = "file", mode = "0640", lines = ["gpus=*", "!/^error/"]', ("ran", "OK", [])),
        ('lines = ["error*"]', ("ran", "CRITICAL", ["FILE_CONTENTS"])),
        ('type = "directory", severity = "WARNING"', ("ran", "WARNING", ["FILE_TYPE"])),
        ("exists = false", ("ran", "CRITICAL", ["FILE_PRESENT"])),
    ],
)
def test_each_branch_through_the_real_cli(
    want: str, seen: tuple[str, str, list[str]], write_config: Callable[..., Path], tmp_path: Path
) -> None:
    marker = tmp_path / "node.conf"
    marker.write_text("gpus=8\nstate=ready\n")
    marker.chmod(0o640)
    assert _run(write_config, f'{{path = "{marker}", {want}}}') == seen


def test_no_files_is_not_applicable_and_a_missing_one_critical(
    write_config: Callable[..., Path], tmp_path: Path
) -> None:
    config = write_config("[checks.files]\n")
    done = run_healthd("check", "--once", "--json", "--only", "files", "--config", str(config))
    assert json.loads(done.stdout)["checks"][0]["state"] == "not_applicable"
    assert _run(write_config, f'{{path = "{tmp_path / "gone"}"}}') == ("ran", "CRITICAL", ["FILE_MISSING"])


def test_a_file_on_a_hung_mount_is_unknown_within_the_deadline(
    hung_mount: str, write_config: Callable[..., Path], tmp_path: Path
) -> None:
    here = tmp_path / "here"
    here.write_text("x\n")
    started = time.monotonic()
    table = f'{{path = "{hung_mount}/marker", lines = ["x"]}},\n{{path = "{here}", lines = ["x"]}}'
    assert _run(write_config, table) == ("ran", "UNKNOWN", ["FILE_HUNG"])
    assert time.monotonic() - started < 30


def test_a_file_a_user_planted_is_unknown(
    intruder: tuple[int, int], write_config: Callable[..., Path], tmp_path: Path
) -> None:
    planted = tmp_path / "ready"
    planted.write_text("ready\n")
    os.chown(planted, *intruder)
    assert _run(write_config, f'{{path = "{planted}", lines = ["ready"]}}') == ("ran", "UNKNOWN", ["FILE_FOREIGN"])
    assert _run(write_config, f'{{path = "{planted}", exists = false}}') == ("ran", "UNKNOWN", ["FILE_FOREIGN"])
    assert _run(write_config, f'{{path = "{planted}", any_owner = true}}') == ("ran", "OK", [])


def test_a_path_whose_probe_is_stuck_is_not_probed_again_by_the_same_daemon(hung_mount: str, tmp_path: Path) -> None:
    settings = FilesSettings(read_timeout=1, expect_files=[FileExpectation(path=f"{hung_mount}/marker")])
    memory: dict[str, Any] = {}
    first = gather(check_context("files", settings, tmp_path, memory=memory))
    (stuck,) = memory["stuck"].values()
    second = gather(check_context("files", settings, tmp_path, memory=memory))
    assert first.seen[f"{hung_mount}/marker"].code == second.seen[f"{hung_mount}/marker"].code == "FILE_HUNG"
    assert f"(pid {stuck.pid}) is still stuck" in second.seen[f"{hung_mount}/marker"].message
