"""What Slurm tells a prolog or epilog about its job, and which findings and Xid events concern that job.

slurmd runs ``Prolog=`` and ``Epilog=`` as root with the job's identity in the
environment (slurm.conf(5), "Prolog and Epilog Scripts"): ``SLURM_JOB_ID``,
``SLURM_JOB_USER`` and, when the job was given GPUs through GRES, ``SLURM_JOB_GPUS``
(their indices on the node). ``CUDA_VISIBLE_DEVICES`` (indices or ``GPU-`` UUIDs) is
read when ``SLURM_JOB_GPUS`` is absent. Neither set means the job was not confined
to some GPUs: every GPU is the job's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from healthd.model import Finding


@dataclass(frozen=True)
class Job:
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
