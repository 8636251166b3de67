"""The last attempt to save a pass, on a real full tmpfs state directory: ``healthd status`` says it failed.

Before, a pass that could not write ``last-pass.json`` (no space left) left ``healthd
status`` showing the pass before as the node's state (``OK (last pass 1s ago)``), exit 0.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

from healthd_testkit.checks import only_checks
from healthd_testkit.paths import fill

from healthd.cycle.engine import Engine
from healthd.cycle.pipeline import run_pass
from healthd.store.attempt import ATTEMPT_NAME, RECORD_SIZE, read_attempt, record_attempt

Cli = Callable[..., tuple[int, str, str]]
# A pass that finds a mount missing: CRITICAL (exit 2) when its record is shown as the node's state.
MISSING = '[checks.mounts]\nexpect = [{ path = "/definitely-not-mounted" }]\n'
CONFIG = f'[slurm]\nnode_name = "n1"\n{MISSING}{only_checks("mounts")}'
NO_SPACE = "last-pass.json: No space left on device"


def test_status_says_the_last_attempt_failed_on_a_full_state_disk(
    write_config: Callable[..., Path], tmpfs: Callable[[str, str], Path], cli: Cli
) -> None:
    # Where write_config puts the state directory; room, once freed, for the history's log to grow too.
    state = tmpfs("state", "size=1m,mode=0700")
    config = write_config(CONFIG)
    assert run_pass(Engine.from_path(config)).exit_code == 2
    code, out, _ = cli("status", "--config", str(config))
    assert code == 2 and "(last pass" in out and "last attempt" not in out, out
    written = (state / "last-pass.json").read_bytes()

    filler = fill(state)
    failed = run_pass(Engine.from_path(config))
    assert any(NO_SPACE in e for e in failed.action.errors), failed.action.errors
    assert (state / "last-pass.json").read_bytes() == written, "the document is the pass before"
    code, out, err = cli("status", "--config", str(config))
    assert code == 3, (out, err)
    headline, attempt = out.split("\n")[:2]
    assert headline.startswith("n1: CRITICAL (last written pass"), out
    assert attempt.startswith("  last attempt at ") and attempt.endswith(f"failed: cannot write {state}/{NO_SPACE}")
    code, out, _ = cli("status", "--json", "--config", str(config))
    shown = json.loads(out)
    assert code == 3 and shown["last_attempt_failed"] and NO_SPACE in shown["last_attempt"]["error"]

    filler.unlink()
    assert run_pass(Engine.from_path(config)).exit_code == 2
    code, out, _ = cli("status", "--config", str(config))
    assert code == 2 and "last attempt" not in out and "(last pass" in out, out


def test_a_disk_full_before_the_first_pass_still_tells_when_the_last_attempt_was(
    write_config: Callable[..., Path], tmpfs: Callable[[str, str], Path], cli: Cli
) -> None:
    """No record could ever be written: the file's time says when, and status says it does not know why."""
    state = tmpfs("state", "size=64k,mode=0700")
    config = write_config(CONFIG)
    fill(state)
    run_pass(Engine.from_path(config))
    assert (state / ATTEMPT_NAME).stat().st_size == 0
    code, _, err = cli("status", "--config", str(config))
    assert code == 3
    assert f"{state}/last-pass.json: no pass recorded; last attempt at " in err, err
    assert err.rstrip().endswith("its outcome was not recorded (a full state disk?)"), err


def test_the_record_is_rewritten_in_place_and_a_torn_one_is_only_a_time(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    record_attempt(state)
    inode = (state / ATTEMPT_NAME).stat().st_ino
    record_attempt(state, "cannot write x: No space left on device")
    assert (state / ATTEMPT_NAME).stat().st_size == RECORD_SIZE and (state / ATTEMPT_NAME).stat().st_ino == inode
    attempt = read_attempt(state)
    assert attempt is not None and attempt.known and attempt.error.endswith("No space left on device")
    assert attempt.failed_after(attempt.at - 1) and not attempt.failed_after(attempt.at)
    (state / ATTEMPT_NAME).write_bytes(b'{"at": 12')
    os.utime(state / ATTEMPT_NAME, (2e9, 2e9))
    torn = read_attempt(state)
    assert torn is not None and not torn.known and torn.at == 2e9 and torn.failed_after(1e9)
