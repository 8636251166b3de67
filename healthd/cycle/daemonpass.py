"""The running daemon's latest pass, kept so that slurmd's hook can report it instead of checking again.

With both the daemon and the HealthCheckProgram hook on a node, the hook would
otherwise run every check a second time. The daemon therefore:

- holds ``state_dir/daemon.lock`` (``flock``, exclusive, close-on-exec so no probe
  child inherits it) for as long as it runs, with a random token written in it;
- after each pass, records ``state_dir/daemon-pass.json``: that token, the pass
  document, when the pass finished, how long the record stays fresh (the interval
  plus the pass's whole budget, ``healthd.cycle.pipeline.pass_budget``), the SHA-256 of
  the config bytes it ran with, and whether it was a dry run.

``daemon_document`` (the hook) uses the record only when all of this holds: the
lock is held right now by a live process (a shared ``flock`` cannot be had), the
lock's token is the record's (the pass is this daemon's, not an earlier one's),
the pass is of this node (a state directory shared with another node must not
make the hook report that node's pass), the record is no older than its freshness and not from the future, the config
has the same bytes as the hook's, the daemon acted (not a dry run) unless the hook
is a dry run, and its action is settled (applied or nothing to do: no pending
retry, no Slurm error). Anything else, a missing, unreadable or untrusted file
included, means the hook runs a full pass as before. A stale or missing record
never counts as OK.

The hook writes nothing and takes no lock in that case: the daemon's pass already
took the state lock (``healthd.store.lock``), decided and acted through Slurm; the
hook reports that decision and exits with its code.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

from healthd.config.load import ConfigError, node_settings, read_config, sha256_hex
from healthd.config.nodename import this_node
from healthd.exitcodes import STATUS_CODES
from healthd.store.lock import LockTimeout, StateLock
from healthd.store.state import StateDir, StateError, open_entry, read_entry
from healthd.store.trust import UntrustedPath, open_trusted_dir

TYPE_CHECKING = False  # not typing's: importing typing at run time would slow `healthd status` (bench/README.md)
if TYPE_CHECKING:
    from typing import Any, Mapping, Optional

LOCK = "daemon.lock"
RECORD = "daemon-pass"
FORMAT = 1
# Seconds a record may seem to come from the future (clock steps) before it is refused.
_CLOCK_SLACK = 5.0
_TOKEN_BYTES = 16


class DaemonClaim:
    """The daemon's hold on ``daemon.lock``, and its record of each pass."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.token = os.urandom(_TOKEN_BYTES).hex()
        self._lock: Optional[StateLock] = None

    def acquire(self, timeout: float) -> bool:
        """Take the lock (waiting up to ``timeout`` for a hook's brief probe); False when another daemon has it.

        Raises ``UntrustedPath`` and ``OSError`` as ``healthd.store.lock`` does.
        """
        lock = StateLock(self.state_dir, timeout, name=LOCK)
        try:
            lock.acquire()
        except LockTimeout:
            return False
        os.ftruncate(lock.fileno(), 0)
        os.pwrite(lock.fileno(), self.token.encode(), 0)
        self._lock = lock
        return True

    def record(
        self, document: Mapping[str, Any], *, fresh_for: float, config_sha256: str, dry_run: bool, now: float
    ) -> None:
        """Keep ``document`` as this daemon's latest pass; raises ``StateError`` or ``UntrustedPath``."""
        if self._lock is None:
            return
        StateDir(self.state_dir).file(RECORD).save(
            {
                "format": FORMAT,
                "token": self.token,
                "finished_at": now,
                "fresh_for": fresh_for,
                "config_sha256": config_sha256,
                "dry_run": dry_run,
                "document": dict(document),
            }
        )

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def _held_token(state_dir: Path) -> Optional[str]:
    """The token in ``daemon.lock`` while a process holds the lock; None when nobody does."""
    dir_fd = open_trusted_dir(state_dir)
    try:
        fd = open_entry(dir_fd, state_dir, LOCK, os.O_RDONLY)
    finally:
        os.close(dir_fd)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 4 * _TOKEN_BYTES, 0).decode("ascii", "replace")
        fcntl.flock(fd, fcntl.LOCK_UN)  # we got it: no daemon holds it
        return None
    finally:
        os.close(fd)


def running_config(state_dir: Path) -> Optional[str]:
    """The SHA-256 of the config the daemon running on ``state_dir`` now last passed with, or None.

    None when no daemon holds ``daemon.lock``, or its record is missing or not its own.
    Raises ``UntrustedPath``.
    """
    try:
        token = _held_token(state_dir)
        if token is None:
            return None
        record = json.loads(read_entry(state_dir, f"{RECORD}.json"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("token") != token:
        return None
    sha256 = record.get("config_sha256")
    return sha256 if isinstance(sha256, str) else None


def usable(
    record: Any, token: Optional[str], config_sha256: str, *, node: str, dry_run: bool, now: float
) -> Optional[str]:
    """Why ``record`` must not stand for the pass the hook would run now on ``node``, or None when it may."""
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        return "not a daemon pass record"
    if token is None:
        return "no daemon is running"
    if record.get("token") != token:
        return "the record is not the running daemon's"
    document = record.get("document")
    if not isinstance(document, dict) or document.get("node") != node:
        return f"the record is not a pass of this node ({node})"
    finished, fresh_for = record.get("finished_at"), record.get("fresh_for")
    if not isinstance(finished, (int, float)) or not isinstance(fresh_for, (int, float)):
        return "the record has no time"
    if not -_CLOCK_SLACK <= now - finished <= fresh_for:
        return f"the daemon's last pass is {now - finished:.0f}s old (fresh for {fresh_for:g}s)"
    if record.get("config_sha256") != config_sha256:
        return "the daemon runs with another config"
    if record.get("dry_run") is not False and not dry_run:
        return "the daemon's pass was a dry run"
    if document.get("status") not in STATUS_CODES:
        return "the record's pass has no status"
    if document.get("exit_code") != STATUS_CODES.get(document["status"]):
        return "the record's pass has no status"
    action = document.get("action")
    if not isinstance(action, dict) or action.get("pending") is not False or action.get("errors") != []:
        return "the daemon's action is not settled"
    return None


def daemon_document(config: Optional[Path], *, dry_run: bool, now: Optional[float] = None) -> Optional[dict[str, Any]]:
    """The running daemon's fresh pass document for the config ``config`` (None: the default), or None.

    None means: run the pass. Nothing here raises.
    """
    try:
        source, raw = read_config(config)
        state_dir, _interval, configured = node_settings(source, raw)
        StateDir(state_dir).refuse_untrusted()
        token = _held_token(state_dir)
        record = json.loads(read_entry(state_dir, f"{RECORD}.json"))
    except (ConfigError, UntrustedPath, OSError, ValueError, StateError):
        return None
    when = time.time() if now is None else now
    node = this_node(configured)
    if usable(record, token, sha256_hex(raw), node=node, dry_run=dry_run, now=when) is not None:
        return None
    document: dict[str, Any] = record["document"]
    return document
