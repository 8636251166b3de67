"""Starting one Slurm client command (scontrol, sinfo, sacct, sacctmgr) so that no filesystem can hang healthd.

The commands and slurm.conf often live on a shared filesystem (``/opt/slurm`` on
NFS). When its server hangs, any stat, open or exec of a path on it sleeps in the
kernel, uninterruptibly (state D), until the server answers; SIGKILL waits too.
healthd therefore never touches those paths itself, not even through
``subprocess.Popen``, which waits until its child has exec'd the program: it
starts the local ``/bin/sh`` on a fixed script (``_FIND_AND_EXEC``) that finds the
command in ``[slurm].bin_dir`` or the standard places, checks that ``[slurm].conf``
exists and execs the command. Everything that may hang happens in that child,
under ``healthd.checks.bounded``'s deadline (own session, the group SIGKILLed at the
deadline, never waited for).

A child still alive a moment after SIGKILL is stuck in the kernel: it is kept
(``StuckChildren``) and, while it lives, no other command with the same
``bin_dir`` and ``conf`` starts in this process, so a hung filesystem costs one
stuck process, not one per call. The script is fixed text: the paths and the
command's arguments reach it as positional parameters, which the shell never
reads as code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

from healthd.checks.bounded import BARE_ENV, Finished, StuckChildren, TimedOut, run_bounded
from healthd.slurm.problem import DETAIL_LIMIT, SlurmFailure, SlurmProblem
from healthd.text import one_line

# Where packages and site builds put the client commands; HealthCheckProgram runs
# with no PATH at all (slurmd passes only SLURMD_NODENAME), so we look ourselves.
STANDARD_BIN_DIRS = (Path("/usr/bin"), Path("/usr/local/bin"), Path("/opt/slurm/bin"))

# The local shell that runs _FIND_AND_EXEC; its $0, so its own messages can be told from the command's.
SHELL = "/bin/sh"
SHELL_NAME = "healthd-slurm"
# $1 the command's name, $2 slurm.conf or "" (not checked), $3 how many directories
# follow, then the directories, then the command's arguments. A directory after the
# one that holds the command is not looked at: it may be the hung one.
_FIND_AND_EXEC = """\
name=$1 conf=$2 count=$3
shift 3
found=
while [ "$count" -gt 0 ]; do
    if [ -z "$found" ] && [ -f "$1/$name" ]; then found=$1/$name; fi
    shift
    count=$((count - 1))
