"""``healthd check``'s trying options: ``--expect`` and ``--timeout`` laid on the config, ``--debug``'s log.

``--expect`` (``healthd.config.expectations``) runs the checks its lines name, with the
lines laid on the config, and always as a dry run: the pass judges the node by settings
that are not its config, and the next pass from the config would undo whatever it told
Slurm (docs/commands.md, "Trying one expectation"). It runs on a private copy of the state
directory, removed at exit: its checks' cursors (the kernel log's), streaks and history are
the node's, and a trial that advanced or counted them would hide an Xid from the next real
pass or drain the node a pass early. ``--debug`` logs, for each check, what
its ``gather`` returned, as one bounded printable line: observations hold text users shape
(mount points, process names), which must not reach the terminal as control characters.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
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


class Trial(NamedTuple):
    """The engine for the pass, the checks the expectations name (None: no ``--expect``), and notes to show."""

    engine: Engine
    names: Optional[tuple[str, ...]]
    notes: tuple[str, ...]


def trial(config: Optional[Path], expect: Sequence[str], timeout: Optional[float], debug: bool) -> Trial:
    """The engine ``healthd check`` runs with: the config with ``expect`` and ``timeout`` laid on.

    Raises ``ConfigError`` (exit 78) naming the file or the expectation that is wrong, and
    ``healthd.config.expectations.NotConverted`` (exit 65) for an NHC line not converted whole.
    """
    layers = [expectation(text) for text in expect]
    if layers:
        layers.append(Layer("--expect", {"paths": {"state_dir": str(scratch_state(config))}}))
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
    return Trial(engine, names, notes)


def show_observation(check: str, observation: object) -> None:
    """``CheckContext.observed`` for ``--debug``: what ``check``'s gather read, as one bounded line."""
    log.debug("%s read: %s", check, one_line(repr(observation), OBSERVATION_LIMIT))


def scratch_state(config: Optional[Path]) -> Path:
    """A private copy of the node's state directory (its locks left out), removed when the process exits.

    Raises ``UntrustedPath`` when the node's own fails the trust rule, as a pass would.
    """
    source, raw = read_config(config)
    node = StateDir(node_settings(source, raw).state_dir)
    node.refuse_untrusted()
    scratch = Path(tempfile.mkdtemp(prefix="healthd-expect-"))
    atexit.register(shutil.rmtree, scratch, True)
    if not node.directory.is_dir():
        return scratch
    with os.scandir(node.directory) as entries:
        for entry in entries:
            if entry.is_file(follow_symlinks=False) and not entry.name.endswith(".lock"):
                shutil.copy2(entry.path, scratch / entry.name, follow_symlinks=False)
    return scratch
