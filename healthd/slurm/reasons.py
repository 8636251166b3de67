"""The reason healthd writes into Slurm, and how it knows a reason as its own: the policy's vocabulary.

A reason is ``<prefix> <CODE> <subject> (+N more)``, naming the finding that calls
for the strongest action, sanitized so that kernel or sysfs text cannot break
scontrol's argument parsing or a log line. Only a reason that starts with the
configured prefix (as a word) is healthd's: LBNL NHC's ownership rule, so that a
node an administrator took out is never touched.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

from healthd.model import Finding, Status

# Longest reason healthd writes: short enough for `sinfo -R` columns and logs.
REASON_MAX = 64
# Statuses in the order they call for action (see ``acting_key``).
ACTING_ORDER = (Status.CRITICAL, Status.WARNING, Status.UNKNOWN, Status.OK)
# " (+N more)" that make_reason appends: a change of N alone is not a new reason.
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


def make_reason(prefix: str, findings: Sequence[Finding], limit: int = REASON_MAX) -> str:
    """``<prefix> <CODE> <subject> (+N more)`` naming the top finding by ``acting_key``, sanitized and short."""
    clean_prefix = sanitize(prefix) or "healthd:"
    if not findings:
        return clean_prefix
    first = min(findings, key=acting_key)
    more = len(findings) - 1
    suffix = f" (+{more} more)" if more else ""
    body = sanitize(f"{first.code} {first.subject}")
    room = limit - len(clean_prefix) - 1 - len(suffix)
    if len(body) > room:
        body = body[: max(room - 3, 0)].rstrip() + "..."
    return f"{clean_prefix} {body}{suffix}"


def owned(reason: str, prefix: str) -> bool:
    """Whether ``reason`` was written by healthd (starts with its prefix as a word)."""
    clean_prefix = sanitize(prefix) or "healthd:"
    return reason == clean_prefix or reason.startswith(clean_prefix + " ")


def repair_reason(prefix: str, code: str, subject: str, count: int, limit: int = REASON_MAX) -> str:
    """``<prefix> REPAIR <CODE> <subject> x<N>``: the node is out for hardware work (docs/history.md)."""
    clean_prefix = sanitize(prefix) or "healthd:"
    suffix = f" x{count}"
    body = sanitize(f"REPAIR {code} {subject}")
    room = limit - len(clean_prefix) - 1 - len(suffix)
    if len(body) > room:
        body = body[: max(room - 3, 0)].rstrip() + "..."
    return f"{clean_prefix} {body}{suffix}"


def reboot_reason(prefix: str, findings: Sequence[Finding], limit: int = REASON_MAX) -> str:
    """``<prefix> REBOOT <CODE> <subject> (+N more)``: the node is out for a reboot healthd asked Slurm for."""
    return make_reason(f"{sanitize(prefix) or 'healthd:'} REBOOT", findings, limit)


def lemon_reason(prefix: str, summary: str, limit: int = REASON_MAX) -> str:
    """``<prefix> LEMON <summary>``: ``healthd fleet lemons --drain`` took the node out (docs/fleet.md)."""
    clean_prefix = sanitize(prefix) or "healthd:"
    body = sanitize(f"LEMON {summary}")
    room = limit - len(clean_prefix) - 1
    if len(body) > room:
        body = body[: max(room - 3, 0)].rstrip() + "..."
    return f"{clean_prefix} {body}"


# Words after the prefix that say what healthd did, before the code they are about.
_VERBS = frozenset({"REPAIR", "REBOOT"})


def reason_code(reason: str, prefix: str) -> str:
    """The finding code a healthd reason names (``<prefix> [REPAIR|REBOOT] <CODE> ...``); "" for none.

    A lemon drain names no code: the fleet's judgement, not one finding.
    """
    clean_prefix = sanitize(prefix) or "healthd:"
    if not owned(reason, clean_prefix) or is_lemon(reason, clean_prefix):
        return ""
    words = reason[len(clean_prefix) :].split()
    if words and words[0] in _VERBS:
        words = words[1:]
    return words[0] if words else ""


def _tagged(reason: str, prefix: str, tag: str) -> bool:
    """Whether ``reason`` is healthd's with ``tag`` as its first word after the prefix."""
    head = f"{sanitize(prefix) or 'healthd:'} {tag}"
    return reason == head or reason.startswith(f"{head} ")


def is_lemon(reason: str, prefix: str) -> bool:
    """Whether ``reason`` is a lemon drain: healthd's, but the fleet's decision, which no clean pass lifts."""
    return _tagged(reason, prefix, "LEMON")


def is_repair(reason: str, prefix: str) -> bool:
    """Whether ``reason`` is a repair drain (``repair_reason``): out for hardware work, never resumed by a pass."""
    return _tagged(reason, prefix, "REPAIR")
