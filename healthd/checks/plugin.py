"""The plugin interface: checks and commands, and their discovery through entry points.

A check module exports one ``CheckSpec``: its name, its settings model (node
expectations included, under ``[checks.NAME]``) and its ``run``, which built-in
checks compose with ``Staged`` from a ``gather`` (all I/O) and a pure ``judge``.
A check may declare event counters its findings feed (``EventCounter``). A module
may also contribute a ``healthd`` subcommand (``CommandSpec``). Built-in checks
and commands are registered in ``pyproject.toml`` under the same entry-point
groups a third-party package would use, so both are found the same way. A plugin
that cannot be imported becomes a ``BrokenCheck`` whose every run is an UNKNOWN
finding (or a ``BrokenCommand`` that says why it cannot run), never a crash.
"""

from __future__ import annotations

import math
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Generic,
    Hashable,
    Iterable,
    Mapping,
    MutableMapping,
    NamedTuple,
    Optional,
    TypeVar,
    Union,
)

from healthd.exitcodes import EX_SOFTWARE
from healthd.model import DetailValue, Device, EventTally, Finding, Status
from healthd.store.state import StateError
from healthd.store.trust import untrusted_reason
from healthd.text import read_kernel_text

if TYPE_CHECKING:
    import argparse

    from pydantic import BaseModel

    from healthd.checks.settings import CheckSettings
    from healthd.config.models import Paths
    from healthd.store.state import StateFile

ENTRY_POINT_GROUP = "healthd.checks"
COMMAND_GROUP = "healthd.commands"


