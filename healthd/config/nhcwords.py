"""Reads an ``nhc.conf`` the way LBNL NHC does, up to the words of each check, for ``healthd import-nhc``.

NHC 1.4.3 (``scripts/common.nhc``, ``nhc_load_conf``) reads the file with bash's ``read``,
which joins a line ending in a backslash to the next and takes a backslash before any
other character as that character; it splits each line at its first ``||`` into a
target and a check, skips lines whose target starts with ``#``, and later ``eval``s the
check (``nhc``, ``nhcmain_run_checks``): bash splits it into words, removes quotes and
expands variables. This module does the same for the one form a config needs (words,
quotes and ``$NAME``/``${NAME}``), and refuses the rest (command substitution, a second
command, parameter operators) with the reason, since only NHC's own shell could say what
they mean.

Variables take the value an earlier line of the file assigned (``VAR=value`` or ``export
VAR=value``, for the same target or for ``*``), else the default NHC itself gives them;
a variable NHC sets per node as it runs (``$HOSTNAME``), or one nothing defines here, is
refused by name. Every step is one pass over the text, so the time is linear in its size.
"""

from __future__ import annotations

import re
from typing import Iterator, Mapping, NamedTuple, Optional

from healthd.text import one_line

# A logical line longer than this is no NHC check: refusing it early keeps a huge input cheap.
MAX_LINE = 65536

# Defaults NHC 1.4.3 gives its variables when nothing overrides them (the sysconfig file
# /etc/sysconfig/nhc may, and a site that sets one there must set it in this file too).
NHC_DEFAULTS: Mapping[str, str] = {
    "CONFDIR": "/etc/nhc",  # nhc, nhcmain_finalize_env
    "INCDIR": "/etc/nhc/scripts",  # nhc, nhcmain_finalize_env: $CONFDIR/scripts
    "NAME": "nhc",  # nhc: the driver script's name
    "PASSWD_DATA_SRC": "/etc/passwd",  # scripts/common.nhc
    "LOGIN_DEFS_SRC": "/etc/login.defs",  # scripts/common.nhc
    "MOUNT_CMD": "mount",  # scripts/lbnl_fs.nhc
    "DF_CMD": "df",  # scripts/lbnl_fs.nhc
    "MCELOG": "mcelog",  # scripts/lbnl_hw.nhc
    "NVIDIA_HEALTHMON": "nvidia-healthmon",  # scripts/lbnl_nv.nhc
    "NVIDIA_SMI_HEALTHMON": "nvidia-smi",  # scripts/csc_nvidia_smi.nhc
}

# Set by NHC on each node as it runs (nhc: nhcmain_init_env and the gather functions):
# their value is the node's, never one for a whole file.
NHC_PER_NODE = frozenset({"HOSTNAME", "HOSTNAME_S", "NHC_RM", "NHC_PID", "NHC_SID", "LIBEXECDIR", "HELPERDIR"})
_PER_NODE_PREFIXES = ("HW_", "FS_", "DF_", "DFI_", "PS_", "NV_", "NVSMI_", "DMI_")

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_VARIABLE = re.compile(rf"\$(?:\{{({_NAME})\}}|({_NAME}))")
# What remains after plain variables are expanded and still asks the shell for something.
_SHELL_EXPANSION = re.compile(r"\$[({0-9@*#?$!-]")
_ASSIGNMENT = re.compile(rf"({_NAME})=(.*)", re.S)
# bash's words: runs of plain characters, quoted strings, escapes, blanks and operators.
_TOKEN = re.compile(
    r"""(?P<blank>[ \t]+)|(?P<single>'[^']*')|(?P<double>"(?:[^"\\]|\\.)*")|(?P<escape>\\.)"""
    r"""|(?P<operator>[;&|<>()`])|(?P<plain>[^ \t'"\\;&|<>()`]+)|(?P<open>.)""",
    re.S,
)
_BLANK = re.compile(r"[ \t\n]")
_QUOTED_PART = re.compile(rf"\\([\"\\$`])|\$(?:\{{({_NAME})\}}|({_NAME}))")
_READ_ESCAPE = re.compile(r"\\(.)", re.S)


class Refused(Exception):
    """A line or word that only NHC's own shell could evaluate; the message says why."""


class Line(NamedTuple):
    """One logical line of nhc.conf: where it starts, its target and its check text (as ``read`` gave them)."""

    number: int
    target: str
    check: str
    shown: str
    too_long: bool = False


def shorten(text: str, limit: int = 160) -> str:
    """``text`` as one printable line of at most ``limit`` characters, looking only at its start.

    The file is the operator's, but it may come from anywhere: no control character of it
    reaches the terminal (``healthd.text.one_line``), and a huge line costs nothing here.
    """
    head = text[: limit * 2]
    flat = one_line(head, limit)
    return flat if len(text) == len(head) or flat.endswith("...") else flat + "..."


