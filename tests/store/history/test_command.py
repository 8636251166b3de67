"""``healthd history``: the table, --json, --jsonl, --since, and its exit codes, through the real CLI."""

from __future__ import annotations

import datetime as dt
import grp
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest
from healthd_testkit.paths import HEALTHD

from healthd.model import Device, Finding, PassResult
from healthd.plan.acks import FindingRef
from healthd.store.history import History
from healthd.store.historyschema import DB_NAME
from healthd.store.lock import StateLock

Cli = Callable[..., tuple[int, str, str]]
Make = Callable[..., PassResult]
Find = Callable[..., Finding]
HOUR, DAY = 3600.0, 86400.0


@pytest.fixture
def config(write_config: Callable[[str], Path]) -> Path:
    return write_config("")


@pytest.fixture
def state(config: Path) -> Path:
    return config.parent / "state"  # where write_config puts [paths] state_dir


@pytest.fixture
def recorded(state: Path, make_pass: Make, finding: Find) -> float:
    """A node's last ten days: a finding ten days ago, then a boot, an Xid, an action and an ack an hour ago."""
    now = time.time()
    with History.open(state) as history:
        old = finding("mounts", "MOUNT_MISSING", "/scratch")
        history.record_pass(make_pass(old), at=now - 10 * DAY, boot_id="boot-a")
        history.record_pass(make_pass(), at=now - 10 * DAY + 300, boot_id="boot-a")
        history.record_boot(at=now - HOUR, boot_id="boot-b", gpus=[Device("gpu", 3, "0000:3b:00.0", "GPU-aaaa", "s1")])
        xid = finding(
            "xid", "XID_79", "gpu3", message="Xid 79 on gpu3: fallen off the bus", event="boot-b:1", pci="0000:3b:00"
        )
        history.record_pass(make_pass(xid), at=now - HOUR + 1, boot_id="boot-b")
        history.record_action(
            at=now - HOUR + 2, action="take_out_now", outcome="applied", node="node0001", reason="healthd: XID_79 gpu3"
        )
        history.record_ack(at=now - 60, refs=[FindingRef("xid/XID_79/gpu3", "boot-b:1")], by="cli")
    return now


def test_no_history_yet_is_not_an_error(cli: Cli, config: Path, state: Path) -> None:
    assert cli("history", "--config", str(config)) == (0, f"no history yet ({state / DB_NAME} does not exist)\n", "")
    code, out, _ = cli("history", "--json", "--config", str(config))
    assert code == 0 and json.loads(out)["events"] == []
    assert cli("history", "--jsonl", "--config", str(config)) == (0, "", "")
    assert not (state / DB_NAME).exists()  # reading never creates it


def test_the_table_shows_the_last_week_one_line_per_event(cli: Cli, config: Path, recorded: float) -> None:
    code, out, err = cli("history", "--config", str(config))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert [line.split()[1] for line in lines] == ["boot", "raised", "action", "ack"]
    stamp = dt.datetime.fromtimestamp(recorded - HOUR).astimezone().isoformat(timespec="seconds")
    assert lines[0] == f"{stamp}  boot                      boot-b: new boot, 1 GPU(s)"
    assert lines[1].endswith("  raised           CRITICAL xid/XID_79 gpu3: Xid 79 on gpu3: fallen off the bus")
    assert lines[2].endswith("  action           applied  take_out_now node0001: healthd: XID_79 gpu3")
    assert lines[3].endswith("  ack                       xid/XID_79 gpu3: acknowledged by cli")


@pytest.mark.parametrize(
    ("since", "kinds"),
    [
        ("30m", ["ack"]),
        ("2h", ["boot", "raised", "action", "ack"]),
        ("2w", ["raised", "cleared", "boot", "raised", "action", "ack"]),
        ("11d", ["raised", "cleared", "boot", "raised", "action", "ack"]),
    ],
)
def test_since_a_duration(cli: Cli, config: Path, recorded: float, since: str, kinds: list[str]) -> None:
    code, out, _ = cli("history", "--since", since, "--config", str(config))
    assert code == 0 and [line.split()[1] for line in out.splitlines()] == kinds


