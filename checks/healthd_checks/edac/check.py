"""The ``edac`` check: host memory errors. EDAC counters judged by their change, machine checks in the kernel log.

``gather`` reads ``devices/system/edac/mc/mcN/`` under ``[paths].sysfs`` (kernel ABI:
Documentation/ABI/testing/sysfs-devices-edac): each memory controller's ``ce_count`` and
``ue_count`` (with the ``*_noinfo_count`` of errors the driver could not place), and each
DIMM's ``dimm_ce_count``/``dimm_ue_count`` and ``dimm_label`` (older drivers: ``csrowN``
with ``ce_count``/``ue_count``). The counters run from the boot (or the driver's load), so
an uncorrected error counted is this boot's: CRITICAL while the count stands. Corrected
errors are normal at a low rate; their rise between passes, per hour, is judged against
``ce_per_hour_max`` (``healthd.checks.counters``: baselines per boot, a lower count is a reset).

The kernel log gives what the counters cannot: the x86 machine-check handler's reports
(arch/x86/kernel/cpu/mce/core.c), whose IA32_MCi_STATUS word says whether the error was
uncorrected (bit 61, UC; Intel SDM vol. 3B, 16.3.2.2; AMD APM vol. 2, 9.3.2.2), the EDAC
core's per-error lines (drivers/edac/edac_mc.c), and pages the kernel took offline
(mm/memory-failure.c). See docs/host.md.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Union

from healthd.checks.counters import BootScoped, rise
from healthd.checks.plugin import CheckSpec, Staged, Unobserved, Verdict
from healthd.model import Finding, Status

from ..common.sysfs import SysfsError, SysfsMissing, parse_counter, read, read_value
from ..kernlog.events import LogObservation, Pattern, gather_log, with_log

if TYPE_CHECKING:
    from healthd.checks.plugin import CheckContext, JudgeContext

    from .settings import EdacSettings


_UC_BIT = 1 << 61  # IA32_MCi_STATUS.UC: the error was not corrected
_PCC_BIT = 1 << 57  # IA32_MCi_STATUS.PCC: processor context corrupt


def _mce_grade(match: re.Match[str]) -> Status:
    status = int(match.group("status"), 16)
    return Status.CRITICAL if status & (_UC_BIT | _PCC_BIT) else Status.WARNING


def _mce_details(match: re.Match[str]) -> dict[str, Union[str, int]]:
    status = int(match.group("status"), 16)
    return {"bank": int(match.group("bank")), "mci_status": f"0x{status:016x}", "uncorrected": bool(status & _UC_BIT)}


PATTERNS = (
    Pattern(
        "MCE",
        re.compile(
            r"mce: \[Hardware Error\]: CPU (?P<cpu>\d{1,5}): Machine Check(?: Exception)?: [0-9a-fA-F]{1,16} "
            r"Bank (?P<bank>\d{1,3}): (?P<status>[0-9a-fA-F]{16})\b"
        ),
        Status.WARNING,
        "machine check",
        "Machine Check",
        lambda m: f"cpu{int(m.group('cpu'))}",
        _mce_details,
        sticky=True,
        grade=_mce_grade,
    ),
    Pattern(
        "MCE_MEMORY_UNCORRECTED",
        re.compile(r"mce: Uncorrected hardware memory error in user-access at (?P<address>[0-9a-fA-F]{1,16})"),
        Status.CRITICAL,
        "uncorrected memory error reached a process",
        "Uncorrected hardware memory error",
        lambda m: "memory",
        lambda m: {"address": m.group("address").lower()},
        sticky=True,
    ),
    Pattern(
        "EDAC_UE_LOGGED",
        # "%d UE %s%son %s (...)" (edac_mc.c). A task name (15 characters at most) can spell
        # "EDAC MC0: 1 UE ", but the kernel follows it with "[pid]" or " (pid)": no brackets allowed.
        re.compile(r"EDAC MC(?P<mc>\d{1,3}): (?P<count>\d{1,10}) UE (?:[^\[\]()]{1,80} )?on "),
        Status.CRITICAL,
        "EDAC logged an uncorrected memory error",
        " UE ",
        lambda m: f"mc{int(m.group('mc'))}",
        sticky=True,
    ),
    Pattern(
        "MEMORY_FAILURE",
        re.compile(r"Memory failure: (?P<pfn>0x[0-9a-fA-F]{1,16}): (?P<what>[ -~]{1,120})"),
        Status.WARNING,
        "the kernel took a memory page offline",
        "Memory failure: ",
        lambda m: "memory",
        lambda m: {"pfn": m.group("pfn").lower()},
    ),
)


class Counts(NamedTuple):
    """Corrected and uncorrected error counts of one controller or DIMM, and its label."""

    name: str
    label: str
    corrected: int
    uncorrected: int


class MemoryController(NamedTuple):
    """One ``mcN``: its totals (with the errors it could not place) and its DIMMs (or csrows)."""

    totals: Counts
    dimms: tuple[Counts, ...]


def _count(path: Path) -> int:
    value = read(path, parse_counter)
    if value is None:
        raise SysfsError(path, "not a counter")
    return value


def _label(path: Path, default: str) -> str:
    try:
        return read_value(path).strip() or default
    except SysfsError:
        return default


def read_controller(directory: Path) -> MemoryController:
    """One ``mcN`` directory; raises SysfsError naming the file that cannot be read."""
    name = directory.name
    corrected, uncorrected = _count(directory / "ce_count"), _count(directory / "ue_count")
    dimms: list[Counts] = []
    for child in sorted(directory.iterdir(), key=lambda p: p.name):
        if re.fullmatch(r"dimm\d{1,4}", child.name):
            ce, ue, label_file = child / "dimm_ce_count", child / "dimm_ue_count", child / "dimm_label"
        elif re.fullmatch(r"csrow\d{1,4}", child.name) and not (directory / "dimm0").exists():
            ce, ue, label_file = child / "ce_count", child / "ue_count", child / "ch0_dimm_label"
        else:
            continue
        try:
            dimms.append(Counts(f"{name}/{child.name}", _label(label_file, child.name), _count(ce), _count(ue)))
        except SysfsMissing:
            continue  # an empty slot offers no counters
    return MemoryController(Counts(name, _label(directory / "mc_name", name), corrected, uncorrected), tuple(dimms))


class EdacObservation(NamedTuple):
    """The controllers read (or why not), the kernel log, the boot and the last pass's baselines."""

    controllers: tuple[MemoryController, ...]
    problems: tuple[Unobserved, ...]
    present: bool
    log: LogObservation
    previous: Mapping[str, Any] = MappingProxyType({})


