"""Cumulative hardware counters judged by their change: the plugin API's one helper for counter baselines.

Error counters (InfiniBand port counters, PCIe AER totals, NVML's PCIe replay and
NVLink counters) only ever grow, so a total says nothing and its rise since the
last pass says everything. They restart at boot and at a driver reload, and narrow
ones stop at their maximum instead of wrapping (IBA PortCounters). A check keeps
its baselines in its state: ``BootScoped`` files them per subject together with the
boot they were taken in, drops the boot-scoped ones when the node has booted since,
and judges each subject against its own; ``rise`` tells a rise from a reset,
``saturated`` a counter stuck at its maximum. Everything here is pure: the check's
``gather`` reads the boot id (``/proc/sys/kernel/random/boot_id``) and the saved
state, its ``judge`` uses these.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, NamedTuple, Optional, TypeVar

from healthd.model import Finding

T = TypeVar("T")


def rise(before: Any, value: int) -> Optional[int]:
    """How much a counter rose from its baseline ``before`` to ``value``.

    None when there is no usable baseline (absent, not an integer), or when the
    counter went down: it was reset (reboot, driver reload, cleared by hand), and
    ``value`` is the new baseline.
    """
    if not isinstance(before, int) or isinstance(before, bool) or value < before:
        return None
    return value - before


def saturated(value: int, bits: int) -> bool:
    """Whether a counter ``bits`` wide stands at its maximum, where it stops: further increases are invisible."""
    return value >= (1 << bits) - 1


class BootScoped(NamedTuple):
    """A check's state document of per-subject counter baselines, valid within the boot that took them.

    The document is ``{"version": V, "boot_id": B, KEY: {subject: entry}}``. On a new
    boot the fields in ``boot_fields`` are dropped from every entry (``None``: whole
    entries are), so counters that restarted are not compared with the last boot's;
    other fields (say, when a link last went down) are kept. An unreadable boot id
    (None), or a document that names none, keeps everything. Without
    ``forget_after`` only the subjects judged in a pass are kept; with it, an entry
    records when its subject was last ``seen`` and is kept that many seconds (a port
    that is unreadable for a while keeps its history).
    """

    key: str
    version: int = 1
    boot_fields: Optional[frozenset[str]] = None
    forget_after: Optional[float] = None

    def resume(self, document: Mapping[str, Any], boot_id: Optional[str], now: float) -> dict[str, dict[str, Any]]:
        """The saved entries (JSON objects only) that still hold in boot ``boot_id`` at time ``now``."""
        raw = document.get(self.key)
        entries = {str(k): dict(v) for k, v in raw.items() if isinstance(v, dict)} if isinstance(raw, dict) else {}
        if boot_id is not None and document.get("boot_id") not in (None, boot_id):
            if self.boot_fields is None:
                return {}
            entries = {name: {k: v for k, v in e.items() if k not in self.boot_fields} for name, e in entries.items()}
        if self.forget_after is None:
            return entries
        return {name: e for name, e in entries.items() if self._recent(e.get("seen"), now)}

    def _recent(self, seen: Any, now: float) -> bool:
        fresh = isinstance(seen, (int, float)) and not isinstance(seen, bool) and seen <= now
        return fresh and self.forget_after is not None and now - self.forget_after <= seen

    def judge_each(
        self,
        document: Mapping[str, Any],
        boot_id: Optional[str],
        now: float,
        subjects: Iterable[tuple[str, T]],
        judge: Callable[[T, Mapping[str, Any]], tuple[list[Finding], dict[str, Any]]],
    ) -> tuple[list[Finding], dict[str, Any]]:
        """Judge each (name, reading) against its baseline; returns the findings and the document to save.

        ``judge(reading, baseline)`` returns the reading's findings and its new entry.
        """
        baselines = self.resume(document, boot_id, now)
        entries = dict(baselines) if self.forget_after is not None else {}
        findings: list[Finding] = []
        for name, reading in subjects:
            found, entry = judge(reading, baselines.get(name, {}))
            findings += found
            entries[name] = entry if self.forget_after is None else {**entry, "seen": now}
        return findings, {"version": self.version, "boot_id": boot_id, self.key: entries}
