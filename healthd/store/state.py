"""Durable state in ``[paths].state_dir``: one JSON document per owner, written atomically, in a trusted directory.

Cursors, counter baselines, sticky findings, pending actions, acknowledgements and
the last pass all live here. A write goes to a new temporary file in the same
directory, is fsynced and renamed over the old one (``healthd.store.atomicfile``), so a
crash leaves either the old or the new document. A file that cannot be parsed is renamed aside
(``NAME.json.corrupt-<time>``) and reported, never fatal: the owner starts from
empty state.

What is stored here steers root: an acknowledgement silences a fault, the policy
state says which drains are healthd's own. So the directory and every entry in it
must pass ``healthd.store.trust``'s rule (owner root or us, no group or other write), or
``UntrustedPath`` is raised and the command refuses (exit 78). Every file is opened
relative to the checked directory with ``O_NOFOLLOW`` (a planted symbolic link is
refused, never followed), checked again by ``fstat`` once open, and a file healthd
creates is created with ``O_EXCL``, so no planted name can redirect a root write.
A missing state directory is created 0700 (missing parents 0755), never inside an
untrusted directory.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import time
from pathlib import Path

from healthd.store.atomicfile import write_atomically
from healthd.store.trust import (
    UntrustedPath,
    closed_on_error,
    open_trusted_dir,
    refuse_untrusted,
    stat_reason,
    trusted_stat,
)

TYPE_CHECKING = False  # not typing's: importing typing at run time would slow `healthd status` (bench/README.md)
if TYPE_CHECKING:
    from typing import Any, Callable, Optional, TypeVar

    R = TypeVar("R")

KEEP_CORRUPT = 3  # corrupt copies kept per file for a post-mortem; older ones are removed
# Added to every open in the state directory: never follow a link, never leak the fd
# into scontrol or a probe, and never block opening a FIFO planted under a known name.
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class StateError(Exception):
    """The state directory or a state file could not be read or written."""


def _link_reason(path: Path) -> str:
    return f"{path} is a symbolic link (healthd follows no link in its state directory)"


def entry_reason(path: Path, info: os.stat_result, *, file_only: bool = False) -> Optional[str]:
    """Why an entry of the state directory (from its ``lstat``) is untrusted, or None.

    Directories are accepted in a listing (healthd never enters them) unless ``file_only``.
    """
    if stat.S_ISLNK(info.st_mode):
        return _link_reason(path)
    reason = stat_reason(path, info)
    if reason is None and not (stat.S_ISREG(info.st_mode) or (stat.S_ISDIR(info.st_mode) and not file_only)):
        return f"{path} is not a regular file (mode {stat.filemode(info.st_mode)})"
    return reason


def _refuse_entry(directory: Path, name: str, info: os.stat_result, *, file_only: bool = False) -> None:
    reason = entry_reason(directory / name, info, file_only=file_only)
    if reason:
        raise UntrustedPath(directory, reason)


def open_entry(dir_fd: int, directory: Path, name: str, flags: int, mode: int = 0o600) -> int:
    """Open the regular file ``name`` in the checked directory ``dir_fd`` without following a link.

    Raises ``UntrustedPath`` (naming ``directory``) for a link or a file that fails the
    rule, ``OSError`` otherwise.
    """
    try:
        fd = os.open(name, flags | _OPEN_FLAGS, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # what O_NOFOLLOW answers for a link (open(2))
            raise UntrustedPath(directory, _link_reason(directory / name)) from None
        raise
    with closed_on_error(fd):
        _refuse_entry(directory, name, os.fstat(fd), file_only=True)
    return fd


def _missing_parts(directory: Path) -> tuple[Path, list[Path]]:
    """The nearest existing ancestor of ``directory`` and the missing paths below it, innermost first."""
    current = directory if directory.is_absolute() else Path.cwd() / directory
    missing: list[Path] = []
    while not os.path.lexists(current):
        missing.append(current)
        current = current.parent
    return current, missing


def make_state_dir(directory: Path) -> None:
    """Create ``directory`` 0700 (and missing parents 0755) unless it exists; never inside an untrusted directory.

    mkdir(2) only takes bits away with the umask, so nothing created here is ever
    writable by group or others, and it belongs to the user healthd runs as.
    """
    existing, missing = _missing_parts(directory)
    if not missing:
        return
    trusted_stat(existing, container=True)

    for path in reversed(missing):
        # Another healthd process (the hook beside the daemon) may create it first; the trust
        # check that follows every creation decides whether what is there may be used.
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700 if path == missing[0] else 0o755)


def open_state_dir(directory: Path, *, create: bool) -> int:
    """The state directory's fd once it and every entry in it pass the rule (raises ``UntrustedPath``, ``OSError``)."""
    if create:
        make_state_dir(directory)
    fd = open_trusted_dir(directory)
    with closed_on_error(fd):
        for name in os.listdir(fd):
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:  # removed since the listing (a temporary file renamed into place)
                continue
            _refuse_entry(directory, name, info)
    return fd


def read_entry(directory: Path, name: str) -> bytes:
    """The contents of ``directory/name``, read without following links from a checked directory and file."""
    dir_fd = open_trusted_dir(directory)
    try:
        fd = open_entry(dir_fd, directory, name, os.O_RDONLY)
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


# ``node.json``: the node the directory belongs to (healthd.store.statenode).
MARK = "node"


def state_owner(directory: Path) -> str:
    """The node ``directory/node.json`` names (healthd.store.statenode), or "" when none is named or it
    cannot be read."""
    try:
        document = json.loads(read_entry(directory, f"{MARK}.json"))
    except (OSError, ValueError):
        return ""
    owner = document.get("node") if isinstance(document, dict) else None
    return owner if isinstance(owner, str) else ""


