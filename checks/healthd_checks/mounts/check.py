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

What a user shapes decides nothing (docs/security.md): a line of mountinfo that does not
parse is skipped and named in an OK note, and the rest is judged; a user's own FUSE mount
(``fuse_user``) never stands for the node's mount at its path, whose presence, type and rw
are judged beneath it, and a path it stands in the way of is not probed: its space and
inodes are UNKNOWN ``MOUNT_USER_FUSE``, naming the user and the mount. A mount that took the
place of the one mountinfo named between the read and the probe (a user's FUSE mounted in
between) is not read (``fsprobe.Changed``): mountinfo is read again and the path probed once
more by it, and a mount that changed again is UNKNOWN ``MOUNT_CHANGED``.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterable, Mapping, NamedTuple, Optional, Sequence

from healthd.checks.plugin import CheckSpec, NotApplicable, Staged, Unobserved, Verdict, read_parsed
from healthd.model import Finding, Status
from healthd.text import one_line

from ..common.mountinfo import (
    MountEntry,
    SkippedLine,
    find_mount,
    find_node_mount,
    fuse_user,
    parse_mountinfo,
    user_mount_in_the_way,
)
from ..common.procs import user_name
from .fsprobe import (
    MEMORY_FILESYSTEMS,
    WALKABLE_FILESYSTEMS,
    Changed,
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

    ``problem`` says why mountinfo could not be read, ``skipped`` which of its lines did
    not parse. ``stuck`` is the record of probes still stuck after this pass when it
    changed (None when it did not), and ``previous`` the state it is kept in. ``users``
    names the owners of the users' FUSE mounts in the way of a watched path (uid, name).
    """

    source: Path
    entries: tuple[MountEntry, ...] = ()
    problem: Optional[Unobserved] = None
    outcomes: tuple[tuple[str, ProbeOutcome], ...] = ()
    stuck: Optional[StuckProbes] = None
    previous: Mapping[str, Any] = MappingProxyType({})
    skipped: tuple[SkippedLine, ...] = ()
    users: tuple[tuple[int, str], ...] = ()


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


def _shown(name: str) -> str:
    """A name read from mountinfo as a finding may carry it: bytes that were not UTF-8 as ``\\xNN``, on one line.

    mountinfo is read with ``surrogateescape`` (a user's mount point may hold any byte);
    a lone surrogate is no character the node history (SQLite), the journal or a terminal
    can take, and a finding that carried one would fail the whole pass.
    """
    return one_line(name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"))


def _stuck_probes(state: Mapping[str, Any]) -> StuckProbes:
    before = state.get("stuck_probes")
    return {k: dict(v) for k, v in before.items() if isinstance(v, dict)} if isinstance(before, dict) else {}


def _watched(settings: MountsSettings) -> list[str]:
    """The paths whose space and inodes the check judges: "/" (``include_root``), ``expect``'s and ``usage_limits``'."""
    wanted = dict.fromkeys(["/"] if settings.include_root else [])
    wanted.update(dict.fromkeys(m.path for m in settings.expect))
    wanted.update(dict.fromkeys(limit.path for limit in settings.usage_limits))
    return list(wanted)


def _users_in_the_way(entries: tuple[MountEntry, ...], paths: list[str]) -> tuple[tuple[int, str], ...]:
    """(uid, name) of each user whose FUSE mount is in the way of one of ``paths``."""
    found = (user_mount_in_the_way(entries, path) for path in paths)
    uids = sorted({uid for mount in found if mount is not None and (uid := fuse_user(mount)) is not None})
    return tuple((uid, user_name(uid)) for uid in uids)


def _probed(settings: MountsSettings, entries: tuple[MountEntry, ...]) -> list[str]:
    """The watched paths to probe: the node's mounts, where no user's FUSE mount is in the way."""
    # A path under a user's FUSE mount is not probed: statvfs there would ask the user's server.
    return [
        path
        for path in _watched(settings)
        if (path == "/" or find_node_mount(entries, path) is not None) and user_mount_in_the_way(entries, path) is None
    ]


def _probe(
    ctx: CheckContext[MountsSettings], entries: tuple[MountEntry, ...], paths: list[str], stuck: StuckProbes
) -> dict[str, ProbeOutcome]:
    """Space and inodes of ``paths``, each read only where its mount is still the one ``entries`` shows there.

    Only mountinfo read from this node's own procfs names the devices here: a captured tree
    (``[paths] procfs``, tests and post-mortems) is not compared with them ("" compares nothing).
    """
    live = ctx.paths.procfs == Path("/proc")
    devices = {path: entry.device if live and (entry := find_mount(entries, path)) else "" for path in paths}
    here = _answered_here(ctx, list(entries), paths)
    outcomes = {path: read_here(path, devices[path]) for path in here}
    probes: ProbeTable = ctx.memory.setdefault("probes", ProbeTable())
    rest = {path: device for path, device in devices.items() if path not in outcomes}
    outcomes.update(probes.probe_all(rest, ctx.settings.probe_timeout, stuck))
    return outcomes


def gather(ctx: CheckContext[MountsSettings]) -> MountsObservation:
    settings = ctx.settings
    source = ctx.paths.procfs / str(settings.namespace_pid) / "mountinfo"
    read = read_parsed(source, parse_mountinfo, "MOUNTINFO", "surrogateescape")
    if isinstance(read, Unobserved):
        return MountsObservation(source, problem=read)
    if not settings.expect and not settings.usage_limits and not settings.include_root:
        raise NotApplicable("no mounts configured in [checks.mounts] expect and include_root is off")
    watched = _watched(settings)
    seen = MountsObservation(source, read.entries, skipped=read.skipped, users=_users_in_the_way(read.entries, watched))
    if not settings.probe_usage:
        return seen
    paths = _probed(settings, read.entries)
    state = ctx.state.load()
    remembered = _stuck_probes(state)
    before = dict(remembered)
    outcomes = _probe(ctx, read.entries, paths, remembered)
    changed = [path for path, outcome in outcomes.items() if isinstance(outcome, Changed)]
    if changed:
        # Another mount stood at a path by the time it was probed (a user's FUSE mounted since
        # mountinfo was read, an autofs trigger that mounted): read mountinfo again, and probe
        # those paths once more by what it says now. A path changed twice stays ``Changed``.
        again = read_parsed(source, parse_mountinfo, "MOUNTINFO", "surrogateescape")
        if not isinstance(again, Unobserved):
            users = _users_in_the_way(again.entries, watched)
            seen = seen._replace(entries=again.entries, skipped=again.skipped, users=users)
            retry = [path for path in _probed(settings, again.entries) if path in changed]
            outcomes = {path: outcome for path, outcome in outcomes.items() if path not in changed}
            outcomes.update(_probe(ctx, again.entries, retry, remembered))
    forget_finished(remembered, keep=set(paths))
    stuck = remembered if remembered != before else None
    found = tuple((path, outcomes[path]) for path in watched if path in outcomes)
    return seen._replace(outcomes=found, stuck=stuck, previous=state)


def answered_from_memory(entries: Sequence[MountEntry], path: str) -> bool:
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


def _mount_chain(entries: Sequence[MountEntry], entry: MountEntry) -> Optional[list[MountEntry]]:
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
    return [path for path in paths if answered_from_memory(own.entries, path)]


def _missing(jc: JudgeContext[MountsSettings], observed: MountsObservation, path: str) -> Finding:
    """MOUNT_MISSING for ``path``; UNKNOWN instead where a line of mountinfo that was skipped names ``path``."""
    unread = next((line for line in observed.skipped if line.mount_point == path), None)
    if unread is not None:
        message = f"{path}: its line {unread.line_number} in {observed.source} does not parse: {unread.problem}"
        return jc.finding(Status.UNKNOWN, "MOUNT_UNREADABLE", path, message, line=unread.line_number)
    visible = find_mount(observed.entries, path)
    uid = None if visible is None else fuse_user(visible)
    # A user's FUSE mount there is no stand-in for the node's own.
    mine = "" if uid is None else f" (only the FUSE mount of {_who(observed, uid)} is there)"
    return jc.finding(Status.CRITICAL, "MOUNT_MISSING", path, f"{path} is not mounted{mine}")


def _who(observed: MountsObservation, uid: int) -> str:
    return f"{dict(observed.users).get(uid, uid)} (uid {uid})"


def _mount_findings(jc: JudgeContext[MountsSettings], observed: MountsObservation) -> Iterable[Finding]:
    for spec in jc.settings.expect:
        # The node's own mount: a user's FUSE stacked over it is judged apart (_user_findings).
        entry = find_node_mount(observed.entries, spec.path)
        if entry is None:
            yield _missing(jc, observed, spec.path)
            continue
        for key, code, wrong in _EXPECTED_ATTRIBUTES:
            want, got = getattr(spec, key), getattr(entry, key)
            if want is not None and got != want:
                message = f"{spec.path} {wrong} {_shown(got)}, expected {want}"
                yield jc.finding(Status.CRITICAL, code, spec.path, message, **{key: _shown(got), "expected": want})
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


def _size_findings(jc: JudgeContext[MountsSettings], path: str, outcome: ProbeOutcome) -> Iterable[Finding]:
    """A ``usage_limits`` entry's sizes: df's Avail (kB) and IFree at least ``min_free_kib`` and ``min_free_inodes``.

    NHC's check_fs_free and check_fs_ifree given a size or a count (scripts/lbnl_fs.nhc) pass a
    filesystem of no blocks (no inodes), and compare the rest with ``-lt``.
    """
    own = next((limit for limit in jc.settings.usage_limits if limit.path == path), None)
    if own is None or not isinstance(outcome, Usage):
        return
    if own.min_free_kib is not None and outcome.total_bytes and outcome.free_kib < own.min_free_kib:
        message = f"{path} has {outcome.free_kib} KiB free (df's Avail), at least {own.min_free_kib} KiB expected"
        yield jc.finding(Status.WARNING, "MOUNT_SPACE_LOW", path, message, free_kib=outcome.free_kib)
    has_inodes = outcome.free_inode_fraction is not None
    if own.min_free_inodes is not None and has_inodes and outcome.free_inodes < own.min_free_inodes:
        message = f"{path} has {outcome.free_inodes} inodes free, at least {own.min_free_inodes} expected"
        yield jc.finding(Status.WARNING, "MOUNT_INODES_LOW", path, message, free_inodes=outcome.free_inodes)


def _skipped_note(jc: JudgeContext[MountsSettings], observed: MountsObservation) -> Iterable[Finding]:
    """An OK note naming the lines of mountinfo that did not parse; every other line was judged."""
    if not observed.skipped:
        return
    first = observed.skipped[0]
    more = f" (and {len(observed.skipped) - 1} more)" if len(observed.skipped) > 1 else ""
    message = (
        f"{observed.source}:{first.line_number}: {first.problem}{more}; skipped, "
        f"the other {len(observed.entries)} mounts judged"
    )
    details = {"lines": ",".join(str(line.line_number) for line in observed.skipped[:20])}
    yield jc.finding(Status.OK, "MOUNTINFO_LINES_SKIPPED", str(observed.source), message, **details)


def _user_findings(jc: JudgeContext[MountsSettings], observed: MountsObservation) -> Iterable[Finding]:
    """UNKNOWN for each watched mount of the node's that a user's FUSE mount stands in the way of.

    Its presence, type and rw are judged from mountinfo all the same; its space and
    inodes cannot be: ``statvfs`` would reach the user's filesystem, which answers what
    its server likes, or, where it does not let root in, zeros from the kernel
    (fs/fuse/inode.c, ``fuse_statfs``). Neither OK nor a fault of the node.
    """
    for path in _watched(jc.settings):
        mount = user_mount_in_the_way(observed.entries, path)
        if mount is None or (uid := fuse_user(mount)) is None:
            continue
        if path != "/" and find_node_mount(observed.entries, path) is None:
            continue  # nothing of the node's there: MOUNT_MISSING, or a usage limit not judged
        message = (
            f"space and inodes of {path} not read: {_who(observed, uid)} has a FUSE mount ({_shown(mount.fstype)}) "
            f"on {_shown(mount.mount_point)}, and statvfs of {path} would ask that user's server"
        )
        user = dict(observed.users).get(uid, str(uid))
        yield jc.finding(
            Status.UNKNOWN, "MOUNT_USER_FUSE", path, message, uid=uid, user=user, user_mount=_shown(mount.mount_point)
        )


def _unread_findings(jc: JudgeContext[MountsSettings], path: str, outcome: ProbeOutcome) -> Iterable[Finding]:
    """What a probe that read no numbers says: hung, changed under it, broken, or failed."""
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
    elif isinstance(outcome, Changed):
        # Not the expected mount's fault, nor a reading of it (fsprobe.Changed).
        yield jc.finding(
            Status.UNKNOWN,
            "MOUNT_CHANGED",
            path,
            f"space and inodes of {path} not read: the mount there changed while it was probed "
            f"(device {_shown(outcome.device)} where mountinfo named {_shown(outcome.expected)})",
            device=_shown(outcome.device),
            expected_device=_shown(outcome.expected),
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


def _usage_findings(
    jc: JudgeContext[MountsSettings], path: str, outcome: ProbeOutcome, fstype: Optional[str]
) -> Iterable[Finding]:
    min_free, min_inodes = _limits(jc.settings, path)
    if not isinstance(outcome, Usage):
        yield from _unread_findings(jc, path, outcome)
    elif outcome.total_bytes == 0 and min_free > 0 and fstype not in MEMORY_FILESYSTEMS:
        # A filesystem with a size says so; no blocks at all is no reading (a FUSE mount that does
        # not let root in is answered so by the kernel: fs/fuse/inode.c, fuse_statfs).
        yield jc.finding(
            Status.UNKNOWN,
            "MOUNT_USAGE_EMPTY",
            path,
            f"space of {path} not read: statvfs answered 0 blocks in all, which a {_shown(fstype or 'mounted')} "
            "filesystem never has",
        )
    else:
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
    findings = [*_mount_findings(jc, observed), *_skipped_note(jc, observed)]
    if jc.settings.probe_usage:
        findings.extend(_user_findings(jc, observed))
    for path, outcome in observed.outcomes:
        visible = find_mount(observed.entries, path)
        findings.extend(_usage_findings(jc, path, outcome, None if visible is None else visible.fstype))
        findings.extend(_size_findings(jc, path, outcome))
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
    read = read_parsed(source, parse_mountinfo, "MOUNTINFO", "surrogateescape")
    if isinstance(read, Unobserved):
        raise OSError(read.message)
    expect: list[dict[str, Any]] = []
    for entry in read.entries:
        if entry.fstype not in _BASELINE_FSTYPES or entry.mount_point in {e["path"] for e in expect}:
            continue
        if fuse_user(entry) is not None:  # a user's own FUSE mount is no expectation of the node
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
