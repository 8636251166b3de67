"""``healthd check``'s trying options: ``--expect`` and ``--timeout`` laid on the config, ``--debug``'s log.

``--expect`` (``healthd.config.expectations``) runs the checks its lines name, with the
lines laid on the config, and always as a dry run: the pass judges the node by settings
that are not its config, and the next pass from the config would undo whatever it told
Slurm (docs/commands.md, "Trying one expectation"). It runs on a private copy of the state
directory, removed at exit: its checks' cursors (the kernel log's), streaks and history are
the node's, and a trial that advanced or counted them would hide an Xid from the next real
pass or drain the node a pass early. The copy is made in the temporary directory and held by
an ``flock`` on it for the process's life; a copy whose holder died without its exit handlers
(SIGKILL, a crash) is unlocked, and the next ``--expect`` of the same user removes it
(``_sweep``). With ``--active``, the node's own ``active.lock`` is taken (``Trial.node_state``),
not the copy's, so the trial never runs diagnostics beside a real active pass. ``--debug`` logs, for each check, what
its ``gather`` returned, as one bounded printable line: observations hold text users shape
(mount points, process names), which must not reach the terminal as control characters.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import NamedTuple, Optional, Sequence

from healthd.config.expectations import Layer, expectation, load_with, pass_timeout
from healthd.config.load import node_settings, read_config
from healthd.cycle.engine import Engine
from healthd.store.state import StateDir
from healthd.text import one_line

log = logging.getLogger(__name__)

# An observation can be a whole kernel log or every mount of the node: enough to see what was read.
OBSERVATION_LIMIT = 2000


# The copies of the state directory ``--expect`` makes: ``tempfile.gettempdir()/healthd-expect-*``.
SCRATCH_PREFIX = "healthd-expect-"


class Trial(NamedTuple):
    """The engine for the pass, the checks the expectations name (None: no ``--expect``), and notes to show.

    ``node_state`` is the node's own state directory where the engine's is ``--expect``'s copy
    (None otherwise): the one whose ``active.lock`` an active pass takes.
    """

    engine: Engine
    names: Optional[tuple[str, ...]]
    notes: tuple[str, ...]
    node_state: Optional[Path] = None


def trial(config: Optional[Path], expect: Sequence[str], timeout: Optional[float], debug: bool) -> Trial:
    """The engine ``healthd check`` runs with: the config with ``expect`` and ``timeout`` laid on.

    Raises ``ConfigError`` (exit 78) naming the file or the expectation that is wrong, and
    ``healthd.config.expectations.NotConverted`` (exit 65) for an NHC line not converted whole.
    """
    layers = [expectation(text) for text in expect]
    node_state = None
    if layers:
        node_state, scratch = scratch_state(config)
        layers.append(Layer("--expect", {"paths": {"state_dir": str(scratch)}}))
    if timeout is not None:
        layers.append(pass_timeout(timeout))
    if layers:
        loaded, specs = load_with(config, layers)
        engine = Engine(loaded, specs)
    else:
        engine = Engine.from_path(config)
    names = tuple(dict.fromkeys(name for layer in layers for name in layer.checks)) if expect else None
    if debug:
        engine.observed = show_observation
        for name in names or ():
            log.debug("%s: settings %s", name, one_line(repr(engine.loaded.check_settings.get(name)), 2000))
    notes = tuple(f"{layer.label}: {note}" for layer in layers for note in layer.notes)
    return Trial(engine, names, notes, node_state)


def show_observation(check: str, observation: object) -> None:
    """``CheckContext.observed`` for ``--debug``: what ``check``'s gather read, as one bounded line."""
    log.debug("%s read: %s", check, one_line(repr(observation), OBSERVATION_LIMIT))


def scratch_state(config: Optional[Path]) -> tuple[Path, Path]:
    """The node's state directory, and a private copy of it (its locks left out), removed when the process exits.

    Raises ``UntrustedPath`` when the node's own fails the trust rule, as a pass would.
    """
    source, raw = read_config(config)
    node = StateDir(node_settings(source, raw).state_dir)
    node.refuse_untrusted()
    parent = Path(tempfile.gettempdir())
    _sweep(parent)
    scratch, held = _held_scratch(parent)
    atexit.register(_remove, scratch, held)
    if not node.directory.is_dir():
        return node.directory, scratch
    with os.scandir(node.directory) as entries:
        for entry in entries:
            if entry.is_file(follow_symlinks=False) and not entry.name.endswith(".lock"):
                shutil.copy2(entry.path, scratch / entry.name, follow_symlinks=False)
    return node.directory, scratch


def _lock(directory: str) -> Optional[int]:
    """An ``flock`` of ``directory`` itself, taken without waiting: its descriptor, or None when another holds it."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return fd


def _held_scratch(parent: Path) -> tuple[Path, int]:
    """A new copy directory under ``parent``, locked: it and the lock's descriptor.

    Another run's ``_sweep`` may take a new directory's lock first, or remove it between
    ``mkdtemp`` and the lock: then the directory at the path is not the one locked, and
    another is made.
    """
    while True:
        scratch = tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=parent)
        held = _lock(scratch)
        if held is None:
            continue
        try:
            if os.stat(scratch, follow_symlinks=False).st_ino == os.fstat(held).st_ino:
                return Path(scratch), held
        except FileNotFoundError:
            pass
        os.close(held)


def _remove(scratch: Path, held: int) -> None:
    shutil.rmtree(scratch, ignore_errors=True)
    os.close(held)


def _sweep(parent: Path) -> None:
    """Remove the copies under ``parent`` that earlier ``--expect`` runs of this user left: those no process holds.

    Only directories this user owns (``lstat``: never a link, never another user's, whose
    names anyone may choose in a shared /tmp); each removed while its lock is held here.
    """
    try:
        with os.scandir(parent) as entries:
            found = [entry.path for entry in entries if entry.name.startswith(SCRATCH_PREFIX)]
    except OSError:
        return
    for path in found:
        try:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                continue
            held = _lock(path)
        except OSError:
            continue
        if held is not None:
            shutil.rmtree(path, ignore_errors=True)
            os.close(held)
