"""Wires one pass together: discovered plugins + validated config -> prepared checks -> results.

The CLI (``check --once``) and the daemon both go through ``Engine`` so that a
pass means the same thing everywhere. The engine keeps the per-process memory of
each check (probe processes, open readers) and the runner's record of stuck
threads between passes.

Building an engine (every command that runs a pass, and ``healthd ack``) and
adopting a new config check the state directory first: one that fails
``healthd.store.trust``'s rule raises ``UntrustedPath`` before any check runs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence

from healthd.checks.plugin import AnyCheck, CheckContext, CheckSpec, PassShared
from healthd.checks.runner import PreparedCheck, Runner
from healthd.config.cache import load_checks
from healthd.config.nodename import this_node
from healthd.cycle.policymemory import PolicyMemory
from healthd.model import CheckResult, Finding, PassResult, RunState, Status, Tier
from healthd.store.state import StateDir
from healthd.store.statenode import claim

if TYPE_CHECKING:
    from healthd.config.loaded import LoadedConfig
    from healthd.config.models import Config


def node_name(config: Config, environ: Optional[dict[str, str]] = None) -> str:
    """SLURMD_NODENAME (set by slurmd for its HealthCheckProgram), then config, then short hostname."""
    return this_node(config.slurm.node_name, environ)


def is_active(spec: AnyCheck) -> bool:
    """Whether ``spec`` is a loaded check marked active (``CheckSpec.active``)."""
    return isinstance(spec, CheckSpec) and spec.active


def _longest_active(checks: Iterable[PreparedCheck]) -> float:
    """The longest ``timeout`` among the enabled active checks of ``checks`` (0 when there are none)."""
    return max(
        (c.context.settings.timeout for c in checks if c.enabled and c.context is not None and is_active(c.spec)),
        default=0.0,
    )


def _trusted_state(config: Config) -> StateDir:
    """The config's state directory; raises ``UntrustedPath`` when it or an entry fails the trust rule.

    Or ``healthd.store.statenode.ForeignStateDir`` (an ``UntrustedPath``) when it belongs to another node.
    """
    state = StateDir(config.paths.state_dir)
    state.refuse_untrusted()
    claim(state, node_name(config), mark=False)
    return state


class Engine:
    """Loads config and plugins once; runs passes on demand."""

    def __init__(
        self,
        loaded: LoadedConfig,
        specs: Sequence[AnyCheck],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.loaded = loaded
        self.specs = list(specs)
        self.clock = clock
        self.state = _trusted_state(loaded.config)
        self.runner = Runner()
        self._memory: dict[str, dict[str, Any]] = {}
        # The policy state a pass could not save, for the next pass of this process (healthd.cycle.policymemory).
        self.policy_memory = PolicyMemory()
        # Shown what each check's gather returned (``CheckContext.observed``: ``healthd check --debug``).
        self.observed: Optional[Callable[[str, object], None]] = None

    @classmethod
    def from_path(cls, path: Optional[Path]) -> Engine:
        loaded, specs = load_checks(path)
        return cls(loaded, specs)

    @property
    def config(self) -> Config:
        return self.loaded.config

    def reconfigure(self, loaded: LoadedConfig, specs: Optional[Sequence[AnyCheck]] = None) -> None:
        """Adopt a new config (SIGHUP), and the checks it loaded; in-process memory survives unless paths changed.

        Raises ``UntrustedPath``, having adopted nothing, when the new state directory fails the trust rule,
        or is another node's than the new config names (``healthd.store.statenode``).
        """
        if loaded.config.paths != self.config.paths:
            self.state = _trusted_state(loaded.config)
            self._memory.clear()
            self.policy_memory = PolicyMemory()
        elif node_name(loaded.config) != node_name(self.config):
            # A new [slurm] node_name in the same directory: refused here, so the reload is rejected and
            # the old config kept, rather than every later pass refusing the directory and the daemon stopping.
            claim(self.state, node_name(loaded.config), mark=False)
        self.loaded = loaded
        if specs is not None:
            self.specs = list(specs)

    def prepare(self, only: Optional[Sequence[str]] = None, tier: Tier = Tier.ORDINARY) -> list[PreparedCheck]:
        """The checks of one pass of ``tier``: the ordinary ones, the active ones, or all (docs/active.md).

        A check that did not load, or was never loaded, is not known to be active: it
        belongs to the ordinary passes, where it reports why it did not run. So does a
        disabled active check, shown as disabled: a config that disables it leaves its
        module unloaded (healthd.config.cache), and a pass must read the same either way.
        """
        prepared = []
        shared = PassShared()
        for spec in self.specs:
            if only is not None and spec.name not in only:
                continue
            settings = self.loaded.check_settings.get(spec.name)
            enabled = bool(getattr(settings, "enabled", True))
            wanted = tier is Tier.ALL or is_active(spec) == (tier is Tier.ACTIVE)
            if not wanted and (tier is Tier.ACTIVE or enabled):
                continue
            if not isinstance(spec, CheckSpec):
                prepared.append(PreparedCheck(spec.name, spec, None, enabled))
                continue
            context: CheckContext[Any] = CheckContext(
                name=spec.name,
                settings=settings,
                paths=self.config.paths,
                state=self.state.file(f"check-{spec.name}"),
                memory=self._memory.setdefault(spec.name, {}),
                clock=self.clock,
                shared=shared,
                observed=self.observed,
            )
            prepared.append(PreparedCheck(spec.name, spec, context, enabled))
        return prepared

    def active_timeout(self) -> float:
        """The longest ``timeout`` of the enabled active checks (0 when there are none)."""
        return _longest_active(self.prepare(None, Tier.ACTIVE))

    def active_names(self) -> frozenset[str]:
        """The enabled active checks: those every ordinary pass leaves out."""
        return frozenset(c.name for c in self.prepare(None, Tier.ACTIVE) if c.enabled)

    def run_checks(self, only: Optional[Sequence[str]] = None, tier: Tier = Tier.ORDINARY) -> PassResult:
        """One pass; problems with state files (corrupt, unreadable) join it as a ``healthd`` result.

        An ordinary pass never runs an active check. A pass with active checks has a
        deadline long enough for the longest of them: a diagnostic takes minutes, far
        beyond ``[runner].pass_timeout``, which bounds the hook's ordinary pass.
        """
        checks = self.prepare(only, tier)
        deadline = self.config.runner.pass_timeout
        if tier is not Tier.ORDINARY:
            longest = _longest_active(checks)
            deadline = max(longest, deadline) if tier is Tier.ALL else longest or deadline
        result = self.runner.run_checks(node_name(self.config), checks, deadline)
        # Every loaded check's adoptions, not only those of the checks that ran: an
        # acknowledgement saved under an old key must carry over in a pass run with --only.
        renames = tuple(pair for spec in self.specs if isinstance(spec, CheckSpec) for pair in spec.adopted())
        result = result._replace(renames=renames)
        problems = self.state.drain_problems()
        if not problems:
            return result
        findings = tuple(
            Finding("healthd", Status.WARNING, "STATE_PROBLEM", str(self.state.directory), problem)
            for problem in problems
        )
        own = CheckResult("healthd", RunState.RAN, findings, 0.0, "state directory problems")
        return result._replace(results=(*result.results, own))
