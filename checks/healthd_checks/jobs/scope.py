"""What Slurm tells a prolog or epilog about its job, and which findings and Xid events concern that job.

slurmd runs ``Prolog=`` and ``Epilog=`` as root with the job's identity in the
environment (slurm.conf(5), "Prolog and Epilog Scripts"): ``SLURM_JOB_ID``,
``SLURM_JOB_USER`` and, when the job was given GPUs through GRES, ``SLURM_JOB_GPUS``
(their indices on the node). ``CUDA_VISIBLE_DEVICES`` (indices or ``GPU-`` UUIDs) is
read when ``SLURM_JOB_GPUS`` is absent. Neither set means no GPU list: on a node that
gives out its GPUs through GRES the job was given none; on a node without GPU GRES it
was not confined, and every GPU is the job's.

Attribution (``owner``). A kernel record is one job's evidence only when exactly one
job can have caused it: among the jobs whose kernel-log window holds the record, the
one whose GPUs it names. Two such jobs (a shared GPU, or unconfined jobs side by side),
or a job whose window is unknown among them, make it nobody's: one Xid counted for
several jobs would look like the GPU failing under several users.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, NamedTuple, Optional

from healthd.model import Finding


class Job(NamedTuple):
    """A job as its prolog or epilog sees it; ``gpus`` None means every GPU of the node."""

    job_id: str
    user: str
    gpus: Optional[frozenset[str]] = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Job:
        listed = env.get("SLURM_JOB_GPUS") or env.get("CUDA_VISIBLE_DEVICES")
        gpus = None
        if listed is not None and listed.strip():
            gpus = frozenset(part.strip() for part in listed.split(",") if part.strip())
        # Slurm's own values, but shown to people and stored: keep them short and printable.
        job_id = "".join(c for c in env.get("SLURM_JOB_ID", "") if c.isalnum() or c in "_.-")[:32]
        user = "".join(c for c in env.get("SLURM_JOB_USER", "") if c.isalnum() or c in "_.-@")[:64]
        return cls(job_id or "unknown", user or "unknown", gpus)

    def has_gpu(self, index: Optional[int], uuid: Optional[str]) -> bool:
        """Whether the GPU with this index or UUID is one of the job's (unknown ones are, to be safe)."""
        if self.gpus is None or (index is None and not uuid):
            return True
        return (index is not None and str(index) in self.gpus) or (bool(uuid) and uuid in self.gpus)

    def concerns(self, finding: Finding) -> bool:
        """A finding about one of the job's GPUs, or about the node as a whole (it names no GPU)."""
        details = finding.details
        index = details.get("gpu", details.get("index"))
        uuid = details.get("uuid")
        return self.has_gpu(
            index if isinstance(index, int) and not isinstance(index, bool) else None,
            uuid if isinstance(uuid, str) else None,
        )

    def to_dict(self) -> dict[str, object]:
        return {"job": self.job_id, "user": self.user, "gpus": sorted(self.gpus) if self.gpus is not None else None}


class LogWindow(NamedTuple):
    """A job's stretch of one boot's kernel log: records with ``start < SEQ <= end``.

    ``start`` None: the prolog noted no position (the window may begin anywhere);
    ``end`` None: the job still runs, or its epilog noted no position.
    """

    job: Job
    start: Optional[int]
    end: Optional[int]

    def holds(self, seq: int) -> bool:
        return (self.start is None or self.start < seq) and (self.end is None or seq <= self.end)


@dataclass(frozen=True)
class KernelRecord:
    """What attribution needs of one kernel record: its SEQ and the GPU it names (``names_gpu`` False: none)."""

    seq: int
    names_gpu: bool
    index: Optional[int] = None
    uuid: Optional[str] = None


def claims(job: Job, record: KernelRecord, gres: bool) -> bool:
    """Whether ``job`` may have caused ``record``: a record naming no GPU may be any job's.

    Without a GPU list a job owns every GPU on a node without GPU GRES and none on a
    node with it (Slurm then sets ``SLURM_JOB_GPUS`` for every job given a GPU:
    slurm.conf(5), "Prolog and Epilog Scripts"). A GPU whose index is unknown (not in
    sysfs) matches no list.
    """
    if not record.names_gpu:
        return True
    if job.gpus is None:
        return not gres
    return (record.index is not None and str(record.index) in job.gpus) or (
        bool(record.uuid) and record.uuid in job.gpus
    )


def owner(record: KernelRecord, windows: Iterable[LogWindow], gres: bool) -> Optional[Job]:
    """The one job that may have caused ``record``; None when no job or more than one may have."""
    found = {w.job.job_id: w.job for w in windows if w.holds(record.seq) and claims(w.job, record, gres)}
    return next(iter(found.values())) if len(found) == 1 else None
