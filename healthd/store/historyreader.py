"""Reading the node's history (``state_dir/history.sqlite``): ``healthd history``, the epilog, escalation's counts.

Anyone may read without the state-directory lock (WAL readers never block the writer,
sqlite.org/wal.html); a reader never writes, and what it cannot read raises
``HistoryError`` naming the file and why. ``HistoryReader.open_readonly`` refuses a
database that is a symlink, not a regular file, another user's or writable by others
(``historyschema.unsafe_reason``). The writer (``healthd.store.history.History``) reads
through the same methods under the lock: the repeat counts escalation needs
(``repeats``), the events of the escalation window.
"""

from __future__ import annotations

import contextlib
import grp
import os
import sqlite3
import stat
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Collection, Iterable, Iterator, Optional

from healthd.model import Device, Finding
from healthd.store.historyschema import (
    BUSY_TIMEOUT_MS,
    DB_NAME,
    EVENT_COLUMNS,
    SCHEMA_VERSION,
    Boot,
    Corrupt,
    Event,
    HistoryError,
    Kind,
    OpenFinding,
    T,
    companions,
    counted_raises,
    event_id,
    gpu_units,
    is_corruption,
    load_details,
    row_event,
    unit_of,
    unsafe_reason,
)


def _denied(path: Path) -> str:
    """Why this user may not read ``path``, naming who may: root, and the owning group where it may read.

    Judged from ``path`` itself, or from the nearest directory above it this user can see
    (a state directory of mode 0700 hides its files).
    """
    for place in (path, *path.parents):
        try:
            info = os.stat(place)
        except OSError:
            continue
        readable = 0o050 if place != path else 0o040  # a directory: read and search
        mode = f"{place} is mode {stat.S_IMODE(info.st_mode):04o}, uid {info.st_uid}"
        who = "root"
        if info.st_gid != 0 and info.st_mode & readable == readable:
            try:
                group = grp.getgrgid(info.st_gid).gr_name
            except KeyError:
                group = str(info.st_gid)
            who = f"root and the members of group {group}"
        return f"permission denied: cannot read {path} ({mode}): only {who} can read the history"
    return f"permission denied: cannot read {path}"


