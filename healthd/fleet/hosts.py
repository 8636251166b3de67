"""Node lists in Slurm's hostlist notation (``gpu[001-004,010]``), expanded by python-hostlist.

python-hostlist (in the ``fleet`` extra) is imported on first use only. Expansions
are memoised: a fleet's job runs repeat the same node lists many times. The
``-x``/``--exclude`` of a job is read from its ``SubmitLine`` (Slurm keeps the
command line, not the options of ``#SBATCH`` lines), which is all that accounting
has of it (docs/fleet.md, "Excluded nodes").
"""

from __future__ import annotations

import shlex
from functools import lru_cache

# One job run's list is at most a few thousand names; the memo holds the distinct lists.
_MEMO = 1 << 16


class HostlistError(ValueError):
    """A node list that is not valid hostlist notation."""


@lru_cache(maxsize=_MEMO)
def expand(text: str) -> tuple[str, ...]:
    """``gpu[01-03]`` -> ("gpu01", "gpu02", "gpu03"); a plain name is itself; "None assigned" is empty."""
    if not text or text.startswith("None"):
        return ()
    if "[" not in text and "," not in text:
        return (text,)
    import hostlist

    try:
        return tuple(hostlist.expand_hostlist(text))
    except hostlist.BadHostlist as exc:
        raise HostlistError(f"node list {text[:80]!r}: {exc}") from None


def excluded(submit_line: str) -> tuple[str, ...]:
    """The nodes a ``-x LIST``/``-xLIST``/``--exclude[=]LIST`` on a submit command line excludes.

    Only the command line is known: an exclusion made in a batch script's
    ``#SBATCH`` lines or by a workflow tool's API does not appear here.
    """
    if "-x" not in submit_line and "--exclude" not in submit_line:
        return ()
    try:
        words = shlex.split(submit_line)
    except ValueError:  # unbalanced quotes in someone's command line
        words = submit_line.split()
    nodes: list[str] = []
    for index, word in enumerate(words):
        value = None
        if word in ("-x", "--exclude") and index + 1 < len(words):
            value = words[index + 1]
        elif word.startswith("--exclude="):
            value = word[len("--exclude=") :]
        elif word.startswith("-x") and len(word) > 2 and not word.startswith("-x-"):
            value = word[2:]
        if value:
            try:
                nodes.extend(expand(value))
            except HostlistError:
                continue  # a file name (`-x FILE` is also allowed by sbatch) or junk: not names we know
    return tuple(dict.fromkeys(nodes))
