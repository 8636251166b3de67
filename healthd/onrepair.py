"""The ``[remediation] on_repair`` hook: a program told when the node is sent to repair (a ticketing hook).

It receives one JSON document on stdin: the node, the repair (code, subject, unit,
count) and the node's history over the escalation window. It runs by absolute
path, as an argument list with no shell, with a bare environment, in its own
process group, and is killed with that group at its deadline. A program that a
user other than root could have written is refused (healthd.trust), like a config.
Its outcome goes into the node's history; it never fails the pass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from healthd.text import one_line
from healthd.trust import untrusted_reason

_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


@dataclass(frozen=True)
class HookResult:
    """``outcome`` is ok, failed, timeout or refused; ``detail`` says why, for the history."""

    outcome: str
    detail: str


def run_on_repair(program: Path, document: Mapping[str, Any], timeout: float) -> HookResult:
    """Run ``program`` with ``document`` as JSON on stdin, within ``timeout`` seconds."""
    why = untrusted_reason(program)
    if why is not None:
        return HookResult("refused", f"{program} not run: {why}")
    try:
        proc = subprocess.Popen(
            [str(program)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=_ENV,
            cwd="/",
            start_new_session=True,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        return HookResult("failed", f"cannot run {program}: {exc.strerror or exc}")
    try:
        _, stderr = proc.communicate(json.dumps(document, sort_keys=True), timeout=timeout)
    except subprocess.TimeoutExpired:
        # The whole group: a ticketing script's curl must not outlive it either.
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return HookResult("timeout", f"{program} killed after {timeout:g}s")
    if proc.returncode != 0:
        return HookResult("failed", f"{program} exited {proc.returncode}: {one_line(stderr, 300)}")
    return HookResult("ok", f"{program} exited 0")