class HistoryReader:
    """The store as read: events, open findings, boots and the repeat counts. ``HistoryError`` for what fails."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: Optional[sqlite3.Connection] = None
        self._boot = ""
        self._node = ""

    @classmethod
    def open_readonly(cls, state_dir: Path) -> Optional[HistoryReader]:
        """A reader of the store in ``state_dir``; None when there is none yet. Raises ``HistoryError``."""
        path = state_dir / DB_NAME
        try:
            os.lstat(path)
        except FileNotFoundError:
            return None
        except PermissionError:
            # The state directory is root's (mode 0700): "does not exist" would be false.
            raise HistoryError(_denied(path)) from None
        except OSError as exc:
            raise HistoryError(f"cannot read {path}: {exc.strerror or exc}") from None
        if not os.access(path, os.R_OK):
            raise HistoryError(_denied(path))
        for part in companions(path):
            reason = unsafe_reason(part)
            if reason:
                raise HistoryError(f"refusing to read the history: {reason}")
        history = cls(path)
        try:
            history._conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, isolation_level=None)
            history._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if not history._check_schema(history._conn):
                history.close()
                return None
            history._load_meta(history._conn)
        except (sqlite3.Error, Corrupt) as exc:
            history.close()
            hint = "; the next pass sets it aside and starts a new one" if is_corruption(exc) else ""
            raise HistoryError(f"cannot read {path}: {exc}{hint}") from None
        return history

    def _check_schema(self, conn: sqlite3.Connection) -> bool:
        """True when the schema is there (and this code can use it); False for an empty database."""
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                raise Corrupt("not a healthd history: it has tables but no schema version")
            return False
        if version > SCHEMA_VERSION:
            # A newer healthd wrote it (then was downgraded): keep it for that version, record nothing.
            raise sqlite3.OperationalError(f"schema version {version} is newer than this healthd's {SCHEMA_VERSION}")
        return True

    def _load_meta(self, conn: sqlite3.Connection) -> None:
        meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('boot', 'node')").fetchall())
        self._boot = meta.get("boot", "")
        self._node = meta.get("node", "")

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None

    def __enter__(self) -> HistoryReader:
        return self

    def __exit__(
        self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()

    @property
    def usable(self) -> bool:
        """False when nothing can be recorded or read (the problems say why)."""
        return self._conn is not None

    @property
    def boot_id(self) -> str:
        """The last boot id recorded ("" when none)."""
        return self._boot

    @property
    def node(self) -> str:
        """The node name of the last recorded pass ("" when none)."""
        return self._node

    def _read(self, what: str, body: Callable[[sqlite3.Connection], T], empty: T) -> T:
        conn = self._conn
        if conn is None:
            return empty
        try:
            return body(conn)
        except (sqlite3.Error, ValueError) as exc:  # ValueError: a row this code cannot read (an unknown kind)
            raise HistoryError(f"cannot read {what} from {self.path}: {exc}") from None

    def events(
        self, *, since: Optional[float] = None, kinds: Optional[Collection[Kind]] = None, subject: Optional[str] = None
    ) -> Iterator[Event]:
        """Events in the order they were recorded, streamed; ``HistoryError`` if the database fails mid-way."""
        conn = self._conn
        if conn is None:
            return
        where: list[str] = ["1"]
        params: list[Any] = []
        if since is not None:
            where.append("at >= ?")
            params.append(since)
        if kinds is not None:
            where.append(f"kind IN ({', '.join('?' * len(kinds))})")
            params.extend(k.value for k in kinds)
        if subject is not None:
            where.append("subject = ?")
            params.append(subject)
        query = f"SELECT {EVENT_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY id"  # noqa: S608 (fixed text)
        try:
            for row in conn.execute(query, params):
                yield row_event(row)
        except (sqlite3.Error, ValueError) as exc:
            raise HistoryError(f"cannot read the events from {self.path}: {exc}") from None

    def open_findings(self) -> tuple[OpenFinding, ...]:
        def body(conn: sqlite3.Connection) -> tuple[OpenFinding, ...]:
            rows = conn.execute(
                "SELECT check_name, code, subject, unit, status, message, details, event, since FROM open_findings"
                " ORDER BY key"
            )
            return tuple(OpenFinding(c, o, s, u, st, m, load_details(d), e, t) for c, o, s, u, st, m, d, e, t in rows)

        return self._read("the open findings", body, ())

    def repeats(self, findings: Iterable[Finding], since: float) -> dict[str, tuple[str, int]]:
        """For each finding (by key): its unit, and how often its code was raised on that unit.

        The count runs from ``since`` or the unit's last repair, whichever is later,
        and includes this pass's raise when the finding is new (not open with the
        same event id): the pass is recorded only after it is planned.
        """

        def body(conn: sqlite3.Connection) -> dict[str, tuple[str, int]]:
            gpus = gpu_units(conn, self._boot)
            open_events = dict(conn.execute("SELECT key, event FROM open_findings"))
            counts: dict[str, tuple[str, int]] = {}
            for finding in findings:
                unit = unit_of(finding, gpus)
                (repaired,) = conn.execute(
                    "SELECT max(at) FROM events WHERE kind = 'repaired' AND unit = ?", (unit,)
                ).fetchone()
                start = max(since, repaired or 0.0)
                past = counted_raises(conn, unit, finding.code, start)
                new = finding.key not in open_events or open_events[finding.key] != event_id(finding)
                counts[finding.key] = (unit, past + int(new))
            return counts

        return self._read("the repeat counts", body, {})

    def boots(self) -> tuple[Boot, ...]:
        """Every boot kept, oldest first, with its GPU inventory."""

        def body(conn: sqlite3.Connection) -> tuple[Boot, ...]:
            inventory: dict[str, list[Device]] = {}
            for boot_id, pci, index, uuid, serial in conn.execute(
                "SELECT boot_id, pci_bus_id, idx, uuid, serial FROM gpus ORDER BY boot_id, idx"
            ):
                inventory.setdefault(boot_id, []).append(Device("gpu", index, pci, uuid, serial))
            rows = conn.execute("SELECT boot_id, first_seen, previous FROM boots ORDER BY first_seen")
            return tuple(Boot(b, t, p, tuple(inventory.get(b, ()))) for b, t, p in rows)

        return self._read("the boots", body, ())
