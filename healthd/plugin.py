"""The check plugin interface and its discovery through the ``healthd.checks`` entry points.

A plugin module exposes one ``CheckSpec``. Built-in checks are registered in
``pyproject.toml`` under the same entry-point group a third-party package would use,
so both are found the same way. A plugin that cannot be imported becomes a
``BrokenCheck`` whose every run is an UNKNOWN finding, never a crash.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, MutableMapping, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from healthd.model import DetailValue, Finding, Status

if TYPE_CHECKING:
    from healthd.config import NodeSpec, Paths
    from healthd.state import StateFile

ENTRY_POINT_GROUP = "healthd.checks"


class CheckSettings(BaseModel):
    """Options every check accepts under ``[checks.NAME]``; checks subclass it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    timeout: float = Field(default=10.0, gt=0, le=600, description="seconds before the check is abandoned")


class NotApplicable(Exception):
    """Raised by a check when it has nothing to examine on this node (not a failure)."""


S = TypeVar("S", bound=CheckSettings)


@dataclass(frozen=True)
class CheckContext(Generic[S]):
    """Everything a check may use: settings, node expectations, roots, state, clock.

    ``state`` persists across processes (in ``[paths].state_dir``); ``memory`` lives
    only as long as this process and carries things like running probe processes.
    """

    name: str
    settings: S
    node: NodeSpec
    paths: Paths
    state: StateFile
    memory: MutableMapping[str, Any] = field(default_factory=dict)
    clock: Callable[[], float] = time.time

    def finding(self, status: Status, code: str, subject: str, message: str, **details: DetailValue) -> Finding:
        return Finding(check=self.name, status=status, code=code, subject=subject, message=message, details=details)

    def save_state(self, data: dict[str, Any], what: str) -> list[Finding]:
        """Persist ``data``; when that fails, the UNKNOWN ``STATE_UNWRITABLE`` finding to report.

        ``what`` says what is lost (``"counter baselines"``): without its state a
        check cannot judge changes or remember events, so the pass says so.
        """
        from healthd.state import StateError

        try:
            self.state.save(data)
        except StateError as exc:
            return [self.finding(Status.UNKNOWN, "STATE_UNWRITABLE", str(self.state.path), f"{what} not kept: {exc}")]
        return []


@dataclass(frozen=True)
class CheckSpec(Generic[S]):
    """What a plugin module exports: a name, a settings model and a ``run`` function.

    ``run`` gathers and judges, returning findings (none means healthy); it raises
    ``NotApplicable`` when the node has nothing to check. It must not log, act or
    touch metrics: it only reports.
    """

    name: str
    description: str
    settings: type[S]
    run: Callable[[CheckContext[S]], Iterable[Finding]]


@dataclass(frozen=True)
class BrokenCheck:
    """Stands in for a plugin whose entry point failed to load."""

    name: str
    error: str


def _untrusted_plugin(module: str) -> str | None:
    """Why the plugin module's file must not be loaded (see healthd.trust), if it must not."""
    import importlib.util
    from pathlib import Path

    from healthd.trust import untrusted_reason

    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None  # the import itself will fail and say why
    if found is None or not found.origin or not found.has_location:
        return None
    return untrusted_reason(Path(found.origin))


def discover() -> list[CheckSpec[Any] | BrokenCheck]:
    """Load every check registered under the entry-point group, sorted by name."""
    from importlib.metadata import entry_points

    try:
        eps = list(entry_points(group=ENTRY_POINT_GROUP))
    except TypeError:  # Python 3.9: entry_points() takes no arguments
        eps = list(entry_points().get(ENTRY_POINT_GROUP, []))  # type: ignore[attr-defined]
    seen: dict[str, CheckSpec[Any] | BrokenCheck] = {}
    for ep in eps:
        if ep.name in seen:
            continue
        reason = _untrusted_plugin(ep.module)
        if reason:
            seen[ep.name] = BrokenCheck(ep.name, f"refusing to load {ep.value}: {reason}")
            continue
        try:
            spec = ep.load()
        except Exception as exc:  # any import failure must become a visible result
            seen[ep.name] = BrokenCheck(ep.name, f"cannot load {ep.value}: {type(exc).__name__}: {exc}")
            continue
        if not isinstance(spec, CheckSpec) or spec.name != ep.name:
            seen[ep.name] = BrokenCheck(ep.name, f"{ep.value} is not a CheckSpec named {ep.name!r}")
            continue
        seen[ep.name] = spec
    return [seen[name] for name in sorted(seen)]
