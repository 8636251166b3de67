"""A progress bar for long reads of accounting: on a terminal only, quiet otherwise (a pipe, a log, cron)."""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, TextIO

WIDTH = 30


def bar(
    items: Iterable[str], total: float, label: str, stream: TextIO, weight: Callable[[str], float] = lambda _: 1
) -> Iterator[str]:
    """``items`` as they are, drawing ``label [#####     ] 45%`` on ``stream`` when it is a terminal.

    ``weight`` is what one item counts towards ``total`` (1 for a line, ``len`` for bytes of
    a file). The bar is redrawn at each whole percent and cleared at the end.
    """
    if total <= 0 or not stream.isatty():
        yield from items
        return
    done = 0.0
    shown = -1
    for item in items:
        done += weight(item)
        percent = min(100, int(100 * done / total))
        if percent != shown:
            shown = percent
            filled = WIDTH * percent // 100
            stream.write(f"\r{label} [{'#' * filled}{' ' * (WIDTH - filled)}] {percent:3d}%")
            stream.flush()
        yield item
    stream.write("\r" + " " * (len(label) + WIDTH + 8) + "\r")
    stream.flush()
