"""Accounting's node lists: a job run's nodes, and the nodes its submit line excluded or pinned it to.

The notation is expanded by ``healthd.slurm.hostlist``. The ``-x``/``--exclude`` and the
``-w``/``--nodelist`` of a job are read from its ``SubmitLine`` (Slurm keeps the
command line, not the options of ``#SBATCH`` lines), which is all that accounting
has of them (docs/fleet.md, "Excluded nodes" and "Evidence a user cannot make").
"""

from __future__ import annotations

import re
import shlex
from array import array
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
# MAYBE_OPTION alone, without the look-behind, finds a superset (``columnar.submit_scan`` in RE2, which has none).
MAYBE_OPTION = r"-[hHOQsuvVlXZE]*[xwF]|--(?:exclud|node)"
_MAYBE = re.compile(rf"(?<!\S)(?:{MAYBE_OPTION})")


def expand(text: str) -> tuple[str, ...]:
    """``gpu[01-03]`` -> ("gpu01", "gpu02", "gpu03"); a plain name is itself; "None assigned" is empty."""
    if not text or text.startswith("None"):
        return ()
    return hostlist.expand(text)


REFUSED_KEPT = 100_000  # lists that do not parse, remembered (``Lists._expanded``)


class Lists:
    """The nodes of the multi-node runs' lists, and each partition's: every distinct list expanded once.

    A busy scheduler's lists are fragmented (``gpu[001-004,017,230-233]``): a year of a large
    fleet holds millions of distinct ones, and expanding each is most of the cost of reading
    them. A list is expanded when first asked for, by a run in a partition (``add``) or by a
    failed run's attribution (``names``), and its nodes are kept as numbers, four bytes a
    node in one flat array: a list seen again in another partition, or on a failed run,
    gives its names back from there, never from a second expansion (the memo of
    ``healthd.slurm.hostlist`` holds 65,536 lists, a few days of a large fleet's). A list
    that does not parse adds no node (its run is counted as the reader decides), and is
    refused again without being read again (the first ``REFUSED_KEPT`` of them; later ones
    are read again, to the same error).
    """

    def __init__(self) -> None:
        self.nodes: set[str] = set()
        self.partitions: dict[str, set[str]] = {}
        self._numbers: dict[str, int] = {}  # list -> its number
        self._refused: dict[str, str] = {}  # list -> why it does not parse
        self._ends = array("q", [0])  # list n's nodes are _members[_ends[n]:_ends[n + 1]]
        self._members = array("i")  # node numbers
        self._first = array("i")  # list n's first partition's number, -1 before any
        self._node_numbers: dict[str, int] = {}
        self._node_names: list[str] = []
        self._partition_numbers: dict[str, int] = {}
        self._elsewhere: set[tuple[str, str]] = set()  # (partition, list) of the other partitions (rare)

    def names(self, text: str) -> tuple[str, ...]:
        """``expand(text)``, from the list's one expansion; HostlistError for a list that does not parse."""
        number = self._numbers.get(text)
        return self._names(self._expanded(text) if number is None else number)

    def add(self, partition: str, text: str) -> None:
        """Count ``text``'s nodes as seen, in ``partition``."""
        number = self._numbers.get(text)
        if number is None:
            try:
                number = self._expanded(text)
            except HostlistError:
                return
        where = self._partition_numbers.get(partition)
        if where is None:
            where = self._partition_numbers[partition] = len(self._partition_numbers)
        first = self._first[number]
        if first == where or (first >= 0 and (partition, text) in self._elsewhere):
            return
        names = self._names(number)
        if first < 0:
            self._first[number] = where
            self.nodes.update(names)
        else:
            self._elsewhere.add((partition, text))
        self.partitions.setdefault(partition, set()).update(names)

    def _expanded(self, text: str) -> int:
        """The number of a list not seen before, expanded now; HostlistError (kept) for one that does not parse."""
        refused = self._refused.get(text)
        if refused is not None:
            raise HostlistError(refused)
        try:
            names = expand(text)
        except HostlistError as exc:
            # Remembered up to a bound: a list that does not parse is bad data, and millions of
            # distinct ones must not grow the report; past it, one is parsed again (the same error).
            if len(self._refused) < REFUSED_KEPT:
                self._refused[text] = str(exc)
            raise
        numbers = self._node_numbers
        for name in names:
            node = numbers.get(name)
            if node is None:
                node = numbers[name] = len(self._node_names)
                self._node_names.append(name)
            self._members.append(node)
        self._ends.append(len(self._members))
        self._first.append(-1)
        number = self._numbers[text] = len(self._first) - 1
        return number

    def _names(self, number: int) -> tuple[str, ...]:
        names = self._node_names
        return tuple(names[node] for node in self._members[self._ends[number] : self._ends[number + 1]])


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


