"""The figures a benchmark prints (nccl-tests, perftest): a word of its table is a bandwidth, or a ``ValueError``."""

from __future__ import annotations

import math

from healthd.text import one_line


def bandwidth(text: str, where: str) -> float:
    """``text`` as a bandwidth: a finite number, 0 or more; ``ValueError`` naming ``where`` otherwise.

    A benchmark's table is its output, not a promise: a truncated run, a mangled pipe or a
    negative figure (perftest has printed some) is no measurement, so never one to judge.
    """
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}: {one_line(text, 30)!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{where}: {one_line(text, 30)!r} is not a bandwidth")
    return value
