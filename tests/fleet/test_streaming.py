"""The fleet's inputs read as streams: a ``sacct --json`` document a job at a time, a broken one up to its break,
``--live`` through files, and each multi-node list expanded once.

A year of a large fleet's accounting is tens of GB of JSON and millions of distinct node
lists (docs/fleet.md, "At scale"): nothing may hold the document, and nothing may expand a
list again only to learn which nodes exist.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pytest
from healthd_testkit.paths import FIXTURES

from healthd.fleet import hosts, sacct_json
from healthd.fleet.analyze import analyze
from healthd.fleet.columnar import JobsFile

ACCOUNTING = FIXTURES / "slurm" / "accounting"
JSON_JOBS = ACCOUNTING / "sacct-json-22.05-take-out.json"
EVENTS = ACCOUNTING / "sacctmgr-events-22.05-take-out.txt"
Cli = Callable[..., tuple[int, str, str]]


class Endless:
    """A ``sacct --json`` document of ``runs`` jobs made as it is read; counts the characters handed out."""

    def __init__(self, runs: int) -> None:
        self.given = 0
        self.parts = self._parts(runs)
        self.pending = ""

    @staticmethod
    def _parts(runs: int) -> Iterator[str]:
        yield '{"meta": {"plugin": {"type": "openapi/dbv0.0.38"}}, "errors": [], "jobs": ['
        for n in range(1, runs + 1):
            job = {
                "job_id": n, "user": "alice", "partition": "batch", "name": "x" * 2000,
                "state": {"current": "COMPLETED"}, "time": {"start": 1700000000 + n, "end": 1700003600 + n},
                "allocation_nodes": 2, "nodes": f"gpu[{n % 900:03d}-{n % 900 + 1:03d}]",
                "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 16}]},
            }  # fmt: skip
            yield ("," if n > 1 else "") + json.dumps(job)
        yield '], "warnings": []}'

    def read(self, size: int) -> str:
        while len(self.pending) < size:
            part = next(self.parts, None)
            if part is None:
                break
            self.pending += part
        out, self.pending = self.pending[:size], self.pending[size:]
        self.given += len(out)
        return out


def test_a_json_document_is_read_a_job_at_a_time() -> None:
    document = Endless(20_000)  # about 45 MB of JSON
    rows = sacct_json.stream(document, "sacct --json", sacct_json.Seen())
    assert next(rows) == "|".join(sacct_json.JOB_TABLE)
    for number, row in enumerate(rows, 1):
        assert row.startswith(f"{number}|alice|batch|COMPLETED|@")
        # Read ahead by at most two chunks: the document is never held.
        assert document.given <= number * 2300 + 2 * sacct_json.CHUNK
    assert number == 20_000


def test_a_json_document_cut_short_keeps_its_runs_and_names_the_break(cli: Cli, tmp_path: Path) -> None:
    text = JSON_JOBS.read_text()
    whole = json.loads(text)["jobs"]
    cut = tmp_path / "jobs.json"
    cut.write_text(text[: text.index(json.dumps(whole[-1]["job_id"]), text.index('"job_id"', len(text) // 2))])
    code, out, err = cli("fleet", "report", "--jobs", str(cut), "--events", str(EVENTS), "--json")
    assert code == 0, err
    jobs = json.loads(out)["inputs"]["jobs"]
    assert jobs["records"] + jobs["skipped"] >= 1 and jobs["bad_lines"] == 1
    assert "the document breaks after job record" in jobs["first_bad_lines"][0]["why"]


def test_a_job_record_with_a_carriage_return_is_named_and_the_others_read(cli: Cli, tmp_path: Path) -> None:
    document = json.loads(JSON_JOBS.read_text())
    document["jobs"][0]["nodes"] = "node1\rnode2"
    document["jobs"][1]["user"] = {"forged": "alice|x"}
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps(document))
    code, out, err = cli("fleet", "report", "--jobs", str(jobs), "--events", str(EVENTS), "--json")
    assert code == 0, err
    read = json.loads(out)["inputs"]["jobs"]
    assert read["bad_lines"] == 2, read
    assert read["records"] + read["skipped"] == len(document["jobs"]) - 2


@pytest.mark.parametrize("engine", ["python", "duckdb"])
def test_each_multi_node_list_is_expanded_once_in_every_partition_and_for_its_failed_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, engine: str
) -> None:
    """A list seen in a second partition, or on a failed run after a run that did not fail, is not expanded again.

    Each partition's node set needs its lists' names, and so does a failed run's
    attribution: both come from the list's one expansion (``hosts.Lists``), whoever read
    the runs first (DuckDB hands the Python reader the failed runs after it counted the others).
    """
    from healthd.slurm import hostlist

    if engine == "duckdb":
        pytest.importorskip("duckdb")
    asked: Counter[str] = Counter()
    real = hostlist.expand

    def counted(text: str) -> tuple[str, ...]:
        asked[text] += 1
        return real(text)

    monkeypatch.setattr(hostlist, "expand", counted)
    lists = [f"gpu[{n:03d}-{n + 3:03d},{n + 9:03d}]" for n in range(0, 400, 4)]
    header = "JobID|User|Partition|State|Start|End|NNodes|NodeList|AllocTRES"
    jobs = [header]
    for n in range(3000):
        # Each list's first run did not fail; later ones fail, in partition p and in q.
        state = "FAILED" if n % 7 == 3 and n >= 100 else "COMPLETED"
        partition = "q" if n % 3 == 0 else "p"
        times = "2024-01-01T00:00:00|2024-01-01T05:00:00"
        jobs.append(f"{n + 1}|u{n % 9}|{partition}|{state}|{times}|5|{lists[n % 100]}|gres/gpu=40")
    events = ["Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User"]
    events.append("c|gpu004|2024-01-01T04:58:00|Unknown|DRAIN|healthd: XID_79 gpu0|root(0)")
    source: Iterable[str] = jobs
    if engine == "duckdb":
        path = tmp_path / "jobs.txt"
        path.write_text("\n".join(jobs) + "\n")
        source = JobsFile(path)
    report = analyze(source, events)
    on_gpu004 = [n for n in range(3000) if n % 7 == 3 and n >= 100 and "gpu004" in real(lists[n % 100])]
    assert report.runs == 3000 and sorted(int(a.job_id) - 1 for a in report.attributed) == on_gpu004
    assert len(report.verdicts) == len({name for text in lists for name in real(text)})
    assert max(count for text, count in asked.items() if text in lists) == 1, asked.most_common(3)


def test_live_streams_sacct_into_files(cli: Cli, write_config: Callable[..., Path], tmp_path: Path) -> None:
    """Stand-in sacct and sacctmgr: ``--live`` reads their output from files, JSON converted a job at a time.

    This sacct's JSON is cut inside its last job (a sacct killed, a full disk): the runs
    before the break are read, the break is one bad line.
    """
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    text = JSON_JOBS.read_text()
    last = text.rindex('"job_id"')
    (tmp_path / "jobs.json").write_text(text[:last])
    for name, body in (
        ("sacct", f'case "$*" in *--json*) cat {tmp_path}/jobs.json;; *SubmitLine*) echo "JobID|SubmitLine";; esac'),
        ("sacctmgr", f"cat {EVENTS}"),
    ):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    config = write_config(f'[slurm]\nbin_dir = "{bin_dir}"\n')
    since, until = "2026-11-01", "2026-12-31"
    code, out, err = cli(
        "fleet", "report", "--live", "--since", since, "--until", until, "--json", "--config", str(config)
    )
    assert code == 0, err
    found = json.loads(out)
    header, *rows = sacct_json.read(text, "x").lines
    from_file = analyze([header, *rows[:-1]], EVENTS.read_text().split("\n"))
    assert found["runs"] == from_file.runs > 0 and found["inputs"]["jobs"]["bad_lines"] == 1
    assert len(found["attributed_failures"]) == len(from_file.attributed)
    named = [a for a in found["attributed_failures"] if "job_name" in a]
    assert named, "the failed runs' names come with them"


def test_lists_that_do_not_parse_are_remembered_up_to_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Millions of distinct broken lists would otherwise grow the report; past the bound each is parsed again."""
    monkeypatch.setattr(hosts, "REFUSED_KEPT", 2)
    lists = hosts.Lists()
    for text in ("n[1-", "n[2-", "n[3-", "n[3-", "n[1-2]"):
        lists.add("p", text)
    assert len(lists._refused) == 2 and lists.nodes == {"n1", "n2"}
    with pytest.raises(hosts.HostlistError):
        lists.names("n[3-")
