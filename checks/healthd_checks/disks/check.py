"""The ``disks`` check: local NVMe drives (controller state, SMART critical warnings, media errors), block I/O errors.

``gather`` lists the NVMe controllers under ``[paths].sysfs/class/nvme`` (kernel ABI:
``state``, ``model``, ``serial``; drivers/nvme/host/core.c), reads each live one's
SMART / Health Information log with ``nvme smart-log -o json`` (nvme-cli, by the
absolute path in ``nvme_cli``, under a deadline: ``program``), and reads the block
layer's error reports from the kernel log (``healthd_checks.kernlog.events``). ``judge`` grades:

- the controller state: ``live`` is healthy, ``dead`` or ``deleting`` CRITICAL, any
  other (``resetting``, ``connecting``, ``new``) a WARNING;
- the log's Critical Warning byte (NVMe Base Specification, SMART / Health Information
  log page, byte 0): each bit set is a finding;
- Media and Data Integrity Errors, a lifetime counter, by its rise between passes.

Without nvme-cli the SMART part is not applicable (sysfs and the kernel log are still
judged). See docs/host.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Optional, Union

from healthd.checks.counters import BootScoped, rise
from healthd.checks.plugin import CheckSpec, Staged, Unobserved, Verdict
from healthd.model import Finding, Status, worst

from ..common import program
from ..common.sysfs import SysfsError, read_value
from ..kernlog.events import LogObservation, Pattern, gather_log, with_log

if TYPE_CHECKING:
    from healthd.checks.plugin import CheckContext, JudgeContext

    from .settings import DisksSettings


# The Critical Warning byte (NVMe Base Specification 2.0, SMART / Health Information, byte 0).
CRITICAL_WARNING_BITS = (
    (0x01, Status.WARNING, "available spare below its threshold"),
    (0x02, Status.WARNING, "temperature outside its thresholds"),
    (0x04, Status.CRITICAL, "reliability degraded by media or internal errors"),
    (0x08, Status.CRITICAL, "media placed in read-only mode"),
    (0x10, Status.CRITICAL, "volatile memory backup device failed"),
    (0x20, Status.CRITICAL, "persistent memory region became read-only"),
)

# Block-layer errors (block/blk-core.c blk_print_req_error: "<kind> error, dev <disk>, sector N ...",
# "blk_update_request: " before it on kernels before 5.10) and buffer-cache write-back errors
# (fs/buffer.c: "Buffer I/O error on dev <dev>, logical block N"). A task name can spell
# "I/O error, dev " (15 characters), but the kernel follows a name with "[pid]" or " (pid)",
# which no device name holds.
PATTERNS = (
    Pattern(
        "BLOCK_IO_ERROR",
        re.compile(
            r"(?:blk_update_request: )?(?P<kind>[a-zA-Z/ ]{1,32}) error, dev (?P<dev>[A-Za-z0-9_-]{1,32}), "
            r"sector (?P<sector>\d{1,20})"
        ),
        Status.WARNING,
        "block I/O error",
        " error, dev ",
        lambda m: m.group("dev"),
        lambda m: {"kind": m.group("kind"), "sector": int(m.group("sector"))},
    ),
    Pattern(
        "BUFFER_IO_ERROR",
        re.compile(r"Buffer I/O error on dev (?P<dev>[A-Za-z0-9_-]{1,32}), logical block (?P<block>\d{1,20})"),
        Status.WARNING,
        "buffer I/O error",
        "Buffer I/O error on dev ",
        lambda m: m.group("dev"),
        lambda m: {"block": int(m.group("block"))},
    ),
)


class SmartLog(NamedTuple):
    """The fields of ``nvme smart-log -o json`` this check judges."""

    critical_warning: int
    media_errors: int
    available_spare: Optional[int] = None
    percent_used: Optional[int] = None


def _number(document: Mapping[str, Any], key: str, source: str) -> int:
    value = document.get(key)
    if isinstance(value, dict):  # nvme-cli 2.x may give a field's bits as {"value": N, ...}
        value = value.get("value")
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())  # 128-bit counters may be printed as strings
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{source}: {key}: expected a non-negative integer, got {value!r}")
    return value


def parse_smart_log(text: str, source: str) -> SmartLog:
    """Parse nvme-cli's JSON SMART log; ValueError names ``source`` and the key at fault."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{source}: not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ValueError(f"{source}: expected a JSON object")

    def optional(*keys: str) -> Optional[int]:
        for key in keys:
            if key in document:
                return _number(document, key, source)
        return None

    return SmartLog(
        critical_warning=_number(document, "critical_warning", source),
        media_errors=_number(document, "media_errors", source),
        available_spare=optional("avail_spare", "available_spare"),
        percent_used=optional("percent_used", "percentage_used"),
    )


class NvmeController(NamedTuple):
    """One NVMe controller: its sysfs name, state and identity, and its SMART log (or why it was not read)."""

    name: str
    state: str
    model: str = ""
    serial: str = ""
    smart: Union[SmartLog, Unobserved, None] = None


class DisksObservation(NamedTuple):
    controllers: tuple[NvmeController, ...]
    problems: tuple[Unobserved, ...]
    log: LogObservation
    nvme_cli_present: bool = False
    previous: Mapping[str, Any] = MappingProxyType({})


def _attribute(directory: Path, name: str) -> str:
    try:
        return read_value(directory / name).strip()
    except SysfsError:
        return ""


