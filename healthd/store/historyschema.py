"""The node's history database, shared by its writer and its readers: the schema, the events, their JSON.

``state_dir/history.sqlite`` is one SQLite database per node (stdlib ``sqlite3``), at
``SCHEMA_VERSION``: the tables (``SCHEMA_SQL``), the records a row becomes (``Event``,
``OpenFinding``, ``Boot``), how details are stored as JSON, and the checks every opener
makes (``unsafe_reason``, ``is_corruption``). The writer is ``healthd.store.history``,
the reader ``healthd.store.historyreader``; docs/history.md describes both.

Units. Each finding event also carries ``unit``: the hardware it is about, so
that a fault counted "on the same GPU" follows the GPU and not its index or
slot. It is the ``uuid`` (or ``serial``) in the finding's details, else the
UUID of the GPU that this boot's inventory lists at the PCI address in
``pci_bus_id``, ``pci`` or the subject, else the subject (an IB port, a mount).
A GPU swapped at the same address has a new UUID, so its counts start from zero.
"""

from __future__ import annotations

import datetime as _dt
import enum
import json
import math
import os
import re
import sqlite3
import stat
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Optional, TypeVar

from healthd.model import Device, Finding

DB_NAME = "history.sqlite"


SCHEMA_VERSION = 1


# Writers are serialised by the state lock, so a wait means a reader is recovering the
# WAL after a crash: short. Never long enough to eat the hook's 60 s.
BUSY_TIMEOUT_MS = 2000


DETAILS_LIMIT = 8192


# SQLITE_CORRUPT and SQLITE_NOTADB (sqlite.org/rescode.html); `sqlite_errorcode` exists from Python 3.11.
_CORRUPT_CODES = frozenset({11, 26})


_CORRUPT_TEXT = ("malformed", "not a database")


_PCI = re.compile(r"(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})(?:\.[0-7])?")


SCHEMA_SQL = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE events (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    boot_id TEXT NOT NULL,
    check_name TEXT NOT NULL,
    code TEXT NOT NULL,
    subject TEXT NOT NULL,
    unit TEXT NOT NULL,
    status TEXT NOT NULL,
    message TEXT NOT NULL,
    details TEXT NOT NULL
);
CREATE INDEX events_at ON events (at);
CREATE INDEX events_raised ON events (unit, code, at) WHERE kind = 'raised';
CREATE TABLE open_findings (
    key TEXT PRIMARY KEY,
    check_name TEXT NOT NULL,
    code TEXT NOT NULL,
    subject TEXT NOT NULL,
    unit TEXT NOT NULL,
    status TEXT NOT NULL,
    message TEXT NOT NULL,
    details TEXT NOT NULL,
    event TEXT,
    since REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE boots (boot_id TEXT PRIMARY KEY, first_seen REAL NOT NULL, previous TEXT) WITHOUT ROWID;
CREATE TABLE gpus (
    boot_id TEXT NOT NULL,
    pci_bus_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    uuid TEXT,
    serial TEXT,
    PRIMARY KEY (boot_id, pci_bus_id)
) WITHOUT ROWID;
"""


T = TypeVar("T")


class HistoryError(Exception):
    """The history cannot be read; ``str()`` names the file and why (readers only: writers never raise)."""


class Corrupt(Exception):
    """The database is not (or no longer) a usable healthd history: set it aside."""


class Kind(enum.Enum):
    """What an event records."""

    RAISED = "raised"
    CHANGED = "changed"
    CLEARED = "cleared"
    ACTION = "action"  # a Slurm action and its outcome
    ACK = "ack"
    BOOT = "boot"  # a boot id seen for the first time, with its GPU inventory
    INVENTORY = "inventory"  # GPUs (or their ids) that a boot's first inventory lacked
    REBOOT_REQUESTED = "reboot_requested"
    REBOOT_DONE = "reboot_done"
    REPAIRED = "repaired"  # hardware work done on a unit (`healthd ack --repaired`): its counts start again
    RESET = "reset"  # this database replaced a corrupt one
    JOB_START = "job_start"  # a job's prolog ran: ``subject`` the job id, ``details`` its user, GPUs, log position
    JOB_XID = "job_xid"  # a kernel record that is one job's alone (``details``: job, user, boot, seq): at most once
    JOB_END = "job_end"  # a job's epilog ran: ``details`` where the kernel log stood, or why nothing was attributed
    # One raise of its unit and code is not counted for escalation: the one recorded with it
    # (same time) when the circuit breaker held the node or the partition was in a wave, or a
    # provisional one that a later read showed was a wave's (``message`` says why; docs/escalation.md).
    UNCOUNTED = "uncounted"


class RebootPhase(enum.Enum):
    REQUESTED = "requested"
    DONE = "done"


def _fields(row: Any, **extra: Any) -> dict[str, Any]:
    """A row's fields (a record's ``_asdict``) for JSON, with ``extra`` replacing or adding some."""
    return {**row._asdict(), **extra}


def gpu_dict(gpu: Device) -> dict[str, Any]:
    """A GPU of a boot's inventory for JSON; ``pci_bus_id`` (its ``address``) is its key within the boot."""
    return {"index": gpu.index, "pci_bus_id": gpu.address, "uuid": gpu.uuid, "serial": gpu.serial}


class Event(NamedTuple):
    """One row of the history. Fields that do not apply to a kind are empty strings.

    Finding transitions and acks: ``check``/``code``/``subject`` are the finding's
    (``status`` its status, for ``cleared`` the one it had). Actions: ``code`` is the
    action, ``subject`` the node, ``status`` the outcome, ``message`` the reason.
    Boots and reboots: ``subject`` is the boot id concerned (for a reboot, the boot it
    ends). ``boot_id`` is the boot that was current when the event was recorded.
    """

    id: int
    at: float
    kind: Kind
    boot_id: str
    check: str
    code: str
    subject: str
    unit: str
    status: str
    message: str
    details: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return _fields(self, kind=self.kind.value, details=dict(self.details), time=iso_time(self.at))


