"""The Xid severity table: NVIDIA's immediate action for each Xid, healthd's grade, and what clears it.

``IMMEDIATE_ACTION`` is the "Resolution Bucket (Immediate Action)" column of
NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
sheet "Xids", Xids 1-161; 162 and later have no immediate action there). healthd
grades by that column:

- RESET_GPU, the WORKFLOW_XID_48 (double-bit ECC: reset the GPU) and WORKFLOW_NVLINK_ERR
  buckets, and CONTACT_SUPPORT are CRITICAL until a GPU
  reset (CONTACT_SUPPORT is also the bucket of every Xid the catalog marks
  "Unused": a retired code appearing on a current GPU needs a person);
- RESTART_BM (reboot the machine), RESTART_VM (this VM must restart) and
  CHECK_MECHANICALS (reseat the board: power it off) are CRITICAL until reboot;
- RESTART_APP Xids are recorded as OK (bucket ``application``): the program that
  faulted must restart, the GPU serves the next one. Users choose how often their
  programs fault, so repeats escalate only where an operator asks for it
  (``app_repeat_count``, off by default; see ``healthd_checks.xid.events``);
- IGNORE Xids (43, "channel reset by the driver", among them) are informational (OK),
  and so is WORKFLOW_XID_45 (bucket ``process_cleanup``): the driver logs Xid 45 when
  it tears down the channels of a process that was stopped (Ctrl-C, a kill, scancel,
  a job's time limit), and NVIDIA's workflow for it is to follow the Xid that came
  with it. Neither ever escalates;
- UPDATE_SWFW (vGPU start error) and CHECK_UVM ("reset the GPU if UVM/vGPU is in
  use, else ignore": healthd cannot tell) are WARNING;
- XID_154 is graded by the recovery action the line names;
- WORKFLOW_NVLINK5_ERR (Xids 144-150) is graded line by line by the catalog's "XID
  144-150 Decode" sheet (``healthd_checks.xid.nvlink5.NVLINK5_ROWS``): IGNORE rows are OK, RESET_GPU rows
  CRITICAL until reset, and XID_154_EVAL rows take the grade of the Xid 154 that follows
  on the same GPU (``followed_by_154``), RESTART_APP (OK) while none has. A line the sheet
  does not list is CRITICAL until reset when the driver calls it Fatal (or its form cannot
  be read), WARNING when it calls it Nonfatal (``nvlink5_entry``).

An Xid not in the table is WARNING: a new driver may log a new hardware fault, and
an unexplained Xid deserves a look without draining a node at once. Every grade
can be overridden per Xid in the config.
"""

from __future__ import annotations

import enum
from typing import Mapping, NamedTuple, Optional

from healthd.model import Status

from .nvlink5 import Nvlink5Line, Resolution, decode_nvlink5, driver_word
from .parse import LineKind, RecoveryAction, XidEvent


class XidAction(enum.Enum):
    """NVIDIA's "Resolution Bucket (Immediate Action)" of an Xid, as the catalog spells it."""

    RESET_GPU = "RESET_GPU"
    RESTART_BM = "RESTART_BM"
    RESTART_VM = "RESTART_VM"
    RESTART_APP = "RESTART_APP"
    IGNORE = "IGNORE"
    CONTACT_SUPPORT = "CONTACT_SUPPORT"
    CHECK_MECHANICALS = "CHECK_MECHANICALS"
    UPDATE_SWFW = "UPDATE_SWFW"
    CHECK_UVM = "CHECK_UVM"
    WORKFLOW_XID_45 = "WORKFLOW_XID_45"
    WORKFLOW_XID_48 = "WORKFLOW_XID_48"
    WORKFLOW_NVLINK_ERR = "WORKFLOW_NVLINK_ERR"
    WORKFLOW_NVLINK5_ERR = "WORKFLOW_NVLINK5_ERR"
    XID_154 = "XID_154"
    NONE = "NONE"  # not in NVIDIA's catalog (SXids, unknown Xids)


