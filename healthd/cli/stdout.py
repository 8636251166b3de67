"""Standard output that a reader may close early (``healthd scan-log big.log | head``), for every entry point."""

from __future__ import annotations

import contextlib
import io
import os
import sys

TYPE_CHECKING = False  # not typing's: importing typing at run time would slow `healthd status` (bench/README.md)
if TYPE_CHECKING:
    from typing import TextIO


class _StdoutGuard(io.TextIOBase):
    """Stands in for ``sys.stdout`` while a command runs, so a reader that goes away ends the output quietly.

    ``healthd scan-log big.log | head`` closes the pipe early; the next write fails
    with EPIPE (Python ignores SIGPIPE). The command still finishes (a pass has
    already acted and saved its state) and exits with its own code: the code says
    what healthd found, not whether someone read all of it. Output after that
    is dropped.
    """

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream
        self.gone = False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.stream.encoding

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self.stream.write(text)
            except BrokenPipeError:
                self._reader_gone()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._reader_gone()

    def _reader_gone(self) -> None:
        self.gone = True
        # What the stream could not write stays in its buffer, and the interpreter
        # flushes it at exit, which would fail again ("Exception ignored ... BrokenPipeError",
        # exit 120): point the descriptor at /dev/null (Python docs, "Note on SIGPIPE").

        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self.stream.fileno())
            finally:
                os.close(devnull)


class _Guarded:
    """``quiet_broken_pipe``'s context manager: a class, as contextlib would cost ``healthd status`` an import."""

    def __enter__(self) -> None:
        self.stream = sys.stdout
        # None: started with stdout closed, and print() already writes nothing.
        self.guard = None if self.stream is None else _StdoutGuard(self.stream)
        if self.guard is not None:
            sys.stdout = self.guard

    def __exit__(self, *exc_info: object) -> None:
        if self.guard is not None:
            self.guard.flush()
            sys.stdout = self.stream


def quiet_broken_pipe() -> _Guarded:
    """Run the body with ``sys.stdout`` guarded by ``_StdoutGuard``; flush before leaving."""
    return _Guarded()
