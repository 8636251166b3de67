"""Accounting's node lists: a job run's nodes, and the nodes its submit line excluded or pinned it to.

The notation is expanded by ``healthd.slurm.hostlist``. The ``-x``/``--exclude`` and the
``-w``/``--nodelist`` of a job are read from its ``SubmitLine`` (Slurm keeps the
command line, not the options of ``#SBATCH`` lines), which is all that accounting
has of them (docs/fleet.md, "Excluded nodes" and "Evidence a user cannot make").
"""

from __future__ import annotations

import re
import shlex
from typing import NamedTuple, Optional

from healthd.slurm import hostlist
from healthd.slurm.hostlist import HostlistError


class NodeOption(NamedTuple):
    """The spellings of one node-list option of sbatch, srun and salloc (sbatch(1), srun(1))."""

    short: str  # "x"
    long: str  # "exclude"
    # The shortest abbreviation of ``long`` that names it alone: Slurm reads long options with
    # getopt_long(3), which takes any unambiguous prefix (--exclu is also --exclusive's).
    least: int


EXCLUDE = NodeOption("x", "exclude", len("exclud"))
# -w/--nodelist names the nodes; -F/--nodefile names a file of them. --node alone is also
# --nodes', so the shortest are --nodel and --nodef.
NODELIST = NodeOption("w", "nodelist", len("nodel"))
NODEFILE = NodeOption("F", "nodefile", len("nodef"))
# Short options that take no argument, which getopt(3) lets a user bundle before another
# (``-vw node2`` is -v -w node2): sbatch(1), srun(1) and salloc(1) of Slurm 22.05.
_NO_ARGUMENT = frozenset("hHOQsuvVlXZE")
# A word that may start one of the options: most submit lines have none and are read no
# further (four million of them at the study's scale).
_MAYBE = re.compile(r"(?<!\S)(?:-[hHOQsuvVlXZE]*[xwF]|--(?:exclud|node))")


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


def _long_value(word: str, following: Optional[str], option: NodeOption) -> Optional[str]:
    name, equals, value = word[2:].partition("=")
    if len(name) < option.least or not option.long.startswith(name):
        return None
    return value if equals else following


def _short_value(word: str, following: Optional[str], option: NodeOption) -> Optional[str]:
    for position, letter in enumerate(word[1:], start=1):
        if letter == option.short:
            return word[position + 1 :] or following
        if letter not in _NO_ARGUMENT:
            return None  # an option that takes the rest of the word as its argument
    return None


def option_values(words: list[str], option: NodeOption) -> list[str]:
    """The values given to ``option`` among a command line's words, in every spelling getopt reads.

    ``-x L``, ``-xL``, ``-vx L`` (after options without an argument), ``--exclude L``,
    ``--exclude=L`` and their unambiguous abbreviations (``--exclud=L``).
    """
    values = []
    for index, word in enumerate(words):
        if not word.startswith("-") or word in ("-", "--"):
            continue
        following = words[index + 1] if index + 1 < len(words) else None
        read = _long_value if word.startswith("--") else _short_value
        value = read(word, following, option)
        if value:
            values.append(value)
    return values


def choices(submit_line: str) -> tuple[tuple[str, ...], bool]:
    """What a submit command line chose: the nodes its ``-x`` excludes, and whether it pins its nodes.

    Excluded: ``-x LIST``/``-xLIST``/``--exclude[=]LIST``. Only the command line is known:
    an exclusion made in a batch script's ``#SBATCH`` lines or by a workflow tool's API
    does not appear here.

    Pinned: ``-w``/``--nodelist`` (any spelling), or ``-F``/``--nodefile``. A job given a
    node list runs on those nodes (sbatch(1): the allocation contains at least them), so
    any value counts, a file name or junk included: a node the user chose, by whatever
    spelling, is the user's choice, not the scheduler's.
    """
    if not _MAYBE.search(submit_line):
        return (), False
    words = _words(submit_line)
    nodes: list[str] = []
    for value in option_values(words, EXCLUDE):
        try:
            nodes.extend(expand(value))
        except HostlistError:
            continue  # a file name (`-x FILE` is also allowed by sbatch) or junk: not names we know
    pins = bool(option_values(words, NODELIST) or option_values(words, NODEFILE))
    return tuple(dict.fromkeys(nodes)), pins


def excluded(submit_line: str) -> tuple[str, ...]:
    """The nodes the submit command line excludes (``choices``)."""
    return choices(submit_line)[0]


def pinned(submit_line: str) -> bool:
    """Whether the submit command line chose its nodes (``choices``)."""
    return choices(submit_line)[1]