def __getattr__(name: str) -> Any:
    """``CheckSettings`` lives in ``healthd.checks.settings`` (pydantic); imported from here only when asked for."""
    if name == "CheckSettings":
        from healthd.checks.settings import CheckSettings

        return CheckSettings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class NotApplicable(Exception):
    """Raised by a check when it has nothing to examine on this node (not a failure).

    ``state``, when given, is saved all the same (by ``Staged``): a check that reads the
    kernel log keeps its cursor while it does not apply, so the next pass reads only the
    records logged since, not the whole boot again (docs/host.md, "Reading the kernel log").
    """

    def __init__(self, reason: str, state: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(reason)
        self.state = state


S = TypeVar("S", bound="CheckSettings")
Obs = TypeVar("Obs")
T = TypeVar("T")


@dataclass(frozen=True)
class _Reporter:
    """Makes findings in the name of one check."""

    name: str

    def finding(self, status: Status, code: str, subject: str, message: str, **details: DetailValue) -> Finding:
        return Finding(check=self.name, status=status, code=code, subject=subject, message=message, details=details)


class PassShared:
    """What the checks of one pass read once for all of them (the kernel log): ``once(key, read)``.

    The engine gives every check of a pass the same one, and each pass a new one. The
    first check to ask for ``key`` runs ``read``; the others asking meanwhile wait for it
    and get the same value. A ``read`` that raises leaves nothing: the next to ask reads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[Hashable, tuple[threading.Lock, list[Any]]] = {}

    def once(self, key: Hashable, read: Callable[[], T]) -> T:
        with self._lock:
            lock, value = self._entries.setdefault(key, (threading.Lock(), []))
        with lock:
            if not value:
                value.append(read())
        result: T = value[0]
        return result


@dataclass(frozen=True)
class CheckContext(_Reporter, Generic[S]):
    """Everything a check's gathering may use: settings, roots, state, memory, clock.

    ``state`` persists across processes (in ``[paths].state_dir``); ``memory`` lives
    only as long as this process and carries things like running probe processes.
    ``devices`` collects the devices the check saw in this pass (``Verdict.devices``),
    ``shared`` holds what the pass's checks read once for all of them, and ``observed``,
    when given, is shown each observation ``gather`` returns (``healthd check --debug``).
    """

    settings: S
    paths: Paths
    state: StateFile
    memory: MutableMapping[str, Any] = field(default_factory=dict)
    clock: Callable[[], float] = time.time
    devices: list[Device] = field(default_factory=list)
    shared: PassShared = field(default_factory=PassShared)
    observed: Optional[Callable[[str, object], None]] = None

    def save_state(self, data: Mapping[str, Any], what: str) -> list[Finding]:
        """Persist ``data``; when that fails, the UNKNOWN ``STATE_UNWRITABLE`` finding to report.

        ``what`` says what is lost (``"counter baselines"``): without its state a
        check cannot judge changes or remember events, so the pass says so.
        """
        try:
            self.state.save(dict(data))
        except StateError as exc:
            return [self.finding(Status.UNKNOWN, "STATE_UNWRITABLE", str(self.state.path), f"{what} not kept: {exc}")]
        return []


@dataclass(frozen=True)
class JudgeContext(_Reporter, Generic[S]):
    """What a judge may use besides its observation: the check's name, its settings and the time of the pass.

    Plain values and no I/O: the same observation and context always give the same verdict.
    """

    settings: S
    now: float


class Unobserved(NamedTuple):
    """Something ``gather`` could not read: its judge reports it as UNKNOWN ("could not observe" is never healthy)."""

    code: str
    subject: str
    message: str
    details: Mapping[str, DetailValue] = MappingProxyType({})

    def finding(self, reporter: _Reporter) -> Finding:
        return reporter.finding(Status.UNKNOWN, self.code, self.subject, self.message, **self.details)


def read_parsed(
    path: Path, parse: Callable[[str, str], T], code: str, decode_errors: str = "strict"
) -> Union[T, Unobserved]:
    """``parse(text, str(path))`` of a UTF-8 text file, for a ``gather``.

    A file that cannot be read is ``CODE_UNREADABLE``, one that ``parse`` rejects
    with a ``ValueError`` (whose message names the line) ``CODE_MALFORMED``.
    """
    try:
        text = read_kernel_text(path, decode_errors)
    except OSError as exc:
        return Unobserved(f"{code}_UNREADABLE", str(path), f"cannot read {path}: {exc}")
    try:
        return parse(text, str(path))
    except ValueError as exc:
        return Unobserved(f"{code}_MALFORMED", str(path), str(exc))


class Verdict(NamedTuple):
    """What a judge concluded: its findings, the state to keep for the next pass, the devices it saw.

    ``state`` None leaves the saved state as it is; a check that keeps state reads the
    previous one in its ``gather`` (``ctx.state.load()``) and judges it with the rest.
    ``devices`` go into the node history's inventory of the boot (``healthd history``).
    """

    findings: tuple[Finding, ...] = ()
    state: Optional[Mapping[str, Any]] = None
    devices: tuple[Device, ...] = ()


@dataclass(frozen=True)
class Staged(Generic[S, Obs]):
    """A check's ``run`` in two stages: ``gather`` does all the I/O, ``judge`` is a pure function of what it got.

    ``gather(ctx)`` reads the node (files, NVML, child processes, the check's saved
    state) and returns an observation; ``judge(observation, JudgeContext)`` returns a
    ``Verdict``. Either may raise ``NotApplicable``. The judge's state is saved here,
    and a failure to save it becomes the UNKNOWN ``STATE_UNWRITABLE`` finding naming
    ``keeps`` (what the state holds).
    """

    gather: Callable[[CheckContext[S]], Obs]
    judge: Callable[[Obs, JudgeContext[S]], Verdict]
    keeps: str = "check state"

    def __call__(self, ctx: CheckContext[S]) -> list[Finding]:
        observation = self.gather(ctx)
        if ctx.observed is not None:
            ctx.observed(ctx.name, observation)
        try:
            verdict = self.judge(observation, JudgeContext(ctx.name, ctx.settings, ctx.clock()))
        except NotApplicable as exc:
            # Not applicable stays the answer when the state cannot be saved: the check only
            # loses its place and reads again next pass; the reason says so.
            unsaved = ctx.save_state(exc.state, self.keeps) if exc.state is not None else []
            if unsaved:
                raise NotApplicable(f"{exc}; {unsaved[0].message}") from None
            raise
        findings = list(verdict.findings)
        ctx.devices.extend(verdict.devices)
        if verdict.state is not None:
            findings += ctx.save_state(verdict.state, self.keeps)
        return findings

    def peek(self, ctx: CheckContext[S]) -> Verdict:
        """The verdict a pass would reach now, saving nothing: its ``state`` is what the pass would have saved.

        The prolog beside the daemon judges a check this way (healthd.cycle.prolog), so the
        daemon's next pass still reads what this one read. It may raise ``NotApplicable``.
        """
        return self.judge(self.gather(ctx), JudgeContext(ctx.name, ctx.settings, ctx.clock()))


# Metric and label names within the Prometheus data model's, and never its reserved "__" prefix.
_NAME = re.compile(r"[a-z][a-z0-9_]*")
# The one upper-case label allowed: dcgm-exporter labels every GPU series ``UUID`` (with ``gpu``
# the NVML index and ``pci_bus_id``), and only that exact name lets a rule join healthd's
# series with its ``on(UUID)``. Any other name stays lower-case.
DCGM_LABELS = frozenset({"UUID"})


@dataclass(frozen=True)
class EventCounter:
    """A Prometheus counter that a check's findings feed: ``healthd_<name>_total``.

    ``select`` gives the label values (in the order of ``labels``) of a finding that
    is one of the counted events, and None for any other finding. A finding's
    ``count`` detail is its number of events (1 without one): the total since a
    point the check chooses, such as the boot, so the series is a counter whose
    resets ``rate()`` handles. Labels must stay few and low-cardinality (GPU
    indexes, error numbers), never free text. Label names are lower-case, except
    dcgm-exporter's ``UUID`` (``DCGM_LABELS``), so GPU series join with its series.
    """

    name: str
    documentation: str
    labels: tuple[str, ...]
    select: Callable[[Finding], Optional[tuple[str, ...]]]

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name) or self.name.endswith("_total"):
            raise ValueError(f"event counter name {self.name!r}: lower-case letters, digits and _, no _total")
        named = all(_NAME.fullmatch(label) or label in DCGM_LABELS for label in self.labels)
        if not named or len(set(self.labels)) != len(self.labels):
            raise ValueError(
                f"event counter {self.name!r}: labels must be distinct lower-case names (or dcgm-exporter's "
                f"{', '.join(sorted(DCGM_LABELS))}), got {self.labels}"
            )

    def tally(self, findings: Iterable[Finding]) -> EventTally:
        """The events among ``findings``, summed by label values."""
        counts: dict[tuple[str, ...], float] = {}
        for finding in findings:
            values = self.select(finding)
            if values is None:
                continue
            if len(values) != len(self.labels):
                raise ValueError(f"event counter {self.name!r} gave {len(values)} label values for {self.labels}")
            count = finding.details.get("count")
            amount = 1.0
            if isinstance(count, (int, float)) and not isinstance(count, bool) and math.isfinite(count) and count >= 0:
                amount = float(count)
            key = tuple(str(v) for v in values)
            counts[key] = counts.get(key, 0.0) + amount
        return EventTally(self.name, self.documentation, self.labels, tuple(sorted(counts.items())))


@dataclass(frozen=True)
class CheckSpec(Generic[S]):
    """What a check module exports: a name, a settings model, a ``run`` function and its event counters.

    ``run`` gathers and judges (``Staged``), returning findings (none means healthy);
    it raises ``NotApplicable`` when the node has nothing to check. It must not log,
    act or touch metrics: it only reports. ``events`` turn findings into counters.
    ``baseline``, when given, reads a known-good node and returns the settings
    (``[checks.NAME]`` keys) that expect what it has, for ``healthd baseline``.
    ``active`` marks a check that loads the node (a diagnostic that stresses the
    GPUs): it never runs in an ordinary pass, only in an active pass, which runs on
    a node that Slurm reports idle and drained (docs/active.md).
    ``adopts`` names findings that another check used to report and this one reports
    now, each as ``"OLDCHECK/CODE"``: the finding keeps its code and subject, so
    ``OLDCHECK/CODE/SUBJECT`` is now ``NAME/CODE/SUBJECT``, and what was saved under the
    old key (an administrator's acknowledgement, the findings that took the node out,
    the open findings of the node history) carries over to the new one.
    ``hardware`` declares which of its codes are a fault of one hardware unit of the
    node (a GPU, an IB port, a DIMM, an NVMe device, a PCIe link): a set of codes, or
    a function of the code where the codes are open-ended (``XID_<n>``). Only those
    escalate to repair when they repeat on their unit (docs/escalation.md); a code a
    user or a shared service can cause must not be declared.
    """

    name: str
    description: str
    # The model, or where to import it from ("package.module:Class", as entry points name
    # objects): a check whose model sits in a module of its own keeps pydantic out of
    # passes that need no validation (healthd.config.cache).
    settings: Union[type[S], str]
    run: Callable[[CheckContext[S]], Iterable[Finding]]
    events: tuple[EventCounter, ...] = ()
    baseline: Optional[Callable[[CheckContext[S]], Mapping[str, Any]]] = None
    active: bool = False
    adopts: tuple[str, ...] = ()
    hardware: Union[frozenset[str], Callable[[str], bool]] = frozenset()

    def is_hardware(self, code: str) -> bool:
        """Whether ``code`` is declared a hardware unit's fault (``hardware``): only then may it escalate."""
        hardware = self.hardware
        return code in hardware if isinstance(hardware, frozenset) else bool(hardware(code))

    def __post_init__(self) -> None:
        for old in self.adopts:
            check, _, code = old.partition("/")
            if not check or not code or "/" in code or check == self.name:
                raise ValueError(f"check {self.name}: adopts {old!r} must be OTHERCHECK/CODE")

    def adopted(self) -> tuple[tuple[str, str], ...]:
        """(old key prefix, new key prefix) of each adopted finding: ``("gpu/NVLINK_DOWN/", "nvlink/NVLINK_DOWN/")``."""
        return tuple((f"{old}/", f"{self.name}/{old.partition('/')[2]}/") for old in self.adopts)

    def settings_model(self) -> type[S]:
        """The settings model, imported now if the check named it lazily."""
        if isinstance(self.settings, type):
            return self.settings
        import importlib

        module, _, attr = self.settings.partition(":")
        model: type[S] = getattr(importlib.import_module(module), attr)
        return model


class BrokenCheck(NamedTuple):
    """Stands in for a plugin whose entry point failed to load."""

    name: str
    error: str


class UnloadedCheck(NamedTuple):
    """A check the config disables, whose module was never imported (``healthd.config.cache``'s fast path)."""

    name: str
    module: str
    attr: str


# What a pass knows of each installed check.
AnyCheck = Union["CheckSpec[Any]", BrokenCheck, UnloadedCheck]


def _untrusted_plugin(module: str) -> str | None:
    """Why the plugin module's file must not be loaded (see healthd.store.trust), if it must not."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None  # the import itself will fail and say why
    if found is None or not found.origin or not found.has_location:
        return None
    return untrusted_reason(Path(found.origin))


def load_entry(name: str, module: str, attr: str, kind: type[T]) -> Union[T, str]:
    """The object ``module:attr`` of the entry point ``name``, or why it could not be loaded.

    A module that fails ``healthd.store.trust``'s rule is never imported.
    """
    import importlib

    value = f"{module}:{attr}"
    reason = _untrusted_plugin(module)
    if reason:
        return f"refusing to load {value}: {reason}"
    try:
        loaded: Any = importlib.import_module(module)
        for part in attr.split("."):
            loaded = getattr(loaded, part)
    except Exception as exc:  # any import failure must become a visible result
        return f"cannot load {value}: {type(exc).__name__}: {exc}"
    if not isinstance(loaded, kind) or getattr(loaded, "name", None) != name:
        return f"{value} is not a {kind.__name__} named {name!r}"
    return loaded


def entry_points_of(group: str) -> dict[str, tuple[str, str]]:
    """Each entry point of ``group`` by name (the first one found wins): its (module, attribute)."""
    from importlib.metadata import entry_points

    try:
        eps = list(entry_points(group=group))
    except TypeError:  # Python 3.9: entry_points() takes no arguments
        eps = list(entry_points().get(group, []))  # type: ignore[attr-defined]
    found: dict[str, tuple[str, str]] = {}
    for ep in eps:
        found.setdefault(ep.name, (ep.module, ep.attr))
    return found


def _load(group: str, kind: type[T]) -> dict[str, Union[T, str]]:
    """Each entry point of ``group`` by name: the loaded object, or why it could not be loaded."""
    return {name: load_entry(name, module, attr, kind) for name, (module, attr) in entry_points_of(group).items()}


def discover() -> list[CheckSpec[Any] | BrokenCheck]:
    """Load every check registered under the ``healthd.checks`` entry-point group, sorted by name."""
    found = _load(ENTRY_POINT_GROUP, CheckSpec)
    return [spec if isinstance(spec, CheckSpec) else BrokenCheck(name, spec) for name, spec in sorted(found.items())]


class CommandSpec(NamedTuple):
    """A ``healthd`` subcommand a plugin contributes through the ``healthd.commands`` entry points.

    Its module is imported only to run it or to list it in ``healthd --help``: keep
    it light and import heavy modules inside ``run``. ``run`` returns the exit code.
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


class BrokenCommand(NamedTuple):
    """Stands in for a command whose entry point failed to load; running it says why."""

    name: str
    error: str
    help: str = "(cannot be loaded)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        import argparse

        parser.add_argument("ignored", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def run(self, args: argparse.Namespace) -> int:
        print(f"healthd: the {self.name} command cannot be used: {self.error}", file=sys.stderr)
        return EX_SOFTWARE  # sysexits.h, as for any other internal error


def discover_commands() -> list[CommandSpec | BrokenCommand]:
    """Load every command registered under the ``healthd.commands`` entry-point group, sorted by name."""
    found = _load(COMMAND_GROUP, CommandSpec)
    return [
        spec if isinstance(spec, CommandSpec) else BrokenCommand(name, spec) for name, spec in sorted(found.items())
    ]


def settings_models(specs: Iterable[AnyCheck]) -> dict[str, type[BaseModel]]:
    """Each check's settings model; a check that did not load still accepts the common options."""
    from healthd.checks.settings import CheckSettings

    return {s.name: (s.settings_model() if isinstance(s, CheckSpec) else CheckSettings) for s in specs}
