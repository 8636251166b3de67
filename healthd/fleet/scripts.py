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

``--cache`` keeps each day's lookups apart (``Blocks``: ``healthd.fleet.cache``), and a job
with runs on several days may be looked up in more than one: a record that one block has is
counted again from another only where that one has it more often (same job and the same
text: the same stored script, or ``NONE``), so a job looked up twice is not rejected as forged.
A forged record whose text is the real one's, letter for letter, in another day's block,
counts once, not twice: the job is believed where a read of the whole window would reject
it, and what is believed is then the job's own request (the forger wrote exactly it), so the
evidence is a whole read's; only the rejection's bad line is missing.
"""

from __future__ import annotations

import re
from typing import Iterable, NamedTuple, Optional, Union

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


class Blocks(NamedTuple):
    """``sacct -B -j ...`` outputs of separate lookups (``--cache``'s days), each a text whole."""

    texts: Iterable[str]


def read_scripts(text: Union[str, Blocks]) -> Scripts:
    """The requests of the scripts in ``sacct -B -j ...`` output (``text`` whole, split on "\\n" alone).

    ``Blocks``: a record is counted as often as the block having it most often has it.
    """
    counts: dict[_Key, int] = {}
    for block in (text,) if isinstance(text, str) else text.texts:
        here = _keys(block)
        if not counts:
            counts = here
            continue
        for key, times in here.items():
            if times > counts.get(key, 0):
                counts[key] = times
    scripted: dict[str, int] = {}  # job -> its records that hold a script
    found: dict[str, Request] = {}
    for key, times in counts.items():
        if isinstance(key, tuple):
            job_id, _, wanted = key
            scripted[job_id] = scripted.get(job_id, 0) + times
            if wanted != Request():
                found[job_id] = wanted
    rejected = [job for job, times in scripted.items() if times + counts.get(job, 0) > 1]
    rejected += [k for k, n in counts.items() if isinstance(k, str) and k not in scripted and n > 1]
    for job_id in rejected:
        found.pop(job_id, None)
    return Scripts(found, tuple(rejected), sum(counts.values()), sum(scripted.values()))


# A record: its job id alone where it is ``NONE`` (no script stored: most records, kept as
# small as a job id), else (job id, its text's hash, the request of its #SBATCH lines). The
# hash is Python's, salted per process: ``read_scripts`` compares records within one process.
_Key = Union[str, tuple[str, int, Request]]


def _keys(block: str) -> dict[_Key, int]:
    """Each record of one ``sacct -B`` output (``_Key``), with how often it is there."""
    here: dict[_Key, int] = {}
    for job_id, body in _records(block.split("\n")):
        # Without the blank lines between records: the last record of a lookup has fewer.
        text = "\n".join(body).rstrip("\n")
        key: _Key = job_id if body[:1] == ["NONE"] else (job_id, hash(text), script_request(text))
        here[key] = here.get(key, 0) + 1
    return here


def batch_job(record: str) -> Optional[str]:
    """The job id of a submit-line record (``JobID|SubmitLine``) whose command is sbatch: a job with a script."""
    job_id, _, line = record.partition("|")
    command = line.split(None, 1)[0] if line.strip() else ""
    return job_id if is_job_id(job_id) and command.rsplit("/", 1)[-1] == "sbatch" else None


def batch_jobs(submit_records: Iterable[str]) -> list[str]:
    """The batch jobs of the submit-line records (``batch_job``), each once."""
    return [job for job in dict.fromkeys(map(batch_job, submit_records)) if job is not None]
