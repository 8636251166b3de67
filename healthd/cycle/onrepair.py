"""The ``[remediation] on_repair`` hook: a program told when the node is sent to repair (a ticketing hook).

It receives one JSON document on stdin: the node, the repair (code, subject, unit,
count) and the node's history over the escalation window. It runs by absolute
path, as an argument list with no shell, with a bare environment, in its own
process group, and is killed with that group at its deadline. A program that a
user other than root could have written is refused (healthd.store.trust), like a config.
Its outcome goes into the node's history; it never fails the pass.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, NamedTuple

from healthd.checks.bounded import TimedOut, run_bounded
from healthd.store.trust import untrusted_reason
from healthd.text import one_line


class HookResult(NamedTuple):
    """``outcome`` is ok, failed, timeout or refused; ``detail`` says why, for the history."""

    outcome: str
    detail: str


def run_on_repair(program: Path, document: Mapping[str, Any], timeout: float) -> HookResult:
    """Run ``program`` with ``document`` as JSON on stdin, within ``timeout`` seconds."""
    why = untrusted_reason(program)
    if why is not None:
        return HookResult("refused", f"{program} not run: {why}")
    try:
        finished = run_bounded([str(program)], timeout, stdin=json.dumps(document, sort_keys=True))
    except TimedOut:
        # The whole group was killed: a ticketing script's curl must not outlive it either.
        return HookResult("timeout", f"{program} killed after {timeout:.3g}s")
    except OSError as exc:
        return HookResult("failed", f"cannot run {program}: {exc.strerror or exc}")
    if finished.returncode != 0:
        return HookResult("failed", f"{program} exited {finished.returncode}: {one_line(finished.err, 300)}")
    return HookResult("ok", f"{program} exited 0")
