"""Standard output that a reader may close early (``healthd scan-log big.log | head``), for every entry point."""

from __future__ import annotations

import contextlib
import io
import os
import sys

TYPE_CHECKING = False  # not typing's: importing typing at run time would slow `healthd status` (README)
if TYPE_CHECKING:
    from typing import Iterator, TextIO


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


@contextlib.contextmanager
def quiet_broken_pipe() -> Iterator[None]:
    """Run the body with ``sys.stdout`` guarded by ``_StdoutGuard``; flush before leaving."""
    stream = sys.stdout
    if stream is None:  # started with stdout closed: print() already writes nothing
        yield
        return
    guard = _StdoutGuard(stream)
    sys.stdout = guard
    try:
        yield
    finally:
        guard.flush()
        sys.stdout = stream
