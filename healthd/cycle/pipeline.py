"""One pass of the acting half: checks -> plan -> execute -> settle.

``run_pass`` is what ``healthd check --once`` (and the HealthCheckProgram hook)
and the daemon call each pass:

1. the engine runs the checks;
2. ``plan`` (healthd.plan.plan, pure) turns results, remembered state and Slurm's
   answers into one decision and its writes, asking for each Slurm read it needs;
3. ``execute`` (healthd.cycle.execute, the only Slurm caller) makes those reads and
   sends those writes; a dry run ``rehearse``s instead;
4. ``settle`` saves the policy state, the acknowledgements and the ``last-pass``
   document, and returns the outcome for the sinks.

It never prints; everything it did or could not do is in the returned
``PassOutcome`` and in log records. Slurm trouble (scontrol missing, slurmctld
down, a timeout) never raises: the intended action is kept in the ``policy``
state file and retried with backoff on later passes.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Optional

from healthd.boot import read_boot_id
from healthd.checks.plugin import CheckSpec
from healthd.cycle.acks import STATE_NAME as ACKS_STATE
from healthd.cycle.acks import AckStore
from healthd.cycle.engine import node_name
from healthd.cycle.execute import execute, observe, rehearse
from healthd.cycle.outcome import PASS_FAILED, ActionSection, PassOutcome
from healthd.cycle.policymemory import mark_unsaved, reach_critical, unsaved_marked, writable_dir
from healthd.cycle.render import pass_to_dict
from healthd.model import CheckResult, Finding, PassResult, RunState, Status, Tier
from healthd.plan.acks import Ack, apply_acks
from healthd.plan.plan import Conclusion, Executed, Observed, Plan, Read, Situation, conclude, held_raises, plan
from healthd.plan.rules import Coverage, PolicyRules
from healthd.plan.spread import act_delay
from healthd.plan.state import ACTING, OWN_CHECK, Action, Decision, PolicyState
from healthd.slurm.adapter import SlurmClient
from healthd.slurm.nodestate import NodeInfo
from healthd.slurm.reasons import Reasons
from healthd.store.attempt import record_attempt
from healthd.store.history import History
from healthd.store.historyschema import HistoryError, RebootPhase
from healthd.store.lock import LockTimeout, StateLock, active_running
from healthd.store.state import StateError
from healthd.store.statenode import claim
from healthd.store.trust import UntrustedPath
from healthd.text import one_line

if TYPE_CHECKING:
    from healthd.config.models import Config
    from healthd.cycle.engine import Engine

LAST_PASS = "last-pass"  # noqa: S105 (a state file name)
# Where a pass that does not stand for the node is saved instead (``run_pass``'s ``aside``).
OTHER_PASS = "other-pass"  # noqa: S105 (a state file name)
POLICY_STATE = "policy"
# Slack on top of a pass's own deadlines before the daemon declares it hung.
PASS_GRACE_SECONDS = 10.0


# slurmd kills its HealthCheckProgram 60 s after starting it (slurm.conf(5), HealthCheckProgram;
# SIGTERM to its process group, then SIGKILL). A one-shot pass (``check --once``, the hook) is
# done 5 s before that, left for the interpreter's start and the exit.
ONE_SHOT_SECONDS = 55.0
# What a one-shot pass keeps back from its deadline to save what a reset or on_repair did.
SAVE_MARGIN_SECONDS = 2.0
# A one-shot pass starts a GPU reset only with this much of its time left: the process
# query answers within a second and a reset takes a few seconds, but a reset cut short
# leaves the GPU in an unknown state, and the try is spent (docs/remediation.md).
RESET_FLOOR_SECONDS = 20.0


def budget_terms(config: Config) -> list[tuple[str, float]]:
    """The deadlines that add up to the longest pass, each with its config key.

    The checks' deadline (``[runner].pass_timeout``), the wait for the state directory's
    lock (``[slurm].lock_timeout``); when Slurm is enabled, the wait before acting on a
    fault (``[slurm].act_splay``) and all Slurm calls of the pass together
    (``[slurm].budget``); and what may follow the decision, the longer of
    ``[remediation].on_repair_timeout`` (when on_repair is set) and a GPU reset's two
    nvidia-smi deadlines (when ``reset`` is on and Slurm enabled). One pass never does
    both: a node in repair is never reset (remedy.reset_target).
    """
    terms = [("[runner].pass_timeout", config.runner.pass_timeout), ("[slurm].lock_timeout", config.slurm.lock_timeout)]
    if config.slurm.enabled:
        terms += [("[slurm].act_splay", config.slurm.act_splay), ("[slurm].budget", config.slurm.budget)]
    remediation = config.remediation
    after: list[tuple[str, float]] = []
    if remediation.on_repair is not None:
        after.append(("[remediation].on_repair_timeout", remediation.on_repair_timeout))
    if remediation.reset and config.slurm.enabled:
        from healthd.cycle.gpureset import ResetSettings

        defaults = ResetSettings()
        after.append(("a GPU reset (nvidia-smi's query and reset)", defaults.query_timeout + defaults.reset_timeout))
    if after:
        terms.append(max(after, key=lambda term: term[1]))
    return terms


def pass_budget(config: Config, grace: float = PASS_GRACE_SECONDS, checks: Optional[float] = None) -> float:
    """How long a pass may take at most (``budget_terms``), plus ``grace``; ``checks`` replaces ``pass_timeout``."""
    terms = dict(budget_terms(config))
    if checks is not None:
        terms["[runner].pass_timeout"] = checks
    return sum(terms.values()) + grace


def one_shot_overrun(config: Config) -> Optional[str]:
    """Why a one-shot pass (the hook) with ``config`` may need more than ``ONE_SHOT_SECONDS``, or None."""
    terms = budget_terms(config)
    total = sum(seconds for _, seconds in terms)
    if total <= ONE_SHOT_SECONDS:
        return None
    listed = " + ".join(f"{name} {seconds:g}" for name, seconds in terms)
    return (
        f"one pass may take {total:g}s ({listed}), more than the {ONE_SHOT_SECONDS:g}s the hook has"
        " (slurmd kills its HealthCheckProgram at 60s): there, on_repair and a GPU reset get only what is left"
        f" of {ONE_SHOT_SECONDS:g}s, and a reset is not started with less than {RESET_FLOOR_SECONDS:g}s left"
        ' (docs/slurm.md, "Running as HealthCheckProgram")'
    )


class PassRequest(NamedTuple):
    """What the caller asked of one pass (see ``run_pass``).

    ``only`` limits it to those checks and ``tier`` says which checks run
    (``Engine.run_checks``); ``dry_run`` sends nothing to Slurm; ``aside`` saves it as
    ``other-pass``; ``deadline`` (``time.monotonic``) is when a one-shot pass must be done.
    """

    only: Optional[tuple[str, ...]] = None
    tier: Tier = Tier.ORDINARY
    dry_run: bool = False
    aside: bool = False
    deadline: Optional[float] = None

    @property
    def partial(self) -> bool:
        """Some checks only (``only``, or the active checks alone): the pass never resumes the node."""
        return self.only is not None or self.tier is Tier.ACTIVE


class PassTools(NamedTuple):
    """What a pass calls out to besides the engine, each replaceable in tests.

    ``client`` talks to Slurm (one for ``[slurm]`` when None), ``clock`` is the wall
    clock, ``sleep`` waits out ``[slurm].act_splay``, ``logger`` takes the log records.
    """

    client: Optional[SlurmClient] = None
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    logger: Optional[logging.Logger] = None


class PassContext(NamedTuple):
    """What one pass uses: the engine (config, state directory, policy memory), the request, the tools."""

    engine: Engine
    request: PassRequest = PassRequest()
    tools: PassTools = PassTools()

    @property
    def config(self) -> Config:
        return self.engine.config

    @property
    def log(self) -> logging.Logger:
        return self.tools.logger or logging.getLogger("healthd.cycle.pipeline")

    @property
    def one_shot(self) -> bool:
        """A one-shot pass (``check``, the hook): the only kind given a deadline."""
        return self.request.deadline is not None

    @property
    def dry(self) -> bool:
        """A dry run: asked for, or ``[policy] dry_run``."""
        return self.request.dry_run or self.config.policy.dry_run

    @property
    def aside(self) -> bool:
        """Saved as ``other-pass``: asked for, or a partial pass (it does not stand for the node)."""
        return self.request.aside or self.request.partial


class PolicyRead(NamedTuple):
    """The policy state a pass starts from: ``loaded`` is ``policy.json`` as read, ``marked`` says
    ``policy.unsaved`` was there (healthd.cycle.policymemory), ``problems`` what was wrong with it."""

    state: PolicyState
    loaded: dict[str, Any]
    marked: bool
    problems: tuple[str, ...] = ()


def _load_policy_state(engine: Engine, judged: PassResult, *, unlocked: bool) -> PolicyRead:
    """The policy state to decide from: ``policy.json``, or the newer copy this process kept
    (healthd.cycle.policymemory).

    ``judged`` is the pass with its acknowledgements applied; ``unlocked``: ``cycle.lock`` could not be opened.
    """
    state_file = engine.state.file(POLICY_STATE)
    loaded, file_problems = state_file.read()
    state, read_problems = PolicyState.read(loaded)
    problems = file_problems + tuple(f"{state_file.path}: {problem}" for problem in read_problems)
    marked = unsaved_marked(engine.state)
    kept = engine.policy_memory.newer(loaded)
    if kept is not None:
        return PolicyRead(kept, loaded, marked, problems)
    # Unlocked in a directory that can be written (no flock there): the mark tells, as in a full one.
    unwritable = unlocked and not writable_dir(engine.state.directory)
    if unwritable or marked:
        reached = reach_critical(state, judged, engine.config.policy.fail_passes)
        if reached != state:
            why = "the state directory cannot be written" if unwritable else "an earlier pass could not save it"
            problems += (
                f"{state_file.path} is not current ({why}): a CRITICAL finding acts without waiting for"
                " [policy] fail_passes",
            )
        state = reached
    return PolicyRead(state, loaded, marked, problems)


def _report(ctx: PassContext, decision: Decision, problem: str, more: tuple[str, ...] = ()) -> ActionSection:
    """The action section of a pass that decided nothing (no lock, or the pass failed): ``problem``, then ``more``."""
    return ActionSection(
        decision=decision,
        node_state=None,
        node_reason=None,
        applied=False,
        held=False,
        pending=False,
        dry_run=ctx.dry,
        slurm_enabled=ctx.config.slurm.enabled,
        acknowledged=(),
        errors=(problem, *more),
        one_shot=ctx.one_shot,
    )


def run_pass(engine: Engine, request: PassRequest = PassRequest(), tools: PassTools = PassTools()) -> PassOutcome:
    """Run one pass of ``engine`` as ``request`` asks and carry its decision out; see the module docstring.

    ``request.deadline`` (``time.monotonic``) is when a one-shot pass must be done
    (``ONE_SHOT_SECONDS`` after its start): what follows the decision, a GPU reset and
    ``[remediation] on_repair``, is cut to fit, and a reset with less than
    ``RESET_FLOOR_SECONDS`` left waits for a later pass. The daemon gives none: its
    watchdog budget counts them whole (``pass_budget``).

    ``request.tier`` says which checks run (``Engine.run_checks``); for one with active checks
    the caller has made sure that no job is on the node (healthd.cycle.activerun). A pass of
    the active checks alone is partial: it never resumes the node. Nor does an ordinary
    pass while another process runs the active checks (``activerun.running``).

    A pass whose checks found a fault first waits its node's ``[slurm].act_splay``
    delay (``healthd.plan.spread.act_delay``; ``tools.sleep`` is injectable for tests), outside
    the state lock, so a fleet-wide fault reaches slurmctld spread over that time.

    The policy and acks state is read, acted on and written back under the state
    directory lock (``healthd.store.lock``); a pass that cannot get the lock within
    ``[slurm].lock_timeout`` is reported but acts on nothing. Whatever goes wrong
    after the checks ran, the pass is still reported and saved: an unexpected
    exception becomes an UNKNOWN ``healthd/PASS_FAILED`` finding.

    A partial pass (``request.only``, or the active checks alone) and one the caller marks
    ``aside`` (run with a config other than the running daemon's) do not stand for the
    node: they are saved as ``other-pass``, and ``last-pass``, which ``healthd status``
    and ``healthd ack`` read, keeps the node's last whole pass (docs/service.md).
    """
    ctx = PassContext(engine, request, tools)
    config = engine.config
    try:
        raw = engine.run_checks(None if request.only is None else list(request.only), request.tier)
    except Exception as exc:  # anything from the engine must still give a reported pass
        return failed_pass(ctx, PassResult(node_name(config), tools.clock(), 0.0, ()), exc)
    if config.slurm.enabled and not ctx.dry and _may_act(raw):
        tools.sleep(act_delay(raw.node, config.slurm.act_splay))
    lock = StateLock(config.paths.state_dir, config.slurm.lock_timeout)
    unlocked: tuple[str, ...] = ()
    try:
        lock.acquire()
    except LockTimeout as exc:
        return _not_acting(ctx, raw, exc)
    except OSError as exc:
        # The directory is missing or unwritable: no state can be saved there either,
        # and checking (and acting on a fault) must go on; the problem is reported.
        unlocked = (f"cannot lock {lock.path}: {exc.strerror or exc}; going on without the lock",)
    try:
        return _locked_pass(ctx, raw, unlocked)
    except UntrustedPath:
        raise  # not a failed pass: every entry point refuses it with exit 78 (docs/service.md)
    except Exception as exc:  # see the docstring
        return failed_pass(ctx, raw, exc)
    finally:
        lock.release()


def _not_acting(ctx: PassContext, raw: PassResult, exc: LockTimeout) -> PassOutcome:
    """The pass that could not get the state lock: reported with its acknowledgements, acting on nothing."""
    ctx.log.warning("%s: not acting this pass", exc)
    acks, ack_problems = AckStore(ctx.engine.state.file(ACKS_STATE)).load()
    result, _ = apply_acks(raw, acks)
    decision = Decision(Action.NONE, Action.NONE, "", f"not acting this pass: {exc}")
    return _finish(ctx, result, _report(ctx, decision, str(exc), ack_problems))


def _may_act(raw: PassResult) -> bool:
    """Whether the checks found a fault (CRITICAL or WARNING) that may take the node out: a healthy pass never waits."""
    return any(f.status in (Status.CRITICAL, Status.WARNING) and f.check != OWN_CHECK for f in raw.findings)


def failed_pass(ctx: PassContext, raw: PassResult, exc: BaseException, met: tuple[str, ...] = ()) -> PassOutcome:
    """The pass as far as it got, plus an UNKNOWN ``PASS_FAILED`` finding; nothing acted on or saved but the pass.

    ``met``: the problems the pass's steps had returned before it raised (the lock, the
    state's reads), listed after its own error.

    The one way a pass that raised is reported: ``run_pass`` takes it when one of
    its steps raised, and the daemon when a pass could not run at all (no thread to
    be had) or raised outside the pipeline. The pass is saved as ``last-pass`` like any
    other, so ``healthd status`` and the hook show UNKNOWN instead of the last pass
    that went well (``ctx.aside``: as ``other-pass``, see ``run_pass``).
    """
    # The exception's text may quote anything (a path, a line of a state file): one safe line.
    message = one_line(f"pass failed: {type(exc).__name__}: {exc}")
    ctx.log.error("%s", message, exc_info=exc)
    finding = Finding(OWN_CHECK, Status.UNKNOWN, PASS_FAILED, OWN_CHECK, message)
    own = CheckResult(OWN_CHECK, RunState.ERROR, (finding,), 0.0, message)
    result = raw._replace(results=(*raw.results, own))
    decision = Decision(Action.NONE, Action.NONE, "", "the pass failed: nothing decided")
    return _finish(ctx, result, _report(ctx, decision, message, met))


def _policy_rules(config: Config) -> PolicyRules:
    """What the config says about acting on the node, bound once for the pass (``[slurm] reason_prefix`` included)."""
    return PolicyRules(
        config.policy,
        Reasons(config.slurm.reason_prefix),
        config.escalation,
        reboot=config.remediation.reboot,
        reset=config.remediation.reset,
        reconcile_interval=config.slurm.reconcile_interval,
    )


def _time_left(deadline: Optional[float]) -> float:
    """What is left of a one-shot pass's time for a reset or on_repair (infinite without a deadline)."""
    return float("inf") if deadline is None else deadline - SAVE_MARGIN_SECONDS - time.monotonic()


def _plan(config: Config, situation: Situation, slurm: SlurmClient) -> Plan:
    """Plan, making each Slurm read the plan asks for (the node, then its partitions) and planning again."""
    rules = _policy_rules(config)
    for _ in Read:
        made = plan(situation, rules)
        if isinstance(made, Plan):
            return made
        # Slurm's boot time tells a reboot happened only where the boot id is unreadable (remedy._booted).
        boot_time = situation.state.reboot is not None and not situation.boot_id
        held = situation.state.held
        observed = observe(
            slurm,
            made,
            situation.result.node,
            situation.observed,
            rules.reasons,
            rules.settings,
            boot_time=boot_time,
            first=held.by if held else (),
        )
        situation = situation._replace(observed=observed)
    made = plan(situation, rules)
    if not isinstance(made, Plan):
        raise RuntimeError(f"the plan asked for {made.value} again after it was read")
    return made


class Acted(NamedTuple):
    """What the locked part of a pass planned (``plan``), did (``executed``) and concluded (``done``)."""

    plan: Plan
    executed: Executed
    done: Conclusion


def _locked_pass(ctx: PassContext, raw: PassResult, unlocked: tuple[str, ...]) -> PassOutcome:
    """The pass under the state lock; ``unlocked`` says why ``cycle.lock`` could not be opened (empty: it is held).

    What the state's reads met (a corrupt ``policy.json`` moved aside, bad acks) is reported
    even when a later step raises: the failed pass names it beside its own error.
    """
    engine = ctx.engine
    claim(engine.state, raw.node, mark=not unlocked)  # before anything in the directory is believed
    store = AckStore(engine.state.file(ACKS_STATE))
    acks, ack_problems = store.load()
    # Judged as acknowledged: a CRITICAL an administrator acknowledged must not count (reach_critical).
    read = _load_policy_state(engine, apply_acks(raw, acks)[0], unlocked=bool(unlocked))
    try:
        return _judge_and_act(ctx, raw, unlocked, store, acks, ack_problems, read)
    except UntrustedPath:
        raise  # not a failed pass (see run_pass)
    except Exception as exc:  # see run_pass's docstring
        return failed_pass(ctx, raw, exc, (*unlocked, *read.problems, *ack_problems))


def _judge_and_act(
    ctx: PassContext,
    raw: PassResult,
    unlocked: tuple[str, ...],
    store: AckStore,
    acks: tuple[Ack, ...],
    ack_problems: tuple[str, ...],
    read: PolicyRead,
) -> PassOutcome:
    """Plan from the state as read, carry the plan out, record it in the history and save what it leaves."""
    engine, config = ctx.engine, ctx.config
    now = ctx.tools.clock()
    state = read.state
    # An active pass holds active.lock itself (activerun.start): only an ordinary pass probes it,
    # and only where the probe can matter: an active check is enabled, and healthd has the node
    # out (only then can the pass resume it). A healthy node's pass touches no lock file.
    active = engine.active_names()
    tier = ctx.request.tier
    busy = tier is Tier.ORDINARY and bool(active) and bool(state.took_out) and active_running(config.paths.state_dir)
    # A one-shot (it has a deadline) asks scontrol ping first: with every slurmctld refusing, it
    # answers in milliseconds where sinfo would retry for MessageTimeout seconds (docs/slurm.md).
    slurm = ctx.tools.client or SlurmClient(config.slurm, probe_first=ctx.request.deadline is not None)
    slurm.start_budget()
    # Opened for this pass only: a corrupt database is set aside, which nothing may hold open.
    history = History.open(config.paths.state_dir)
    try:
        repeats = _repeats(history, raw, config.escalation.window_days, now, engine)
        boot_id = read_boot_id(config.paths.procfs, default="")
        situation = Situation(
            result=raw,
            state=state,
            acks=acks,
            observed=Observed(),
            now=now,
            partial=ctx.request.partial,
            slurm_enabled=config.slurm.enabled,
            dry_run=ctx.dry,
            repeats=repeats,
            boot_id=boot_id,
            coverage=Coverage(tier, active, busy),
        )
        acted = _act(ctx, situation, _plan(config, situation, slurm), slurm)
        done = _record_history(history, acted, now, boot_id, repeats, dry=ctx.dry)
        acted = acted._replace(done=done)
        if not ctx.dry:
            _record_reboot(history, state, done, now)
    finally:
        history.close()
    outcome = _settle(ctx, acted, store, read, unlocked, ack_problems)
    if done.state.repair is not None and state.repair is None and not ctx.dry:
        # After the pass is saved: a hook killed while on_repair runs has lost nothing of it.
        _tell_repair(config, done, now, ctx.log, ctx.request.deadline)
    return outcome


def _act(ctx: PassContext, situation: Situation, the_plan: Plan, slurm: SlurmClient) -> Acted:
    """Carry ``the_plan`` out (a dry run rehearses it) and conclude what it did to the situation's state."""
    log, deadline = ctx.log, ctx.request.deadline
    left = _time_left(deadline)
    if the_plan.reset is not None and left < RESET_FLOOR_SECONDS:
        # Not started, not spent: a reset cut short would leave the GPU in an unknown state.
        log.warning(
            "GPU reset of %s left to a later pass: %.0fs left of this one-shot pass, %gs needed",
            the_plan.reset.pci,
            max(left, 0.0),
            RESET_FLOOR_SECONDS,
        )
        the_plan = the_plan._replace(steps=(), reset=None, interrupted=None)
    node = situation.result.node
    if the_plan.acknowledged and not ctx.dry:
        log.warning("node %s was resumed by someone else: %d finding(s) acknowledged", node, len(the_plan.acknowledged))
    if ctx.dry:
        executed = rehearse(the_plan)
    else:
        if the_plan.interrupted is not None:
            # Saved before the writes: if slurmd kills the hook (or the host dies) mid-way,
            # the next pass still knows what it was doing and retries it (and confirms the drain).
            with contextlib.suppress(StateError):
                ctx.engine.state.file(POLICY_STATE).save(the_plan.interrupted.to_dict())
        executed = _execute(ctx, the_plan, slurm, situation.boot_id) if the_plan.steps else Executed()
    done = conclude(the_plan, executed, situation.state, situation.now)
    _log_outcome(log, node, the_plan, executed, done)
    return Acted(the_plan, executed, done)


def _execute(ctx: PassContext, the_plan: Plan, slurm: SlurmClient, boot_id: str) -> Executed:
    """Send the plan's writes; the GPU-reset machinery is imported here, where a step may use it:
    a pass with nothing to send (a healthy node's, a dry run's) never loads it."""
    from healthd.cycle.gpureset import MARKS_NAME, ResetMarks

    resets = ResetMarks(ctx.engine.state.file(MARKS_NAME), boot_id)
    deadline = ctx.request.deadline
    cut = None if deadline is None else deadline - SAVE_MARGIN_SECONDS
    return execute(the_plan, slurm, ctx.config, ctx.tools.sleep, resets=resets, deadline=cut)


def _repeats(
    history: History, raw: PassResult, window_days: float, now: float, engine: Engine
) -> dict[str, tuple[str, int]]:
    """How often each hardware fault of this pass was raised on its unit in the escalation window (remedy.escalate).

    Only a code its check declares a hardware unit's fault (``CheckSpec.hardware``) is
    counted: one a user or a shared service can cause never escalates (docs/escalation.md).
    """
    specs = {spec.name: spec for spec in engine.specs if isinstance(spec, CheckSpec)}
    faults = [
        f
        for f in raw.findings
        if f.status in (Status.CRITICAL, Status.WARNING) and f.check in specs and specs[f.check].is_hardware(f.code)
    ]
    if not faults:
        return {}
    try:
        return history.repeats(faults, now - window_days * 86400)
    except HistoryError as exc:
        history.problems.append(f"{exc}: repeat failures are not escalated this pass")
        return {}


def _tell_repair(config: Config, done: Conclusion, now: float, log: logging.Logger, deadline: Optional[float]) -> None:
    """Run ``[remediation] on_repair`` with the node's history, and record what it did.

    A one-shot pass gives it what is left of its time (``deadline``), at most
    ``on_repair_timeout``. The history is opened again: the pass's own is saved and closed.
    """
    from healthd.cycle.onrepair import HookResult, run_on_repair  # only a pass that starts a repair runs it

    repair = done.state.repair
    program = config.remediation.on_repair
    if repair is None or program is None:
        return
    with History.open(config.paths.state_dir) as history:
        try:
            events = [e.to_dict() for e in history.events(since=now - config.escalation.window_days * 86400)]
        except HistoryError as exc:
            history.problems.append(str(exc))
            events = []
        document = {"node": done.result.node, "at": now, "repair": repair.to_dict(), "events": events}
        timeout = min(config.remediation.on_repair_timeout, _time_left(deadline))
        if timeout > 0:
            told = run_on_repair(program, document, timeout)
        else:
            told = HookResult("timeout", f"{program} not run: no time left in this pass")
        (log.info if told.outcome == "ok" else log.error)("on_repair for %s: %s", repair.subject, told.detail)
        history.record_action(
            at=now, action="on_repair", outcome=told.outcome, node=done.result.node, reason=told.detail
        )
        for problem in history.problems:
            log.error("history: %s", problem)


def _action_outcome(the_plan: Plan, executed: Executed, done: Conclusion) -> Optional[tuple[str, str]]:
    """(action, outcome) for the node's history: what was done to the node, or held back, this pass."""
    decision = done.decision
    if executed.lost or (the_plan.held_why and decision.action is Action.HOLD):
        return decision.intended.value, "held"
    if done.applied:
        return decision.action.value, "applied"
    if done.state.pending is not None and decision.action in ACTING:
        return decision.action.value, "pending"
    return None


def _record_reboot(history: History, before: PolicyState, done: Conclusion, now: float) -> None:
    """A reboot asked for this pass, or one seen done (the boot changed), into the node's history."""
    asked, was = done.state.reboot, before.reboot
    if asked is not None and asked != was:
        history.record_reboot(at=now, phase=RebootPhase.REQUESTED, boot_id=asked.boot_id, reason=asked.reason)
    elif was is not None and asked is None and done.state.rebooted == was.cause:
        history.record_reboot(at=now, phase=RebootPhase.DONE, boot_id=was.boot_id, reason=was.reason)


def _record_history(
    history: History, acted: Acted, now: float, boot_id: str, repeats: Mapping[str, tuple[str, int]], *, dry: bool
) -> Conclusion:
    """Add this pass to the node's history (healthd.store.history), under the state lock the pass holds.

    The reported pass is recorded (acknowledgements applied), so an acknowledgement
    shows as a change to OK. A dry run records the findings but no action. A history
    that cannot be written, or was corrupt and set aside, becomes one UNKNOWN finding
    of healthd's own: it says what is lost, and never stops the pass.
    """
    the_plan, executed, done = acted.plan, acted.executed, acted.done
    result = done.result
    if boot_id:
        history.record_boot(at=now, boot_id=boot_id, gpus=[d for d in result.devices if d.kind == "gpu"])
    else:
        history.problems.append("the boot id is unreadable: new boots are not told apart")
    # A take-out that lost its place after the drain was held back as much as one held before it.
    uncounted = {**the_plan.uncounted, **held_raises(repeats, executed.lost)}
    history.record_pass(result, at=now, boot_id=boot_id, uncounted=uncounted)
    for taken, why in {} if dry else the_plan.retracted.items():
        # A raise an earlier take-out counted, which this pass's read shows was a wave's.
        history.record_uncounted(at=now, unit=taken.unit, code=taken.code, since=taken.since, why=why)
    if the_plan.acknowledged and not dry:
        history.record_ack(at=now, refs=the_plan.acknowledged, by="slurm-resume")
    action = None if dry else _action_outcome(the_plan, executed, done)
    if action is not None:
        history.record_action(
            at=now,
            action=action[0],
            outcome=action[1],
            node=result.node,
            reason=done.decision.reason or done.decision.explanation,
            details={
                "steps": " ".join(step.value for step in executed.done),
                "error": executed.error.message if executed.error else "",
            },
        )
    if the_plan.reset is not None and executed.reset:
        history.record_action(
            at=now,
            action="gpu_reset",
            outcome=executed.reset,
            node=result.node,
            reason=executed.reset_message,
            details={"pci": the_plan.reset.pci, "finding": the_plan.reset.key},
        )
    history.maintain(now)
    problem = history.problem_finding(OWN_CHECK)
    if problem is None:
        return done
    own = CheckResult(OWN_CHECK, RunState.RAN, (problem,), 0.0)
    return done._replace(result=result._replace(results=(*result.results, own)))


def _log_outcome(log: logging.Logger, node: str, the_plan: Plan, executed: Executed, done: Conclusion) -> None:
    decision = done.decision
    if done.applied:
        log.warning("node %s: %s (%s)", node, decision.action.value, decision.reason or decision.explanation)
    elif done.state.pending is not None and not executed.rehearsed:
        log.warning("node %s: %s is pending: %s", node, done.state.pending.action.value, done.state.pending.error)
    held_why = executed.lost or the_plan.held_why
    if held_why:
        log.error(
            "DRAIN_HELD on %s: %s would be %s, held back: %s", node, decision.reason, decision.intended.value, held_why
        )


def _settle(
    ctx: PassContext,
    acted: Acted,
    store: AckStore,
    read: PolicyRead,
    unlocked: tuple[str, ...],
    ack_problems: tuple[str, ...],
) -> PassOutcome:
    """Save what the pass leaves behind and build its outcome (the sinks take it from there).

    Its action's errors are the problems each step returned, in the order met: the lock
    (``unlocked``), the policy state as read, the plan's reads, the writes, the saves,
    the acks file (``ack_problems``), the reset marks (``executed.problems``). The policy state
    that cannot be saved is kept for this process's next pass, and marked unsaved for the
    others (healthd.cycle.policymemory).
    """
    engine, dry = ctx.engine, ctx.dry
    the_plan, executed, done = acted.plan, acted.executed, acted.done
    slurm = the_plan.errors + ((executed.error,) if executed.error else ())
    problems = unlocked + read.problems + tuple(problem.message for problem in slurm)
    saved = False
    try:
        # A dry run's counters are not synced to the disk (docs/policy.md, "Dry run"): it did nothing to record.
        engine.state.file(POLICY_STATE).save(done.state.to_dict(), durable=not dry)
        saved = True
        if not dry:
            store.save(the_plan.acks)
    except StateError as exc:
        problems += (str(exc),)
    engine.policy_memory.saved(done.state, read.loaded, saved)
    if saved == read.marked:
        mark_unsaved(engine.state, not saved)
    problems += ack_problems + executed.problems
    node = the_plan.node
    pending = done.state.pending is not None and not dry
    report = ActionSection(
        decision=done.decision,
        node_state=node.state_text if node else None,
        node_reason=node.reason if node else None,
        applied=done.applied,
        held=done.decision.action is Action.HOLD,
        pending=pending,
        next_retry=done.state.pending.next_try if pending and done.state.pending else None,
        dry_run=dry,
        slurm_enabled=ctx.config.slurm.enabled,
        acknowledged=the_plan.acknowledged,
        errors=problems,
        steps=tuple(step.value for step in (executed.would if dry else executed.done)),
        slurm_errors=slurm,
        one_shot=ctx.one_shot,
    )
    return _finish(ctx, done.result, report, done.state, node)


def _finish(
    ctx: PassContext,
    result: PassResult,
    report: ActionSection,
    state: Optional[PolicyState] = None,
    node: Optional[NodeInfo] = None,
) -> PassOutcome:
    engine = ctx.engine
    document = pass_to_dict(result, {"action": report.to_dict()})
    failed = ""
    try:
        engine.state.file(OTHER_PASS if ctx.aside else LAST_PASS).save(document, durable=not ctx.dry)
    except StateError as exc:
        failed = str(exc)
        report = report._replace(errors=(*report.errors, failed))
        document["action"] = report.to_dict()
    if not ctx.aside:
        # Where a full disk lets the document be saved no more, ``healthd status`` still learns so.
        record_attempt(engine.state.directory, failed)
    return PassOutcome(result=result, action=report, state=state or PolicyState(), document=document, node=node)
