"""The one way a test waits: poll a condition until it holds or a deadline passes.

A test waits for an outcome (a node state, a log line, a file), never for a fixed
time: on a loaded 2-core CI machine, fixed sleeps are either too short or too slow.
"""

from __future__ import annotations

import time
from typing import Any, Callable


def wait_for(
    predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition", interval: float = 0.05
) -> None:
    """Return once ``predicate()`` is truthy; raise ``TimeoutError`` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    if predicate():
        return
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
