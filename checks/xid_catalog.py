"""The Xid severity table: which bucket each Xid falls in, its default grade, and whether it sticks.

Buckets follow the "Resolution Bucket (Immediate Action)" column of NVIDIA's Xid
catalog (docs.nvidia.com/deploy/xid-errors, "Analyzing Xid Errors with the Xid
Catalog"): RESET_GPU and RESTART_BM (reboot) Xids, uncorrectable ECC, row-remap
failures, GSP errors, NVLink errors, fallen off the bus and CONTACT_SUPPORT are
hardware faults and CRITICAL. RESTART_APP Xids, together with the ones NVIDIA's
Kubernetes device plugin skips as application errors (13, 31, 43, 45, 68), are
recorded as OK observations and only escalate when they repeat on one GPU. IGNORE
Xids are informational. An Xid not in the table is WARNING: a new driver may log
a new hardware fault, and an unexplained Xid deserves a look without draining a
node at once. Every grade can be overridden per Xid in the config.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Mapping, Optional

from healthd.model import Status

from .xid_parse import Kind, RecoveryAction, XidEvent


class Bucket(enum.Enum):
    """Why an Xid is graded the way it is (kept in finding details and scan-log output)."""

    RESET_GPU = "reset_gpu"
    REBOOT = "reboot"
    CONTACT_SUPPORT = "contact_support"
    ROW_REMAP_FAILURE = "row_remap_failure"
    UNCORRECTABLE_ECC = "uncorrectable_ecc"
    GSP_ERROR = "gsp_error"
    NVLINK = "nvlink"
    FALLEN_OFF_BUS = "fallen_off_bus"
    RECOVERY_ACTION = "recovery_action"
    APPLICATION = "application"
    INFORMATIONAL = "informational"
    NVSWITCH_FATAL = "nvswitch_fatal"
    NVSWITCH_NONFATAL = "nvswitch_nonfatal"
    UNKNOWN = "unknown"


class Sticky(enum.Enum):
    """What clears a finding besides an acknowledgement: nothing short of a reset, or of a reboot."""

    NO = "no"
    UNTIL_RESET = "until_reset"
    UNTIL_REBOOT = "until_reboot"


@dataclass(frozen=True)
class Entry:
    bucket: Bucket
    grade: Status
    sticky: Sticky
    summary: str


def _hw(bucket: Bucket, summary: str, sticky: Sticky = Sticky.UNTIL_RESET) -> Entry:
    return Entry(bucket, Status.CRITICAL, sticky, summary)


def _app(summary: str) -> Entry:
    return Entry(Bucket.APPLICATION, Status.OK, Sticky.NO, summary)


def _info(summary: str) -> Entry:
    return Entry(Bucket.INFORMATIONAL, Status.OK, Sticky.NO, summary)


_NVLINK5 = "NVLink5 error (decode with NVIDIA's NVLink5 Xid tables)"

# Xid -> entry. Summaries are our own short wording of the catalog's description.
CATALOG: Mapping[int, Entry] = {
    8: _app("GPU stopped processing (channel idle timeout)"),
    13: _app("graphics engine exception"),
    31: _app("GPU memory page fault"),
    43: _app("GPU stopped processing (channel reset by the driver)"),
    45: _app("preemptive cleanup after a previous error or process exit"),
    48: _hw(Bucket.UNCORRECTABLE_ECC, "double bit ECC error"),
    61: _hw(Bucket.CONTACT_SUPPORT, "internal micro-controller breakpoint/warning"),
    62: _hw(Bucket.RESET_GPU, "internal micro-controller halt"),
    63: _info("ECC page retirement or row remapping recorded"),
    64: _hw(Bucket.ROW_REMAP_FAILURE, "ECC page retirement or row remapping failure"),
    68: _app("NVDEC0 (video decoder) exception"),
    69: _app("graphics engine class error"),
    74: _hw(Bucket.NVLINK, "NVLink error"),
    79: _hw(Bucket.FALLEN_OFF_BUS, "GPU has fallen off the bus", Sticky.UNTIL_REBOOT),
    92: _info("high single-bit ECC error rate"),
    94: _app("contained ECC error (affected application must restart)"),
    95: _hw(Bucket.UNCORRECTABLE_ECC, "uncontained ECC error"),
    109: _hw(Bucket.RESET_GPU, "context switch timeout"),
    110: _hw(Bucket.RESET_GPU, "security fault"),
    119: _hw(Bucket.GSP_ERROR, "GSP RPC timeout"),
    120: _hw(Bucket.GSP_ERROR, "GSP error"),
    121: _info("corrected C2C link error"),
    140: _hw(Bucket.UNCORRECTABLE_ECC, "unrecovered ECC error"),
    143: _hw(Bucket.RESET_GPU, "GPU initialization failure"),
    144: _hw(Bucket.NVLINK, _NVLINK5),
    145: _hw(Bucket.NVLINK, _NVLINK5),
    146: _hw(Bucket.NVLINK, _NVLINK5),
    147: _hw(Bucket.NVLINK, _NVLINK5),
    148: _hw(Bucket.NVLINK, _NVLINK5),
    149: _hw(Bucket.NVLINK, _NVLINK5),
    150: _hw(Bucket.NVLINK, _NVLINK5),
    154: Entry(Bucket.RECOVERY_ACTION, Status.OK, Sticky.NO, "GPU recovery action changed"),
}

UNKNOWN_XID = Entry(Bucket.UNKNOWN, Status.WARNING, Sticky.NO, "Xid not in healthd's catalog")

# Xid 154's new action decides its grade: the driver itself says what the GPU needs.
RECOVERY_ENTRIES: Mapping[RecoveryAction, Entry] = {
    RecoveryAction.NONE: Entry(Bucket.RECOVERY_ACTION, Status.OK, Sticky.NO, "no recovery action needed"),
    RecoveryAction.GPU_RESET: _hw(Bucket.RECOVERY_ACTION, "recovery action: GPU reset"),
    RecoveryAction.NODE_REBOOT: _hw(Bucket.RECOVERY_ACTION, "recovery action: node reboot", Sticky.UNTIL_REBOOT),
    RecoveryAction.DRAIN_P2P: _hw(Bucket.RECOVERY_ACTION, "recovery action: drain P2P"),
    RecoveryAction.DRAIN_AND_RESET: _hw(Bucket.RECOVERY_ACTION, "recovery action: drain P2P and reset GPU"),
}

# NVSwitch SXids: NVIDIA's Fabric Manager guide treats fatal SXids as needing a
# reset of the GPUs and switches in the fabric; non-fatal ones are corrected.
SXID_FATAL = _hw(Bucket.NVSWITCH_FATAL, "fatal NVSwitch error")
SXID_NONFATAL = Entry(Bucket.NVSWITCH_NONFATAL, Status.OK, Sticky.NO, "non-fatal NVSwitch error")
SXID_UNCLASSIFIED = Entry(Bucket.UNKNOWN, Status.WARNING, Sticky.NO, "NVSwitch error of unstated fatality")


def override_key(event: XidEvent) -> str:
    """The key an operator uses in ``overrides``: ``"79"`` for Xid 79, ``"SXID_20034"`` for an SXid."""
    return f"SXID_{event.code}" if event.kind is Kind.SXID else str(event.code)


def classify(event: XidEvent, overrides: Optional[Mapping[str, Status]] = None) -> Entry:
    """The entry for ``event`` with the operator's override applied to its grade."""
    if event.kind is Kind.SXID:
        entry = SXID_FATAL if event.fatal else SXID_NONFATAL if event.fatal is False else SXID_UNCLASSIFIED
    elif event.code == 154 and event.recovery is not None:
        action = event.recovery.action
        entry = RECOVERY_ENTRIES[action] if action is not None else UNKNOWN_XID
    else:
        entry = CATALOG.get(event.code, UNKNOWN_XID)
    grade = (overrides or {}).get(override_key(event))
    if grade is None or grade is entry.grade:
        return entry
    return Entry(entry.bucket, grade, entry.sticky, entry.summary)