class Bucket(enum.Enum):
    """Why an Xid is graded the way it is (kept in finding details and scan-log output)."""

    RESET_GPU = "reset_gpu"
    REBOOT = "reboot"
    CONTACT_SUPPORT = "contact_support"
    CHECK_MECHANICALS = "check_mechanicals"
    ROW_REMAP_FAILURE = "row_remap_failure"
    UNCORRECTABLE_ECC = "uncorrectable_ecc"
    GSP_ERROR = "gsp_error"
    NVLINK = "nvlink"
    FALLEN_OFF_BUS = "fallen_off_bus"
    RECOVERY_ACTION = "recovery_action"
    APPLICATION = "application"
    PROCESS_CLEANUP = "process_cleanup"
    INFORMATIONAL = "informational"
    SOFTWARE = "software"
    NVSWITCH_FATAL = "nvswitch_fatal"
    NVSWITCH_NONFATAL = "nvswitch_nonfatal"
    POWER_SMOOTHING = "power_smoothing"
    UNKNOWN = "unknown"


# The buckets of a fault in the GPU itself, by NVIDIA's catalog: what it tells the operator
# to reset, reboot, reseat or take to support, and the GPU's memory, links and bus. Only
# they escalate to repair (healthd_checks.xid.check.hardware_code, docs/escalation.md).
HARDWARE_BUCKETS = frozenset(
    {
        Bucket.RESET_GPU,
        Bucket.REBOOT,
        Bucket.CONTACT_SUPPORT,
        Bucket.CHECK_MECHANICALS,
        Bucket.ROW_REMAP_FAILURE,
        Bucket.UNCORRECTABLE_ECC,
        Bucket.GSP_ERROR,
        Bucket.NVLINK,
        Bucket.FALLEN_OFF_BUS,
        Bucket.RECOVERY_ACTION,
    }
)


class Sticky(enum.Enum):
    """What clears a finding besides an acknowledgement: nothing short of a reset, or of a reboot."""

    NO = "no"
    UNTIL_RESET = "until_reset"
    UNTIL_REBOOT = "until_reboot"


class Entry(NamedTuple):
    bucket: Bucket
    grade: Status
    sticky: Sticky
    summary: str
    action: XidAction = XidAction.NONE
    nvlink5: Optional[Nvlink5Line] = None  # Xids 144-150: the line's decode


_A = XidAction
_UNUSED = "retired Xid (the catalog marks it unused on current GPUs)"

