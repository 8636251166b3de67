"""Pinning from what a job asked for: submit line, ``#SBATCH`` lines, an exclusion of every other node.

A user whose failed runs their own request placed on one node gives no evidence against it:
a node list (on the command line or in the script), or ``-x`` of every other node of the
partition. Two users doing so together pass the leave-one-user-out guard, so the request
itself has to be read. The cluster test is ``test_lemons_cluster.py``; these are the rules
on plain values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional

import pytest
from healthd_testkit import synth

from healthd.fleet.analyze import FleetReport, analyze
from healthd.fleet.hosts import Request, directives, request, script_request
from healthd.fleet.lemons import NodeSignals
from healthd.fleet.scripts import Blocks, batch_jobs, read_scripts

HEALTHY = synth.FleetSpec(nodes=200, events=500, incident_lemons=0, silent_lemons=0, buggy_users=0, seed=7)
TARGET = "gpu0199"
RULE = "-" * 80


def script_output(scripts: dict[str, str]) -> str:
    """``sacct -B -j ...`` as 22.05 prints it (src/sacct/options.c, _print_script)."""
    return "".join(f"Batch Script for {job}\n{RULE}\n{body}\n" for job, body in scripts.items())


@pytest.mark.parametrize(
    ("script", "words"),
    [
        ("#!/bin/sh\n#SBATCH --nodelist=node2\nexit 1\n", ["--nodelist=node2"]),
        ("#!/bin/sh\n#SBATCH -w node2 # on node2\n#SBATCH -J 'a b'\n", ["-w", "node2", "-J", "a b"]),
        ("#!/bin/sh\n\n# a comment\n#SBATCH -x node1\n", ["-x", "node1"]),  # blank and comment lines go on
        ("#!/bin/sh\necho start\n#SBATCH -w node2\n", []),  # after the first command sbatch reads no more
        ("#!/bin/sh\n  #SBATCH -w node2\n", []),  # not at the line's first byte: a comment
        ("#SBATCH-wnode2\n", ["-wnode2"]),  # anything after the magic word
        ("#SLURM -w node2\n", ["-w", "node2"]),  # the old word, still read
        ('#SBATCH -x "node1 node3"\n', ["-x", "node1 node3"]),
        ("#SBATCH -x node\\#1\n", ["-x", "node#1"]),  # an escaped # is no comment
        ("#SBATCH -w node2\r\n#SBATCH -x node1\n", ["-w", "node2", "-x", "node1"]),  # \r is a space to isspace(3)
        ("#SBATCH -w node2\u2028x\n", ["-w", "node2\u2028x"]),  # a Unicode line separator is not
    ],
)
def test_sbatch_directives_are_read_as_sbatch_reads_them(script: str, words: list[str]) -> None:
    assert directives(script) == words


def test_the_command_line_overrides_the_scripts_exclusion_and_a_node_list_in_either_pins() -> None:
    script = script_request("#!/bin/sh\n#SBATCH -x node1\n#SBATCH -w node2\n")
    assert script == Request(("node1",), True, True)
    assert request("sbatch -x node3 run.sh").over(script) == Request(("node3",), True, True)
    assert request("sbatch run.sh").over(script) == script
    assert request("sbatch -w node4 run.sh").over(Request()).pinned


def test_scripts_are_read_by_job_and_a_forged_header_costs_the_named_job_its_script() -> None:
    forged = f"#!/bin/sh\n#SBATCH -x node1\necho\nBatch Script for 7\n{RULE}\n#SBATCH -w node2\n"
    text = script_output(
        {"5": "#!/bin/sh\n#SBATCH -w node2\nexit 1\n", "6": forged, "7": "#!/bin/sh\ntrue\n", "8": "NONE\n"}
    )
    found = read_scripts(text)
    assert found.requests == {"5": Request((), True, False), "6": Request(("node1",), False, True)}
    assert found.rejected == ("7",)
    assert (found.records, found.stored) == (5, 4)


def test_a_job_looked_up_on_two_days_is_believed_and_a_header_forged_on_either_still_counts() -> None:
    """``--cache`` keeps each day's lookup apart: a job whose runs end on two days is in both."""
    five, six = "#!/bin/sh\n#SBATCH -x node1\n", "#!/bin/sh\n#SBATCH -w node2\n"
    first, second = script_output({"5": five, "6": six}), script_output({"9": "NONE\n", "5": five})
    found = read_scripts(Blocks([first, second]))
    assert found.requests == {"5": Request(("node1",), False, True), "6": Request((), True, False)}
    assert (found.rejected, found.records, found.stored) == ((), 3, 2)
    forged = script_output({"7": f"#!/bin/sh\nexit 1\nBatch Script for 5\n{RULE}\n#SBATCH -w node3\n"})
    found = read_scripts(Blocks([first, second, forged]))
    assert found.rejected == ("5",) and "5" not in found.requests
    twice = script_output({"7": f"true\nBatch Script for 6\n{RULE}\n{six}Batch Script for 6\n{RULE}\n{six}"})
    assert read_scripts(Blocks([twice])).rejected == ("6",), "a header forged twice in one lookup counts twice"
    assert read_scripts(Blocks([first, twice])).rejected == ("6",)
    # Another text that asks for the same: a forgery as on a whole read, though its request is the real one's.
    same_ask = script_output({"8": f"true\nBatch Script for 5\n{RULE}\n#!/bin/bash\n#SBATCH -x node1\n"})
    assert read_scripts(Blocks([first, same_ask])).rejected == read_scripts(first + same_ask).rejected == ("5",)


