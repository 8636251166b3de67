"""The config's own tables as frozen value classes: the type of ``LoadedConfig.config`` on every path.

A validated config and one read back from the cache (``healthd.config.cache``) are both
instances of these classes, so ``isinstance(loaded.config, Config)`` holds whichever way it
came. Defining them needs no pydantic: pydantic validates them (``healthd.config.models``)
through the constraints in their annotations, ``Limits`` and ``After``, which import it only
when a config is validated, and ``ConfigTable.__get_pydantic_core_schema__``, which builds a
model of the table's fields then (unknown keys refused). They are not dataclasses: making
the ten tables dataclasses cost a cold ``check --once`` about 6 ms (bench/README.md);
``ConfigTable`` gives them the same frozen, compared-by-value behaviour without generating code.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Annotated, Any, Callable, ClassVar, Literal, Optional

from healthd.config.defaults import DEFAULT_INTERVAL_SECONDS, DEFAULT_STATE_DIR


class ConfigTable:
    """A config table: its fields are the class's annotated attributes, each with its default.

    Immutable and compared by value; built with keywords (a missing one takes its default).
    """

    _names: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls) -> None:
        # Each table declares its own fields (a class without annotations would list its base's on Python 3.9).
        annotations = getattr(cls, "__annotations__", {})
        cls._names = tuple(name for name in annotations if not name.startswith("_"))

    def __init__(self, **values: Any) -> None:
        unknown = set(values) - set(self._names)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no setting {sorted(unknown)[0]!r}")
        for name in self._names:
            value = values[name] if name in values else getattr(type(self), name)
            # A default dict is the class's: each table gets its own.
            object.__setattr__(self, name, dict(value) if isinstance(value, dict) and name not in values else value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def values(self) -> dict[str, Any]:
        """Each field's value, in the order the class declares them."""
        return {name: self.__dict__[name] for name in self._names}

    def replaced(self, **changes: Any) -> Any:
        """This table with ``changes`` (not validated: the caller sets known keys)."""
        return type(self)(**{**self.values(), **changes})

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.values() == other.values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, *self.values().values()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.values().items())})"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Callable[[Any], Any]) -> Any:
        """Validate a table as a pydantic model of the same fields would, then make it this class."""
        from pydantic import ConfigDict, create_model
        from pydantic_core import core_schema

        hints = typing.get_type_hints(cls, include_extras=True)
        fields: Any = {name: (hints[name], getattr(cls, name)) for name in cls._names}
        model = create_model(cls.__name__, __config__=ConfigDict(extra="forbid", frozen=True), **fields)
        return core_schema.no_info_after_validator_function(
            lambda valid: cls(**{name: getattr(valid, name) for name in cls._names}), handler(model)
        )


class Limits:
    """Bounds of a number or a string (pydantic ``Field``'s ``gt``, ``le``, ``max_length``, ``pattern``...)."""

    def __init__(self, **limits: Any) -> None:
        self.limits = limits

    def __get_pydantic_core_schema__(self, source: Any, handler: Callable[[Any], Any]) -> Any:
        from pydantic import Field

        return handler(Annotated[source, Field(**self.limits)])


class After:
    """A check run on the value once pydantic has read it; its ``ValueError`` names the key."""

    def __init__(self, check: Callable[[Any], Any]) -> None:
        self.check = check

    def __get_pydantic_core_schema__(self, source: Any, handler: Callable[[Any], Any]) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(self.check, handler(source))


def _openable(value: Path) -> Path:
    from healthd.checks.settings import openable

    return openable(value)


def _absolute(value: Path) -> Path:
    from healthd.checks.settings import absolute

    return absolute(value)


# Every path a config names is one of these two, as in the checks' settings (healthd.checks.settings).
SettingPath = Annotated[Path, After(_openable)]
AbsolutePath = Annotated[Path, After(_absolute)]

_PREFIX_WORD = r"[A-Za-z0-9_.,:;/@+#%()\-]+"


def _reason_prefix(value: str) -> str:
    # The prefix is how healthd recognises its own reasons, so it must reach
    # Slurm exactly as written: no characters scontrol or sanitizing would change.
    if not re.fullmatch(rf"{_PREFIX_WORD}(?: {_PREFIX_WORD})*", value):
        raise ValueError(
            f"{value!r} must be words of letters, digits and _ . , : ; / @ + # % ( ) - separated by single spaces"
        )
    return value


