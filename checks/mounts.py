"""The ``mounts`` check: required filesystems are mounted as expected, not full, and not hung.

Presence, type, source and rw/ro come from mountinfo without touching the
filesystems: PID 1's by default, because the systemd unit's sandbox (ProtectSystem)
gives healthd's own namespace read-only views that are not the node's truth. Free
space and inodes need statvfs, which hangs on a dead network mount, so they come
from ``fsprobe`` child processes under a deadline. Missing or hung mounts are
CRITICAL: the source paper lists missing mounts among the high-severity failures
that take a node out at once.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable

from pydantic import Field

from healthd.model import Finding, Status
from healthd.plugin import CheckContext, CheckSettings, CheckSpec, NotApplicable

from .fsprobe import Failed, Hung, ProbeTable, Usage, forget_finished
from .mountinfo import MountinfoError, find_mount, parse_mountinfo


class MountsSettings(CheckSettings):
    min_free_percent: float = Field(default=5.0, ge=0, le=100, description="WARNING below this much free space")
    min_free_inodes_percent: float = Field(default=5.0, ge=0, le=100, description="WARNING below this many inodes")
    namespace_pid: int = Field(
        default=1, ge=1, description="judge the mounts as this process sees them (1: the node's, not our sandbox's)"
    )
    probe_usage: bool = Field(default=True, description="probe space, inodes and hangs (statvfs in a child)")
    include_root: bool = Field(default=True, description="also watch space and inodes of /")
    probe_timeout: float = Field(default=3.0, gt=0, le=60, description="seconds before a statvfs probe is hung")


def _mount_findings(ctx: CheckContext[MountsSettings], entries: list[Any]) -> Iterable[Finding]:
    for spec in ctx.node.mounts:
        entry = find_mount(entries, spec.path)
        if entry is None:
            yield ctx.finding(Status.CRITICAL, "MOUNT_MISSING", spec.path, f"{spec.path} is not mounted")
            continue
        if spec.fstype is not None and entry.fstype != spec.fstype:
            yield ctx.finding(
                Status.CRITICAL,
                "MOUNT_WRONG_TYPE",
                spec.path,
                f"{spec.path} is {entry.fstype}, expected {spec.fstype}",
                fstype=entry.fstype,
                expected=spec.fstype,
            )
        if spec.source is not None and entry.source != spec.source:
            yield ctx.finding(
                Status.CRITICAL,
                "MOUNT_WRONG_SOURCE",
                spec.path,
                f"{spec.path} is mounted from {entry.source}, expected {spec.source}",
                source=entry.source,
                expected=spec.source,
            )
        if spec.rw and entry.read_only:
            yield ctx.finding(Status.CRITICAL, "MOUNT_READ_ONLY", spec.path, f"{spec.path} is mounted read-only")


def _usage_findings(ctx: CheckContext[MountsSettings], path: str, outcome: object) -> Iterable[Finding]:
    settings = ctx.settings
    if isinstance(outcome, Hung):
        how = "an earlier probe is still stuck" if outcome.inherited else "statvfs did not return"
        yield ctx.finding(
            Status.CRITICAL,
            "MOUNT_HUNG",
            path,
            f"{path} is hung: {how} after {outcome.stuck_seconds:.1f}s",
            probe_pid=outcome.pid,
            stuck_seconds=round(outcome.stuck_seconds, 3),
        )
    elif isinstance(outcome, Failed):
        yield ctx.finding(Status.UNKNOWN, "MOUNT_PROBE_FAILED", path, f"cannot read usage of {path}: {outcome.message}")
    elif isinstance(outcome, Usage):
        if outcome.free_fraction * 100 < settings.min_free_percent:
            yield ctx.finding(
                Status.WARNING,
                "MOUNT_SPACE_LOW",
                path,
                f"{path} has {outcome.free_fraction:.1%} space free (threshold {settings.min_free_percent}%)",
                free_percent=round(outcome.free_fraction * 100, 2),
            )
        inodes = outcome.free_inode_fraction
        if inodes is not None and inodes * 100 < settings.min_free_inodes_percent:
            yield ctx.finding(
                Status.WARNING,
                "MOUNT_INODES_LOW",
                path,
                f"{path} has {inodes:.1%} inodes free (threshold {settings.min_free_inodes_percent}%)",
                free_inodes_percent=round(inodes * 100, 2),
            )


def run(ctx: CheckContext[MountsSettings]) -> list[Finding]:
    source = ctx.paths.procfs / str(ctx.settings.namespace_pid) / "mountinfo"
    try:
        entries = parse_mountinfo(source.read_text(encoding="utf-8", errors="surrogateescape"), str(source))
    except OSError as exc:
        return [ctx.finding(Status.UNKNOWN, "MOUNTINFO_UNREADABLE", str(source), f"cannot read {source}: {exc}")]
    except MountinfoError as exc:
        return [ctx.finding(Status.UNKNOWN, "MOUNTINFO_MALFORMED", str(source), str(exc))]
    if not ctx.node.mounts and not ctx.settings.include_root:
        raise NotApplicable("no mounts configured in [node].mounts and include_root is off")
    findings = list(_mount_findings(ctx, entries))
    missing = {f.subject for f in findings if f.code == "MOUNT_MISSING"}
    if not ctx.settings.probe_usage:
        return findings
    paths = [] if not ctx.settings.include_root else ["/"]
    paths += [m.path for m in ctx.node.mounts if m.path not in missing and m.path not in paths]
    probes: ProbeTable = ctx.memory.setdefault("probes", ProbeTable())
    state = ctx.state.load()
    before = state.get("stuck_probes")
    remembered: dict[str, dict[str, float]] = (
        {k: dict(v) for k, v in before.items() if isinstance(v, dict)} if isinstance(before, dict) else {}
    )
    with ThreadPoolExecutor(max_workers=max(1, len(paths))) as pool:
        outcomes = list(pool.map(lambda p: probes.probe(p, ctx.settings.probe_timeout, remembered), paths))
    for path, outcome in zip(paths, outcomes):
        findings.extend(_usage_findings(ctx, path, outcome))
    forget_finished(remembered, keep=set(paths))
    if remembered != (before or {}):
        findings += ctx.save_state({**state, "stuck_probes": remembered}, "stuck probe records")
    return findings


CHECK = CheckSpec(
    name="mounts",
    description="required filesystems mounted as expected, with space and inodes free, and not hung",
    settings=MountsSettings,
    run=run,
)
