"""The ``mounts`` check: required filesystems are mounted as expected, not full, and not hung.

Presence, type, source and rw/ro come from mountinfo without touching the
filesystems: PID 1's by default, because the systemd unit's sandbox (ProtectSystem)
gives healthd's own namespace read-only views that are not the node's truth. Free
space and inodes need statvfs, which hangs on a dead network mount, so they come
from one ``fsprobe`` child process under a deadline. Missing, hung or broken
mounts (statvfs failing as a dead client does: ``BROKEN_ERRNOS``) are CRITICAL:
the source paper lists missing mounts among the high-severity failures that take
a node out at once. ``gather`` reads mountinfo and runs the probes;
``judge`` compares what they saw with ``[checks.mounts] expect``.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterable, Mapping, NamedTuple, Optional

from healthd.checks.plugin import CheckSpec, NotApplicable, Staged, Unobserved, Verdict, read_parsed
from healthd.model import Finding, Status

from ..common.mountinfo import MountEntry, find_mount, parse_mountinfo
from .fsprobe import (
    MEMORY_FILESYSTEMS,
    WALKABLE_FILESYSTEMS,
    Failed,
    Hung,
    ProbeOutcome,
    ProbeTable,
    Usage,
    forget_finished,
    read_here,
)

if TYPE_CHECKING:
    from healthd.checks.plugin import CheckContext, JudgeContext

    from .settings import MountsSettings


StuckProbes = dict[str, dict[str, float]]


class MountsObservation(NamedTuple):
    """Mountinfo as the namespace's process sees it, and the probes' outcomes by path.

    ``problem`` says why mountinfo could not be read. ``stuck`` is the
    record of probes still stuck after this pass when it changed (None when it did
    not), and ``previous`` the state it is kept in.
    """

    source: Path
    entries: tuple[MountEntry, ...] = ()
    problem: Optional[Unobserved] = None
    outcomes: tuple[tuple[str, ProbeOutcome], ...] = ()
    stuck: Optional[StuckProbes] = None
    previous: Mapping[str, Any] = MappingProxyType({})


# What statvfs says of a mount whose filesystem is gone while it stays mounted: as good as
# hung for the jobs that use it, so graded like MOUNT_HUNG. ENOTCONN: a FUSE client whose
# server died ("Transport endpoint is not connected", fs/fuse/dev.c); ESTALE: an NFS file
# handle the server no longer knows (nfs(5)); EIO: a Lustre client evicted by its servers,
# an NFS soft mount past its retries; ETIMEDOUT: an NFS mount with ``softerr`` past them
# (nfs(5)); EHOSTDOWN: a CIFS or Ceph client that lost its server; ENODEV: the device under
# the mount went away. A refusal (EACCES, EPERM) or the probe's own failure says nothing of
# the filesystem, and stays UNKNOWN.
BROKEN_ERRNOS = frozenset({errno.ENOTCONN, errno.ESTALE, errno.EIO, errno.ETIMEDOUT, errno.EHOSTDOWN, errno.ENODEV})

# The mount's attributes a spec may pin: (attribute, finding code, how a wrong one reads).
_EXPECTED_ATTRIBUTES = (("fstype", "MOUNT_WRONG_TYPE", "is"), ("source", "MOUNT_WRONG_SOURCE", "is mounted from"))


def _stuck_probes(state: Mapping[str, Any]) -> StuckProbes:
    before = state.get("stuck_probes")
    return {k: dict(v) for k, v in before.items() if isinstance(v, dict)} if isinstance(before, dict) else {}


def gather(ctx: CheckContext[MountsSettings]) -> MountsObservation:
    settings = ctx.settings
    source = ctx.paths.procfs / str(settings.namespace_pid) / "mountinfo"
    entries = read_parsed(source, parse_mountinfo, "MOUNTINFO", "surrogateescape")
    if isinstance(entries, Unobserved):
        return MountsObservation(source, problem=entries)
    if not settings.expect and not settings.usage_limits and not settings.include_root:
        raise NotApplicable("no mounts configured in [checks.mounts] expect and include_root is off")
    if not settings.probe_usage:
        return MountsObservation(source, tuple(entries))
    wanted = dict.fromkeys(["/"] if settings.include_root else [])
    wanted.update(dict.fromkeys(m.path for m in settings.expect))
    wanted.update(dict.fromkeys(limit.path for limit in settings.usage_limits))
    paths = [path for path in wanted if path == "/" or find_mount(entries, path) is not None]
    here = _answered_here(ctx, entries, paths)
    probes: ProbeTable = ctx.memory.setdefault("probes", ProbeTable())
    state = ctx.state.load()
    remembered = _stuck_probes(state)
    before = dict(remembered)
    outcomes = {path: read_here(path) for path in here}
    outcomes.update(probes.probe_all([p for p in paths if p not in outcomes], settings.probe_timeout, remembered))
    forget_finished(remembered, keep=set(paths))
    stuck = remembered if remembered != before else None
    return MountsObservation(source, tuple(entries), None, tuple((p, outcomes[p]) for p in paths), stuck, state)


def answered_from_memory(entries: list[MountEntry], path: str) -> bool:
    """Whether ``statvfs(path)`` cannot wait, by ``entries``: the mountinfo of the namespace that reads it.

    The mount visible at ``path`` must have no backing store (``MEMORY_FILESYSTEMS``), and
    every mount the walk to it crosses must not revalidate the path (``WALKABLE_FILESYSTEMS``):
    its chain of parents down to the namespace's root, which includes a mount stacked beneath
    it at the same point (a tmpfs over an autofs trigger is reached through the autofs). A
    later mount on the way (over a parent's directory) would lead the walk elsewhere: then the
    mount is hidden, and not read here. /dev/shm under an NFS root is probed in the child.
    """
    entry = find_mount(entries, path)
    if entry is None or entry.fstype not in MEMORY_FILESYSTEMS:
        return False
    chain = _mount_chain(entries, entry)
    if chain is None or any(mount.fstype not in WALKABLE_FILESYSTEMS for mount in chain):
        return False
    crossed = {mount.mount_id for mount in chain}
    above = (str(parent) for parent in PurePosixPath(path).parents)
    return all((top := find_mount(entries, p)) is None or top.mount_id in crossed for p in above)


def _mount_chain(entries: list[MountEntry], entry: MountEntry) -> Optional[list[MountEntry]]:
    """``entry`` and the mounts beneath it down to the namespace's root ("/"); None when the chain breaks or loops."""
    by_id = {e.mount_id: e for e in entries}
    chain = [entry]
    while (parent := by_id.get(chain[-1].parent_id)) is not None and parent is not chain[-1]:
        if len(chain) > len(entries):
            return None
        chain.append(parent)
    return chain if chain[-1].mount_point == "/" else None


def _answered_here(ctx: CheckContext[MountsSettings], entries: list[MountEntry], paths: list[str]) -> list[str]:
    """The ``paths`` this process may ``statvfs`` itself, judged from its own mountinfo (where the walk happens).

    ``entries`` (PID 1's mountinfo) says what the node has, and which paths are worth
    asking about; this process may see other mounts (a container, a service with mounts
    of its own). When its own mountinfo cannot be read, none.
    """
    paths = [p for p in paths if (found := find_mount(entries, p)) is not None and found.fstype in MEMORY_FILESYSTEMS]
    if not paths:
        return []
    own = read_parsed(ctx.paths.procfs / "self" / "mountinfo", parse_mountinfo, "MOUNTINFO", "surrogateescape")
    if isinstance(own, Unobserved):
        return []
    return [path for path in paths if answered_from_memory(own, path)]


def _mount_findings(jc: JudgeContext[MountsSettings], entries: list[MountEntry]) -> Iterable[Finding]:
    for spec in jc.settings.expect:
        entry = find_mount(entries, spec.path)
        if entry is None:
            yield jc.finding(Status.CRITICAL, "MOUNT_MISSING", spec.path, f"{spec.path} is not mounted")
            continue
        for key, code, wrong in _EXPECTED_ATTRIBUTES:
            want, got = getattr(spec, key), getattr(entry, key)
            if want is not None and got != want:
                message = f"{spec.path} {wrong} {got}, expected {want}"
                yield jc.finding(Status.CRITICAL, code, spec.path, message, **{key: got, "expected": want})
        if spec.rw and entry.read_only:
            yield jc.finding(Status.CRITICAL, "MOUNT_READ_ONLY", spec.path, f"{spec.path} is mounted read-only")


def _limits(settings: MountsSettings, path: str) -> tuple[float, float]:
    """The free space and inode percentages ``path`` must keep: its ``usage_limits`` entry's, else the check's own."""
    own = next((limit for limit in settings.usage_limits if limit.path == path), None)
    space = own.min_free_percent if own is not None and own.min_free_percent is not None else None
    inodes = own.min_free_inodes_percent if own is not None and own.min_free_inodes_percent is not None else None
    return (
        settings.min_free_percent if space is None else space,
        settings.min_free_inodes_percent if inodes is None else inodes,
    )


def _usage_findings(jc: JudgeContext[MountsSettings], path: str, outcome: ProbeOutcome) -> Iterable[Finding]:
    min_free, min_inodes = _limits(jc.settings, path)
    if isinstance(outcome, Hung):
        how = "an earlier probe is still stuck" if outcome.inherited else "statvfs did not return"
        yield jc.finding(
            Status.CRITICAL,
            "MOUNT_HUNG",
            path,
            f"{path} is hung: {how} after {outcome.stuck_seconds:.1f}s",
            probe_pid=outcome.pid,
            stuck_seconds=round(outcome.stuck_seconds, 3),
        )
    elif isinstance(outcome, Failed) and outcome.errno in BROKEN_ERRNOS:
        name = errno.errorcode[outcome.errno]
        yield jc.finding(
            Status.CRITICAL,
            "MOUNT_BROKEN",
            path,
            f"{path} is broken: statvfs failed with {name} ({os.strerror(outcome.errno)})",
            errno=name,
        )
    elif isinstance(outcome, Failed):
        yield jc.finding(Status.UNKNOWN, "MOUNT_PROBE_FAILED", path, f"cannot read usage of {path}: {outcome.message}")
    elif isinstance(outcome, Usage):
        convention = jc.settings.free_space_as
        space, inodes = outcome.free_percents(convention)
        how = " (as df counts it)" if convention == "df" else ""
        if space is not None and space < min_free:
            yield jc.finding(
                Status.WARNING,
                "MOUNT_SPACE_LOW",
                path,
                f"{path} has {space:.1f}% space free{how} (threshold {min_free}%)",
                free_percent=round(space, 2),
            )
        if inodes is not None and inodes < min_inodes:
            yield jc.finding(
                Status.WARNING,
                "MOUNT_INODES_LOW",
                path,
                f"{path} has {inodes:.1f}% inodes free{how} (threshold {min_inodes}%)",
                free_inodes_percent=round(inodes, 2),
            )


def judge(observed: MountsObservation, jc: JudgeContext[MountsSettings]) -> Verdict:
    if observed.problem is not None:
        return Verdict((observed.problem.finding(jc),))
    findings = list(_mount_findings(jc, list(observed.entries)))
    for path, outcome in observed.outcomes:
        findings.extend(_usage_findings(jc, path, outcome))
    state = None if observed.stuck is None else {**observed.previous, "stuck_probes": observed.stuck}
    return Verdict(tuple(findings), state)


# Filesystems a node's jobs depend on: local disks and the network and parallel ones.
# Pseudo filesystems (proc, sysfs, cgroup, tmpfs ...) come with the kernel and are not expectations.
_BASELINE_FSTYPES = frozenset(
    {"ext4", "xfs", "btrfs", "zfs", "nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "wekafs", "ceph", "fuse.ceph"}
)
# Network filesystems: their source (server:/export) is part of what is expected.
_NETWORK_FSTYPES = frozenset({"nfs", "nfs4", "lustre", "cifs", "ceph"})


def baseline(ctx: CheckContext[MountsSettings]) -> dict[str, Any]:
    """``expect`` for every mounted disk, network or parallel filesystem, read-write as it is now."""
    source = ctx.paths.procfs / str(ctx.settings.namespace_pid) / "mountinfo"
    entries = read_parsed(source, parse_mountinfo, "MOUNTINFO", "surrogateescape")
    if isinstance(entries, Unobserved):
        raise OSError(entries.message)
    expect: list[dict[str, Any]] = []
    for entry in entries:
        if entry.fstype not in _BASELINE_FSTYPES or entry.mount_point in {e["path"] for e in expect}:
            continue
        spec: dict[str, Any] = {"path": entry.mount_point, "fstype": entry.fstype}
        if entry.fstype in _NETWORK_FSTYPES:
            spec["source"] = entry.source
        spec["rw"] = not entry.read_only
        expect.append(spec)
    return {"expect": expect}


CHECK = CheckSpec(
    name="mounts",
    description="required filesystems mounted as expected, with space and inodes free, and not hung",
    settings="healthd_checks.mounts.settings:MountsSettings",
    baseline=baseline,
    run=Staged(gather, judge, keeps="stuck probe records"),
)
