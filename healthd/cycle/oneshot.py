"""``healthd check``'s flow: one pass (or the active checks) from the options, its outcome or why it was refused.

The command (``healthd.commands.check``) parses its options into a ``OneShot``, calls
``check_once`` and prints what it returns; every decision is here:

- ``--only`` names known checks, and ``--force`` goes with ``--active`` (exit 64 otherwise);
- ``--expect`` lays its lines on the config and runs as a dry run, ``--timeout`` and
  ``--debug`` build the engine (``healthd.cycle.checkmodes``); an NHC line not converted
  whole is refused (exit 65);
- ``--active`` starts the active checks through ``healthd.cycle.activerun.start``, asking
  Slurm first unless ``--force`` (docs/active.md); refused, exit 75;
- otherwise one pass (``run_pass``) with ``ONE_SHOT_SECONDS`` from the start, saved aside
  when a daemon runs with another config (``healthd.cycle.pipeline.run_pass``).

A SIGTERM (slurmd's kill of a HealthCheckProgram) takes the programs the pass runs with it
(``healthd.checks.bounded.end_with_children``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import NamedTuple, Optional, Union

from healthd.checks.bounded import end_with_children
from healthd.cycle.daemonpass import running_config
from healthd.cycle.engine import Engine
from healthd.cycle.outcome import PassOutcome
from healthd.cycle.pipeline import ONE_SHOT_SECONDS, PassRequest, run_pass
from healthd.exitcodes import EX_DATAERR, EX_TEMPFAIL, EX_USAGE
from healthd.text import did_you_mean, one_line


class OneShot(NamedTuple):
    """What ``healthd check`` was asked: its options, parsed."""

    config: Optional[Path]
    only: Optional[tuple[str, ...]] = None  # --only's names; None: every check
    dry_run: bool = False
    active: bool = False
    force: bool = False
    expect: tuple[str, ...] = ()
    timeout: Optional[float] = None
    debug: bool = False


class Declined(NamedTuple):
    """The pass did not run: the exit code, and the lines that say why (each for stderr, after ``healthd: ``)."""

    exit_code: int
    lines: tuple[str, ...]


class Done(NamedTuple):
    """The pass's outcome, and the notes its ``--expect`` lines left (each for stderr, after ``healthd: note: ``)."""

    outcome: PassOutcome
    notes: tuple[str, ...]


def check_once(asked: OneShot) -> Union[Declined, Done]:
    """Run what ``asked`` names (see the module docstring); the outcome, or why nothing ran.

    Raises ``ConfigError`` and ``UntrustedPath`` as loading the config and the state directory do.
    """
    begun = time.monotonic()
    with end_with_children():
        return _check_once(asked, begun)


def _check_once(asked: OneShot, begun: float) -> Union[Declined, Done]:
    tried = _trial(asked)
    if isinstance(tried, Declined):
        return tried
    engine, expected, notes, node_state = tried
    only = None if expected is None else list(expected)
    if asked.only is not None:
        only = list(asked.only) + (only or [])
        unknown = _unknown(engine, only)
        if unknown:
            return unknown
    refused = _refused_options(asked, engine, expected)
    if refused:
        return refused
    # A pass judged by expectations laid on the config must not change what Slurm holds (commands.md).
    dry_run = asked.dry_run or expected is not None
    if asked.active:
        # A branch a healthy pass never takes: imported only here (docs/architecture.md, "Imports inside functions").
        from healthd.cycle.activerun import NotStarted, start
        from healthd.plan.active import refusal

        rule = None if asked.force else refusal
        started = start(engine, rule, "check --once --active", dry_run=dry_run, only=only, node_state=node_state)
        if isinstance(started, NotStarted):
            return Declined(EX_TEMPFAIL, (f"not running the active checks: {started.why}",))
        return Done(started, notes)
    # A daemon running with another config is the node's: this pass is saved aside (run_pass).
    daemon_config = running_config(engine.config.paths.state_dir)
    aside = daemon_config is not None and daemon_config != engine.loaded.sha256
    only_names = None if only is None else tuple(only)
    request = PassRequest(only_names, dry_run=dry_run, aside=aside, deadline=begun + ONE_SHOT_SECONDS)
    return Done(run_pass(engine, request), notes)


def _unknown(engine: Engine, only: list[str]) -> Optional[Declined]:
    """``--only``'s names that are no check's, each with a guess, and the checks there are; None if all are known."""
    names = [spec.name for spec in engine.specs]
    unknown = sorted(set(only) - set(names))
    if not unknown:
        return None
    lines = [f"--only: {one_line(name, 64)}: unknown check{did_you_mean(name, names)}" for name in unknown]
    return Declined(EX_USAGE, (*lines, f"known checks: {', '.join(names)}"))


def _refused_options(asked: OneShot, engine: Engine, expected: Optional[tuple[str, ...]]) -> Optional[Declined]:
    if asked.force and not asked.active:
        return Declined(EX_USAGE, ("--force goes with --active",))
    active = sorted(set(expected or ()) & engine.active_names())
    if active and not asked.active:
        return Declined(EX_USAGE, (f"--expect: {', '.join(active)}: an active check, run with --active alone",))
    return None


_Tried = tuple[Engine, Optional[tuple[str, ...]], tuple[str, ...], Optional[Path]]


def _trial(asked: OneShot) -> Union[Declined, _Tried]:
    """The engine, the checks ``--expect`` names (None without it), its notes and the node's own state directory.

    The last is None unless the engine's is ``--expect``'s copy. Or why a line was refused.
    """
    if not (asked.expect or asked.timeout is not None or asked.debug):
        return Engine.from_path(asked.config), None, (), None
    # The trying options' branch (a scratch state directory, NHC's words): imported only when asked for.
    from healthd.config.expectations import NotConverted
    from healthd.cycle.checkmodes import trial

    try:
        tried = trial(asked.config, asked.expect, asked.timeout, asked.debug)
    except NotConverted as exc:
        return Declined(EX_DATAERR, tuple(f"{exc.label}: not converted: {one_line(r, 400)}" for r in exc.reasons))
    return tried.engine, tried.names, tried.notes, tried.node_state
