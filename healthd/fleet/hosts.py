"""Accounting's node lists: a job run's nodes, and the nodes its submit line excluded or pinned it to.

The notation is expanded by ``healthd.hostlist``. The ``-x``/``--exclude`` and the
``-w``/``--nodelist`` of a job are read from its ``SubmitLine`` (Slurm keeps the
command line, not the options of ``#SBATCH`` lines), which is all that accounting
has of them (docs/fleet.md, "Excluded nodes" and "Pinned runs").
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from healthd import hostlist
from healthd.hostlist import HostlistError


@dataclass(frozen=True)
class NodeOption:
    """The spellings of one node-list option of sbatch, srun and salloc (sbatch(1))."""

    short: str  # "-x"
    long: str  # "--exclude"


EXCLUDE = NodeOption("-x", "--exclude")
# -w/--nodelist names the nodes; -F/--nodefile names a file of them (sbatch(1), srun(1)).
NODELIST = NodeOption("-w", "--nodelist")
NODEFILE = NodeOption("-F", "--nodefile")


def expand(text: str) -> tuple[str, ...]:
    """``gpu[01-03]`` -> ("gpu01", "gpu02", "gpu03"); a plain name is itself; "None assigned" is empty."""
    if not text or text.startswith("None"):
        return ()
    return hostlist.expand(text)


def _words(submit_line: str) -> list[str]:
    try:
        return shlex.split(submit_line)
    except ValueError:  # unbalanced quotes in someone's command line
        return submit_line.split()


def option_values(submit_line: str, option: NodeOption) -> list[str]:
    """The values given to ``option`` on a command line: ``-x L``, ``-xL``, ``--exclude L``, ``--exclude=L``."""
    if option.short not in submit_line and option.long not in submit_line:
        return []
    words = _words(submit_line)
    values = []
    for index, word in enumerate(words):
        value = None
        if word in (option.short, option.long) and index + 1 < len(words):
            value = words[index + 1]
        elif word.startswith(option.long + "="):
            value = word[len(option.long) + 1 :]
        elif word.startswith(option.short) and len(word) > 2 and word[2] != "-":
            value = word[2:]
        if value:
            values.append(value)
    return values


def excluded(submit_line: str) -> tuple[str, ...]:
    """The nodes a ``-x LIST``/``-xLIST``/``--exclude[=]LIST`` on a submit command line excludes.

    Only the command line is known: an exclusion made in a batch script's
    ``#SBATCH`` lines or by a workflow tool's API does not appear here.
    """
    nodes: list[str] = []
    for value in option_values(submit_line, EXCLUDE):
        try:
            nodes.extend(expand(value))
        except HostlistError:
            continue  # a file name (`-x FILE` is also allowed by sbatch) or junk: not names we know
    return tuple(dict.fromkeys(nodes))


def pinned(submit_line: str) -> bool:
    """Whether the command line chose its nodes: ``-w``/``--nodelist`` (any spelling), or ``-F``/``--nodefile``.

    A job given a node list runs on those nodes (sbatch(1): the allocation contains at
    least them), so any value counts, a file name or junk included: a node the user
    chose, by whatever spelling, is the user's choice, not the scheduler's.
    """
    return bool(option_values(submit_line, NODELIST) or option_values(submit_line, NODEFILE))