def _smart(ctx: CheckContext[DisksSettings], name: str) -> Union[SmartLog, Unobserved]:
    settings = ctx.settings
    argv = [str(settings.nvme_cli), "smart-log", f"/dev/{name}", "--output-format=json"]
    done = program.run(ctx.memory, argv, settings.smart_timeout, name, "NVME_SMART")
    if isinstance(done, Unobserved):
        return done
    if done.returncode != 0:
        return program.failed(done, argv, name, "NVME_SMART")
    try:
        return parse_smart_log(done.out, f"{settings.nvme_cli} smart-log /dev/{name}")
    except ValueError as exc:
        return Unobserved("NVME_SMART_MALFORMED", name, str(exc))


def gather(ctx: CheckContext[DisksSettings]) -> DisksObservation:
    root = ctx.paths.sysfs / "class/nvme"
    problems: list[Unobserved] = []
    try:
        entries = sorted(p for p in root.iterdir() if re.fullmatch(r"nvme\d{1,4}", p.name))
    except FileNotFoundError:
        entries = []
    except OSError as exc:
        entries = []
        problems.append(Unobserved("NVME_SYSFS_UNREADABLE", str(root), f"cannot list {root}: {exc}"))
    cli = program.present(ctx.settings.nvme_cli)
    controllers = []
    for directory in entries:
        state = _attribute(directory, "state")
        if not state:
            problems.append(Unobserved("NVME_SYSFS_UNREADABLE", directory.name, f"cannot read {directory / 'state'}"))
            continue
        smart = _smart(ctx, directory.name) if cli and state == "live" else None
        controllers.append(
            NvmeController(
                directory.name, state, _attribute(directory, "model"), _attribute(directory, "serial"), smart
            )
        )
    previous = ctx.state.load().get("media")
    return DisksObservation(
        tuple(controllers),
        tuple(problems),
        gather_log(ctx, ctx.settings),
        cli,
        previous if isinstance(previous, dict) else {},
    )


# Media errors count over the drive's life: a new boot changes nothing about the baseline.
_MEDIA = BootScoped(key="drives", boot_fields=frozenset())


def judge_controller(c: NvmeController, jc: JudgeContext[DisksSettings]) -> list[Finding]:
    identity = {"model": c.model, "serial": c.serial}
    if c.state in ("dead", "deleting"):
        message = f"NVMe controller {c.name} ({c.model}) is {c.state}"
        return [jc.finding(Status.CRITICAL, "NVME_CONTROLLER_STATE", c.name, message, state=c.state, **identity)]
    if c.state != "live":
        message = f"NVMe controller {c.name} ({c.model}) is {c.state}, not live"
        return [jc.finding(Status.WARNING, "NVME_CONTROLLER_STATE", c.name, message, state=c.state, **identity)]
    smart = c.smart
    if isinstance(smart, Unobserved):
        return [smart.finding(jc)]
    if smart is None or not smart.critical_warning:
        return []
    raised = [(status, text) for bit, status, text in CRITICAL_WARNING_BITS if smart.critical_warning & bit]
    status = worst(grade for grade, _ in raised) if raised else Status.WARNING
    said = "; ".join(text for _, text in raised) or "a reserved bit"
    message = f"{c.name} ({c.model}) SMART critical warning 0x{smart.critical_warning:02x}: {said}"
    finding = jc.finding(
        status,
        "NVME_CRITICAL_WARNING",
        c.name,
        message,
        critical_warning=smart.critical_warning,
        available_spare=smart.available_spare,
        **identity,
    )
    return [finding]


def judge(observed: DisksObservation, jc: JudgeContext[DisksSettings]) -> Verdict:
    settings = jc.settings
    findings = [problem.finding(jc) for problem in observed.problems]
    expected = settings.expect_nvme
    if expected is not None and len(observed.controllers) < expected:
        names = ",".join(c.name for c in observed.controllers)
        message = f"{len(observed.controllers)} NVMe controller(s), {expected} expected"
        findings.append(jc.finding(Status.CRITICAL, "NVME_MISSING", "nvme", message, found=names, expected=expected))
    for controller in observed.controllers:
        findings += judge_controller(controller, jc)

    def media(item: tuple[NvmeController, SmartLog], stored: Mapping[str, Any]) -> tuple[list[Finding], dict[str, Any]]:
        c, smart = item
        increase = rise(stored.get("media_errors"), smart.media_errors)
        entry = {"media_errors": smart.media_errors}
        if not increase or increase <= settings.media_errors_max:
            return [], entry
        message = f"{increase} new media and data integrity error(s) on {c.name} ({c.model}) since the previous pass"
        finding = jc.finding(
            Status.WARNING, "NVME_MEDIA_ERRORS", c.name, message, increase=increase, total=smart.media_errors
        )
        return [finding], entry

    # Drives are named by serial: nvme0 and nvme1 may swap at the next boot.
    drives = [(c.serial or c.name, (c, c.smart)) for c in observed.controllers if isinstance(c.smart, SmartLog)]
    rates, media_state = _MEDIA.judge_each(observed.previous, observed.log.boot_id, jc.now, drives, media)
    state: dict[str, Any] = {"media": media_state if drives else dict(observed.previous)}
    absent = "no NVMe controller under class/nvme and no block I/O error logged"
    present = bool(observed.controllers or expected)
    return with_log(observed.log, jc, settings, PATTERNS, findings + rates, state, None if present else absent)


CHECK = CheckSpec(
    name="disks",
    description="local disks: NVMe controller state, SMART critical warnings and media errors, block I/O errors",
    settings="healthd_checks.disks.settings:DisksSettings",
    run=Staged(gather, judge, keeps="NVMe media-error baselines and the kernel-log cursor"),
    # An NVMe device's own report of itself. Block and buffer I/O errors are not: the
    # kernel logs them for any block device, a loop device over a full file or a network
    # block device whose server went away among them.
    hardware=frozenset({"NVME_CONTROLLER_STATE", "NVME_CRITICAL_WARNING", "NVME_MEDIA_ERRORS", "NVME_MISSING"}),
)
