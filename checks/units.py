"""What systemd says of the services a node must run: ``systemctl show`` parsed strictly, each unit's state classed.

``systemctl is-active`` prints only a unit's ActiveState, and that alone cannot tell a
daemon being reloaded or restarted (by configuration management, across the whole
fleet at once) from one that is down. ``systemctl show`` adds the SubState, which can.
A unit is classed (``Condition``) as running, down, or moving between the two; the
check reads a moving unit again after a short wait and never grades one that is still
moving as dead. ``parse_show`` is pure; ``read_units`` runs systemctl (``program``:
trusted, bounded, never doubled).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, MutableMapping, Sequence, Union

from healthd.plugin import Unobserved
from healthd.text import one_line

from . import program

PROPERTIES = ("Id", "LoadState", "ActiveState", "SubState")

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


@dataclass(frozen=True)
class UnitState:
    """One unit as ``systemctl show`` describes it; ``unit`` is the name asked for, ``id`` systemd's own."""

    unit: str
    id: str
    load: str
    active: str
    sub: str

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
    missing = [key for key in PROPERTIES if key not in values]
    if missing:
        raise ShowError(f"{source}:{lines[0][0]}: no {', '.join(missing)} for {unit}")
    state = UnitState(unit, values["Id"], values["LoadState"], values["ActiveState"], values["SubState"])
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
