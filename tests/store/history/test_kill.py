"""kill -9 at any moment of a history write leaves a database that opens, checks clean and holds whole passes.

A real child process (history_writer.py) records passes in a loop and is SIGKILLed
at random moments, many times over the same database. After each kill: the store
opens without a problem, ``PRAGMA integrity_check`` is ok, the recorded passes are
exactly 0..N with no gap (a prefix of what was written), every pass has all of its
events (one transaction each), and the open findings are those of pass N.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from healthd.store.history import History
from healthd.store.historyschema import DB_NAME, Kind

# Slow (a writer process killed many times over): left out of the fast tier, `pytest -m "not slow"`.
pytestmark = pytest.mark.slow

WRITER = Path(__file__).with_name("history_writer.py")
PER_PASS = 4  # history_writer.PER_PASS: three steady findings and one that comes and goes
KILLS = 12


def _start(state_dir: Path, first_pass: int) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, str(WRITER), str(state_dir), str(first_pass)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line == "ready\n", f"writer did not start: {line!r} {child.stderr.read() if child.stderr else ''}"
    return child


def _check(state_dir: Path) -> int:
    """Everything the module docstring promises; returns the last pass recorded."""
    with sqlite3.connect(state_dir / DB_NAME) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()
    with History.open(state_dir) as history:
        assert history.usable and history.problems == []
        transitions = [e for e in history.events() if e.kind in (Kind.RAISED, Kind.CHANGED, Kind.CLEARED)]
        per_pass = Counter(int(e.at) for e in transitions)  # the writer records pass n at time n
        last = max(per_pass)
        assert sorted(per_pass) == list(range(last + 1)), "a pass is missing: not a prefix of the writes"
        assert set(per_pass.values()) == {PER_PASS}, f"a pass was recorded in part: {per_pass}"
        # The passes were written in order.
        assert [int(e.at) for e in transitions] == sorted(int(e.at) for e in transitions)
        expected = {f"gpu/ECC_DISABLED/gpu{i}" for i in range(3)} | (
            {"mounts/MOUNT_MISSING//scratch"} if last % 2 == 0 else set()
        )
        open_now = history.open_findings()
        assert {f.key for f in open_now} == expected
        assert {f.details["pass"] for f in open_now} == {last}
    return last


def test_kill_9_during_writes_leaves_a_usable_prefix(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    next_pass, progress = 0, []
    for _ in range(KILLS):
        child = _start(state_dir, next_pass)
        time.sleep(rng.uniform(0.0, 0.25))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        assert child.returncode == -signal.SIGKILL, f"seed {seed}: the writer stopped by itself: {child.stderr}"
        last = _check(state_dir)
        assert last >= next_pass, f"seed {seed}: the pass the writer reported as done is gone"
        progress.append(last - next_pass + 1)
        next_pass = last + 1
        if child.stdout:
            child.stdout.close()
        if child.stderr:
            child.stderr.close()
    # The kills landed among many writes, maintenance runs included (every 20th pass).
    assert next_pass > 20 * 3, f"seed {seed}: only {next_pass} passes in {KILLS} runs: {progress}"
