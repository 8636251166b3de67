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
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass
from typing import Iterable, Optional

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
_CODE = re.compile(r"[A-Z][A-Z0-9_]*")
_NOT_CODE = re.compile(r"[^A-Z0-9]+")


def code_of(prefix: str) -> str:
    """``Not responding`` -> ``NOT_RESPONDING``, ``NHC:`` -> ``NHC``: the taxonomy code of a configured prefix."""
    return _NOT_CODE.sub("_", prefix.upper()).strip("_") or "OTHER"


@dataclass(frozen=True)
class CauseRules:
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


@dataclass(frozen=True)
class Incident:
    """Cause events on one node close together in time: one time the node went bad."""

    node: str
    start: float
    end: Optional[float]  # None while the node is still out
    codes: tuple[str, ...]  # distinct, in order of appearance; the first names the incident

    @property
    def code(self) -> str:
        return self.codes[0]


@dataclass(frozen=True)
class NodeEvents:
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


def group_incidents(
    events: Iterable[tuple[str, float, Optional[float], str]], gap: float
) -> tuple[list[Incident], dict[str, NodeEvents]]:
    """Cause events ``(node, start, end, code)`` -> incidents (by node, then time) and each node's event index."""
    by_node: dict[str, list[tuple[float, Optional[float], str]]] = {}
    for node, start, stop, code in events:
        by_node.setdefault(node, []).append((start, stop, code))
    incidents: list[Incident] = []
    index: dict[str, NodeEvents] = {}
    for node in sorted(by_node):
        rows = sorted(by_node[node], key=lambda row: (row[0], row[2]))
        owners: list[int] = []
        first = last = rows[0][0]
        end: Optional[float] = rows[0][1]
        codes: list[str] = []
        for start, stop, code in rows:
            if start - last > gap:
                incidents.append(Incident(node, first, end, tuple(codes)))
                first, end, codes = start, stop, []
            last = start
            end = None if end is None or stop is None else max(end, stop)
            if code not in codes:
                codes.append(code)
            owners.append(len(incidents))
        incidents.append(Incident(node, first, end, tuple(codes)))
        index[node] = NodeEvents(tuple(r[0] for r in rows), tuple(r[2] for r in rows), tuple(owners))
    return incidents, index
