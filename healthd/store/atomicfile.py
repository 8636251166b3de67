"""Replacing a file atomically, never following a link: the one writer of every file healthd leaves behind.

The state documents (``healthd.store.state``), the metrics textfile (``healthd.service.metrics``)
and a recorded GPU snapshot (``healthd record-gpus``) are all written here. A crash
or power loss leaves either the old file or the new one, never a mix, and a name
planted where healthd writes (a link, a FIFO, a file) makes the write fail instead
of redirecting it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

# O_EXCL: the temporary name must be new, so nothing planted under it is ever opened;
# O_NOFOLLOW on top, as open(2) advises for O_EXCL on a name that may be a link.
# O_CLOEXEC: the descriptor never leaks into scontrol or a probe.
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_atomically(dir_fd: int, name: str, body: bytes, mode: int, *, durable: bool = True) -> None:
    """Replace ``name`` in the directory ``dir_fd`` with ``body``, file mode ``mode``.

    The temporary file is new (``O_CREAT | O_EXCL``: a planted name or link makes
    the write fail, it is never followed), sits in the same directory (``rename`` is
    atomic only within one filesystem), is fsynced before the rename, and the
    directory after it, or a power loss could bring the old file back. Not ``durable``:
    the directory is not synced, so a power loss may bring the old file back (never a
    torn one), for a document that records nothing done outside (a dry run's). The rename
    replaces a link planted at ``name`` itself rather than writing through it. The
    temporary name starts with a dot and ends in ``.tmp``, so readers of ``*.json``
    or ``*.prom`` never see it half-written. The mode is set with ``fchmod``, because
    the umask (the unit's ``UMask=0077``) may have taken bits away at creation.
    """
    tmp = f".{name}.{os.urandom(8).hex()}.tmp"
    fd = os.open(tmp, _CREATE_FLAGS, mode, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(body)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        if durable:
            os.fsync(dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def replace_file(path: Path, body: bytes, mode: int) -> None:
    """``write_atomically`` for a path of the caller's choosing; raises ``OSError``.

    For a file a person names on the command line; files in healthd's own
    directories go through a directory that passed ``healthd.store.trust``'s rule first.
    """
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_atomically(dir_fd, path.name, body, mode)
    finally:
        os.close(dir_fd)
