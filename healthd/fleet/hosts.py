"""Accounting's node lists: a job run's nodes, and the nodes its submit line excluded.

The notation is expanded by ``healthd.hostlist``. The ``-x``/``--exclude`` of a job
is read from its ``SubmitLine`` (Slurm keeps the command line, not the options of
``#SBATCH`` lines), which is all that accounting has of it (docs/fleet.md,
"Excluded nodes").
"""

from __future__ import annotations

import shlex

from healthd import hostlist
from healthd.hostlist import HostlistError


def expand(text: str) -> tuple[str, ...]:
    """``gpu[01-03]`` -> ("gpu01", "gpu02", "gpu03"); a plain name is itself; "None assigned" is empty."""
    if not text or text.startswith("None"):
        return ()
    return hostlist.expand(text)


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
