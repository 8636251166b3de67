"""Live collection for ``healthd fleet``: the raw accounting texts, from sacct and sacctmgr.

Two read-only queries of slurmdbd, by absolute path (``[slurm].bin_dir`` or the
standard places, as the Slurm adapter finds scontrol), with the adapter's
environment (``SLURM_CONF`` from ``[slurm].conf`` or healthd's own, and ``TZ``) and
one deadline for both (``healthd.slurm.command``: neither a slurmdbd that does not answer
nor a hung filesystem under the commands or slurm.conf can hold the caller).
Parsing is the analysis's business; this module returns the texts.

- ``sacct -a -X -D -P``: every user's jobs (``-a``), one line per allocation
  without its steps (``-X``), every run of a requeued job (``-D``: the run a node
  failure ended is the evidence), ``|``-separated (``-P``), with no field a job's
  owner writes (``-P`` does not escape them, so they could forge records);
- the same with ``-o JobID,SubmitLine`` (22.05 and later): the submit command lines,
  for the ``-x``/``--exclude`` signal, kept apart and matched by JobID
  (``healthd.fleet.submit``).
- ``sacctmgr -P show event``: every node drain, down or fail with its reason and
  who set it, which is where healthd's ``healthd: CODE ...`` reasons are kept;
- ``sacct -B -j IDS`` (``batch_scripts``), for the batch jobs of the window: their
  scripts, whose ``#SBATCH`` lines may name or exclude nodes (``healthd.fleet.scripts``).

Both commands take times as local time without a zone (``YYYY-MM-DDTHH:MM:SS``) and
print them so; the window is converted to the local time of ``TZ`` (or the system's),
which the commands get too.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import NamedTuple, Optional, Sequence

from healthd.fleet import sacct_json
from healthd.fleet.sacct import EVENT_FIELDS, SACCT_FIELDS, SUBMIT_FIELDS, text_of
from healthd.slurm.command import STANDARD_BIN_DIRS, ClientTimedOut, SlurmError, client_env, run_client
from healthd.text import one_line

SLURM_TIME = "%Y-%m-%dT%H:%M:%S"

# What the commands print (22.05) when they cannot reach slurmdbd or accounting is off:
# said in plain words before their own message.
_UNREACHABLE = ("Connection refused", "persistent connection", "Problem talking to the database", "Unable to contact")
_DISABLED = ("accounting storage is disabled", "not running a supported accounting_storage plugin")


class AccountingError(SlurmError):
    """sacct or sacctmgr is missing, failed, timed out, or slurmdbd could not be reached."""


class Accounting(NamedTuple):
    """The three texts, unparsed: the job runs, the node events, and the runs' submit lines."""

    jobs: str
    events: str
    submit_lines: str


def slurm_time(when: datetime.datetime) -> str:
    """``when`` as the local time the commands read (a naive ``when`` is already local time)."""
    return when.astimezone().strftime(SLURM_TIME)


def _whole_second_after(when: datetime.datetime) -> datetime.datetime:
    """``when`` rounded up to a whole second: accounting keeps whole seconds, so an event
    stamped in the second a window ends at would fall outside a window cut down to it."""
    return when if when.microsecond == 0 else when.replace(microsecond=0) + datetime.timedelta(seconds=1)


def sacct_args(since: datetime.datetime, until: datetime.datetime, fields: Sequence[str] = SACCT_FIELDS) -> list[str]:
    until = _whole_second_after(until)
    return ["-a", "-X", "-D", "-P", "-o", ",".join(fields), "-S", slurm_time(since), "-E", slurm_time(until)]


def sacct_json_args(since: datetime.datetime, until: datetime.datetime) -> list[str]:
    """The job query as ``sacct --json`` (21.08 and later with the JSON serializer): the same window and runs."""
    until = _whole_second_after(until)
    return ["-a", "-X", "-D", "--json", "-S", slurm_time(since), "-E", slurm_time(until)]


def _no_json(error: AccountingError) -> bool:
    """Whether sacct failed because it cannot print JSON (an old Slurm, or no serializer plugin)."""
    # 21.08 and later without the JSON serializer plugin say so in words naming it; older
    # ones do not know the option (getopt's "unrecognized option '--json'").
    said = str(error).lower()
    return "unrecognized option" in said or "serializer" in said


