"""Whose kernel record is it: one job's alone, or nobody's; and each record is stored at most once.

The pure rule (``healthd_checks.jobs.scope.owner``) on plain values, then the epilog's real recording
path (``healthd.cycle.jobrecord.record_start`` and ``attribute`` on a real history, ``job_events``
on a kernel-log file in the kernel's record format) driven by hypothesis through
arbitrary interleavings of jobs, users and kernel records.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Optional

from healthd_testkit.xid import BOOT_A, Node
from hypothesis import example, given, settings
from hypothesis import strategies as st

from healthd.cycle.epilog import attribute
from healthd.cycle.jobrecord import record_end, record_start
from healthd.store.history import History
from healthd.store.historyreader import HistoryReader
from healthd.store.historyschema import Kind
from healthd_checks.jobs.joblog import job_events, last_seq
from healthd_checks.jobs.scope import Job, KernelRecord, LogWindow, owner

GPUS = ("0000:3b:00.0", "0000:5e:00.0")


def _xid(bdf: str, code: int = 31) -> str:
    return f"NVRM: Xid (PCI:{bdf[:-2]}): {code}, pid=1, name=python, Ch 00000008, intr 10000000. MMU Fault"


def test_a_record_on_a_gpu_is_the_one_job_that_holds_it() -> None:
    gpu_job, cpu_job = Job("1", "alice", frozenset({"0"})), Job("2", "bob")
    windows = [LogWindow(gpu_job, 10, None), LogWindow(cpu_job, 10, None)]
    on_gpu0 = KernelRecord(11, True, 0, None)
    assert owner(on_gpu0, windows, gres=True) == gpu_job, "with GRES a job without SLURM_JOB_GPUS owns no GPU"
    assert owner(on_gpu0, windows, gres=False) is None, "without GRES both may have caused it: nobody's"
    assert owner(KernelRecord(11, True, 1, None), windows, gres=True) is None, "a GPU no job was given"


def test_an_unconfined_job_alone_owns_every_gpu_and_records_naming_no_gpu() -> None:
    alone = [LogWindow(Job("1", "alice"), 10, 20)]
    assert owner(KernelRecord(15, True, None, None), alone, gres=False) == Job("1", "alice")
    assert owner(KernelRecord(15, False), alone, gres=True) == Job("1", "alice"), "an SXid in its window"
    assert owner(KernelRecord(21, True, 0, None), alone, gres=False) is None, "after its end"
    assert owner(KernelRecord(10, True, 0, None), alone, gres=False) is None, "its start is not in it"


def test_a_job_whose_window_is_unknown_makes_the_records_it_may_hold_nobodys() -> None:
    known, unknown = LogWindow(Job("1", "alice"), 10, 20), LogWindow(Job("2", "bob"), None, 30)
    assert owner(KernelRecord(15, True, 0, None), [known, unknown], gres=False) is None
    assert owner(KernelRecord(31, True, 0, None), [unknown], gres=False) is None


# One step of a node's life: ("job", n) starts job n the first time (its prolog, when it
# has one) and ends it the second (its epilog); ("xid", g) is the driver logging an
# application Xid on GPU g (None: on a GPU that sysfs does not list).
Step = tuple[str, Optional[int]]
STEPS = st.lists(
    st.one_of(st.tuples(st.just("job"), st.integers(0, 3)), st.tuples(st.just("xid"), st.sampled_from([0, 1, None]))),
    max_size=30,
)
# Each job's (start, end) SEQ as the test saw them (None: not noted, or not yet).
Windows = dict[str, tuple[Optional[int], Optional[int]]]
# Each job: its user, its GPU list (None: none), whether its prolog ran.
JobSpec = tuple[str, Optional[str], bool]
JOBS = st.lists(
    st.tuples(
        st.sampled_from(["u1", "u2", "u3"]),
        st.sampled_from([None, None, "0", "1", "0,1"]),
        st.sampled_from([True, True, True, False]),
    ),
    min_size=4,
    max_size=4,
)


def _step(history: History, node: Node, job: Job, prolog: bool, gres: Optional[bool], windows: Windows) -> None:
    """Job ``job``'s prolog (the first time) or epilog (the second), as slurmd would run them."""
    if job.job_id not in windows:
        seq = last_seq(node.kmsg) if prolog else None
        if prolog:
            record_start(history, job, seq, BOOT_A, time.time())
        windows[job.job_id] = (seq, None)
        return
    start, end = windows[job.job_id]
    if end is not None:
        return
    if start is None:  # no prolog position: the epilog notes where the log ends, and nothing else
        windows[job.job_id] = (None, last_seq(node.kmsg))
        record_end(history, job, BOOT_A, windows[job.job_id][1], "UNKNOWN", "no prolog position")
        return
    log = job_events(node.kmsg, node.root / "sys", start)
    attribute(history, LogWindow(job, start, log.end), log.events, BOOT_A, gres)
    windows[job.job_id] = (start, log.end)


def _play(root: Path, steps: list[Step], jobs: list[JobSpec], gres: Optional[bool]) -> None:
    node = Node(root)
    for bdf in GPUS:
        node.gpu(bdf)
    node.log("Linux version 6.1")
    state = root / "state"
    state.mkdir(mode=0o700)
    History.open(state).close()
    windows: Windows = {}
    owned: dict[int, set[str]] = {}
    for what, number in steps:
        if what == "xid":
            node.log(_xid("0000:99:00.0" if number is None else GPUS[number]))
            owned[node.seq] = {j for j, (_, end) in windows.items() if end is None}
            continue
        assert number is not None
        user, gpus, prolog = jobs[number]
        job = Job(str(number), user, frozenset(gpus.split(",")) if gpus else None)
        with History.open(state) as history:
            _step(history, node, job, prolog, gres, windows)
    reader = HistoryReader.open_readonly(state)
    assert reader is not None
    with reader:
        rows = list(reader.events(kinds=(Kind.JOB_XID,)))
    recorded = [(e.details["boot"], e.details["seq"], e.details["job"]) for e in rows]
    keys = [(boot, seq) for boot, seq, _ in recorded]
    assert len(keys) == len(set(keys)), f"a kernel record counted twice: {recorded}"
    for _, seq, job_id in recorded:
        assert job_id in owned[seq], f"record {seq} went to job {job_id}, which was not running: {owned[seq]}"
        assert jobs[int(job_id)][2], "a job with no prolog position attributed a record"


@settings(max_examples=200, deadline=None)
@given(STEPS, JOBS, st.sampled_from([None, True, False]))
# Two unconfined jobs and one Xid between their prologs and epilogs: the old epilog stored it twice.
@example([("job", 0), ("job", 1), ("xid", 0), ("job", 0), ("job", 1)], [("u1", None, True)] * 4, None)
def test_no_interleaving_of_jobs_users_and_records_counts_a_record_twice(
    steps: list[Step], jobs: list[JobSpec], gres: Optional[bool]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _play(Path(tmp), steps, jobs, gres)