def _host_port(value: Optional[str]) -> Optional[str]:
    if value is None:
        return value
    _host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("listen must be HOST:PORT with a port 1-65535")
    return value


def _counts(value: dict[str, int]) -> dict[str, int]:
    for code, count in value.items():
        if count < 0:
            raise ValueError(f"{code} = {count}: a repeat count must be 0 (never) or more")
    return value


class Paths(ConfigTable):
    """Filesystem roots, settable so tests and post-mortems can point at captured trees."""

    sysfs: SettingPath = Path("/sys")
    procfs: SettingPath = Path("/proc")
    kmsg: SettingPath = Path("/dev/kmsg")
    state_dir: SettingPath = DEFAULT_STATE_DIR


class SlurmSettings(ConfigTable):
    """How healthd reaches Slurm. The adapter is the only code that uses these."""

    enabled: bool = True
    bin_dir: Optional[AbsolutePath] = None
    conf: Optional[AbsolutePath] = None
    node_name: Optional[str] = None
    # Per scontrol call, and for all calls of one pass together: with the default
    # [runner].pass_timeout a hook run stays well inside slurmd's 60 s kill.
    timeout: Annotated[float, Limits(gt=0, le=120)] = 5.0
    budget: Annotated[float, Limits(gt=0, le=300)] = 12.0
    reason_prefix: Annotated[str, Limits(min_length=1, max_length=32), After(_reason_prefix)] = "healthd:"
    # Seconds between node-state reads on passes that need none (0: every pass).
    reconcile_interval: Annotated[float, Limits(ge=0)] = 3600.0
    lock_timeout: Annotated[float, Limits(gt=0, le=60)] = 3.0
    # The most a pass with a fault waits, a stable per-node delay, before its first
    # Slurm call (docs/scale.md, "Spread"). At most 60 s: the bound on how long a
    # CRITICAL take-out is put off; the default keeps a hook run inside slurmd's 60 s kill.
    act_splay: Annotated[float, Limits(ge=0, le=60)] = 10.0


class PolicySettings(ConfigTable):
    """What healthd does with a pass's results (see docs/policy.md)."""

    dry_run: bool = False
    unknown_action: Literal["report", "drain"] = "report"
    unknown_passes: Annotated[int, Limits(ge=1)] = 3
    fail_passes: Annotated[int, Limits(ge=1)] = 1
    clean_passes: Annotated[int, Limits(ge=1)] = 1
    max_out_fraction: Annotated[float, Limits(gt=0, le=1)] = 0.10
    # Seconds between a drain and the circuit breaker's confirming read. It must exceed
    # the one-second resolution of slurmctld's reason stamps (see breaker.breaker_confirm).
    breaker_settle: Annotated[float, Limits(ge=1.2, le=20)] = 2.0
    # Seconds a take-out holds its place under the circuit breaker: the breaker limits a wave
    # of take-outs, not the backlog of nodes waiting for hardware work (docs/policy.md,
    # "The window"). An hour covers a shared fault reaching every node within a few
    # five-minute passes and the held nodes' 12.5 min backoff, and gives an operator paged
    # by DRAIN_HELD that long before the next nodes may go.
    breaker_window: Annotated[float, Limits(ge=30, le=7 * 86400)] = 3600.0
    # A partition of more nodes than this is counted shard by shard (healthd.plan.shard): each
    # node reads its shard's nodes one by one instead of the whole node table, which slurmctld
    # packs for every read of many nodes (0.2 s a read at 100,000 nodes). Below it, the whole
    # partition's count (docs/scale.md, "Breaker shards", says where the two cost the same).
    breaker_shard_above: Annotated[int, Limits(ge=0)] = 10000


class RunnerSettings(ConfigTable):
    """Deadlines: each check has its own (``[checks.NAME].timeout``); the pass has one."""

    pass_timeout: Annotated[float, Limits(gt=0, le=600)] = 30.0


