"""Starting an active pass: one at a time per node, a last look at Slurm, and a record of the run.

Every way into the active checks goes through ``start``: ``healthd check --once
--active``, the epilog (``[active] at_epilog``) and the daemon (``[active]
when_drained``, ``after_pass``). It

1. takes ``state_dir/active.lock`` without waiting, so two epilogs that end
   together, or the daemon and an operator, never run diagnostics side by side (the
   second is refused; the kernel drops the lock of a holder that dies);
2. reads the node once from Slurm (``sinfo -n NAME``) right before starting, and
   asks the caller's rule (healthd.plan.active) whether the checks may start now;
3. notes the start in ``state_dir/active.json`` before the checks run, so neither a
   restart nor a crash in the middle starts them again within ``[active] interval``;
4. runs the pass (``healthd.cycle.pipeline.run_pass``), the lock held until it is done.

The daemon asks for no Slurm read of its own to find a chance: it looks at the node
its ordinary pass read, and a pass reads the node only when healthd has it out (or
has something to do), so a healthy node's pass still sends slurmctld nothing.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NamedTuple, Optional, Union

from healthd.cycle.engine import node_name
from healthd.cycle.pipeline import PassRequest, pass_budget, run_pass
from healthd.model import Tier
from healthd.plan.active import daemon_skip, drained_skip
from healthd.slurm.adapter import SlurmClient, SlurmError
from healthd.slurm.reasons import Reasons
from healthd.store.lock import ACTIVE_LOCK, LockTimeout, StateLock
from healthd.store.state import StateError

if TYPE_CHECKING:
    from healthd.cycle.engine import Engine
    from healthd.cycle.outcome import PassOutcome
    from healthd.slurm.nodestate import NodeInfo

RECORD = "active"

Rule = Callable[["NodeInfo"], Optional[str]]


class NotStarted(NamedTuple):
    """The active checks were not started, and why."""

    why: str


def last_run(engine: Engine) -> Optional[float]:
    """When the last active run on this node started (``active.json``), or None."""
    value = engine.state.file(RECORD).load().get("last_run")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def misfit(engine: Engine, budget: float, key: str) -> Optional[str]:
    """The first enabled active check whose ``timeout`` exceeds ``budget`` (the setting ``key``), or None."""
    for check in engine.prepare(None, Tier.ACTIVE):
        timeout = getattr(check.context.settings, "timeout", 0.0) if check.context is not None else 0.0
        if check.enabled and timeout > budget:
            return f"[checks.{check.name}] timeout = {timeout:g}s exceeds {key} = {budget:g}s"
    return None


def start(
    engine: Engine,
    rule: Optional[Rule],
    by: str,
    *,
    tier: Tier = Tier.ACTIVE,
    dry_run: bool = False,
    only: Optional[list[str]] = None,
    node_state: Optional[Path] = None,
) -> Union[NotStarted, PassOutcome]:
    """Run a pass of ``tier`` with the active checks, if ``rule`` allows it now; see the module docstring.

    ``rule`` None starts without asking Slurm (``--force``: the operator vouches for the node).
    ``by`` says who started the run, for the record; ``only`` limits the pass to those checks.
    ``node_state`` is the node's state directory where the engine's is another (``--expect``'s
    copy): its ``active.lock`` is the node's, which every other active pass takes.
    """
    lock = StateLock(node_state or engine.config.paths.state_dir, 0.0, name=ACTIVE_LOCK)
    try:
        lock.acquire()
    except LockTimeout:
        return NotStarted("another active pass is running on this node")
    except OSError as exc:
        return NotStarted(f"cannot lock {lock.path}: {exc.strerror or exc}")
    try:
        why = _look(engine, rule) if rule is not None else None
        if why is not None:
            return NotStarted(why)
        try:
            engine.state.file(RECORD).save({"last_run": engine.clock(), "by": by})
        except StateError as exc:
            return NotStarted(f"{exc}: without a record, restarts could run the active checks again and again")
        return run_pass(engine, PassRequest(None if only is None else tuple(only), tier, dry_run))
    finally:
        lock.release()


def _look(engine: Engine, rule: Rule) -> Optional[str]:
    """One ``sinfo -n NAME`` read judged by ``rule``: why the checks may not start now, or None."""
    config = engine.config
    if not config.slurm.enabled:
        return "[slurm] enabled = false, so whether the node is idle and drained is not known (--force runs anyway)"
    try:
        node = SlurmClient(config.slurm).node(node_name(config))
    except SlurmError as exc:
        return f"cannot read the node's state from Slurm: {exc}"
    return rule(node)


def after_pass(engine: Engine, outcome: PassOutcome, dry_run: bool, log: logging.Logger) -> PassOutcome:
    """The daemon's pass: ``outcome``, or the whole pass with the active checks that it called for.

    With ``[active] when_drained``, an ordinary pass that saw the node idle and drained
    by healthd, ``interval`` after the last active run, is followed by a pass of every
    check, the active ones included (``Tier.ALL``): a whole pass, so the policy resumes
    the node when everything passes and keeps it out while an active check fails. A
    dry run only says it would.
    """
    settings = engine.config.active
    if not settings.when_drained:
        return outcome
    reasons = Reasons(engine.config.slurm.reason_prefix)
    why = daemon_skip(outcome.node, reasons, last_run(engine), engine.clock(), settings.interval)
    if why is not None:
        log.debug("active checks not started: %s", why)
        return outcome
    if dry_run or engine.config.policy.dry_run:
        # A dry run observes: it starts no diagnostic (they load the GPUs) and records none.
        log.info(
            "dry run: node %s is idle and drained by healthd: would run the active checks now", outcome.result.node
        )
        return outcome
    log.info("node %s is idle and drained by healthd: running every check, the active ones too", outcome.result.node)
    done = start(engine, lambda node: drained_skip(node, reasons), "daemon", tier=Tier.ALL, dry_run=dry_run)
    if isinstance(done, NotStarted):
        log.info("active checks not started: %s", done.why)
        return outcome
    return done


def daemon_budget(engine: Engine) -> float:
    """Seconds a daemon pass may take on top of an ordinary one: a last read, then a whole pass with active checks."""
    config = engine.config
    if not config.active.when_drained:
        return 0.0
    return config.slurm.timeout + pass_budget(config, checks=max(engine.active_timeout(), config.runner.pass_timeout))