# Xid -> (NVIDIA's immediate action, our short wording of the catalog's description).
IMMEDIATE_ACTION: Mapping[int, tuple[XidAction, str]] = {
    **{code: (_A.CONTACT_SUPPORT, _UNUSED) for code in (*range(1, 8), 9, 10, 12, *range(15, 25), *range(26, 31))},
    **{code: (_A.CONTACT_SUPPORT, _UNUSED) for code in (*range(33, 37), 42, 47, *range(49, 54), *range(55, 60))},
    **{code: (_A.CONTACT_SUPPORT, _UNUSED) for code in (61, 65, 73, 81, 87, 90, 91, *range(111, 119))},
    **{code: (_A.CONTACT_SUPPORT, _UNUSED) for code in (*range(122, 126), 138)},
    8: (_A.RESTART_APP, "GPU stopped processing (channel idle timeout)"),
    11: (_A.RESTART_APP, "invalid or corrupted push buffer stream"),
    13: (_A.RESTART_APP, "graphics engine exception"),
    14: (_A.IGNORE, "fake or injected error"),
    25: (_A.RESTART_APP, "invalid or illegal push buffer stream"),
    31: (_A.RESTART_APP, "GPU memory page fault"),
    32: (_A.RESTART_APP, "invalid or corrupted push buffer stream (PBDMA)"),
    37: (_A.IGNORE, "driver firmware error"),
    38: (_A.IGNORE, "driver firmware watchdog timeout"),
    39: (_A.RESTART_APP, "copy engine exception"),
    40: (_A.RESTART_APP, "copy engine exception"),
    41: (_A.RESTART_APP, "copy engine exception"),
    43: (_A.IGNORE, "GPU stopped processing (channel reset by the driver)"),
    44: (_A.IGNORE, "graphics engine fault during context switch"),
    45: (_A.WORKFLOW_XID_45, "preemptive cleanup after a previous error or process exit"),
    46: (_A.RESET_GPU, "GPU stopped processing (GPU timeout)"),
    48: (_A.WORKFLOW_XID_48, "double bit ECC error"),
    54: (_A.CHECK_MECHANICALS, "auxiliary power is not connected to the GPU board"),
    60: (_A.RESTART_APP, "video processor exception"),
    62: (_A.RESET_GPU, "internal micro-controller halt"),
    63: (_A.IGNORE, "ECC page retirement or row remapping recorded"),
    64: (_A.RESET_GPU, "ECC page retirement or row remapping failure"),
    66: (_A.IGNORE, "illegal access by driver"),
    67: (_A.IGNORE, "illegal access by driver"),
    68: (_A.RESTART_APP, "NVDEC0 (video decoder) exception"),
    69: (_A.RESTART_APP, "graphics engine class error"),
    **{code: (_A.RESTART_APP, f"copy engine CE{code - 67} error") for code in (70, 71, 72)},
    74: (_A.WORKFLOW_NVLINK_ERR, "NVLink error"),
    **{code: (_A.RESTART_APP, f"copy engine CE{code - 69} error") for code in (75, 76, 77)},
    78: (_A.UPDATE_SWFW, "vGPU start error"),
    79: (_A.RESTART_BM, "GPU has fallen off the bus"),
    80: (_A.RESTART_APP, "corrupted data sent to GPU"),
    82: (_A.RESTART_APP, "NVJPG0 error"),
    83: (_A.RESTART_APP, "NVDEC1 error"),
    84: (_A.RESTART_APP, "NVDEC2 error"),
    85: (_A.RESTART_APP, "copy engine CE9 error"),
    86: (_A.RESTART_APP, "optical flow accelerator exception"),
    88: (_A.RESTART_APP, "NVDEC3 error"),
    89: (_A.RESTART_APP, "NVDEC4 error"),
    92: (_A.IGNORE, "high single-bit ECC error rate"),
    93: (_A.IGNORE, "InfoROM wear limit reached"),
    94: (_A.RESTART_APP, "contained ECC error (affected application must restart)"),
    95: (_A.RESET_GPU, "uncontained ECC error"),
    **{code: (_A.RESTART_APP, f"NVDEC{code - 91} error") for code in (96, 97, 98)},
    **{code: (_A.RESTART_APP, f"NVJPG{code - 98} error") for code in range(99, 106)},
    106: (_A.IGNORE, "SMBPBI test message"),
    107: (_A.IGNORE, "SMBPBI test message"),
    108: (_A.IGNORE, "NVLink remote translation error"),
    109: (_A.RESET_GPU, "context switch timeout"),
    110: (_A.RESET_GPU, "security fault"),
    119: (_A.RESET_GPU, "GSP RPC timeout"),
    120: (_A.RESET_GPU, "GSP error"),
    121: (_A.IGNORE, "corrected C2C link error"),
    **{code: (_A.RESTART_APP, f"copy engine CE{code - 116} error") for code in range(126, 136)},
    136: (_A.RESET_GPU, "NVLink link training failed"),
    137: (_A.IGNORE, "NVLink privilege error (illegal peer access)"),
    139: (_A.RESTART_APP, "optical flow accelerator OFA1 error"),
    140: (_A.RESET_GPU, "unrecovered ECC error"),
    141: (_A.IGNORE, "CUDA fast path error"),
    142: (_A.CONTACT_SUPPORT, "NVENC3 error"),
    143: (_A.RESET_GPU, "GPU initialization failure"),
    **{
        code: (_A.WORKFLOW_NVLINK5_ERR, "NVLink5 error in a form healthd cannot decode; default for it: CRITICAL")
        for code in range(144, 151)
    },
    151: (_A.RESTART_VM, "key rotation error"),
    152: (_A.IGNORE, "DLA SMMU error"),
    153: (_A.IGNORE, "DLA timeout"),
    154: (_A.XID_154, "GPU recovery action changed"),
    155: (_A.RESET_GPU, "NVLink software-defined link down"),
    156: (_A.RESET_GPU, "resource retirement event"),
    157: (_A.IGNORE, "resource retirement failure (no spare resources left)"),
    158: (_A.RESET_GPU, "GPU fatal timeout"),
    159: (_A.CHECK_UVM, "CHI non-data error"),
    160: (_A.IGNORE, "channel retirement event"),
    161: (_A.IGNORE, "channel retirement failure"),
}