def _physical(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, text) of each line as ``read`` gives it: continuations joined, escapes taken."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.split("\n"), start=1):
        if not pending:
            start = number
        # An odd number of backslashes at the end escapes the newline: read joins the next line.
        trailing = len(raw) - len(raw.rstrip("\\"))
        if trailing % 2:
            pending.append(raw[:-1])
            continue
        pending.append(raw)
        yield start, "".join(pending)
        pending = []
    if pending:
        yield start, "".join(pending)


def logical_lines(text: str) -> Iterator[Line]:
    """Each line NHC would look at: not blank, not a comment (target starting with ``#``)."""
    for number, joined in _physical(text):
        if len(joined) > MAX_LINE:
            yield Line(number, "", "", shorten(joined), too_long=True)
            continue
        # read without -r takes the character after each backslash as itself.
        line = _READ_ESCAPE.sub(r"\1", joined) if "\\" in joined else joined
        target, _, check = line.partition("||")
        target, check = target.strip(" \t\r"), check.strip(" \t\r")
        if target.startswith("#") or not line.strip():
            continue
        yield Line(number, target, check, shorten(line.strip()))


class Variables:
    """The values ``$NAME`` takes on each target's lines: earlier assignments, then NHC's defaults."""

    def __init__(self) -> None:
        self._assigned: dict[str, dict[str, str]] = {}
        self._elsewhere: dict[str, str] = {}

    def assign(self, target: str, name: str, value: str) -> None:
        self._assigned.setdefault(target, {})[name] = value
        if target != "*":
            self._elsewhere.setdefault(name, target)

    def value(self, target: str, name: str) -> str:
        for scope in (target, "*"):
            found = self._assigned.get(scope, {}).get(name)
            if found is not None:
                return found
        if name in NHC_DEFAULTS:
            return NHC_DEFAULTS[name]
        if name in NHC_PER_NODE or name.startswith(_PER_NODE_PREFIXES):
            raise Refused(f"${name} is set by NHC on each node as it runs: no one value holds for the file")
        other = self._elsewhere.get(name)
        if other is not None:
            raise Refused(f"${name} is assigned only for target {other!r}, not for this line's nodes")
        raise Refused(f"${name} is not assigned earlier in this file and has no default in NHC 1.4.3")


def _expand(text: str, target: str, variables: Variables, quoted: bool) -> str:
    """``text`` with its variables expanded; in double quotes a backslash before a double quote,
    a backslash, ``$`` or a backquote stands for that character (bash(1), QUOTING)."""
    if "$" not in text and not (quoted and "\\" in text):
        return text
    pattern = _QUOTED_PART if quoted else _VARIABLE

    def one(found: re.Match[str]) -> str:
        if quoted and found.group(1):
            return found.group(1)
        name = found.group(found.re.groups - 1) or found.group(found.re.groups)
        return variables.value(target, name)

    if _SHELL_EXPANSION.search(pattern.sub("", text)):
        raise Refused(f"{shorten(text, 60)!r} asks NHC's shell for an expansion (such as $(...) or ${{X:-y}})")
    expanded = pattern.sub(one, text)
    if not quoted and _BLANK.search(expanded):
        # Unquoted, bash would split the value into several words, each its own argument.
        raise Refused(f"{shorten(text, 60)!r} expands to several words outside quotes; quote it as NHC would need")
    return expanded


def words(check: str, target: str, variables: Variables) -> list[str]:
    """The words bash makes of ``check``: quotes removed, variables expanded, a ``#`` word ending them."""
    result: list[str] = []
    current: Optional[list[str]] = None
    for found in _TOKEN.finditer(check):
        kind, text = found.lastgroup, found.group()
        if kind == "blank":
            if current is not None:
                result.append("".join(current))
            current = None
        elif kind == "plain" and current is None and text.startswith("#"):
            return result
        elif kind in ("operator", "open"):
            raise Refused(f"{text!r} outside quotes: NHC's shell would run more than one check or command here")
        else:
            current = [] if current is None else current
            current.append(_word_part(kind, text, target, variables))
    if current is not None:
        result.append("".join(current))
    return result


def _word_part(kind: Optional[str], text: str, target: str, variables: Variables) -> str:
    if kind == "single":
        return text[1:-1]
    if kind == "escape":
        return text[1]
    if kind == "double":
        return _expand(text[1:-1], target, variables, quoted=True)
    return _expand(text, target, variables, quoted=False)


def assignments(items: list[str]) -> Optional[list[tuple[str, str]]]:
    """``[(NAME, value)]`` when the words assign variables (``A=1 B=2``, ``export A=1``), else None."""
    rest = items[1:] if items and items[0] == "export" else items
    pairs = [_ASSIGNMENT.fullmatch(word) for word in rest]
    if not rest or not all(pairs):
        return None
    return [(found.group(1), found.group(2)) for found in pairs if found is not None]
