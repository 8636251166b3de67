"""Running a check's outside program (``nvme``, ``ipmitool``): by absolute path, trusted, bounded, never twice at once.

A check that needs a program takes its absolute path from its settings and is not
applicable where the program is absent (``present``). ``run`` refuses a program that
someone other than root could have replaced (``healthd.store.trust``), runs it with a
deadline (``healthd.checks.bounded``: no shell, a bare environment, its process group killed
at the deadline) and, when it hangs (a tool stuck on a dead device sleeps in the
kernel and outlives SIGKILL), keeps it in the check's process memory so the next
pass does not start another behind it. Every failure is an ``Unobserved`` naming the
program: UNKNOWN, never healthy.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, MutableMapping, Sequence, Union

from healthd.checks.bounded import Finished, TimedOut, run_bounded
from healthd.checks.plugin import Unobserved
from healthd.store.trust import untrusted_reason
from healthd.text import one_line


def present(program: Path) -> bool:
    """Whether ``program`` is an executable file (an absent tool makes its part of a check not applicable)."""
    return program.is_file() and os.access(program, os.X_OK)


def run(
    memory: MutableMapping[str, Any], argv: Sequence[str], timeout: float, subject: str, code: str
) -> Union[Finished, Unobserved]:
    """``argv`` (``argv[0]`` absolute) within ``timeout`` seconds, or why it could not give an answer."""
    program = argv[0]
    key = f"program:{subject}"
    earlier = memory.get(key)
    if isinstance(earlier, subprocess.Popen) and earlier.poll() is None:
        message = f"{program} from an earlier pass is still running (pid {earlier.pid}); not starting another"
        return Unobserved(f"{code}_HUNG", subject, message, {"pid": earlier.pid})
    memory.pop(key, None)
    reason = untrusted_reason(Path(program))
    if reason is not None:
        return Unobserved(f"{code}_UNTRUSTED", subject, f"refusing to run {program}: {reason}")
    try:
        return run_bounded(argv, timeout)
    except TimedOut as exc:
        memory[key] = exc.process
        return Unobserved(
            f"{code}_TIMEOUT", subject, f"{program} gave no answer within {timeout:g}s", {"timeout": timeout}
        )
    except OSError as exc:
        return Unobserved(f"{code}_FAILED", subject, one_line(f"cannot run {program}: {exc}"))


def failed(finished: Finished, argv: Sequence[str], subject: str, code: str) -> Unobserved:
    """A program that answered with a non-zero status: what it said, as an ``Unobserved``."""
    said = one_line(finished.err or finished.out, 200)
    message = f"{argv[0]} {' '.join(argv[1:2])} exited with status {finished.returncode}: {said}"
    return Unobserved(f"{code}_FAILED", subject, message, {"returncode": finished.returncode})
