"""Slurm host lists (``node[1-3,7],gpu[01-02]-ib[0-1]``) expanded into node names.

One home for the notation, used by the breaker (the groups sinfo prints) and by
``healthd fleet`` (accounting's node lists). The expansion is python-hostlist's, a
library kept for exactly this notation, imported on first use; results are
memoised, since a fleet's job runs repeat the same lists many times. healthd
expands only what it needs (the nodes out with its own reason), never a whole
table, and a list of more than 100,000 names (python-hostlist's limit, far above
any partition) is refused as malformed.
"""

from __future__ import annotations

from functools import lru_cache

_MEMO = 1 << 16


class HostlistError(ValueError):
    """A host list that is not Slurm's notation."""


@lru_cache(maxsize=_MEMO)
def expand(text: str) -> tuple[str, ...]:
    """Every node name in ``text``, in order: ``n[1-2],m3`` -> ("n1", "n2", "m3"); "" -> ()."""
    text = text.strip()
    if "[" not in text and "]" not in text:
        return tuple(name for name in text.split(",") if name)
    import hostlist

    try:
        return tuple(hostlist.expand_hostlist(text))
    except hostlist.BadHostlist as exc:
        raise HostlistError(f"host list {text[:80]!r}: {exc}") from None
