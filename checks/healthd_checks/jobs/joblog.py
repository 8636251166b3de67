"""The Xid, SXid and fallen-off-the-bus events in a job's stretch of the kernel log.

The prolog notes where /dev/kmsg stood when the job started (the SEQ of its last
record: a per-boot sequence number, so exact where a clock is not); the epilog reads
the records after it and notes where the log ends. Whose each record is, is decided
by ``healthd_checks.jobs.scope.owner`` against every job's stretch, not here. The
records go through the same parser and catalog as the ``xid`` check and ``scan-log``
(``healthd_checks.xid.scan``), so only the driver's own records count
(userspace ones only with ``accept_userspace_kmsg``). GPU indices are NVML's default
order: NVIDIA GPUs on the PCI bus sorted by address (``xid.nvidia_gpus``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, NamedTuple, Optional

from healthd.model import Status

from ..kernlog.source import LogUnavailable, read_kmsg
from ..xid.check import nvidia_gpus
from ..xid.parse import LineKind, sm_location
from ..xid.scan import ScanEntry, scan
from .scope import Job, KernelRecord


class JobEvent(NamedTuple):
    """One event of the job's window: the scanned line, its GPU index (None: unknown) and its GPC/TPC group."""

    entry: ScanEntry
    gpu: Optional[int]
    group: Optional[str]

    @property
    def subject(self) -> str:
        return self.entry.gpu

    @property
    def record(self) -> KernelRecord:
        """The record for attribution: an SXid names an NVSwitch, no GPU."""
        seq, event = self.entry.record.seq, self.entry.event
        names_gpu = event.kind is not LineKind.SXID and (event.pci is not None or bool(self.entry.uuid))
        return KernelRecord(seq if seq is not None else -1, names_gpu, self.gpu, self.entry.uuid)

    def details(self, job: Job, boot: str) -> dict[str, Any]:
        found = self.entry.to_dict()
        return {
            "boot": boot,
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


class JobLog(NamedTuple):
    """The events after the job's start, the SEQ the log ends at, and what was lost (overwritten records) if any."""

    events: tuple[JobEvent, ...]
    end: int
    lost: Optional[str]


def job_events(
    kmsg: Path,
    sysfs: Path,
    after: int,
    overrides: Optional[Mapping[str, Status]] = None,
    accept_userspace: bool = False,
) -> JobLog:
    """Every GPU's events after SEQ ``after``, to the log's end; raises ``LogUnavailable`` when it cannot be read."""
    result = read_kmsg(kmsg, after)
    # Back into the kernel's record format, which the scanner reads as a /dev/kmsg dump.
    dump = [
        f"{(line.facility or 0) * 8 + 4},{line.record_id},{line.usec or 0},-;{line.message}" for line in result.lines
    ]
    order = {str(address): index for index, address in enumerate(nvidia_gpus(sysfs))}
    events = []
    for entry in scan(dump, overrides, accept_userspace):
        index = order.get(str(entry.event.pci)) if entry.event.pci is not None else None
        events.append(JobEvent(entry, index, sm_location(entry.event)))
    end = int(result.cursor) if result.cursor is not None and result.cursor.isdigit() else after
    return JobLog(tuple(events), end, result.lost)


__all__ = ["JobEvent", "JobLog", "LogUnavailable", "job_events", "last_seq"]
