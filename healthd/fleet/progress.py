"""A progress bar for long reads of accounting: on a terminal only, quiet otherwise (a pipe, a log, cron)."""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, TextIO

WIDTH = 30


def bar(
    items: Iterable[str], total: float, label: str, stream: TextIO, weight: Callable[[str], float] = lambda _: 1
) -> Iterable[str]:
    """``items`` as they are, drawing ``label [#####     ] 45%`` on ``stream`` when it is a terminal.

    ``weight`` is what one item counts towards ``total`` (1 for a line, ``len`` for bytes of
    a file). The bar is redrawn at each whole percent and cleared at the end. Without a bar
    the very object comes back: the analysis hands a ``columnar.JobsFile`` to DuckDB, and a
    generator around it would send every line through the Python reader instead.
    """
    if total <= 0 or not stream.isatty():
        return items
    return _drawn(items, total, label, stream, weight)


def _drawn(
    items: Iterable[str], total: float, label: str, stream: TextIO, weight: Callable[[str], float]
) -> Iterator[str]:
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
