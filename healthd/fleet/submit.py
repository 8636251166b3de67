"""Each job's ``-x``/``--exclude`` and ``-w``/``--nodelist``, from sacct's SubmitLine asked for on its own, by JobID.

``sacct -P`` prints a submit line as it was typed, with its ``|`` and newlines
(sacct(1) escapes nothing), so a submit line can hold what looks like further
records. That is why it is not among the job fields (a forged record there would
count as a failed run), but read from ``sacct -o JobID,SubmitLine`` with the same
window, where the most a forged record can claim is an exclusion or a pin. It is checked:

- a line that does not start with a Slurm job id continues the record before it
  (a newline inside a submit line);
- the records of every job id whose line excludes or pins nodes are counted over the whole
  input (a second pass), and its line is believed only when that count equals
  the job's runs in the jobs input. A forged record for a job adds one more record
  than the job has runs, and is left out with the job's true one: a user cannot put
  an exclusion or a pin on a job, nor one in the name of another's (a pin takes a
  job's runs out of the failure evidence, docs/fleet.md "Evidence a user cannot make").

A job's batch script (``healthd.fleet.scripts``) adds its ``#SBATCH`` node options under the
command line's, and is believed with the job's submit line.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Iterator, NamedTuple, Optional

from healthd.fleet.columnar import SubmitScan, submit_scan
from healthd.fleet.hosts import Request, may_ask, request
from healthd.fleet.sacct import FileLines, InputSummary, LineTally, SacctTable, is_job_id, open_table, submit_command
from healthd.fleet.scripts import Scripts

SUBMIT_COLUMNS = ("JobID", "SubmitLine")
NOTHING = Request()


class Choice(NamedTuple):
    """What one job asked for (submit line and script): the nodes it excluded, whether it named its nodes."""

    line: int  # its first line in the input
    excluded: tuple[str, ...]
    pinned: bool


class Exclusions(NamedTuple):
    """Job id -> its ``Choice``, for the jobs whose line excludes nodes or pins the job to some."""

    jobs: dict[str, Choice]
    records: dict[str, int]  # records of each of those job ids in the input
    tally: LineTally


def _records_of(table: SacctTable, tally: LineTally) -> Iterator[tuple[int, str, str]]:
    i_id, i_text = table.index("JobID"), table.index("SubmitLine")
    current: Optional[tuple[int, str, str]] = None
    for number, line in table.rows:
        fields = table.split(line)
        if fields is not None and is_job_id(fields[i_id]):
            if current is not None:
                yield current
            current = (number, fields[i_id], fields[i_text])
        elif current is not None:
            current = (current[0], current[1], f"{current[2]}\n{line}")
        else:
            tally.reject(number, f"{line[:40]!r} does not start with a job id")
    if current is not None:
        yield current


def read_exclusions(
    passes: Callable[[], Iterable[str]], source: str, scripts: Optional[Scripts] = None, engine: bool = False
) -> Exclusions:
    """Read the submit-line input twice (``passes()`` gives its lines afresh each time).

    ``scripts``: the requests of the jobs' batch scripts (``healthd.fleet.scripts``), under
    their command lines (``Request.over``); a job's script is believed with its submit line.
    ``engine``: DuckDB may find the records that can ask for nodes (``columnar.submit_scan``),
    where the input is a file it reads; the Python reader reads those records alone, as it
    reads them in the whole input.
    """
    tally = LineTally(source)
    jobs: dict[str, Choice] = {}
    # Each distinct submit line that may name a node option read once: a site's jobs repeat
    # their command lines, and reading one costs a shell-word split (``hosts.request``).
    requests: dict[str, Request] = {}
    wanted = {} if scripts is None else scripts.requests
    rejected = set() if scripts is None else set(scripts.rejected)
    table = open_table(passes(), source, SUBMIT_COLUMNS, submit_command())
    scan = _scan(passes(), table, frozenset(wanted) | rejected) if engine else None
    if scan is not None:
        table = dataclasses.replace(table, rows=iter(scan.lines))
    for number, job_id, text in _records_of(table, tally):
        tally.records += 1
        if job_id not in jobs:
            if job_id in rejected:
                rejected.discard(job_id)
                tally.reject(
                    number,
                    f"job {job_id}: its batch script's header appears more than once: its #SBATCH lines are left out",
                )
            asked = requests.get(text) if may_ask(text) else NOTHING
            if asked is None:
                asked = requests[text] = request(text)
            found = asked.over(wanted.get(job_id, NOTHING))
            if found.excluded or found.pinned:
                jobs[job_id] = Choice(number, found.excluded, found.pinned)
    if scan is None:
        return Exclusions(jobs, _counts(passes(), source, dict.fromkeys(jobs, 0)), tally)
    tally.records = scan.records
    return Exclusions(jobs, {job: scan.per_job[job] for job in jobs}, tally)


def _scan(lines: Iterable[str], table: SacctTable, jobs: frozenset[str]) -> Optional[SubmitScan]:
    """DuckDB's scan of a ``JobID|SubmitLine`` file (``columnar.submit_scan``), or None: the Python reader reads all."""
    plain = table.width == 2 and table.index("JobID") == 0 and table.free_text == 1
    if not plain or not isinstance(lines, FileLines):
        return None
    return submit_scan(lines.path, jobs)


def _counts(lines: Iterable[str], source: str, records: dict[str, int]) -> dict[str, int]:
    """``records`` with each job's records counted, as ``_records_of`` reads them.

    A line whose first field is none of these jobs neither starts one of their records nor
    continues one (a continuation belongs to the record before it, whose count is taken
    already): where JobID is the first column, only the lines that start with one of them
    are read further. Most of the millions of lines are none of the few jobs that exclude.
    """
    table = open_table(lines, source, SUBMIT_COLUMNS, submit_command())
    if table.index("JobID") != 0:
        for _, job_id, _ in _records_of(table, LineTally(source)):
            if job_id in records:
                records[job_id] += 1
        return records
    for _, line in table.rows:
        head = line.partition("|")[0]
        if head in records and table.split(line) is not None and is_job_id(head):
            records[head] += 1
    return records


def settle(exclusions: Exclusions, runs: dict[str, list[int]]) -> Iterator[tuple[str, Choice, int]]:
    """(job id, its choice, runs the analysis used) for each job whose records match its runs.

    ``runs`` maps a job id to [its runs in the jobs input, those the analysis used]; a
    job whose count differs is rejected as a bad line of the submit-line input, and its
    exclusion and pin are left out.
    """
    for job_id, choice in exclusions.jobs.items():
        seen, used = runs.get(job_id) or [0, 0]
        if seen != exclusions.records[job_id]:
            exclusions.tally.reject(
                choice.line,
                f"job {job_id}: {exclusions.records[job_id]} submit-line records for {seen} runs "
                "(a forged record, or another window): its exclusion or pin is left out",
            )
            continue
        yield job_id, choice, used


def summary(exclusions: Optional[Exclusions]) -> Optional[InputSummary]:
    return None if exclusions is None else exclusions.tally.summary()