class Request(NamedTuple):
    """The node options one job asked for: the nodes its ``-x`` excludes, whether it named its nodes.

    ``excluding``: whether an ``-x`` was given at all (its value may be a file or junk, which
    names no node we know): an ``-x`` on the command line replaces the script's.
    """

    excluded: tuple[str, ...] = ()
    pinned: bool = False
    excluding: bool = False

    def over(self, script: Request) -> Request:
        """This command line's request over the batch script's ``#SBATCH`` one.

        sbatch(1): options on the command line override those of ``#SBATCH`` lines; a node list
        in either is a pin (a later ``-w`` replaces an earlier one, and still names nodes).
        """
        excluded = self.excluded if self.excluding else script.excluded
        return Request(excluded, self.pinned or script.pinned, self.excluding or script.excluding)


def _request(words: list[str]) -> Request:
    nodes: list[str] = []
    values = option_values(words, EXCLUDE)
    for value in values:
        try:
            nodes.extend(expand(value))
        except HostlistError:
            continue  # a file name (`-x FILE` is also allowed by sbatch) or junk: not names we know
    pins = bool(option_values(words, NODELIST) or option_values(words, NODEFILE))
    return Request(tuple(dict.fromkeys(nodes)), pins, bool(values))


def may_ask(submit_line: str) -> bool:
    """Whether a submit command line holds a word that may start a node option (else it asks for none)."""
    return _MAYBE.search(submit_line) is not None


def request(submit_line: str) -> Request:
    """What a submit command line asked for (``choices``)."""
    if not may_ask(submit_line):
        return Request()
    return _request(_words(submit_line))


# sbatch(1): "The batch script may contain options preceded with "#SBATCH" before any
# executable commands in the script. sbatch will stop processing further #SBATCH directives
# once the first non-comment non-whitespace line has been reached in the script." The
# details are sbatch's own (src/sbatch/opt.c, _opt_batch_script and get_argument, 22.05 to
# 26.05): a line starting with #SBATCH (or the old #SLURM) at its first byte, anything after
# it; arguments split on white space, grouped by quotes, a backslash escaping the next
# character, an unescaped # ending the line.
_MAGIC = ("#SBATCH", "#SLURM")
_C_SPACE = frozenset(" \t\n\v\f\r")  # isspace(3) in the C locale: not str.isspace's Unicode spaces


def _arguments(text: str) -> list[str]:
    """A directive line's arguments, as sbatch's get_argument reads them."""
    words: list[str] = []
    word: Optional[list[str]] = None
    quote = ""
    escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
            word = word if word is not None else []
            continue
        elif quote:
            if char == quote:
                quote = ""
                continue
        elif char in "\"'":
            quote, word = char, word if word is not None else []
            continue
        elif char == "#":
            break
        elif char in _C_SPACE:
            if word is not None:
                words.append("".join(word))
                word = None
            continue
        word = word if word is not None else []
        word.append(char)
    if word is not None:
        words.append("".join(word))
    return words


def directives(script: str) -> list[str]:
    """The option words of a batch script's ``#SBATCH`` lines, as sbatch reads them.

    From the top of the script to its first line that is neither blank nor a comment. Split
    on "\\n" alone, as sbatch's next_line does: a user's script may hold other line breaks.
    """
    words: list[str] = []
    for line in script.split("\n"):
        magic = next((m for m in _MAGIC if line.startswith(m)), None)
        if magic is None:
            text = line.lstrip()
            if text and not text.startswith("#"):
                break  # the first command: sbatch reads no further
            continue
        words.extend(_arguments(line[len(magic) :]))
    return words


def script_request(script: str) -> Request:
    """What a batch script's ``#SBATCH`` lines asked for (``directives``)."""
    return _request(directives(script))


def choices(submit_line: str) -> tuple[tuple[str, ...], bool]:
    """What a submit command line chose: the nodes its ``-x`` excludes, and whether it pins its nodes.

    Excluded: ``-x LIST``/``-xLIST``/``--exclude[=]LIST``. Only the command line is read
    here; the batch script's ``#SBATCH`` lines are ``script_request``'s.

    Pinned: ``-w``/``--nodelist`` (any spelling), or ``-F``/``--nodefile``. A job given a
    node list runs on those nodes (sbatch(1): the allocation contains at least them), so
    any value counts, a file name or junk included: a node the user chose, by whatever
    spelling, is the user's choice, not the scheduler's.
    """
    found = request(submit_line)
    return found.excluded, found.pinned


def excluded(submit_line: str) -> tuple[str, ...]:
    """The nodes the submit command line excludes (``choices``)."""
    return choices(submit_line)[0]


def pinned(submit_line: str) -> bool:
    """Whether the submit command line chose its nodes (``choices``)."""
    return choices(submit_line)[1]