# Immediate action -> (bucket, grade, sticky): healthd's reading of each bucket (module docstring).
_BY_ACTION: Mapping[XidAction, tuple[Bucket, Status, Sticky]] = {
    XidAction.RESET_GPU: (Bucket.RESET_GPU, Status.CRITICAL, Sticky.UNTIL_RESET),
    XidAction.WORKFLOW_XID_48: (Bucket.UNCORRECTABLE_ECC, Status.CRITICAL, Sticky.UNTIL_RESET),
    XidAction.WORKFLOW_NVLINK_ERR: (Bucket.NVLINK, Status.CRITICAL, Sticky.UNTIL_RESET),
    XidAction.WORKFLOW_NVLINK5_ERR: (Bucket.NVLINK, Status.CRITICAL, Sticky.UNTIL_RESET),  # undecoded lines only
    XidAction.CONTACT_SUPPORT: (Bucket.CONTACT_SUPPORT, Status.CRITICAL, Sticky.UNTIL_RESET),
    XidAction.RESTART_BM: (Bucket.REBOOT, Status.CRITICAL, Sticky.UNTIL_REBOOT),
    XidAction.RESTART_VM: (Bucket.REBOOT, Status.CRITICAL, Sticky.UNTIL_REBOOT),
    XidAction.CHECK_MECHANICALS: (Bucket.CHECK_MECHANICALS, Status.CRITICAL, Sticky.UNTIL_REBOOT),
    XidAction.RESTART_APP: (Bucket.APPLICATION, Status.OK, Sticky.NO),
    XidAction.WORKFLOW_XID_45: (Bucket.PROCESS_CLEANUP, Status.OK, Sticky.NO),
    XidAction.IGNORE: (Bucket.INFORMATIONAL, Status.OK, Sticky.NO),
    XidAction.UPDATE_SWFW: (Bucket.SOFTWARE, Status.WARNING, Sticky.NO),
    XidAction.CHECK_UVM: (Bucket.SOFTWARE, Status.WARNING, Sticky.NO),
    XidAction.XID_154: (Bucket.RECOVERY_ACTION, Status.OK, Sticky.NO),
}

# Finer "why" than the action bucket for Xids operators look for by name.
_BUCKET_OF: Mapping[int, Bucket] = {
    64: Bucket.ROW_REMAP_FAILURE,
    79: Bucket.FALLEN_OFF_BUS,
    95: Bucket.UNCORRECTABLE_ECC,
    119: Bucket.GSP_ERROR,
    120: Bucket.GSP_ERROR,
    140: Bucket.UNCORRECTABLE_ECC,
}


def _entry(code: int, action: XidAction, summary: str) -> Entry:
    bucket, grade, sticky = _BY_ACTION[action]
    return Entry(_BUCKET_OF.get(code, bucket), grade, sticky, summary, action)


