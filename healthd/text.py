"""Makes untrusted text (kernel log, sysfs, NVML, mount sources) safe for one line of output.

Text that reaches a log line, a journal field, a table row or a Slurm reason must
not be able to start a new line, forge a ``<N>`` priority prefix at the start of
one, move the terminal cursor (ANSI escapes) or carry a NUL. ``one_line`` keeps
printable characters only: every other character (Unicode categories Cc, Cf, Zl,
Zp, Cs, Co, Cn: controls, format characters, separators, surrogates, unassigned)
becomes a space, runs of whitespace collapse to one space, and the result is cut
to ``limit`` characters with a trailing ellipsis.
"""

from __future__ import annotations

import unicodedata

DEFAULT_LIMIT = 300
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
    the one-line summaries (daemon, hook) are ``healthd.render.pass_summary``.
    """
    return f"{one_line(node, 200)}: {one_line(status, 16)} ({when})"
