"""The policy state when ``policy.json`` cannot be saved: hysteresis must not stop a CRITICAL node from being taken out.

``[policy] fail_passes`` counts consecutive failing passes in ``state_dir/policy.json``
(healthd.plan.state). A state directory that is read-only, full or missing cannot keep that
count, and a count that never passes 1 would leave a CRITICAL node in service for as
long as the directory stays broken, while docs/service.md promises that checking (and
acting) goes on. Two remedies, one per kind of process:

- **Within one process** (the daemon, ``healthd run``): ``PolicyMemory`` keeps the state
  of the last pass whose save failed, with ``policy.json`` as that pass had read it. The
  next pass uses the kept state as long as the file still reads the same: the file is
  then older than the kept state. Once another process (the hook, ``healthd check
  --once``, ``healthd ack``) has saved the file, it differs, and it is the newer one: the
  kept state is dropped. Every writer saves under ``cycle.lock`` (healthd.store.lock).
- **Across processes** (the hook and ``check --once`` run one pass each): a pass whose
  save failed leaves an empty ``policy.unsaved`` marker where it still can (a full
  filesystem usually still takes an empty file); a pass that sees the marker, or cannot
  open ``cycle.lock`` in a directory it cannot write (read-only, missing, a file), knows
  the saved count is not current and treats every check with a CRITICAL finding as having
  reached ``fail_passes`` (``reach_critical``). WARNING and UNKNOWN findings keep the saved count:
  a drain that waits for the jobs is not worth acting on a fault seen once. The first
  pass that saves ``policy.json`` again removes the marker.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from healthd.model import Status
from healthd.plan.state import OWN_CHECK
from healthd.store.state import open_entry
from healthd.store.trust import open_trusted_dir

if TYPE_CHECKING:  # healthd.plan.state is the pass's to import: the engine holds a PolicyMemory from the start
    from pathlib import Path

    from healthd.model import PassResult
    from healthd.plan.state import PolicyState
    from healthd.store.state import StateDir

UNSAVED = "policy.unsaved"


@dataclass
class PolicyMemory:
    """One process's copy of the policy state its last pass could not save (None: the file is current).

    ``read`` is ``policy.json`` as that pass loaded it: while the file still reads so, nobody
    has saved it since, and ``state`` is the newer of the two.
    """

    state: Optional[PolicyState] = None
    read: Optional[dict[str, Any]] = None

    def newer(self, loaded: dict[str, Any]) -> Optional[PolicyState]:
        """The kept state when it is newer than ``loaded`` (the file as read now), else None."""
        if self.state is None or loaded != self.read:
            self.state = self.read = None
            return None
        return self.state

    def saved(self, state: PolicyState, loaded: dict[str, Any], ok: bool) -> None:
        """Remember the pass's ``state`` when its save failed (``ok`` False); forget it when the save worked."""
        self.state, self.read = (None, None) if ok else (state, loaded)


def unsaved_marked(state: StateDir) -> bool:
    """Whether ``policy.unsaved`` says an earlier pass could not save the policy state."""
    with contextlib.suppress(OSError):
        dir_fd = open_trusted_dir(state.directory)
        try:
            os.stat(UNSAVED, dir_fd=dir_fd, follow_symlinks=False)
            return True
        except FileNotFoundError:
            return False
        finally:
            os.close(dir_fd)
    return False


def mark_unsaved(state: StateDir, unsaved: bool) -> None:
    """Leave ``policy.unsaved`` (an empty file) when ``unsaved``, remove it otherwise; best effort.

    Raises ``UntrustedPath`` like every open in the state directory.
    """
    with contextlib.suppress(OSError):
        dir_fd = open_trusted_dir(state.directory)
        try:
            if unsaved:
                os.close(open_entry(dir_fd, state.directory, UNSAVED, os.O_WRONLY | os.O_CREAT))
            else:
                os.unlink(UNSAVED, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)


def writable_dir(directory: Path) -> bool:
    """Whether ``directory`` is a directory this process may write: ``access(2)`` says no for a read-only
    filesystem even to root."""
    return os.path.isdir(directory) and os.access(directory, os.W_OK)


def reach_critical(state: PolicyState, raw: PassResult, fail_passes: int) -> PolicyState:
    """``state`` with each check that reports CRITICAL one pass short of ``fail_passes``: this pass reaches it."""
    critical = {f.check for f in raw.findings if f.status is Status.CRITICAL and f.check != OWN_CHECK}
    if not critical:
        return state
    streaks = dict(state.fail_streaks)
    for check in critical:
        streaks[check] = max(streaks.get(check, 0), fail_passes - 1)
    return state._replace(fail_streaks=streaks)