# Xids 162 and 163 have no immediate action in the catalog, but its descriptions say
# what they are: the GPU's power smoothing circuitry disengaged (163: "No GPU reset
# required"; power swings until the thermal events behind it are resolved) and
# re-engaged (162). A disengaged circuit is worth a look, never a drain: both are OK
# notes, and the 163 note says "cleared" once a 162 follows (an operator who wants a
# drain sets ``[checks.xid] overrides``).
#
# Xids 167-169 have no immediate action either; the catalog gives the driver's names
# (nverror.h: PCIE_FATAL_TIMEOUT, REDUCED_GPU_MEMORY_CAPACITY, SEC2_HALT_ERROR) and
# descriptions, and each is a fault of the GPU that its next boot (a reset) is for:
# 169 is described as Xid 62 is, "Internal micro-controller halt" (SEC2 where 62 is
# the PMU), and 62's action is RESET_GPU; 167 is a timeout the driver calls fatal, as
# 158 (GPU_FATAL_TIMEOUT, RESET_GPU) is; 168, "Errors found in WPR (write protected
# region)", leaves the GPU with less memory than it has, which every job on it would
# meet. All three are CRITICAL until a GPU reset; one that comes back after the reset
# is logged again. See docs/xid.md.
_DESCRIBED: Mapping[int, Entry] = {
    162: Entry(Bucket.POWER_SMOOTHING, Status.OK, Sticky.NO, "power smoothing circuitry re-engaged"),
    163: Entry(Bucket.POWER_SMOOTHING, Status.OK, Sticky.NO, "power smoothing circuitry disengaged"),
    167: Entry(Bucket.RESET_GPU, Status.CRITICAL, Sticky.UNTIL_RESET, "fatal PCIe timeout"),
    168: Entry(Bucket.RESET_GPU, Status.CRITICAL, Sticky.UNTIL_RESET, "reduced GPU memory capacity: errors in WPR"),
    169: Entry(Bucket.RESET_GPU, Status.CRITICAL, Sticky.UNTIL_RESET, "SEC2 micro-controller halt"),
}

CATALOG: Mapping[int, Entry] = {
    **{code: _entry(code, *row) for code, row in sorted(IMMEDIATE_ACTION.items())},
    **_DESCRIBED,
}

# Xid -> the earlier Xids of the same GPU that it resolves. Besides Xid 154 back to
# 0x0 (none), which clears what a reset clears (xid_events), the catalog documents
# one such pair: 162 "Power Smoothing HW Circuitry capability reengaged" undoes 163
# "... disengaged". No other Xid is documented as resolving another: 63 (a row
# remap recorded) and 64 (failed) are outcomes, not a pending state and its end;
# 94 and 95 (contained and uncontained errors) are alternatives; 119 and 120 (GSP)
# are both faults. See docs/xid.md.
CLEARS: Mapping[int, frozenset[int]] = {162: frozenset({163})}

UNKNOWN_XID = Entry(Bucket.UNKNOWN, Status.WARNING, Sticky.NO, "Xid not in healthd's catalog")


def _recovery(grade: Status, sticky: Sticky, summary: str) -> Entry:
    return Entry(Bucket.RECOVERY_ACTION, grade, sticky, summary, XidAction.XID_154)


# Xid 154's new action decides its grade: the driver itself says what the GPU needs.
RECOVERY_ENTRIES: Mapping[RecoveryAction, Entry] = {
    RecoveryAction.NONE: _recovery(Status.OK, Sticky.NO, "no recovery action needed"),
    RecoveryAction.GPU_RESET: _recovery(Status.CRITICAL, Sticky.UNTIL_RESET, "recovery action: GPU reset"),
    RecoveryAction.NODE_REBOOT: _recovery(Status.CRITICAL, Sticky.UNTIL_REBOOT, "recovery action: node reboot"),
    RecoveryAction.DRAIN_P2P: _recovery(Status.CRITICAL, Sticky.UNTIL_RESET, "recovery action: drain P2P"),
    RecoveryAction.DRAIN_AND_RESET: _recovery(
        Status.CRITICAL, Sticky.UNTIL_RESET, "recovery action: drain P2P and reset GPU"
    ),
    RecoveryAction.RECOVER_IMEX_DOMAIN: _recovery(
        Status.CRITICAL, Sticky.UNTIL_RESET, "recovery action: recover the IMEX domain"
    ),
    RecoveryAction.BUS_RESET: _recovery(Status.CRITICAL, Sticky.UNTIL_REBOOT, "recovery action: reset the PCIe bus"),
    RecoveryAction.SYSTEM_REBOOT: _recovery(Status.CRITICAL, Sticky.UNTIL_REBOOT, "recovery action: system reboot"),
}

