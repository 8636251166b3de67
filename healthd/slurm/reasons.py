"""The reason healthd writes into Slurm, and how it knows a reason as its own: the policy's vocabulary.

A reason is ``<prefix> <CODE> <subject> (+N more)``, naming the finding that calls
for the strongest action, sanitized so that kernel or sysfs text cannot break
scontrol's argument parsing or a log line. Only a reason that starts with the
configured prefix (as a word) is healthd's: LBNL NHC's ownership rule, so that a
node an administrator took out is never touched. ``Reasons`` holds that prefix, made
once from the config, and every function that writes or recognises healthd's reasons.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from healthd.model import Finding, Status

# ``[slurm] reason_prefix`` by default (config.sections.SlurmSettings).
DEFAULT_PREFIX = "healthd:"
# Longest reason healthd writes: short enough for `sinfo -R` columns and logs.
REASON_MAX = 64
# Statuses in the order they call for action (see ``acting_key``).
ACTING_ORDER = (Status.CRITICAL, Status.WARNING, Status.UNKNOWN, Status.OK)
# " (+N more)" that ``Reasons.reason`` appends: a change of N alone is not a new reason.
_MORE_SUFFIX = re.compile(r"\s\(\+\d+ more\)$")
# What slurmctld 22.05 appends to the reason of a node it reboots (docs/slurm.md, "Reboot
# requests"): not part of the reason healthd wrote.
_REBOOT_SUFFIXES = re.compile(r"(\s:\sreboot (issued|complete|timed out))+$")
# The stamp of the drain with which a node took its place under the circuit breaker,
# carried into the DOWN that follows, which re-stamps the reason (see ``with_place``).
_PLACE_SUFFIX = re.compile(r"\s#(\d{1,12})$")
# Characters that are safe inside one scontrol `Reason=` argument and in logs.
_UNSAFE = re.compile(r"[^A-Za-z0-9 _.,:;/@+#%()\-]")


def sanitize(text: str) -> str:
    """Keep only characters that cannot break scontrol's argument parsing or a log line.

    Reasons quote kernel and sysfs text (device names, mount points); quotes, ``=``,
    control characters and non-ASCII become ``_`` and runs of spaces collapse.
    """
    return _UNSAFE.sub("_", " ".join(text.split()))


def reason_head(reason: str) -> str:
    """A healthd reason without its ``(+N more)`` count, its place stamp and Slurm's reboot suffixes.

    What is left is the part naming the top finding.
    """
    return _MORE_SUFFIX.sub("", _PLACE_SUFFIX.sub("", _REBOOT_SUFFIXES.sub("", reason)))


def with_place(reason: str, stamp: float) -> str:
    """``reason`` for the DOWN of a take-out, carrying the stamp of the drain that kept the node's place.

    slurmctld stamps a reason again whenever it is set, and a DOWN node that slurmd
    brings back (ReturnToService=2) is no longer DOWN: without its drain's stamp it
    would queue behind nodes that drained after it, and they would keep places it
    holds (breaker.breaker_confirm). The stamp is slurmctld's own, read back after the
    drain, so every node orders the places alike.
    """
    return f"{_PLACE_SUFFIX.sub('', reason)} #{int(stamp)}"


def place_stamp(reason: str) -> Optional[float]:
    """The drain stamp ``with_place`` put in ``reason``, if any."""
    found = _PLACE_SUFFIX.search(_REBOOT_SUFFIXES.sub("", reason))
    return float(found.group(1)) if found else None


def acting_key(finding: Finding) -> tuple[int, str]:
    """Sort key putting first the finding that calls for the strongest action.

    For acting, a known fault outranks "could not observe": CRITICAL, WARNING,
    then UNKNOWN (``Status.rank`` puts UNKNOWN above WARNING for reporting). Ties
    go by finding key, so the same findings always give the same reason.
    """
    return ACTING_ORDER.index(finding.status), finding.key


def _fit(head: str, body: str, suffix: str, limit: int) -> str:
    """``<head> <body><suffix>``, the body (already sanitized) cut with "..." to keep within ``limit``."""
    room = limit - len(head) - 1 - len(suffix)
    if len(body) > room:
        body = body[: max(room - 3, 0)].rstrip() + "..."
    return f"{head} {body}{suffix}"


def _naming(head: str, findings: Sequence[Finding], limit: int) -> str:
    """``<head> <CODE> <subject> (+N more)`` naming the top finding by ``acting_key``; ``head`` alone for none."""
    if not findings:
        return head
    first = min(findings, key=acting_key)
    more = len(findings) - 1
    suffix = f" (+{more} more)" if more else ""
    return _fit(head, sanitize(f"{first.code} {first.subject}"), suffix, limit)


# Words after the prefix that say what healthd did, before the code they are about.
_VERBS = frozenset({"REPAIR", "REBOOT"})


@dataclass(frozen=True)
class Reasons:
    """healthd's reasons under one prefix (``[slurm] reason_prefix``): how it writes them, how it knows its own.

    Made once from the config (``Reasons(config.slurm.reason_prefix)``) and handed to
    whatever writes or reads a reason, so the prefix is never a loose string. ``prefix``
    is kept sanitized; one that sanitizes to nothing is healthd's default. The config
    admits only prefixes that sanitizing leaves as they are (``config.sections``), so
    the prefix reaches Slurm exactly as written.
    """

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefix", sanitize(self.prefix) or DEFAULT_PREFIX)

    def reason(self, findings: Sequence[Finding], limit: int = REASON_MAX) -> str:
        """``<prefix> <CODE> <subject> (+N more)`` naming the top finding by ``acting_key``, sanitized and short."""
        return _naming(self.prefix, findings, limit)

    def repair(self, code: str, subject: str, count: int, limit: int = REASON_MAX) -> str:
        """``<prefix> REPAIR <CODE> <subject> x<N>``: the node is out for hardware work (docs/history.md)."""
        return _fit(self.prefix, sanitize(f"REPAIR {code} {subject}"), f" x{count}", limit)

    def reboot(self, findings: Sequence[Finding], limit: int = REASON_MAX) -> str:
        """``<prefix> REBOOT <CODE> <subject> (+N more)``: the node is out for a reboot healthd asked Slurm for."""
        return _naming(f"{self.prefix} REBOOT", findings, limit)

    def lemon(self, summary: str, limit: int = REASON_MAX) -> str:
        """``<prefix> LEMON <summary>``: ``healthd fleet lemons --drain`` took the node out (docs/fleet.md)."""
        return _fit(self.prefix, sanitize(f"LEMON {summary}"), "", limit)

    def owns(self, reason: str) -> bool:
        """Whether ``reason`` was written by healthd: it starts with the prefix as a word (NHC's ownership rule)."""
        return reason == self.prefix or reason.startswith(self.prefix + " ")

    def _tagged(self, reason: str, tag: str) -> bool:
        """Whether ``reason`` is healthd's with ``tag`` as its first word after the prefix."""
        head = f"{self.prefix} {tag}"
        return reason == head or reason.startswith(f"{head} ")

    def is_lemon(self, reason: str) -> bool:
        """Whether ``reason`` is a lemon drain: healthd's, but the fleet's decision, which no clean pass lifts."""
        return self._tagged(reason, "LEMON")

    def is_repair(self, reason: str) -> bool:
        """Whether ``reason`` is a repair drain (``repair``): out for hardware work, never resumed by a pass."""
        return self._tagged(reason, "REPAIR")

    def code(self, reason: str) -> str:
        """The finding code a healthd reason names (``<prefix> [REPAIR|REBOOT] <CODE> ...``); "" for none.

        A lemon drain names no code: the fleet's judgement, not one finding.
        """
        if not self.owns(reason) or self.is_lemon(reason):
            return ""
        words = reason[len(self.prefix) :].split()
        if words and words[0] in _VERBS:
            words = words[1:]
        return words[0] if words else ""