def _keep_newest(dir_fd: int, name: str, keep: int) -> None:
    prefix = f"{name}.corrupt-"
    copies: list[tuple[float, str]] = []
    for entry in os.listdir(dir_fd):
        if entry.startswith(prefix):
            with contextlib.suppress(OSError):
                copies.append((os.stat(entry, dir_fd=dir_fd, follow_symlinks=False).st_mtime, entry))
    for _, old in sorted(copies, reverse=True)[keep:]:
        with contextlib.suppress(OSError):
            os.unlink(old, dir_fd=dir_fd)


class StateFile:
    """One owner's JSON document (a check's, the policy's, the last pass's).

    A plain class, as is ``StateDir``: ``healthd status`` reads state without paying for
    the dataclasses module.
    """

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        # What ``load`` met, for the check framework (``StateDir.drain_problems``); ``read`` returns its own.
        self.problems: list[str] = []
        import threading  # here, not at the top: ``healthd status`` reads no StateFile

        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"StateFile({self.directory!r}, {self.name!r})"

    @property
    def path(self) -> Path:
        return self.directory / f"{self.name}.json"

    def read(self) -> tuple[dict[str, Any], tuple[str, ...]]:
        """The stored document (``{}`` when there is none or it was corrupt) and the problems met.

        Raises ``UntrustedPath``.
        """
        with self._lock:
            try:
                dir_fd = open_trusted_dir(self.directory)
                try:
                    with os.fdopen(open_entry(dir_fd, self.directory, self.path.name, os.O_RDONLY), "rb") as handle:
                        raw = handle.read()
                    return self._parse(dir_fd, raw)
                finally:
                    os.close(dir_fd)
            except FileNotFoundError:
                return {}, ()
            except OSError as exc:
                return {}, (f"cannot read {self.path}: {exc.strerror or exc}",)

    def load(self) -> dict[str, Any]:
        """The stored document, as ``read``, for a check (``CheckContext.state``): its problems wait in ``problems``.

        A check's gather returns its observation alone (healthd.checks.plugin): the check
        framework, not the check, reports its state file's problems (``StateDir.drain_problems``).
        """
        document, problems = self.read()
        self.problems.extend(problems)
        return document

    def _parse(self, dir_fd: int, raw: bytes) -> tuple[dict[str, Any], tuple[str, ...]]:
        """The document in ``raw``; a corrupt one is renamed aside (within ``dir_fd``) and reported."""
        name = self.path.name
        try:
            data = json.loads(raw.decode("utf-8"))  # bad UTF-8 is corruption too (a ValueError)
            if not isinstance(data, dict):
                raise ValueError("top level is not an object")
        except ValueError as exc:
            aside = f"{name}.corrupt-{int(time.time())}"
            try:
                os.replace(name, aside, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                _keep_newest(dir_fd, name, KEEP_CORRUPT)
                where = f"moved to {self.directory / aside}"
            except OSError as move_exc:
                where = f"could not move it aside: {move_exc}"
            return {}, (f"corrupt state file {self.path} ({exc}); {where}; starting empty",)
        return data, ()

    def save(self, data: dict[str, Any], *, durable: bool = True) -> None:
        """Replace the document atomically; raises ``StateError`` naming the file, or ``UntrustedPath``.

        Not ``durable``: a power loss may bring back the document before (``write_atomically``).
        """
        body = json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")
        with self._lock:
            try:
                make_state_dir(self.directory)
                dir_fd = open_trusted_dir(self.directory)
                try:
                    write_atomically(dir_fd, self.path.name, body, 0o600, durable=durable)
                finally:
                    os.close(dir_fd)
            except OSError as exc:
                raise StateError(f"cannot write {self.path}: {exc.strerror or exc}") from exc


class StateDir:
    """Hands out ``StateFile``s under one directory and collects their problems."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._files: dict[str, StateFile] = {}

    def __repr__(self) -> str:
        return f"StateDir({self.directory!r})"

    def file(self, name: str) -> StateFile:
        if name not in self._files:
            self._files[name] = StateFile(self.directory, name)
        return self._files[name]

    def refuse_untrusted(self) -> None:
        """Raise ``UntrustedPath`` if the directory or any entry in it fails the rule.

        A directory that does not exist yet is checked where it would be created; one
        that is unusable (a file in its place) is not refused: each pass reports it.
        """
        try:
            fd = open_state_dir(self.directory, create=False)
        except FileNotFoundError:
            refuse_untrusted(_missing_parts(self.directory)[0], container=True)
            return
        except OSError:
            return
        os.close(fd)

    def drain_problems(self) -> list[str]:
        """What the files read with ``StateFile.load`` met since the last drain: the checks' own state files.

        The pass reads its own files (policy, acks) with ``StateFile.read``, which returns them.
        """
        problems: list[str] = []
        for state_file in self._files.values():
            problems.extend(state_file.problems)
            state_file.problems.clear()
        return problems


def load_records(raw: Any, make: Callable[..., R], valid: Callable[[R], bool]) -> dict[str, R]:
    """The records of a saved ``{key: fields}`` table that rebuild with ``make`` and pass ``valid``.

    State files outlive versions and may be damaged: an entry that does not rebuild,
    or that ``valid`` rejects (returning False or raising ``ValueError``), is dropped
    rather than trusted.
    """
    records: dict[str, R] = {}
    if not isinstance(raw, dict):
        return records
    for key, fields in raw.items():
        try:
            record = make(**fields)
            if valid(record):
                records[str(key)] = record
        except (TypeError, ValueError):
            continue
    return records