done
[ -n "$found" ] || { echo "$0: no command" >&2; exit 127; }
[ -z "$conf" ] || [ -f "$conf" ] || { echo "$0: no conf" >&2; exit 127; }
exec "$found" "$@"
"""

_STUCK: StuckChildren[tuple[Optional[Path], Optional[Path]]] = StuckChildren()


class SlurmError(Exception):
    """A Slurm command failed, timed out or printed something unparseable.

    ``problem`` is the failure as a value: ``kind``, the ``command`` and a short
    ``detail`` (the message, cut to one line of ``DETAIL_LIMIT``, when none is given)
    are set where it happens, so that nothing reads them back from the text.
    """

    def __init__(
        self,
        message: str,
        kind: SlurmFailure = SlurmFailure.READ_FAILED,
        command: str = "",
        detail: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        said = one_line(message, DETAIL_LIMIT) if detail is None else detail
        self.problem = SlurmProblem(kind, command, said, message)


class NotRun(SlurmError):
    """The command was not started: it or slurm.conf is missing, or an earlier one is stuck."""


class SlurmNotFound(NotRun):
    """The command is not installed where the config says or in the standard places."""


class ClientTimedOut(SlurmError):
    """The command gave no answer in time and was killed; ``stuck`` is its pid if it outlived SIGKILL."""

    def __init__(self, command: str, timeout: float, stuck: Optional[int], suspects: str) -> None:
        self.stuck = stuck
        self.stuck_note = (
            f"; stuck in the kernel after SIGKILL (pid {stuck}): is the filesystem of {suspects} hung?"
            if stuck is not None
            else ""
        )
        said = f"timed out after {timeout:.3g}s{self.stuck_note}"
        super().__init__(f"`{command}` {said}", SlurmFailure.UNREACHABLE, command, _said(command, said))


def _said(command: str, said: str) -> str:
    """The detail of a command that gave no answer: its program and what became of it (``scontrol timed out ...``)."""
    return one_line(f"{command.split(' ')[0]} {said}", DETAIL_LIMIT)


def not_run(command: str, why: str) -> NotRun:
    """``command`` was not started, for ``why``: Slurm is not reachable from here."""
    said = f"not run: {why}"
    return NotRun(f"`{command}` {said}", SlurmFailure.UNREACHABLE, command, _said(command, said))


def client_env(conf: Optional[Path]) -> dict[str, str]:
    """The environment of a Slurm client command: a bare one, with ``SLURM_CONF`` and ``TZ``.

    ``SLURM_CONF`` is ``[slurm].conf`` when configured, else healthd's own; without
    either the command finds slurm.conf where it was built to look. ``TZ`` passes
    through because the commands print and read times in local time, with no zone:
    they must mean the same local time as healthd does.
    """
    env = dict(BARE_ENV)
    if conf is not None:
        env["SLURM_CONF"] = str(conf)
    elif "SLURM_CONF" in os.environ:
        env["SLURM_CONF"] = os.environ["SLURM_CONF"]
    if "TZ" in os.environ:
        env["TZ"] = os.environ["TZ"]
    return env


def _bin_dirs(bin_dir: Optional[Path]) -> tuple[Path, ...]:
    """Where the commands are looked for: ``[slurm].bin_dir`` alone when set, else the standard places."""
    return (bin_dir,) if bin_dir is not None else STANDARD_BIN_DIRS


def run_client(
    program: str, args: Sequence[str], bin_dir: Optional[Path], conf: Optional[Path], timeout: float, command: str
) -> Finished:
    """Run ``program args`` within ``timeout`` seconds; ``command`` is how messages name it.

    Raises ``SlurmNotFound`` or ``NotRun`` (nothing was sent to Slurm),
    ``ClientTimedOut``, or ``SlurmError`` when the command cannot be executed.
    A non-zero exit status is the caller's to read.
    """
    dirs = _bin_dirs(bin_dir)
    suspects = ", ".join(str(p) for p in ((conf,) if conf is not None else ()) + dirs)
    stuck = _STUCK.alive((bin_dir, conf))
    if stuck is not None:
        raise not_run(
            command,
            f"an earlier Slurm command (pid {stuck}) is still stuck in the kernel after SIGKILL;"
            f" is the filesystem of {suspects} hung?",
        )
    argv = [SHELL, "-c", _FIND_AND_EXEC, SHELL_NAME, program, str(conf or ""), str(len(dirs)), *map(str, dirs), *args]
    try:
        finished = run_bounded(argv, timeout, env=client_env(conf))
    except TimedOut as exc:
        kept = _STUCK.keep((bin_dir, conf), exc.process)
        raise ClientTimedOut(command, timeout, exc.process.pid if kept else None, suspects) from None
    except OSError as exc:
        raise SlurmError(
            f"cannot run {SHELL} to start {program}: {exc.strerror or exc}", SlurmFailure.UNREACHABLE, command
        ) from None
    said = finished.err.strip()
    if finished.returncode == 127 and said == f"{SHELL_NAME}: no command":
        where = ", ".join(str(d) for d in dirs)
        raise SlurmNotFound(f"{program} not found in {where} (set [slurm].bin_dir)", SlurmFailure.NOT_FOUND, command)
    if finished.returncode == 127 and said == f"{SHELL_NAME}: no conf":
        # scontrol would retry a missing slurm.conf for about a minute before giving up.
        raise not_run(command, f"{conf} does not exist ([slurm].conf)")
    if finished.returncode in (126, 127) and said.startswith(f"{SHELL_NAME}: "):
        # The shell could not exec the command it found: its message names the file and why.
        found = [str(d / program) for d in dirs if str(d / program) in said]
        why = one_line(said[said.index(found[0]) :] if found else said, 300)
        raise SlurmError(f"cannot run {why}", SlurmFailure.UNREACHABLE, command)
    return finished
