"""What systemd says of the services a node must run: ``systemctl show`` parsed strictly, each unit's state classed.

``systemctl is-active`` prints only a unit's ActiveState, and that alone cannot tell a
daemon being reloaded or restarted (by configuration management, across the whole
fleet at once) from one that is down. ``systemctl show`` adds the SubState, which can.
A unit is classed (``Condition``) as running, down, or moving between the two; the
check reads a moving unit again after a short wait and never grades one that is still
moving as dead, unless systemd's own timestamps show that its daemon has not run for
longer than ``transition_limit`` (``UnitState.moving_since``). ``parse_show`` is pure;
``read_units`` runs systemctl (``program``: trusted, bounded, never doubled).
"""

from __future__ import annotations

import enum
import re
from types import MappingProxyType
from typing import Any, Mapping, MutableMapping, NamedTuple, Optional, Sequence, Union

from healthd.checks.plugin import Unobserved
from healthd.text import one_line

from ..common import program

REQUIRED = ("Id", "LoadState", "ActiveState", "SubState")
# How long a moving unit has gone without a running daemon (``UnitState.moving_since``). systemd
# prints NRestarts only for a service, and only since systemd 235, so a block may lack it (then
# no automatic restart is known of); a block without a timestamp leaves that unit's time in
# transition unknown, never the whole read malformed.
TIMING = ("NRestarts", "ActiveExitTimestampMonotonic", "InactiveExitTimestampMonotonic")
PROPERTIES = REQUIRED + TIMING

# ActiveState, as org.freedesktop.systemd1(5) defines it ("Unit ACTIVE states"; systemctl(1)
# is-active prints the same word): "reloading" is active and reloading its configuration,
# "refreshing" (newer systemd) active with a new mount entering its namespace, so the
# daemon runs. "maintenance" is inactive while a maintenance operation (systemctl clean, which
# needs the unit stopped) runs.
RUNNING = frozenset({"active", "reloading", "refreshing"})
STOPPED = frozenset({"inactive", "failed", "maintenance"})
MOVING = frozenset({"activating", "deactivating"})
# The SubState of a service whose process has exited and which systemd will start again after
# RestartSec= (systemd.service(5) Restart=): ActiveState says "activating", but nothing runs;
# a daemon that keeps crashing sits here between attempts. "auto-restart-queued" is the same
# wait once the restart job is queued (systemd 254 and later).
RESTART_WAIT = frozenset({"auto-restart", "auto-restart-queued"})


class Condition(enum.Enum):
    """What a unit's states mean for the node: its daemon runs, does not, or is being started or stopped."""

    RUNNING = "running"
    DOWN = "down"
    MOVING = "moving"


# systemd prints a timestamp as microseconds of CLOCK_MONOTONIC, and a counter, in decimal.
_DECIMAL = re.compile(r"[0-9]{1,20}")


def _count(timing: Mapping[str, str], key: str) -> Union[int, str]:
    """The number systemd printed for ``key``, or what is wrong with it."""
    value = timing.get(key)
    if value is None:
        return f"systemd did not print {key}"
    if not _DECIMAL.fullmatch(value):
        return f"{key}={value[:40]!r} is not a decimal count"
    return int(value)


class Since(NamedTuple):
    """When a moving unit's daemon last ran (``at``, microseconds of CLOCK_MONOTONIC), or why that is unknown.

    ``at`` 0 with ``restarts``: it has not run since boot. ``restarts`` is systemd's count
    of the times it started the unit again by itself (Restart=) since a start was asked for.
    """

    at: Optional[int]
    unknown: str = ""
    restarts: int = 0