def _names_every_user(text: str) -> bool:
    """Whether ``sacct --json`` output names the user of every job.

    22.05 takes a job's ``user`` from its association and prints null for a user who has
    none (not added with ``sacctmgr add user``), where ``-P`` prints the name of the uid;
    the lemon test's guards need the user, so such a window is read with ``-P`` instead.
    """
    try:
        document = json.loads(text)
    except ValueError:
        return False
    jobs = document.get("jobs") if isinstance(document, dict) else None
    return isinstance(jobs, list) and all(
        isinstance(job, dict) and isinstance(job.get("user"), str) and job["user"] for job in jobs
    )


def sacctmgr_args(since: datetime.datetime, until: datetime.datetime) -> list[str]:
    return [
        "-P",
        "show",
        "event",
        f"Start={slurm_time(since)}",
        f"End={slurm_time(_whole_second_after(until))}",
        f"Format={','.join(EVENT_FIELDS)}",
    ]


def collect(
    bin_dir: Optional[Path],
    since: datetime.datetime,
    until: datetime.datetime,
    timeout: float,
    *,
    conf: Optional[Path] = None,
) -> Accounting:
    """sacct's and sacctmgr's texts for the jobs, node events and submit lines from ``since`` to ``until``.

    ``bin_dir`` and ``conf`` mean what ``[slurm].bin_dir`` and ``[slurm].conf`` mean
    (None: the standard places, and healthd's own ``SLURM_CONF``). ``timeout``
    seconds cover both commands. Raises ``AccountingError`` naming the command.
    """
    if until <= since:
        raise AccountingError(f"empty window: it ends at {slurm_time(until)}, not after its start {slurm_time(since)}")
    deadline = time.monotonic() + timeout
    # JSON first: it carries job names safely (a name is a string, not a field of a "|" line),
    # and epoch times; sacctmgr has no --json in 22.05 ("unrecognized option"), so events stay -P.
    try:
        jobs = _run(bin_dir, "sacct", sacct_json_args(since, until), deadline, timeout, conf)
    except AccountingError as exc:
        if not _no_json(exc):
            raise
        jobs = ""
    if not _names_every_user(jobs):
        jobs = _run(bin_dir, "sacct", sacct_args(since, until), deadline, timeout, conf)
    events = _run(bin_dir, "sacctmgr", sacctmgr_args(since, until), deadline, timeout, conf)
    submit_lines = _run(bin_dir, "sacct", sacct_args(since, until, SUBMIT_FIELDS), deadline, timeout, conf)
    return Accounting(jobs, events, submit_lines)


class Spooled(NamedTuple):
    """The accounting of a window as files (``spool``): memory holds none of the runs."""

    jobs: Path  # the runs as sacct -P rows, header first (sacct --json converted)
    events: str  # the node events (thousands: kept as text)
    submit_lines: Path  # sacct -P -o JobID,SubmitLine
    names: dict[str, str]  # JobID -> name of the failed runs (sacct --json only; shown, never analysed)


def spool(
    bin_dir: Optional[Path],
    window: tuple[datetime.datetime, datetime.datetime],
    timeout: float,
    directory: Path,
    *,
    conf: Optional[Path] = None,
    deadline: Optional[float] = None,
) -> Spooled:
    """What ``collect`` reads, with sacct's output streamed into files under ``directory``.

    sacct writes straight into a file, and ``sacct --json`` is converted a job at a time
    (``sacct_json.stream``): a year of a large fleet is tens of GB of JSON, which ``collect``
    would hold whole. The analysis then streams the files. ``deadline`` (monotonic seconds):
    one the caller's other commands share, ``timeout`` from now without it.
    """
    since, until = window
    if until <= since:
        raise AccountingError(f"empty window: it ends at {slurm_time(until)}, not after its start {slurm_time(since)}")
    run = _Stream(bin_dir, conf, _deadline(deadline, timeout), timeout)
    jobs, raw = directory / "jobs.txt", directory / "jobs.json"
    seen = _json_rows(run, sacct_json_args(since, until), raw, jobs)
    if seen is None or seen.no_user:
        run.into(jobs, "sacct", sacct_args(since, until))
    events = directory / "events.txt"
    run.into(events, "sacctmgr", sacctmgr_args(since, until))
    submit = directory / "submit.txt"
    run.into(submit, "sacct", sacct_args(since, until, SUBMIT_FIELDS))
    text = events.read_bytes().decode("utf-8", "replace")
    return Spooled(jobs, text, submit, {} if seen is None or seen.no_user else seen.names)


