"""Refuses paths that someone other than root (or us) could have written: configs, plugins, state, metrics.

healthd runs as root and can drain every node of a cluster, so a config or plugin
that an unprivileged user could modify is as good as a root shell for them, and a
state directory they can write lets them plant an acknowledgement that silences a
fault, or a symbolic link that turns root's next write into one of their choosing.
The rule is the one OpenSSH's StrictModes and sudo apply: the file and every
directory above it must belong to root or to the user running healthd, and must not
be writable by group (other than root's) or others. A world-writable directory with
the sticky bit (``/tmp``) is accepted above the path, because there others cannot
rename or replace what we own; it is refused as the path itself.

The path is walked the way the kernel resolves it (path_resolution(7)), from ``/``
down, so a directory a symbolic link passes through is checked too, and each link
must belong to root or us (the rule of the kernel's fs.protected_symlinks for
sticky directories, applied everywhere).

A POSIX access ACL (acl(5)) can let other users write where the mode seems not to:
with one, the mode's group bits are the ACL's mask, the most any named user or group
entry is granted. So where the mode grants group write to root's group, the ACL
(``system.posix_acl_access``) is read too, and a named user other than root (or us),
or a named group other than root's, that may write under the mask is refused. A
directory's default ACL is not checked: it only seeds the ACL of entries created in it
later, and the kernel caps their mask at the creating mode's group bits (acl(5),
"Object creation and default ACLs"). healthd creates nothing with group write, and
checks every entry it reads by this same rule.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

TYPE_CHECKING = False  # not typing's: importing typing at run time would slow `healthd status` (bench/README.md)
if TYPE_CHECKING:
    from types import TracebackType
    from typing import Optional

# The kernel's own limit on links followed in one lookup (MAXSYMLINKS, path_resolution(7)).
_MAX_LINKS = 40


class UntrustedPath(Exception):
    """``path`` fails the trust rule; ``reason`` names the offending file or directory and why.

    Every command refuses with exit 78 (EX_CONFIG) on it: the fix is an administrator's.
    """

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"refusing {path}, which others could have written: {reason}")


def stat_reason(
    path: Path, info: os.stat_result, *, container: bool = False, dir_owner: Optional[int] = None
) -> Optional[str]:
    """The rule for one file, directory or link, from its ``lstat``: why it is untrusted, or None.

    ``container`` accepts a sticky world-writable directory: one the path passes through
    (or where a new entry of ours is created), never the path itself. A link's own mode
    is always 0777 and means nothing; only its owner counts. ``dir_owner`` is one more
    uid a directory (never a link or a file) may belong to: the node_exporter account
    for the metrics textfile, written there and never read back (healthd.service.metrics).
    """
    owners = (0, os.geteuid()) if dir_owner is None or not stat.S_ISDIR(info.st_mode) else (0, os.geteuid(), dir_owner)
    if info.st_uid not in owners:
        also = "" if dir_owner is None else f" or uid {dir_owner}"
        return f"{path} belongs to uid {info.st_uid}, not root{also}"
    mode = info.st_mode
    if stat.S_ISLNK(mode) or not mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    if container and stat.S_ISDIR(mode) and mode & stat.S_ISVTX:
        return None
    if mode & stat.S_IWOTH or info.st_gid != 0:
        return f"{path} is writable by group or others (mode {stat.filemode(mode)})"
    # Group write is fine when the group is root's own, unless these bits are an ACL's mask.
    return acl_reason(path)


# acl(5) as the kernel stores it in the xattr (include/uapi/linux/posix_acl_xattr.h): a
# little-endian u32 version, then one (u16 tag, u16 perm, u32 id) entry per 8 bytes.
_ACL_XATTR = "system.posix_acl_access"
_ACL_VERSION = 2
_ACL_USER = 0x02
_ACL_GROUP = 0x08
_ACL_MASK = 0x10
_ACL_WRITE = 0x02


def acl_reason(path: Path) -> Optional[str]:
    """Why the access ACL of ``path`` (not followed if a link) lets someone else write it, or None.

    One ``lgetxattr``; a file without an ACL, or on a filesystem without ACLs, has none.
    """
    try:
        blob = os.getxattr(path, _ACL_XATTR, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.EOPNOTSUPP, errno.ENOTSUP):
            return None
        return f"cannot read the ACL of {path}: {exc.strerror or exc}"
    if len(blob) < 4 or (len(blob) - 4) % 8 or int.from_bytes(blob[:4], "little") != _ACL_VERSION:
        return f"{path} has an ACL that healthd cannot read ({len(blob)} bytes)"
    entries = [
        (int.from_bytes(blob[i : i + 2], "little"), int.from_bytes(blob[i + 2 : i + 4], "little"), blob[i + 4 : i + 8])
        for i in range(4, len(blob), 8)
    ]
    # The kernel refuses an ACL with named entries and no mask, so the default is never used for one.
    mask = next((perm for tag, perm, _ in entries if tag == _ACL_MASK), 0o7)
    for tag, perm, raw_id in entries:
        ident = int.from_bytes(raw_id, "little")
        if not perm & mask & _ACL_WRITE:
            continue
        if tag == _ACL_USER and ident not in (0, os.geteuid()):
            kind, name = "user", _user_name(ident)
        elif tag == _ACL_GROUP and ident != 0:
            kind, name = "group", _group_name(ident)
        else:
            continue
        return (
            f"{path} is writable by {kind} {name} ({'uid' if kind == 'user' else 'gid'} {ident}) through its ACL"
            f" (entry {kind}:{name}:{_rwx(perm)}, mask {_rwx(mask)})"
        )
    return None


def _rwx(perm: int) -> str:
    return "".join(letter if perm & bit else "-" for letter, bit in (("r", 4), ("w", 2), ("x", 1)))


def _user_name(uid: int) -> str:
    import pwd  # here: only a refusal names the user

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group_name(gid: int) -> str:
    import grp  # here: only a refusal names the group

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def trusted_stat(path: Path, *, container: bool = False, dir_owner: Optional[int] = None) -> os.stat_result:
    """Check ``path`` and everything the kernel passes through to reach it; return what it names.

    Raises ``UntrustedPath`` when a component fails the rule (``container`` and
    ``dir_owner`` as in ``stat_reason``, ``container`` for the last component),
    ``OSError`` when the path cannot be walked (missing, not a directory, a link loop).
    """
    start = path if path.is_absolute() else Path.cwd() / path
    # A stack of names still to walk; Path keeps ".." so links resolve as the kernel does.
    pending = list(reversed(start.parts[1:]))
    current = Path("/")
    info = os.lstat(current)
    links = 0
    while True:
        reason = stat_reason(current, info, container=container or bool(pending), dir_owner=dir_owner)
        if reason:
            raise UntrustedPath(path, reason)
        if not pending:
            break
        name = pending.pop()
        if name == "..":
            # ``current`` is a real directory (links are expanded), so its lexical parent is its parent.
            current = current.parent
            info = os.lstat(current)
            continue
        candidate = current / name
        info = os.lstat(candidate)
        if stat.S_ISLNK(info.st_mode):
            reason = stat_reason(candidate, info)
            if reason:
                raise UntrustedPath(path, reason)
            links += 1
            if links > _MAX_LINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
            target = Path(os.readlink(candidate))
            pending.extend(reversed(target.parts[1:] if target.is_absolute() else target.parts))
            if target.is_absolute():
                current = Path("/")
                info = os.lstat(current)
            continue
        current = candidate
    final = os.stat(path)
    if (final.st_dev, final.st_ino) != (info.st_dev, info.st_ino):
        raise UntrustedPath(path, f"{path} changed while it was being checked")
    return info


def untrusted_reason(path: Path) -> Optional[str]:
    """Why ``path`` must not be trusted, or ``None`` when it is safe to load."""
    try:
        trusted_stat(path)
    except UntrustedPath as exc:
        return exc.reason
    except OSError as exc:
        return f"cannot check {path}: {exc.strerror or exc}"
    return None


def refuse_untrusted(path: Path, *, container: bool = False, dir_owner: Optional[int] = None) -> None:
    """Raise ``UntrustedPath`` if ``path`` fails the rule (``dir_owner`` as in ``stat_reason``).

    A path that cannot be walked at all (missing, not a directory) is not refused
    here: whoever uses it meets the same error and reports it as unusable.
    """
    try:
        trusted_stat(path, container=container, dir_owner=dir_owner)
    except OSError:
        return


def open_trusted_dir(path: Path, *, dir_owner: Optional[int] = None) -> int:
    """A file descriptor of the directory ``path`` once it passes the rule (raises ``UntrustedPath``, ``OSError``).

    The descriptor is checked to be the very directory that was checked, so a rename
    between the check and the open cannot swap it; files are then opened relative to
    it (``dir_fd``), never by a path that could be redirected later. ``dir_owner`` as in
    ``stat_reason``.
    """
    info = trusted_stat(path, dir_owner=dir_owner)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    with closed_on_error(fd):
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
            raise UntrustedPath(path, f"{path} changed while it was being checked")
    return fd


def closed_on_error(fd: int) -> _ClosedOnError:
    """Close ``fd`` if the block raises (a refused file is never left open), keep it open otherwise."""
    return _ClosedOnError(fd)


class _ClosedOnError:
    """``closed_on_error``'s context manager: a class, as contextlib would cost ``healthd status`` an import."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> int:
        return self.fd

    def __exit__(
        self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        if exc_type is not None:
            os.close(self.fd)