def test_since_an_iso_date(cli: Cli, config: Path, recorded: float) -> None:
    utc = dt.datetime.fromtimestamp(recorded - 2 * HOUR, tz=dt.timezone.utc)
    for text in (utc.isoformat(timespec="seconds"), utc.strftime("%Y-%m-%dT%H:%M:%SZ")):
        code, out, _ = cli("history", "--jsonl", "--since", text, "--config", str(config))
        assert code == 0 and [json.loads(line)["kind"] for line in out.splitlines()] == [
            "boot",
            "raised",
            "action",
            "ack",
        ]
    local_day = dt.datetime.fromtimestamp(recorded - 20 * DAY).strftime("%Y-%m-%d")  # local time, as people mean it
    code, out, _ = cli("history", "--jsonl", "--since", local_day, "--config", str(config))
    assert code == 0 and len(out.splitlines()) == 6


def test_no_events_in_the_window_says_so(cli: Cli, config: Path, recorded: float) -> None:
    code, out, _ = cli("history", "--since", "1s", "--config", str(config))
    assert code == 0 and out.startswith("no events since ")


@pytest.mark.parametrize("bad", ["7", "7x", "-3d", "yesterday", "2024-13-01", "7d\n<0>x"])
def test_a_bad_since_exits_64_naming_it(cli: Cli, config: Path, recorded: float, bad: str) -> None:
    code, out, err = cli("history", f"--since={bad}", "--config", str(config))
    assert (code, out) == (64, "")
    assert err.startswith(f"healthd: --since {bad.replace(chr(10), ' ')!r}: expected a duration such as 30m")
    assert err.count("\n") == 1


@pytest.mark.parametrize("far", ["999999999w", "1969-12-31T00:00:00+00:00", "9999-12-31T23:00:00-12:00"])
def test_a_since_out_of_range_exits_64_naming_it(cli: Cli, config: Path, recorded: float, far: str) -> None:
    code, out, err = cli("history", f"--since={far}", "--config", str(config))
    assert (code, out) == (64, "")
    assert err == f"healthd: --since {far!r}: out of range (1970 to 9999)\n"


def test_json_is_one_document(cli: Cli, config: Path, recorded: float) -> None:
    code, out, _ = cli("history", "--json", "--config", str(config))
    document = json.loads(out)
    assert code == 0 and document["node"] == "node0001"
    assert [e["kind"] for e in document["events"]] == ["boot", "raised", "action", "ack"]
    raised = document["events"][1]
    assert (raised["check"], raised["code"], raised["subject"], raised["unit"]) == ("xid", "XID_79", "gpu3", "GPU-aaaa")
    assert raised["details"] == {"event": "boot-b:1", "pci": "0000:3b:00"} and raised["time"].endswith("Z")
    assert [f["code"] for f in document["open_findings"]] == ["XID_79"]
    assert [(b["boot_id"], b["previous"]) for b in document["boots"]] == [("boot-b", None)]
    assert document["boots"][0]["gpus"] == [
        {"index": 3, "pci_bus_id": "0000:3b:00.0", "uuid": "GPU-aaaa", "serial": "s1"}
    ]


def test_jsonl_exports_everything_one_event_per_line(cli: Cli, config: Path, recorded: float) -> None:
    code, out, _ = cli("history", "--jsonl", "--config", str(config))
    events = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [e["kind"] for e in events] == ["raised", "cleared", "boot", "raised", "action", "ack"]
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)


def test_hostile_text_stays_on_its_line(cli: Cli, config: Path, state: Path, make_pass: Make, finding: Find) -> None:
    evil = finding("mounts", "MOUNT_HUNG", "/x\n2024-01-01 forged", message="a\x1b[2J\r\nb\u2028c<0>")
    with History.open(state) as history:
        history.record_pass(make_pass(evil), at=time.time(), boot_id="b")
    code, out, _ = cli("history", "--config", str(config))
    assert code == 0 and out.count("\n") == 1 and "\x1b" not in out and "\r" not in out
    assert out.rstrip("\n").endswith("mounts/MOUNT_HUNG /x 2024-01-01 forged: a [2J b c<0>")