# NVSwitch SXids: NVIDIA's Fabric Manager guide treats fatal SXids as needing a
# reset of the GPUs and switches in the fabric; non-fatal ones are corrected.
SXID_FATAL = Entry(Bucket.NVSWITCH_FATAL, Status.CRITICAL, Sticky.UNTIL_RESET, "fatal NVSwitch error")
SXID_NONFATAL = Entry(Bucket.NVSWITCH_NONFATAL, Status.OK, Sticky.NO, "non-fatal NVSwitch error")
SXID_UNCLASSIFIED = Entry(Bucket.UNKNOWN, Status.WARNING, Sticky.NO, "NVSwitch error of unstated fatality")


# What fixes the fault without a person, as the finding's ``remedy`` detail that healthd's
# remediation acts on (docs/remediation.md): NVIDIA's RESTART_BM/RESTART_VM bucket ("restart
# the bare-metal machine / the VM") and Xid 154's reboot recovery actions are a reboot;
# Xid 154's GPU_RESET is a GPU reset. CHECK_MECHANICALS needs the power off and the board
# reseated, and the RESET_GPU bucket's Xids are left to a person's reset until healthd's
# reset of them is proven here: no remedy.
_REBOOT, _RESET = "reboot", "reset"
_REMEDY_OF_ACTION: Mapping[str, str] = {XidAction.RESTART_BM.value: _REBOOT, XidAction.RESTART_VM.value: _REBOOT}
_REMEDY_OF_RECOVERY: Mapping[str, str] = {
    RecoveryAction.NODE_REBOOT.name: _REBOOT,
    RecoveryAction.SYSTEM_REBOOT.name: _REBOOT,
    RecoveryAction.GPU_RESET.name: _RESET,
}


def remedy(action: str, recovery_action: str) -> str:
    """The remedy of an event with NVIDIA's immediate ``action`` and Xid 154 ``recovery_action`` (names); "" if none."""
    if recovery_action:
        return _REMEDY_OF_RECOVERY.get(recovery_action, "")
    return _REMEDY_OF_ACTION.get(action, "")


NVLINK5_XIDS = range(144, 151)

# The sheet's resolution -> (bucket, grade, sticky). XID_154_EVAL's own grade is the
# catalog's "If no XID 154 present, RESTART_APP": OK, as every RESTART_APP Xid.
_BY_RESOLUTION: Mapping[Resolution, tuple[Bucket, Status, Sticky]] = {
    Resolution.IGNORE: (Bucket.INFORMATIONAL, Status.OK, Sticky.NO),
    Resolution.RESET_GPU: (Bucket.NVLINK, Status.CRITICAL, Sticky.UNTIL_RESET),
    Resolution.XID_154_EVAL: (Bucket.APPLICATION, Status.OK, Sticky.NO),
}
_AWAITING_154 = "XID_154_EVAL, no Xid 154 after it (yet): RESTART_APP"


def _nvlink5_what(line: Nvlink5Line) -> str:
    word = "Fatal" if line.fatal else "Nonfatal"
    return f"NVLink5 {line.unit} {word}, status 0x{line.status:x}"


