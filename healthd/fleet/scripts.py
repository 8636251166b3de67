"""Each batch job's ``#SBATCH`` node options, from the scripts ``sacct --batch-script`` prints, by JobID.

Accounting keeps no requested or excluded node list (``sacct -e`` of 22.05 has ``ReqNodes``,
a count, and no list; nor has ``slurmdb_job_rec_t`` up to 26.05), so what a job asked for
in its batch script is read from the script itself, which slurmdbd keeps when slurm.conf
has ``AccountingStoreFlags=job_script``. ``sacct -B -j IDS`` (every release needs ``-j``
for it) prints, per job, ``Batch Script for ID``, a line of 80 dashes, the script (``NONE``
when none is stored) and an empty line (src/sacct/options.c, ``_print_script``).

A script is text its owner writes, printed raw, so it can hold a line that looks like
another job's header. It is checked as the submit lines are (``healthd.fleet.submit``):
a job's script is believed only when its header appears exactly once. A forged header for
another's job makes that job's header appear twice, and its script is left out (a pin
takes runs out of the failure evidence, docs/fleet.md "Evidence a user cannot make"). The
forger's own directives are not moved by it: the forged header is a line that is not a
comment, where sbatch stopped reading directives anyway.
"""

from __future__ import annotations

import re
from typing import Iterable, NamedTuple

from healthd.fleet.hosts import Request, script_request
from healthd.fleet.sacct import is_job_id

_HEADER = re.compile(r"Batch Script for (\S+)")
_RULE = "-" * 80


class Scripts(NamedTuple):
    """Job id -> what its script asked for, for the jobs whose script was believed."""

    requests: dict[str, Request]
    rejected: tuple[str, ...]  # jobs whose header appeared more than once
    records: int  # headers read
    stored: int  # of them, with a script (not ``NONE``: accounting keeps none without job_script)


def _records(lines: list[str]) -> Iterable[tuple[str, list[str]]]:
    """(job id, script lines) of each header followed by its rule."""
    starts = [
        (i, found.group(1))
        for i, line in enumerate(lines[:-1])
        if (found := _HEADER.fullmatch(line)) and lines[i + 1] == _RULE and is_job_id(found.group(1))
    ]
    for (start, job_id), (end, _) in zip(starts, [*starts[1:], (len(lines), "")]):
        yield job_id, lines[start + 2 : end]


def read_scripts(text: str) -> Scripts:
    """The requests of the scripts in ``sacct -B -j ...`` output (``text`` whole, split on "\\n" alone)."""
    seen: dict[str, int] = {}
    found: dict[str, Request] = {}
    stored = 0
    for job_id, body in _records(text.split("\n")):
        seen[job_id] = seen.get(job_id, 0) + 1
        stored += body[:1] != ["NONE"]
        wanted = script_request("\n".join(body))
        if wanted != Request():
            found[job_id] = wanted
    rejected = tuple(job for job, times in seen.items() if times > 1)
    for job_id in rejected:
        found.pop(job_id, None)
    return Scripts(found, rejected, sum(seen.values()), stored)


def batch_jobs(submit_records: Iterable[str]) -> list[str]:
    """The job ids of the submit-line records (``JobID|SubmitLine``) whose command is sbatch: the jobs with a script."""
    jobs = []
    for record in submit_records:
        job_id, _, line = record.partition("|")
        command = line.split(None, 1)[0] if line.strip() else ""
        if is_job_id(job_id) and command.rsplit("/", 1)[-1] == "sbatch":
            jobs.append(job_id)
    return list(dict.fromkeys(jobs))