def test_a_config_error_exits_78(cli: Cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[paths\n")
    code, _, err = cli("history", "--config", str(bad))
    assert code == 78 and f"{bad}: not valid TOML" in err


def test_an_unreadable_database_exits_66_and_is_left_alone(cli: Cli, config: Path, state: Path) -> None:
    state.mkdir(mode=0o700)
    (state / DB_NAME).write_bytes(b"garbage" * 100)
    (state / DB_NAME).chmod(0o600)
    code, out, err = cli("history", "--config", str(config))
    assert (code, out) == (66, "")
    assert err.startswith(f"healthd: cannot read {state / DB_NAME}: file is not a database;")
    assert (state / DB_NAME).read_bytes() == b"garbage" * 100


def test_reading_needs_no_lock_and_waits_for_no_writer(cli: Cli, config: Path, state: Path, recorded: float) -> None:
    writer = sqlite3.connect(state / DB_NAME, isolation_level=None)
    try:
        with StateLock(state, timeout=1):
            writer.execute("BEGIN IMMEDIATE")
            writer.execute("DELETE FROM events")  # not committed: a reader sees the history as it was
            started = time.monotonic()
            code, out, _ = cli("history", "--jsonl", "--config", str(config))
            assert time.monotonic() - started < 1.5
            writer.execute("ROLLBACK")
    finally:
        writer.close()
    assert code == 0 and len(out.splitlines()) == 6


def test_a_reader_that_leaves_early_ends_the_export_quietly(
    config: Path, state: Path, make_pass: Make, finding: Find
) -> None:
    now = time.time()
    with History.open(state) as history:
        for n in range(3000):
            history.record_pass(make_pass(finding("mounts", "MOUNT_HUNG", f"/m{n}")), at=now + n, boot_id="b")
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    for form in ("--jsonl", "--json", "--since=1d"):
        producer = subprocess.Popen(
            [str(HEALTHD), "history", form, "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert producer.stdout is not None and producer.stderr is not None
        head = subprocess.run(["head", "-c", "100"], stdin=producer.stdout, capture_output=True, text=True, timeout=60)
        producer.stdout.close()
        assert producer.wait(timeout=60) == 0 and producer.stderr.read() == "", form
        producer.stderr.close()
        assert len(head.stdout) == 100


def test_a_row_it_cannot_read_exits_66(cli: Cli, config: Path, state: Path, recorded: float) -> None:
    with sqlite3.connect(state / DB_NAME) as conn:  # as a newer healthd, or a hand edit, might leave it
        conn.execute("UPDATE events SET kind = 'from_the_future' WHERE kind = 'ack'")
    conn.close()
    code, out, err = cli("history", "--json", "--config", str(config))
    assert (code, out) == (66, "")
    assert err.startswith(
        f"healthd: cannot read the events from {state / DB_NAME}: 'from_the_future' is not a valid Kind"
    )


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every user can reach (pytest's own temporary directory is closed to them), removed after."""
    made = Path(tempfile.mkdtemp(prefix="healthd-history-"))
    made.chmod(0o755)
    try:
        yield made
    finally:
        shutil.rmtree(made)


def _as_user(account: tuple[int, int], *args: str) -> subprocess.CompletedProcess[str]:
    """``healthd ARGS`` run by the real unprivileged user, without root's groups."""
    uid, gid = account
    user = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", str(HEALTHD), *args]
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    return subprocess.run(user, capture_output=True, text=True, timeout=60, check=False, env=env)


@pytest.mark.parametrize(
    ("dir_mode", "file_mode", "group", "who"),
    [
        # As healthd makes them: the state directory root's alone, mode 0700.
        (0o700, 0o600, "root", "only root can read the history"),
        # A directory others may enter, a file they may not read.
        (0o755, 0o600, "root", "only root can read the history"),
        # An operators' group given the reading.
        (0o750, 0o640, "daemon", "only root and the members of group daemon can read the history"),
    ],
)
def test_an_unreadable_history_is_permission_denied_for_a_user_not_missing(
    open_dir: Path, intruder: tuple[int, int], dir_mode: int, file_mode: int, group: str, who: str
) -> None:
    """Before, a user who could not see into the state directory was told there was no history yet (exit 0)."""
    state = open_dir / "state"
    config = open_dir / "healthd.toml"
    config.write_text(f'[paths]\nstate_dir = "{state}"\n[slurm]\nenabled = false\n')
    with History.open(state):
        pass
    gid = grp.getgrnam(group).gr_gid
    for path, mode in ((state, dir_mode), (state / DB_NAME, file_mode)):
        os.chown(path, 0, gid)
        path.chmod(mode)
    done = _as_user(intruder, "history", "--config", str(config))
    assert (done.returncode, done.stdout) == (66, ""), done
    assert done.stderr.startswith(f"healthd: permission denied: cannot read {state / DB_NAME} ("), done.stderr
    assert done.stderr.rstrip().endswith(who), done.stderr
    assert "does not exist" not in done.stderr
    root = subprocess.run(
        [str(HEALTHD), "history", "--config", str(config)], capture_output=True, text=True, check=False
    )
    assert root.returncode == 0 and root.stdout.startswith("no events since"), "root reads it as before"
