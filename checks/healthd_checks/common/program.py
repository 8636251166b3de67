"""Running a check's outside program (``nvme``, ``ipmitool``): by absolute path, trusted, bounded, never twice at once.

A check that needs a program takes its absolute path from its settings and is not
applicable where the program is absent (``present``). ``run`` refuses a program that
someone other than root could have replaced (``healthd.store.trust``), runs it with a
deadline (``healthd.checks.bounded``: no shell, a bare environment, its process group killed
at the deadline) and, when it hangs (a tool stuck on a dead device sleeps in the
kernel and outlives SIGKILL), keeps it in the check's process memory so the next
pass does not start another behind it. ``run_pair`` does the same for a server and the
client that measures against it on the same node (perftest's loopback). Every failure is
an ``Unobserved`` naming the program: UNKNOWN, never healthy.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Mapping, MutableMapping, Optional, Sequence, Union

from healthd.checks.bounded import KILL_GRACE, Finished, TimedOut, run_bounded
from healthd.checks.plugin import Unobserved
from healthd.store.trust import untrusted_reason
from healthd.text import one_line


def present(program: Path) -> bool:
    """Whether ``program`` is an executable file (an absent tool makes its part of a check not applicable)."""
    return program.is_file() and os.access(program, os.X_OK)


def run(
    memory: MutableMapping[str, Any],
    argv: Sequence[str],
    timeout: float,
    subject: str,
    code: str,
    env: Optional[Mapping[str, str]] = None,
) -> Union[Finished, Unobserved]:
    """``argv`` (``argv[0]`` absolute) within ``timeout`` seconds, or why it could not give an answer.

    ``env`` replaces the bare environment whole (``run_bounded``).
    """
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
        return run_bounded(argv, timeout, env=env)
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


# How long a client that connected waits for its server to end by itself before it is killed.
SERVER_GRACE = 2.0
# Between two tries of a client whose server is not listening yet.
CONNECT_PAUSE = 0.25


class _Server:
    """A program run bounded in a thread of its own, while its client runs in the caller's."""

    def __init__(self, argv: Sequence[str], timeout: float, env: Optional[Mapping[str, str]]) -> None:
        self.pid: Optional[int] = None
        self.stuck: Optional[subprocess.Popen[str]] = None
        # Set once the server's pid is known or it could not start: ``stop`` waits for it, so a client
        # that answered at once cannot leave a server that had not started yet running behind it.
        self.settled = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(argv, timeout, env), daemon=True)
        self.thread.start()

    def _run(self, argv: Sequence[str], timeout: float, env: Optional[Mapping[str, str]]) -> None:
        # What the server prints is not judged (the client reports the same measurement); a server
        # that cannot start leaves its client nothing to connect to, which the client then says.
        try:
            run_bounded(argv, timeout, env=env, started=self._started)
        except TimedOut as exc:
            self.stuck = exc.process
        except OSError:
            pass
        finally:
            self.settled.set()

    def _started(self, pid: int) -> None:
        self.pid = pid
        self.settled.set()

    def alive(self) -> bool:
        return self.thread.is_alive() or (self.stuck is not None and self.stuck.poll() is None)

    def stop(self, grace: float) -> bool:
        """Wait ``grace`` seconds for it to end, then kill its process group; False when it outlives that too."""
        self.thread.join(grace)
        if self.thread.is_alive():
            self.settled.wait(KILL_GRACE * 10)
        if self.thread.is_alive() and self.pid is not None:
            with contextlib.suppress(OSError):  # gone meanwhile
                os.killpg(self.pid, signal.SIGKILL)
            self.thread.join(KILL_GRACE * 10)
        return not self.alive()


def run_pair(
    memory: MutableMapping[str, Any],
    server: Sequence[str],
    client: Sequence[str],
    timeout: float,
    subject: str,
    code: str,
    connect_window: float,
    env: Optional[Mapping[str, str]] = None,
) -> Union[Finished, Unobserved]:
    """``server`` started first, then ``client`` connecting to it (perftest's ``ib_write_bw``): the client's result.

    Both within ``timeout`` seconds, by the rules of ``run``. A server takes a moment to
    listen, and a probe connection would be taken for its one client, so the client is
    started again while it fails, the server still runs and ``connect_window`` seconds have
    not passed. When the client has answered, the server has ``SERVER_GRACE`` seconds to end
    by itself before its process group is killed (at once when the client failed); one that
    outlives even SIGKILL is kept in ``memory``, and the next pass starts no other beside it.
    """
    key = f"program:{subject} server"
    earlier = memory.get(key)
    if isinstance(earlier, _Server) and earlier.alive():
        message = (
            f"{server[0]} (server) from an earlier pass is still running (pid {earlier.pid}); not starting another"
        )
        return Unobserved(f"{code}_HUNG", subject, message, {"pid": earlier.pid or 0})
    memory.pop(key, None)
    reason = untrusted_reason(Path(server[0]))
    if reason is not None:
        return Unobserved(f"{code}_UNTRUSTED", subject, f"refusing to run {server[0]}: {reason}")
    deadline = time.monotonic() + timeout
    running = _Server(server, timeout, env)
    done: Union[Finished, Unobserved, None] = None
    try:
        done = _client(memory, client, deadline, deadline - timeout + connect_window, running, subject, code, env)
        return done
    finally:
        # A server whose client failed waits for a client that will not come: it is ended at once.
        answered = isinstance(done, Finished) and done.returncode == 0
        if not running.stop(SERVER_GRACE if answered else 0.0):
            memory[key] = running


def _client(
    memory: MutableMapping[str, Any],
    argv: Sequence[str],
    deadline: float,
    connect_by: float,
    server: _Server,
    subject: str,
    code: str,
    env: Optional[Mapping[str, str]],
) -> Union[Finished, Unobserved]:
    while True:
        done = run(memory, argv, max(deadline - time.monotonic(), 0.0), subject, code, env)
        retry = isinstance(done, Finished) and done.returncode != 0 and server.alive()
        if not retry or time.monotonic() + CONNECT_PAUSE >= min(connect_by, deadline):
            return done
        time.sleep(CONNECT_PAUSE)
