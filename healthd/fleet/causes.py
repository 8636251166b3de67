"""Which node events are node-health causes, their codes, and how events become incidents.

A cause is an event (a drain or down in ``sacctmgr show event``) whose reason
is healthd's own (``healthd: CODE ...``, also ``healthd: REBOOT CODE`` and
``healthd: REPAIR CODE``, giving ``CODE``) or starts with one of the configured
prefixes: Slurm's own failure reasons and other tools' (``NHC:``). Anything
else, maintenance and every other administrator's reason, is not a cause.
``healthd: LEMON`` is not one either: it is this command's own preventive drain.

Events on one node that start within ``gap`` seconds of the previous one are one
incident (the study saw PCIe errors come with Xid 79): the incident keeps every
code, and its first event's code names it.

A cause that hits many nodes at once (a switch, a rack's power, slurmctld losing a
rack) says nothing about any one of them: one event line naming several nodes, or
cause events on more than ``SHARED_NODES`` nodes starting within ``SHARED_WINDOW``
seconds of the first, are one ``SharedIncident``. Their nodes' incidents are marked
shared and do not count against the node (docs/fleet.md, "Shared incidents").
"""

from __future__ import annotations

import re
from bisect import bisect_left
from typing import Iterable, NamedTuple, Optional

# Slurm's own reasons for a node that failed under a job (slurmctld 22.05: ping timeouts,
# unkillable processes, prolog/epilog failures, a reboot it did not ask for, a batch
# step that could not be completed) and the LBNL NHC prefix. Matched case-insensitively.
DEFAULT_CAUSES = (
    "Not responding",
    "Kill task failed",
    "Prolog error",
    "Epilog error",
    "Prolog failed",
    "Epilog failed",
    "Node unexpectedly rebooted",
    "batch job complete failure",
    "NHC:",
)
# healthd's own words after the prefix that are not finding codes.
_HEALTHD_VERBS = ("REBOOT", "REPAIR")
LEMON = "LEMON"
# slurmctld marks every node it lost in one ping pass (SlurmdTimeout) within the same
# second or so; 30 s leaves room for slurmdbd's stamping. Independent incidents on more
# than 4 nodes within 30 s are beyond chance even at the study's scale: 60 incidents a day
# over 3,000 nodes put 0.02 in a 30 s window, and P(5 or more) ~ 1e-10.
SHARED_WINDOW = 30.0
SHARED_NODES = 4
_CODE = re.compile(r"[A-Z][A-Z0-9_]*")
_NOT_CODE = re.compile(r"[^A-Z0-9]+")


def code_of(prefix: str) -> str:
    """``Not responding`` -> ``NOT_RESPONDING``, ``NHC:`` -> ``NHC``: the taxonomy code of a configured prefix."""
    return _NOT_CODE.sub("_", prefix.upper()).strip("_") or "OTHER"


class CauseRules(NamedTuple):
    """How reasons are read: healthd's prefix and the other prefixes that count as causes."""

    healthd_prefix: str = "healthd:"
    causes: tuple[str, ...] = DEFAULT_CAUSES

    def classify(self, reason: str) -> Optional[str]:
        """The cause code of ``reason``, or None when it is not a node-health cause."""
        text = reason.strip()
        prefix = self.healthd_prefix
        if text == prefix:
            return code_of(prefix)
        if text.startswith(prefix + " "):
            words = text[len(prefix) + 1 :].split()
            if words and words[0] in _HEALTHD_VERBS:
                words = words[1:]
            if not words or words[0] == LEMON:
                return None if words else code_of(prefix)
            return words[0] if _CODE.fullmatch(words[0]) else code_of(prefix)
        lowered = text.lower()
        for cause in self.causes:
            if lowered.startswith(cause.lower()):
                return code_of(cause)
        return None


class Incident(NamedTuple):
    """Cause events on one node close together in time: one time the node went bad."""

    node: str
    start: float
    end: Optional[float]  # None while the node is still out
    codes: tuple[str, ...]  # distinct, in order of appearance; the first names the incident
    shared: bool = False  # one of its events was part of a SharedIncident: not the node's own

    @property
    def code(self) -> str:
        return self.codes[0]


class SharedIncident(NamedTuple):
    """One cause that hit many nodes at once: reported once, counted against none of them."""

    start: float
    nodes: tuple[str, ...]
    codes: tuple[str, ...]

    @property
    def code(self) -> str:
        return self.codes[0]


class NodeEvents(NamedTuple):
    """One node's cause events sorted by start, with the incident each belongs to."""

    starts: tuple[float, ...]
    codes: tuple[str, ...]
    incident: tuple[int, ...]  # index into the incidents list

    def first_in(self, low: float, high: float) -> Optional[int]:
        """The position of the earliest event starting in [low, high], or None."""
        position = bisect_left(self.starts, low)
        if position < len(self.starts) and self.starts[position] <= high:
            return position
        return None


def _codes(codes: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(codes))


def shared_incidents(
    lines: list[tuple[tuple[str, ...], float, str]],
    window: float = SHARED_WINDOW,
    most: int = SHARED_NODES,
) -> tuple[list[SharedIncident], set[int]]:
    """Cause event lines ``(nodes, start, code)`` -> the shared incidents and the positions of their lines.

    Lines are taken in order of start; a group is every line starting within ``window``
    seconds of its first. A group over more than ``most`` nodes is one shared incident;
    otherwise each of its lines naming several nodes is one on its own.
    """
    order = sorted(range(len(lines)), key=lambda i: lines[i][1])
    found: list[SharedIncident] = []
    shared: set[int] = set()
    head = 0
    while head < len(order):
        tail = head
        while tail < len(order) and lines[order[tail]][1] - lines[order[head]][1] <= window:
            tail += 1
        group = order[head:tail]
        nodes = {name for i in group for name in lines[i][0]}
        parts = [group] if len(nodes) > most else [[i] for i in group if len(lines[i][0]) > 1]
        for part in parts:
            names = sorted({name for i in part for name in lines[i][0]})
            found.append(SharedIncident(lines[part[0]][1], tuple(names), _codes(lines[i][2] for i in part)))
            shared.update(part)
        head = tail
    return found, shared


def group_incidents(
    events: Iterable[tuple[str, float, Optional[float], str, bool]], gap: float
) -> tuple[list[Incident], dict[str, NodeEvents]]:
    """Cause events ``(node, start, end, code, shared)`` -> incidents (by node, then time) and each node's index."""
    by_node: dict[str, list[tuple[float, Optional[float], str, bool]]] = {}
    for node, start, stop, code, part_of_shared in events:
        by_node.setdefault(node, []).append((start, stop, code, part_of_shared))
    incidents: list[Incident] = []
    index: dict[str, NodeEvents] = {}
    for node in sorted(by_node):
        rows = sorted(by_node[node], key=lambda row: (row[0], row[2]))
        owners: list[int] = []
        first = last = rows[0][0]
        end: Optional[float] = rows[0][1]
        codes: list[str] = []
        shared = False
        for start, stop, code, part_of_shared in rows:
            if start - last > gap:
                incidents.append(Incident(node, first, end, tuple(codes), shared))
                first, end, codes, shared = start, stop, [], False
            last = start
            end = None if end is None or stop is None else max(end, stop)
            shared = shared or part_of_shared
            if code not in codes:
                codes.append(code)
            owners.append(len(incidents))
        incidents.append(Incident(node, first, end, tuple(codes), shared))
        index[node] = NodeEvents(tuple(r[0] for r in rows), tuple(r[2] for r in rows), tuple(owners))
    return incidents, index
