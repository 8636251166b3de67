"""POSIX ACLs set through their xattr, as setfacl(1) would set them, for the trust rule's tests.

The kernel takes an ACL as ``system.posix_acl_access`` (``system.posix_acl_default`` for a
directory's default ACL) in the format of include/uapi/linux/posix_acl_xattr.h: a
little-endian u32 version 2, then an (u16 tag, u16 perm, u32 id) entry for each of
the owner, named users, the owning group, named groups, the mask and others. Setting
one changes the mode's group bits to the mask, as setfacl does.
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path
from typing import Optional

import pytest

ACCESS = "system.posix_acl_access"
DEFAULT = "system.posix_acl_default"
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_NO_ID = 0xFFFFFFFF


def _entry(tag: int, perm: int, ident: int = _NO_ID) -> bytes:
    return struct.pack("<HHI", tag, perm, ident)


def acl_blob(
    *, owner: int = 7, group: int = 5, other: int = 5, mask: int = 7, users: dict[int, int], groups: dict[int, int]
) -> bytes:
    """An ACL: the owner, group, other and mask permissions (rwx as 4/2/1), named ``users``/``groups`` by id."""
    entries = [_entry(_USER_OBJ, owner)]
    entries += [_entry(_USER, perm, uid) for uid, perm in sorted(users.items())]
    entries.append(_entry(_GROUP_OBJ, group))
    entries += [_entry(_GROUP, perm, gid) for gid, perm in sorted(groups.items())]
    entries += [_entry(_MASK, mask), _entry(_OTHER, other)]
    return struct.pack("<I", 2) + b"".join(entries)


def set_acl(
    path: Path,
    *,
    users: Optional[dict[int, int]] = None,
    groups: Optional[dict[int, int]] = None,
    mask: int = 7,
    which: str = ACCESS,
    **objects: int,
) -> None:
    """Give ``path`` an ACL (``acl_blob``'s arguments); skip the test where its filesystem has no ACLs."""
    blob = acl_blob(users=users or {}, groups=groups or {}, mask=mask, **objects)
    try:
        os.setxattr(path, which, blob)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.ENOTSUP):
            pytest.skip(f"{path}'s filesystem has no POSIX ACLs")
        raise