def nvlink5_entry(event: XidEvent) -> Entry:
    """An Xid 144-150 line graded by its row in the catalog's "XID 144-150 Decode" sheet.

    A line the sheet does not list gets healthd's default, and its summary says so: a
    Fatal one needs what every listed Fatal row but one needs, a GPU reset (CRITICAL until
    reset); a Nonfatal one is WARNING, worth a person's look but not an immediate drain.
    A line healthd cannot read at all keeps the whole Xid's WORKFLOW_NVLINK5_ERR grade.
    """
    line = decode_nvlink5(event.code, event.text)
    if line is None:
        # Registers missing (a pasted line cut short): the driver's own word still says which default applies.
        if driver_word(event.text) is False:
            summary = (
                "NVLink5 error without the registers to decode; the driver says Nonfatal, so healthd's default: WARNING"
            )
            return Entry(Bucket.NVLINK, Status.WARNING, Sticky.NO, summary, XidAction.WORKFLOW_NVLINK5_ERR)
        return CATALOG[event.code]
    what = _nvlink5_what(line)
    if line.row is None:
        default = "CRITICAL until reset" if line.fatal else "WARNING"
        grade, sticky = (Status.CRITICAL, Sticky.UNTIL_RESET) if line.fatal else (Status.WARNING, Sticky.NO)
        summary = f"{what}: not in NVIDIA's Xid 144-150 decode, so healthd's default: {default}"
        return Entry(Bucket.NVLINK, grade, sticky, summary, XidAction.WORKFLOW_NVLINK5_ERR, line)
    bucket, grade, sticky = _BY_RESOLUTION[line.row.resolution]
    if line.row.resolution is Resolution.XID_154_EVAL:
        summary = f"{what}: {_AWAITING_154}"
    else:
        summary = f"{what}: {line.row.resolution.value} (NVIDIA's Xid 144-150 decode)"
    return Entry(bucket, grade, sticky, summary, XidAction.WORKFLOW_NVLINK5_ERR, line)


def awaits_154(entry: Entry) -> bool:
    """Whether ``entry`` is an Xid 144-150 line whose grade is that of the Xid 154 to follow.

    Not when an override gave the Xid another grade than the catalog's RESTART_APP: the
    operator's grade stands.
    """
    row = entry.nvlink5.row if entry.nvlink5 is not None else None
    return row is not None and row.resolution is Resolution.XID_154_EVAL and entry.grade is Status.OK


def followed_by_154(waiting: str, recovery: Entry, line: Optional[Nvlink5Line] = None) -> Entry:
    """The entry of an XID_154_EVAL line (summary ``waiting``) once an Xid 154 graded ``recovery`` followed it."""
    what = waiting.removesuffix(f": {_AWAITING_154}")
    summary = f"{what}: XID_154_EVAL, the Xid 154 after it says {recovery.summary}"
    return Entry(recovery.bucket, recovery.grade, recovery.sticky, summary, XidAction.WORKFLOW_NVLINK5_ERR, line)


def override_key(event: XidEvent) -> str:
    """The key an operator uses in ``overrides``: ``"79"`` for Xid 79, ``"SXID_20034"`` for an SXid."""
    return f"SXID_{event.code}" if event.kind is LineKind.SXID else str(event.code)


def classify(event: XidEvent, overrides: Optional[Mapping[str, Status]] = None) -> Entry:
    """The entry for ``event`` with the operator's override applied to its grade."""
    if event.kind is LineKind.SXID:
        entry = SXID_FATAL if event.fatal else SXID_NONFATAL if event.fatal is False else SXID_UNCLASSIFIED
    elif event.code == 154 and event.recovery is not None:
        action = event.recovery.action
        entry = RECOVERY_ENTRIES[action] if action is not None else UNKNOWN_XID
    elif event.code in NVLINK5_XIDS:
        entry = nvlink5_entry(event)
    else:
        entry = CATALOG.get(event.code, UNKNOWN_XID)
    grade = (overrides or {}).get(override_key(event))
    if grade is None or grade is entry.grade:
        return entry
    return Entry(entry.bucket, grade, entry.sticky, entry.summary, entry.action, entry.nvlink5)