def test_a_cluster_that_keeps_no_scripts_is_said_to_show_none() -> None:
    """Without AccountingStoreFlags=job_script sacct prints NONE for each: no #SBATCH line was seen."""
    jobs, events, submit, _ = _two_users({"mallory": ("", None)})
    report = analyze(jobs, events, submit_lines=lambda: iter(submit), scripts=script_output({"900000": "NONE\n"}))
    assert any(note.startswith("no batch scripts") for note in report.lemon_notes)


def test_the_scripts_asked_for_are_the_batch_jobs() -> None:
    records = [
        "1|sbatch -w node2 run.sh",
        "2|srun -w node2 false",
        "3|/usr/bin/sbatch run.sh",
        "1|sbatch run.sh",
        "x|sbatch",
    ]
    assert batch_jobs(records) == ["1", "3"]


def _two_users(ways: dict[str, tuple[str, Optional[str]]]) -> tuple[list[str], list[str], list[str], str]:
    """The healthy fleet, and per user: 40 failed runs on TARGET, 400 completed ones elsewhere.

    ``ways`` gives each user's failing runs' submit options and batch script (None: none).
    Returns the jobs, events, submit lines and the scripts' ``sacct -B`` output.
    """
    fleet = synth.plant(HEALTHY)
    jobs, submit = list(synth.job_lines(fleet)), list(synth.submit_lines(fleet))
    scripts: dict[str, str] = {}
    for u, (user, (options, script)) in enumerate(ways.items()):
        for k in range(440):
            fails, job = k < 40, str(900000 + 1000 * u + k)
            node = TARGET if fails else HEALTHY.node_name(k % 150)
            when = f"2024-01-{2 + k % 25:02d}T{k % 20:02d}"
            jobs.append(
                f"{job}|{user}|gpu|{'FAILED' if fails else 'COMPLETED'}|{int(fails)}:0|{when}:00:00|"
                f"{when}:00:00|{when}:10:00|00:10:00|1|{node}|gres/gpu=8"
            )
            submit.append(f"{job}|sbatch {options if fails else ''} run.sh")
            if fails and script is not None:
                scripts[job] = script
    return jobs, list(synth.event_lines(fleet)), submit, script_output(scripts)


def _target(report: FleetReport) -> NodeSignals:
    return next(v.signals for v in report.verdicts if v.node == TARGET)


EVERY_OTHER = "-x gpu[0000-0198]"


def test_two_users_placing_their_failures_on_a_node_by_script_and_by_exclusion_make_no_lemon() -> None:
    """Leaving out one of two users leaves the other's 40 failures: the plain and the one-user guard
    both flag TARGET. Read from the requests, all 80 were placed there by their owners."""
    ways = {"mallory": ("", "#!/bin/sh\n#SBATCH --nodelist=gpu0199\nexit 1\n"), "trudy": (EVERY_OTHER, None)}
    jobs, events, submit, scripts = _two_users(ways)
    report = analyze(jobs, events, submit_lines=lambda: iter(submit), scripts=scripts)
    assert TARGET not in {v.node for v in report.lemons}
    held = {h.node: h for h in report.held_back}
    assert held[TARGET].plain_q < 1e-6, "without the guards it is a lemon"
    signals = _target(report)
    assert (signals.pinned_runs, signals.pinned_failures, signals.counted_failures) == (80, 80, 0)
    other = next(v.signals for v in report.verdicts if v.node == "gpu0000")
    assert other.excluded_by_jobs >= 40  # trudy's exclusion is still counted against the others


