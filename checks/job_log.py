"""The Xid, SXid and fallen-off-the-bus events a job's time window left in the kernel log, on the job's GPUs.

The prolog notes where /dev/kmsg stood when the job started (the SEQ of its last
record: a per-boot sequence number, so exact where a clock is not); the epilog reads
the records after it. The records go through the same parser and catalog as the
``xid`` check and ``scan-log`` (``xid_scan``), so only the driver's own records count
(userspace ones only with ``accept_userspace_kmsg``). GPU indices are NVML's default
order: NVIDIA GPUs on the PCI bus sorted by address (``xid.nvidia_gpus``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from healthd.model import Status

from .job_scope import Job
from .kernlog import LogUnavailable, read_kmsg
from .xid import nvidia_gpus
from .xid_parse import Kind, sm_location
from .xid_scan import ScanEntry, scan


@dataclass(frozen=True)
class JobEvent:
    """One event of the job's window: the scanned line, its GPU index (None: unknown) and its GPC/TPC group."""

    entry: ScanEntry
    gpu: Optional[int]
    group: Optional[str]

    @property
    def subject(self) -> str:
        return self.entry.gpu

    def details(self, job: Job) -> dict[str, Any]:
        found = self.entry.to_dict()
        return {
            "job": job.job_id,
            "user": job.user,
            "xid": found["xid"],
            "kind": found["kind"],
            "bucket": found["bucket"],
            "gpu": self.gpu,
            "pci": found["pci"],
            "uuid": found["uuid"],
            "seq": found["seq"],
            "group": self.group,
            "process": found["process"],
        }


def last_seq(kmsg: Path) -> Optional[int]:
    """The SEQ of the newest record in the kernel log (None when it is empty); raises ``LogUnavailable``."""
    result = read_kmsg(kmsg, None)
    return int(result.cursor) if result.cursor is not None and result.cursor.isdigit() else None


def job_events(
    kmsg: Path,
    sysfs: Path,
    job: Job,
    after: Optional[int],
    overrides: Optional[Mapping[str, Status]] = None,
    accept_userspace: bool = False,
) -> tuple[list[JobEvent], Optional[str]]:
    """The job's events after SEQ ``after``, and what was lost (the kernel overwrote records), if anything.

    Raises ``LogUnavailable`` when the log cannot be read.
    """
    result = read_kmsg(kmsg, after)
    # Back into the kernel's record format, which the scanner reads as a /dev/kmsg dump.
    dump = [
        f"{(line.facility or 0) * 8 + 4},{line.record_id},{line.usec or 0},-;{line.message}" for line in result.lines
    ]
    order = {str(address): index for index, address in enumerate(nvidia_gpus(sysfs))}
    events = []
    for entry in scan(dump, overrides, accept_userspace):
        index = order.get(str(entry.event.pci)) if entry.event.pci is not None else None
        if entry.event.kind is not Kind.SXID and not job.has_gpu(index, entry.uuid):
            continue
        group = sm_location(entry.event)
        events.append(JobEvent(entry, index, group))
    return events, result.lost


__all__ = ["JobEvent", "LogUnavailable", "job_events", "last_seq"]