class DaemonSettings(ConfigTable):
    """``healthd run``: the interval between passes (the source paper's five minutes)."""

    interval: Annotated[float, Limits(ge=1, le=86400)] = DEFAULT_INTERVAL_SECONDS
    splay: bool = True


class ActiveSettings(ConfigTable):
    """When healthd starts the active checks by itself (docs/active.md). Both ways are off by default.

    ``at_epilog``: the epilog runs them once the job ended and no other job is on the
    node, within ``epilog_timeout`` seconds. ``when_drained``: the daemon runs them
    (with every other check) on a node it drained itself that Slurm shows idle. Either
    way at most once per ``interval`` seconds, counted from the last active run on the
    node, whoever started it (kept in the state directory, so restarts do not rerun them).
    """

    at_epilog: bool = False
    # A diagnostic at the epilog holds the node COMPLETING (no job starts on it) for its
    # whole length; dcgm's level 2, retried once, needs up to its default 600 s timeout.
    epilog_timeout: Annotated[float, Limits(gt=0, le=3600)] = 600.0
    when_drained: bool = False
    # Six hours: a node healthd holds out is re-examined a few times a day, while an
    # active run costs minutes of a node that does nothing else meanwhile.
    interval: Annotated[float, Limits(ge=0, le=30 * 86400)] = 21600.0


class MetricsSettings(ConfigTable):
    """Prometheus exposition: an HTTP listener and/or a node_exporter textfile."""

    listen: Annotated[Optional[str], After(_host_port)] = None
    textfile: Optional[SettingPath] = None
    # The account node_exporter runs as: the textfile's directory (and those above it) may be
    # its as well as root's (healthd.service.metrics.refuse_untrusted_textfile). Debian's package and
    # the common RPMs run node_exporter as `prometheus`; "" trusts root's directories only.
    textfile_owner: Annotated[str, Limits(pattern=r"^([a-z_][a-z0-9_.-]{0,31})?$")] = "prometheus"


class EscalationSettings(ConfigTable):
    """Repeat failures send a node to repair (docs/history.md, "Escalation").

    The same hardware finding code (``CheckSpec.hardware``, docs/escalation.md) raised
    ``repeats`` times on the same unit (a GPU by UUID or serial, an IB port, a DIMM)
    within ``window_days`` keeps the node out for hardware work; ``overrides`` sets
    ``repeats`` per code (0: never escalate it). A code no check declares hardware
    never escalates, whatever ``overrides`` says.
    """

    repeats: Annotated[int, Limits(ge=0)] = 3
    window_days: Annotated[float, Limits(gt=0, le=3650)] = 30.0
    overrides: Annotated[dict[str, int], After(_counts)] = {}


class RemediationSettings(ConfigTable):
    """What healthd does besides draining (docs/history.md, docs/remediation.md).

    ``reboot`` lets a finding whose remedy is a reboot have Slurm reboot the node;
    ``reset`` lets one whose remedy is a GPU reset have ``nvidia_smi`` reset that GPU.

    ``on_repair`` is a program (absolute path, run without a shell, within
    ``on_repair_timeout`` seconds) that receives the node's history as JSON on
    stdin when the node is sent to repair: a ticketing hook.
    """

    on_repair: Optional[AbsolutePath] = None
    on_repair_timeout: Annotated[float, Limits(gt=0, le=300)] = 30.0
    # Off by default: a reboot or a GPU reset is healthd acting on the machine, not only on Slurm
    # (docs/remediation.md).
    reboot: bool = False
    reset: bool = False
    nvidia_smi: AbsolutePath = Path("/usr/bin/nvidia-smi")


class Config(ConfigTable):
    """The whole file. ``checks`` holds raw tables, validated per check by ``healthd.config.models``."""

    # Defaults shared by every Config that does not set the table: they are immutable.
    paths: Paths = Paths()
    slurm: SlurmSettings = SlurmSettings()
    policy: PolicySettings = PolicySettings()
    runner: RunnerSettings = RunnerSettings()
    daemon: DaemonSettings = DaemonSettings()
    active: ActiveSettings = ActiveSettings()
    metrics: MetricsSettings = MetricsSettings()
    escalation: EscalationSettings = EscalationSettings()
    remediation: RemediationSettings = RemediationSettings()
    checks: dict[str, dict[str, Any]] = {}