def gather(ctx: CheckContext[EdacSettings]) -> EdacObservation:
    root = ctx.paths.sysfs / "devices/system/edac/mc"
    controllers: list[MemoryController] = []
    problems: list[Unobserved] = []
    try:
        entries = sorted((p for p in root.iterdir() if re.fullmatch(r"mc\d{1,4}", p.name)), key=lambda p: p.name)
    except FileNotFoundError:
        entries = []
    except OSError as exc:
        entries = []
        problems.append(Unobserved("EDAC_SYSFS_UNREADABLE", str(root), f"cannot list {root}: {exc}"))
    for directory in entries:
        try:
            controllers.append(read_controller(directory))
        except (SysfsError, OSError) as exc:
            problems.append(Unobserved("EDAC_SYSFS_UNREADABLE", directory.name, str(exc)))
    log = gather_log(ctx, ctx.settings)
    previous = ctx.state.load().get("counters")
    return EdacObservation(
        tuple(controllers), tuple(problems), bool(entries), log, previous if isinstance(previous, dict) else {}
    )


_COUNTERS = BootScoped(key="counts")


def _rate_judge(
    jc: JudgeContext[EdacSettings],
) -> Callable[[Counts, Mapping[str, Any]], tuple[list[Finding], dict[str, Any]]]:
    settings = jc.settings

    def judge_dimm(counts: Counts, stored: Mapping[str, Any]) -> tuple[list[Finding], dict[str, Any]]:
        entry = {"corrected": counts.corrected, "at": jc.now}
        increase = rise(stored.get("corrected"), counts.corrected)
        at = stored.get("at")
        if not increase or not isinstance(at, (int, float)) or isinstance(at, bool) or at > jc.now:
            return [], entry
        per_hour = increase * 3600.0 / max(jc.now - at, settings.rate_window)
        if per_hour <= settings.ce_per_hour_max:
            return [], entry
        message = f"{increase} corrected memory errors since the previous pass ({per_hour:.0f}/h) on {counts.label}"
        finding = jc.finding(
            Status.WARNING,
            "EDAC_CORRECTED_RATE",
            counts.name,
            message,
            increase=increase,
            per_hour=round(per_hour, 1),
            total=counts.corrected,
            label=counts.label,
        )
        return [finding], entry

    return judge_dimm


