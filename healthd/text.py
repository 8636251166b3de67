"""Makes untrusted text (kernel log, sysfs, NVML, mount sources) safe for one line of output.

Text that reaches a log line, a journal field, a table row or a Slurm reason must
not be able to start a new line, forge a ``<N>`` priority prefix at the start of
one, move the terminal cursor (ANSI escapes) or carry a NUL. ``one_line`` keeps
printable characters only: every other character (Unicode categories Cc, Cf, Zl,
Zp, Cs, Co, Cn: controls, format characters, separators, surrogates, unassigned)
becomes a space, runs of whitespace collapse to one space, and the result is cut
to ``limit`` characters with a trailing ellipsis. ``did_you_mean`` names the known names
closest to a misspelt one, for the error that refuses it.

``records`` and ``read_kernel_text`` are the one way to read text the kernel exports (/proc,
/sys, mountinfo, the kernel log). The kernel ends each record with ``\n`` and escapes almost
nothing inside one: ``Name:`` in /proc/PID/status escapes only ``\n`` and ``\\``
(fs/proc/array.c), mountinfo only space, tab, newline and backslash (fs/proc_namespace.c).
``str.splitlines()`` also splits on ``\r``, ``\v``, ``\f``, ``\x1c``-``\x1e``, ``\x85`` and
``\u2028``, and a text-mode read turns ``\r`` into ``\n``: either lets a user who puts one of
those bytes in a task name or a mount point cut a record in two and forge the second half.
"""

from __future__ import annotations

import unicodedata

TYPE_CHECKING = False  # not typing's: `healthd status` imports this module (bench/README.md)
if TYPE_CHECKING:
    from os import PathLike
    from typing import Iterable

DEFAULT_LIMIT = 300
# did_you_mean: the least closeness that makes a guess, and how far behind the closest another may be.
_CUTOFF = 0.6
_SPREAD = 0.1
_ELLIPSIS = "..."


def _printable(char: str) -> bool:
    if char.isprintable():
        return True
    # str.isprintable() also rejects ordinary spaces other than " " (tab, NBSP): keep them as spaces.
    return unicodedata.category(char) == "Zs"


def one_line(text: object, limit: int = DEFAULT_LIMIT) -> str:
    """``text`` (any object, through ``str``) as one printable line of at most ``limit`` characters."""
    raw = str(text)
    # Most text is printable already: one C-level test instead of one call per character.
    cleaned = raw if raw.isprintable() else "".join(char if _printable(char) else " " for char in raw)
    collapsed = " ".join(cleaned.split())
    if len(collapsed) <= limit:
        return collapsed
    if limit <= len(_ELLIPSIS):
        return collapsed[:limit]
    return collapsed[: limit - len(_ELLIPSIS)].rstrip() + _ELLIPSIS


def pass_headline(node: object, status: object, when: str) -> str:
    """The first words said of a pass wherever a person reads it whole: ``NODE: STATUS (WHEN)``.

    The table of ``check --once`` ends with it and ``healthd status`` starts with it;
    the one-line summaries (daemon, hook) are ``healthd.cycle.render.pass_summary``.
    """
    return f"{one_line(node, 200)}: {one_line(status, 16)} ({when})"


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``"; did you mean NAME?"`` naming the ``known`` names closest to a misspelt ``word``, or "".

    Closeness is difflib's ratio, at ``get_close_matches``' default cutoff of 0.6, and only
    the names within 0.1 of the closest are named (three at most): ``expect_gpuz`` is told
    ``expect_gpus``, not every ``expect_*`` too, and a word like none of them gets no guess.
    """
    import difflib  # only an error message needs it: `healthd status` never pays for it

    ratios = []
    for name in sorted(set(known)):
        matcher = difflib.SequenceMatcher(None, word, name)
        if matcher.real_quick_ratio() >= _CUTOFF and matcher.quick_ratio() >= _CUTOFF:
            ratios.append((-matcher.ratio(), name))
    ratios.sort()
    close = [name for ratio, name in ratios[:3] if -ratio >= max(_CUTOFF, -ratios[0][0] - _SPREAD)]
    return f"; did you mean {' or '.join(close)}?" if close else ""


def records(text: str) -> list[str]:
    """The records of kernel-exported ``text``, split on ``\n`` alone, without the empty piece after a last ``\n``."""
    parts = text.split("\n")
    if parts[-1] == "":
        parts.pop()
    return parts


def read_kernel_text(path: str | PathLike[str], errors: str = "replace") -> str:
    """A file the kernel writes, decoded as UTF-8 with no newline translation (``\r`` stays ``\r``).

    Bytes that are not UTF-8 (a user's task name or mount point may hold any) become
    U+FFFD with the default ``errors``: data to show, never a reason to refuse the file.
    """
    with open(path, "rb") as handle:
        return handle.read().decode("utf-8", errors)