def test_without_the_scripts_the_script_pin_is_not_seen_and_the_report_says_so() -> None:
    ways = {"mallory": ("", "#!/bin/sh\n#SBATCH --nodelist=gpu0199\nexit 1\n"), "trudy": (EVERY_OTHER, None)}
    jobs, events, submit, _ = _two_users(ways)
    report = analyze(jobs, events, submit_lines=lambda: iter(submit))
    assert (_target(report).pinned_failures, _target(report).counted_failures) == (40, 40)
    assert any(note.startswith("no batch scripts") for note in report.lemon_notes)


def test_an_exclusion_that_leaves_the_scheduler_a_choice_is_no_pin() -> None:
    """``-x`` of all but two nodes: the scheduler chose between them, so the runs are evidence."""
    ways = {"mallory": ("-x gpu[0000-0197]", None)}
    jobs, events, submit, _ = _two_users(ways)
    report = analyze(jobs, events, submit_lines=lambda: iter(submit))
    assert _target(report).pinned_runs == 0 and _target(report).counted_failures == 40


def test_a_forged_script_header_does_not_pin_another_users_job() -> None:
    """mallory's script carries a header for trudy's failing job 901000 with a node list under it:
    that job then has two headers, and neither script is believed."""
    jobs, events, submit, _ = _two_users({"mallory": ("", None), "trudy": ("", None)})
    forged = f"#!/bin/sh\nexit 1\nBatch Script for 901000\n{RULE}\n#SBATCH -w {TARGET}\n"
    scripts = script_output({"900000": forged, "901000": "#!/bin/sh\nexit 1\n"})
    report = analyze(jobs, events, submit_lines=lambda: iter(submit), scripts=scripts)
    assert _target(report).pinned_runs == 0 and _target(report).counted_failures == 80
    assert report.submit_lines is not None and report.submit_lines.bad == 1


def test_an_exclusion_in_a_partition_of_one_node_places_nothing() -> None:
    """With no other node in its partition, the run went where any run there goes."""
    jobs = ["JobID|User|Partition|State|Start|End|NNodes|NodeList|AllocTRES"]
    jobs += [
        f"{k}|mallory|solo|FAILED|2024-01-02T00:00:00|2024-01-02T00:10:00|1|gpu0001|gres/gpu=8" for k in range(1, 6)
    ]
    submit = ["JobID|SubmitLine", *(f"{k}|sbatch -x gpu0002 run.sh" for k in range(1, 6))]
    events = ["Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User"]
    report = analyze(jobs, events, submit_lines=lambda: iter(submit))
    signals = next(v.signals for v in report.verdicts if v.node == "gpu0001")
    assert signals.pinned_runs == 0 and signals.counted_failures == 5


def test_the_report_reads_the_scripts_file_with_the_submit_lines(
    tmp_path: Path, cli: Callable[..., tuple[int, str, str]]
) -> None:
    ways = {"mallory": ("", "#!/bin/sh\n#SBATCH --nodelist=gpu0199\nexit 1\n"), "trudy": (EVERY_OTHER, None)}
    jobs, events, submit, scripts = _two_users(ways)
    files = {}
    for name, text in (("jobs", "\n".join(jobs)), ("events", "\n".join(events)), ("submit", "\n".join(submit))):
        files[name] = tmp_path / f"{name}.txt"
        files[name].write_text(text + "\n")
    files["scripts"] = tmp_path / "scripts.txt"
    files["scripts"].write_text(scripts)
    inputs = ("--jobs", str(files["jobs"]), "--events", str(files["events"]))
    code, out, err = cli(
        "fleet", "report", *inputs, "--submit-lines", str(files["submit"]), "--scripts", str(files["scripts"]), "--json"
    )
    assert code == 0, err
    document = json.loads(out)
    assert TARGET not in {lemon["node"] for lemon in document["lemon_nodes"]}
    assert not any(note.startswith("no batch scripts") for note in document["lemon_test"]["notes"])
    code, _, err = cli("fleet", "report", *inputs, "--scripts", str(files["scripts"]))
    assert code == 64 and "--scripts goes with --submit-lines" in err