class UnitState(NamedTuple):
    """One unit as ``systemctl show`` describes it; ``unit`` is the name asked for, ``id`` systemd's own."""

    unit: str
    id: str
    load: str
    active: str
    sub: str
    timing: Mapping[str, str] = MappingProxyType({})  # the TIMING properties systemd printed

    @property
    def condition(self) -> Condition:
        if self.active in RUNNING:
            return Condition.RUNNING
        if self.active in STOPPED or self.sub in RESTART_WAIT:
            return Condition.DOWN
        return Condition.MOVING

    @property
    def installed(self) -> bool:
        # LoadState "not-found": no unit file of that name (org.freedesktop.systemd1(5) LoadState).
        return self.load != "not-found"

    @property
    def described(self) -> str:
        """``activating (auto-restart)``: the ActiveState and SubState, as ``systemctl status`` shows them."""
        return f"{self.active} ({self.sub})" if self.sub else self.active

    def moving_since(self) -> Since:
        """Since when (CLOCK_MONOTONIC) this unit, being started or stopped, has been without a running daemon.

        ``StateChangeTimestamp`` cannot tell: unit_notify() (src/core/unit.c) sets it on every
        SubState change, and a start that hangs (TimeoutStartSec=, 90 s by default) with Restart=
        goes start -> final-sigterm -> failed-before-auto-restart -> auto-restart -> start, so it
        never ages past one attempt; InactiveExitTimestamp is reset by each attempt too. systemd
        counts the automatic restarts (NRestarts, kept until a start that is not automatic, so a
        restart asked for by configuration management reads 0). With none, the unit is in the
        first attempt since it was asked to start or stop: the later of the two exit timestamps
        is when that began. With some, every attempt since its daemon last ran has failed: it
        last ran until ActiveExitTimestamp, 0 when it has not run since boot.
        """
        restarts = _count(self.timing, "NRestarts") if "NRestarts" in self.timing else 0
        if isinstance(restarts, str):
            return Since(None, restarts)
        active_exit = _count(self.timing, "ActiveExitTimestampMonotonic")
        inactive_exit = _count(self.timing, "InactiveExitTimestampMonotonic")
        if isinstance(active_exit, str):
            return Since(None, active_exit, restarts)
        if isinstance(inactive_exit, str):
            return Since(None, inactive_exit, restarts)
        if restarts:
            return Since(active_exit, restarts=restarts)
        if not active_exit and not inactive_exit:
            return Since(None, f"systemd gives neither {' nor '.join(TIMING[1:])}")
        return Since(max(active_exit, inactive_exit))


class ShowError(ValueError):
    """``systemctl show`` printed something other than one block of the asked properties per unit."""


def _block(lines: list[tuple[int, str]], unit: str, source: str) -> UnitState:
    values: dict[str, str] = {}
    for number, line in lines:
        key, equals, value = line.partition("=")
        if not equals or key not in PROPERTIES:
            expected = ", ".join(PROPERTIES)
            raise ShowError(f"{source}:{number}: expected one of {expected} as KEY=VALUE, got {line[:80]!r}")
        if key in values:
            raise ShowError(f"{source}:{number}: {key} given twice for {unit}")
        values[key] = value
    missing = [key for key in REQUIRED if key not in values]
    if missing:
        raise ShowError(f"{source}:{lines[0][0]}: no {', '.join(missing)} for {unit}")
    timing = {key: values[key] for key in TIMING if key in values}
    state = UnitState(unit, values["Id"], values["LoadState"], values["ActiveState"], values["SubState"], timing)
    if state.active not in RUNNING | STOPPED | MOVING:
        known = ", ".join(sorted(RUNNING | STOPPED | MOVING))
        raise ShowError(f"{source}:{lines[0][0]}: {unit} has ActiveState {state.active[:40]!r}, none of {known}")
    return state


def parse_show(text: str, units: Sequence[str], source: str) -> tuple[UnitState, ...]:
    """The states of ``units`` from ``systemctl show --property=...``: one block per unit, in order, blank-separated.

    Blocks follow the order of the units on the command line; an alias's block carries
    the unit's own Id (``sshd.service`` shows ``Id=ssh.service``), so units are matched
    by position, not by Id.
    """
    blocks: list[list[tuple[int, str]]] = [[]]
    # systemctl ends each KEY=VALUE with "\n". The values asked for are systemd's own words and
    # numbers, and a unit name holds only [A-Za-z0-9:_.\\@-] (systemd.unit(5)): none breaks a line.
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            blocks[-1].append((number, line))
        elif blocks[-1]:
            blocks.append([])
    blocks = [block for block in blocks if block]
    if len(blocks) != len(units):
        raise ShowError(f"{source}: {len(blocks)} blocks of properties for {len(units)} units")
    return tuple(_block(block, unit, source) for block, unit in zip(blocks, units))


def unit_name(name: str) -> str:
    """``munge`` -> ``munge.service``; a name with a type suffix is kept."""
    return name if "." in name else f"{name}.service"


def read_units(
    memory: MutableMapping[str, Any], systemctl: str, units: Sequence[str], timeout: float
) -> Union[tuple[UnitState, ...], Unobserved]:
    """The states of ``units`` from one ``systemctl show``, or why systemd gave none (an ``Unobserved``)."""
    argv = [systemctl, "show", "--no-pager", f"--property={','.join(PROPERTIES)}", "--", *map(unit_name, units)]
    done = program.run(memory, argv, timeout, "systemctl", "SYSTEMCTL")
    if isinstance(done, Unobserved):
        return done
    if done.returncode != 0:
        return program.failed(done, argv, "systemctl", "SYSTEMCTL")
    try:
        return parse_show(done.out, units, f"{systemctl} show")
    except ShowError as exc:
        return Unobserved("SYSTEMCTL_MALFORMED", "systemctl", one_line(str(exc), 300))