def judge_counters(observed: EdacObservation, jc: JudgeContext[EdacSettings]) -> tuple[list[Finding], dict[str, Any]]:
    """Uncorrected errors counted this boot (CRITICAL), and corrected ones rising too fast (WARNING)."""
    findings: list[Finding] = []
    rated: list[tuple[str, Counts]] = []
    for controller in observed.controllers:
        totals = controller.totals
        if totals.uncorrected:
            where = [f"{d.label} ({d.uncorrected})" for d in controller.dimms if d.uncorrected]
            on = f" on {', '.join(where[:4])}" if where else ""
            findings.append(
                jc.finding(
                    Status.CRITICAL,
                    "EDAC_UNCORRECTED",
                    totals.name,
                    f"{totals.uncorrected} uncorrected memory error(s) this boot on {totals.label}{on}",
                    count=totals.uncorrected,
                    label=totals.label,
                    event=f"{observed.log.boot_id}:{totals.name}:{totals.uncorrected}",
                )
            )
        # Each DIMM is rated on its own; a controller without DIMM counters is rated as a whole.
        rated += [(d.name, d) for d in controller.dimms] or [(totals.name, totals)]
    rates, document = _COUNTERS.judge_each(observed.previous, observed.log.boot_id, jc.now, rated, _rate_judge(jc))
    return findings + rates, document


def judge(observed: EdacObservation, jc: JudgeContext[EdacSettings]) -> Verdict:
    settings = jc.settings
    findings = [problem.finding(jc) for problem in observed.problems]
    expected = settings.expect_controllers
    if expected is not None and len(observed.controllers) < expected and not observed.problems:
        message = f"{len(observed.controllers)} EDAC memory controller(s), {expected} expected: errors go unseen"
        findings.append(jc.finding(Status.UNKNOWN, "EDAC_CONTROLLERS_MISSING", "edac", message, expected=expected))
    if not observed.present and not observed.problems and not expected:
        # No EDAC driver: memory errors are not counted here, but machine checks are still logged.
        counters: list[Finding] = []
        counter_state: dict[str, Any] = dict(observed.previous)
    else:
        counters, counter_state = judge_counters(observed, jc)
    absent = "no EDAC memory controller under devices/system/edac/mc and no machine check logged"
    state: dict[str, Any] = {"counters": counter_state}
    present = bool(observed.present or expected)
    return with_log(observed.log, jc, settings, PATTERNS, findings + counters, state, None if present else absent)


CHECK = CheckSpec(
    name="edac",
    description="host memory: EDAC uncorrected errors, corrected-error rates per DIMM, machine checks (kernel log)",
    settings="healthd_checks.edac.settings:EdacSettings",
    run=Staged(gather, judge, keeps="EDAC counter baselines and the kernel-log cursor"),
    # A DIMM's (or memory controller's) errors; an EDAC driver that is not loaded is not.
    hardware=frozenset(
        {"EDAC_CORRECTED_RATE", "EDAC_UE_LOGGED", "EDAC_UNCORRECTED", "MCE_MEMORY_UNCORRECTED", "MEMORY_FAILURE"}
    ),
)