class OpenFinding(NamedTuple):
    """A finding the last recorded pass still reported, and since when."""

    check: str
    code: str
    subject: str
    unit: str
    status: str
    message: str
    details: Mapping[str, Any]
    event: Optional[str]
    since: float

    @property
    def key(self) -> str:
        return f"{self.check}/{self.code}/{self.subject}"

    def to_dict(self) -> dict[str, Any]:
        return _fields(self, details=dict(self.details), since_time=iso_time(self.since))


class Boot(NamedTuple):
    boot_id: str
    first_seen: float
    previous: Optional[str]
    gpus: tuple[Device, ...]

    def to_dict(self) -> dict[str, Any]:
        return _fields(self, gpus=[gpu_dict(g) for g in self.gpus], first_seen_time=iso_time(self.first_seen))


class Maintenance(NamedTuple):
    """What a ``maintain`` run did: events deleted by age and by the size cap, and the file size after."""

    deleted_by_age: int
    deleted_by_size: int
    size_bytes: int


def iso_time(epoch: float) -> str:
    return _dt.datetime.fromtimestamp(epoch, tz=_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def is_corruption(exc: BaseException) -> bool:
    if isinstance(exc, Corrupt):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _CORRUPT_CODES
    return isinstance(exc, sqlite3.DatabaseError) and any(t in str(exc).lower() for t in _CORRUPT_TEXT)


def unsafe_reason(path: Path) -> Optional[str]:
    """Why an existing ``path`` must not be opened as (part of) the database; None when safe or absent.

    The state directory is root's: a symlink, a non-regular file, a file of another
    user, or one that group or others may write was put there by someone else.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot stat {path}: {exc.strerror or exc}"
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link"
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is not a regular file"
    if info.st_uid not in (0, os.geteuid()):
        return f"{path} belongs to uid {info.st_uid}, not root"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by group or others (mode {stat.filemode(info.st_mode)})"
    return None


def companions(path: Path) -> tuple[Path, ...]:
    """The database and the files SQLite keeps beside it."""
    return (path, *(path.with_name(path.name + suffix) for suffix in ("-wal", "-shm", "-journal")))


DETAILS_DEPTH = 16  # deeper (or self-referring) details are kept as their repr


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON can hold it, at every depth: NaN and Infinity, which json.dumps would write
    though they are not JSON (a reader in another language would choke), become text, as does
    anything JSON has no form for; keys become text."""
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if value is None or isinstance(value, (str, int)):
        return value
    if depth < DETAILS_DEPTH:
        if isinstance(value, Mapping):
            return {str(k): plain(v, depth + 1) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v, depth + 1) for v in value]
    return repr(value)[:DETAILS_LIMIT]


def details_json(details: Mapping[str, Any]) -> str:
    text = json.dumps(plain(details), sort_keys=True, separators=(",", ":"), allow_nan=False)
    if len(text) > DETAILS_LIMIT:
        return json.dumps({"truncated": True, "size": len(text)})
    return text


def load_details(text: str) -> Mapping[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {"unreadable": text[:200]}
    # Rows written before nested NaN was turned into text may still hold it.
    value = plain(value)
    return value if isinstance(value, dict) else {"value": value}


def pci_key(text: str) -> Optional[tuple[int, int, int]]:
    """(domain, bus, device) of a PCI address in any of its spellings (NVML, sysfs, the driver's Xid tag)."""
    match = _PCI.fullmatch(text.strip().lower())
    if not match:
        return None
    domain, bus, device = match.groups()
    return int(domain or "0", 16), int(bus, 16), int(device, 16)


def event_id(finding: Finding) -> Optional[str]:
    event = finding.details.get("event")
    return None if event is None else str(event)


def unit_of(finding: Finding, gpus: Mapping[tuple[int, int, int], str]) -> str:
    details = finding.details
    for name in ("uuid", "serial"):
        value = details.get(name)
        if isinstance(value, str) and value:
            return value
    for value in (details.get("pci_bus_id"), details.get("pci"), finding.subject):
        key = pci_key(value) if isinstance(value, str) else None
        if key is not None and key in gpus:
            return gpus[key]
    return finding.subject


def row_event(row: tuple[Any, ...]) -> Event:
    id_, at, kind, boot_id, check, code, subject, unit, status, message, details = row
    return Event(id_, at, Kind(kind), boot_id, check, code, subject, unit, status, message, load_details(details))


EVENT_COLUMNS = "id, at, kind, boot_id, check_name, code, subject, unit, status, message, details"


def counted_raises(conn: sqlite3.Connection, unit: str, code: str, since: float) -> int:
    """How many raises of ``code`` on ``unit`` since then escalation counts: each ``uncounted`` event takes one back."""
    (net,) = conn.execute(
        "SELECT coalesce(sum(CASE kind WHEN 'raised' THEN 1 ELSE -1 END), 0) FROM events"
        " WHERE kind IN ('raised', 'uncounted') AND unit = ? AND code = ? AND at >= ?",
        (unit, code, since),
    ).fetchone()
    return int(net)


def gpu_units(conn: sqlite3.Connection, boot_id: str) -> dict[tuple[int, int, int], str]:
    units = {}
    for pci, uuid, serial in conn.execute("SELECT pci_bus_id, uuid, serial FROM gpus WHERE boot_id = ?", (boot_id,)):
        key = pci_key(pci)
        if key is not None and (uuid or serial):
            units[key] = uuid or serial
    return units