def _json_rows(run: _Stream, args: list[str], raw: Path, rows: Path) -> Optional[sacct_json.Seen]:
    """``sacct --json`` into ``raw``, converted to rows in ``rows``; None where this sacct has no JSON."""
    try:
        run.into(raw, "sacct", args)
    except AccountingError as exc:
        if not _no_json(exc):
            raise
        return None
    seen = sacct_json.Seen()
    try:
        with text_of(raw.open("rb")) as source, rows.open("w", encoding="utf-8", newline="\n") as out:
            out.writelines(row + "\n" for row in sacct_json.stream(source, "sacct --json", seen))
    except ValueError:
        return None  # not JSON at all (an old sacct printing its table): read -P
    finally:
        raw.unlink()
    return seen


class _Stream:
    """Runs Slurm's clients with their output into a file, within one deadline."""

    def __init__(self, bin_dir: Optional[Path], conf: Optional[Path], deadline: float, timeout: float) -> None:
        self.dirs = (bin_dir,) if bin_dir is not None else STANDARD_BIN_DIRS
        self.conf, self.deadline, self.timeout = conf, deadline, timeout

    def into(self, path: Path, name: str, args: Sequence[str]) -> None:
        """``name args`` with its standard output written to ``path``; AccountingError as ``_run`` says it."""
        found = next((d / name for d in self.dirs if (d / name).is_file()), None)
        command = shlex.join([str(found or name), *args])
        if found is None:
            raise AccountingError(f"{name} not found in {', '.join(map(str, self.dirs))} (set [slurm].bin_dir)")
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise AccountingError(f"`{command}` not run: the {self.timeout:g}s for collecting accounting are used up")
        with path.open("wb") as out:
            process = subprocess.Popen(
                [str(found), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.PIPE,
                env=client_env(self.conf),
                cwd="/",
                start_new_session=True,
            )
            try:
                _, err = process.communicate(timeout=remaining)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                raise AccountingError(
                    f"`{command}` did not answer within {self.timeout:g}s: slurmdbd is slow or not reachable"
                ) from None
        if process.returncode != 0:
            said = one_line(err.decode("utf-8", "replace") or path.read_text("utf-8", "replace")[:2000], 500)
            raise AccountingError(
                f"`{command}` failed (exit status {process.returncode}){_cause(said)}: {said or 'no output'}"
            )


# Job ids per ``sacct -B -j`` call: sacct needs -j for scripts (src/sacct/options.c), and a
# thousand ids keep the command line near 10 kB.
SCRIPT_BATCH = 1000


def batch_scripts(
    bin_dir: Optional[Path],
    jobs: Sequence[str],
    timeout: float,
    *,
    conf: Optional[Path] = None,
    deadline: Optional[float] = None,
) -> str:
    """``sacct -B -j IDS`` for ``jobs``, a thousand at a time, within ``timeout`` seconds in all (or by ``deadline``).

    Each script comes only where slurm.conf has ``AccountingStoreFlags=job_script`` (else
    ``NONE``); a job that is not in accounting is left out by sacct.
    """
    until = _deadline(deadline, timeout)
    parts = []
    for first in range(0, len(jobs), SCRIPT_BATCH):
        chosen = ",".join(jobs[first : first + SCRIPT_BATCH])
        parts.append(_run(bin_dir, "sacct", ["-B", "-j", chosen], until, timeout, conf))
    return "".join(parts)


def _deadline(given: Optional[float], timeout: float) -> float:
    """The monotonic time by which the commands must be done: ``given``, else ``timeout`` from now."""
    return time.monotonic() + timeout if given is None else given


def _run(
    bin_dir: Optional[Path], name: str, args: Sequence[str], deadline: float, timeout: float, conf: Optional[Path]
) -> str:
    # The command as the messages show it: its path when bin_dir says where it is.
    command = shlex.join([str(bin_dir / name) if bin_dir is not None else name, *args])
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise AccountingError(f"`{command}` not run: the {timeout:g}s for collecting accounting are used up")
    try:
        finished = run_client(name, args, bin_dir, conf, remaining, command)
    except ClientTimedOut as exc:
        raise AccountingError(
            f"`{command}` did not answer within {timeout:g}s: slurmdbd is slow or not reachable{exc.stuck_note}"
        ) from None
    except SlurmError as exc:
        raise AccountingError(str(exc)) from None
    if finished.returncode != 0:
        said = one_line(finished.err or finished.out, 500) or "no output"
        raise AccountingError(f"`{command}` failed (exit status {finished.returncode}){_cause(said)}: {said}")
    return finished.out


def _cause(said: str) -> str:
    if any(text in said for text in _DISABLED):
        return "; Slurm accounting is not enabled (slurm.conf AccountingStorageType)"
    if any(text in said for text in _UNREACHABLE):
        return "; slurmdbd is not reachable"
    return ""
