"""Recording the node's history: transitions, Slurm actions, acks, boots and reboots, in ``state_dir/history.sqlite``.

One SQLite database per node (its schema: ``healthd.store.historyschema``), written
by whichever healthd process holds the state-directory lock (daemon, hook, ``healthd
ack``) and read by anyone without it (``healthd.store.historyreader``; WAL readers
never block the writer). A writer opens the store under the lock, records, and closes it before
releasing the lock: the store is never kept open across passes, because a
corrupt database is renamed aside, and SQLite must not have it open elsewhere
then (sqlite.org/howtocorrupt.html, "unlinking or renaming a database file
while in use").

Durability. ``journal_mode=WAL`` with ``synchronous=NORMAL``: a commit appends
its pages and a commit frame to the WAL with ``write(2)``; once ``write``
returns the data is in the kernel's page cache, so killing the process (kill
-9, the OOM killer, slurmd's SIGKILL of its HealthCheckProgram) at any moment
loses nothing committed, and a transaction cut short has no valid commit frame
and is ignored when the WAL is next read. Only a power loss or a kernel crash can
lose the last transactions before a checkpoint, never corrupt the database
(sqlite.org/pragma.html#pragma_synchronous, sqlite.org/wal.html). That is the
right trade for a record written every five minutes.

Faults. Nothing here raises into a pass: ``record_*`` and ``maintain`` catch
every SQLite and file-system error and append a sentence to ``problems``,
which the caller reports as an UNKNOWN finding (``problem_finding``). A corrupt
database (not a database, a malformed page, a failed ``PRAGMA quick_check``) is
renamed to ``history.sqlite.corrupt-<time>`` with its WAL (the newest
``KEEP_CORRUPT`` kept), a new one is started, and its first event (``reset``)
says why. A database path that is a symlink, not a regular file, owned by
another user or writable by group or others is refused (history is then off
for that process and the refusal is a problem), since the state directory is
root's and a planted file there is an attack, not data.

Transitions. ``record_pass`` compares the pass with the findings still open in
the store: a finding not open is ``raised``; an open one whose status, message
or details differ is ``changed``, except that a new ``details.event`` (a new
Xid event on the same GPU) is a new ``raised``; an open finding that its
check, having run, no longer reports is ``cleared``. A check that did not run
to the end (timeout, crash, ``--only``) clears nothing: it saw nothing either
way. A pass's transitions are one transaction: all or none.
A finding's unit is resolved as ``historyschema`` says (``unit_of``).
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, NamedTuple, Optional

from healthd.model import Device, Finding, PassResult, RunState, Status
from healthd.store.historyreader import HistoryReader
from healthd.store.historyschema import (
    BUSY_TIMEOUT_MS,
    DB_NAME,
    EVENT_COLUMNS,
    SCHEMA_SQL,
    SCHEMA_VERSION,
    Corrupt,
    Event,
    Kind,
    Maintenance,
    RebootPhase,
    T,
    companions,
    counted_raises,
    details_json,
    event_id,
    gpu_dict,
    gpu_units,
    is_corruption,
    pci_key,
    row_event,
    unit_of,
    unsafe_reason,
)

if TYPE_CHECKING:
    from healthd.plan.acks import FindingRef

KEEP_DAYS = 180


MAX_BYTES = 64 * 1024 * 1024


KEEP_CORRUPT = 3  # corrupt databases kept for a post-mortem (`sqlite3 FILE .recover`); older ones removed


MAINTENANCE_INTERVAL = 86400.0  # quick_check and retention run at most once a day


PROBLEM_CODE = "HISTORY_PROBLEM"


# Stored text is bounded so that one chatty finding cannot fill the size cap by itself.
MESSAGE_LIMIT = 2000


# Size pruning deletes down to this fraction of the cap, so it does not run again at once.
_PRUNE_TARGET = 0.8


# Run states after which a check has said all it has to say: its unreported findings are cleared.
_OBSERVED = frozenset({RunState.RAN, RunState.NOT_APPLICABLE, RunState.DISABLED})


_NONE: Mapping[str, str] = {}


def _adopt_open(conn: sqlite3.Connection, result: PassResult) -> None:
    """Open findings saved under a key that another check has adopted since (``CheckSpec.adopts``) take the new key.

    The finding goes on where it was: a key that moved is not a fault cleared and a
    new one raised (which would count as a repeat for escalation).
    """
    for (key,) in conn.execute("SELECT key FROM open_findings").fetchall():
        new = result.current_key(key)
        if new != key:
            check = new.split("/", 1)[0]
            conn.execute("UPDATE OR IGNORE open_findings SET key = ?, check_name = ? WHERE key = ?", (new, check, key))
            conn.execute("DELETE FROM open_findings WHERE key = ?", (key,))


class _Entry(NamedTuple):
    """An event's columns after ``at``, ``kind`` and ``boot_id``, in table order."""

    check: str = ""
    code: str = ""
    subject: str = ""
    unit: str = ""
    status: str = ""
    message: str = ""
    details: str = "{}"

    @classmethod
    def of(cls, finding: Finding) -> _Entry:
        message, details = finding.message[:MESSAGE_LIMIT], details_json(finding.details)
        return cls(finding.check, finding.code, finding.subject, finding.subject, finding.status.name, message, details)


_INSERT_EVENT = f"INSERT INTO events ({EVENT_COLUMNS[4:]}) VALUES ({', '.join('?' * 10)})"  # noqa: S608 (fixed text)


class History(HistoryReader):
    """The writer's store: ``History.open`` under the state lock; it reads as ``HistoryReader`` does.

    A writer never raises: see the module docstring. ``problems`` collects what
    went wrong; ``problem_finding`` turns it into the UNKNOWN finding to report.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.problems: list[str] = []
        self._reset: Optional[tuple[str, Path]] = None

    def __enter__(self) -> History:
        return self

    @classmethod
    def open(cls, state_dir: Path) -> History:
        """The writer's store in ``state_dir``, created if needed. Call it with the state lock held."""
        history = cls(state_dir / DB_NAME)
        history._open_writer()
        return history

    def _open_writer(self) -> None:
        for attempt in (1, 2):
            try:
                self._connect()
                if self._reset is not None:
                    why, aside = self._reset
                    self._reset = None
                    message = f"a new history: the old one was corrupt ({why})"
                    self._insert_now(
                        Kind.RESET, _Entry(message=message, details=details_json({"corrupt_copy": str(aside)}))
                    )
                return
            except (sqlite3.Error, Corrupt, OSError) as exc:
                self.close()
                if attempt == 1 and is_corruption(exc):
                    if self._set_aside(str(exc)):
                        continue
                    return
                what = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                self.problems.append(f"cannot open the history {self.path}: {what}; nothing is recorded this time")
                return

    def _connect(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Created here, not by SQLite, so it is 0600 and not a file someone linked in;
        # SQLite gives the WAL and shared-memory files the database's mode.
        with contextlib.suppress(FileExistsError):
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        for part in companions(self.path):
            reason = unsafe_reason(part)
            if reason:
                raise OSError(f"refusing it: {reason}")
        conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=True)
        self._conn = conn
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if os.path.getsize(self.path) == 0:
            # Lets `maintain` give freed pages back to the file system. Only an empty file takes it
            # (before WAL mode writes the header); on an existing one the pragma writes a page each
            # time, which would cost every pass a checkpoint.
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if not mode or str(mode[0]).lower() != "wal":
            self.problems.append(f"{self.path}: WAL mode is not available here (journal mode {mode}): kept going")
        conn.execute("PRAGMA synchronous = NORMAL")
        # A checkpointed WAL is truncated back to this size instead of keeping its largest size.
        conn.execute("PRAGMA journal_size_limit = 1048576")
        if not self._check_schema(conn):
            self._create(conn)
        self._load_meta(conn)

    def _create(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in filter(str.strip, SCHEMA_SQL.split(";")):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise

    def _set_aside(self, why: str) -> bool:
        """Rename the corrupt database (and its WAL) aside; False when that failed too."""
        self.close()
        stamp = int(time.time())
        aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        number = 0
        while os.path.lexists(aside):
            number += 1
            aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}.{number}")
        try:
            os.replace(self.path, aside)
            # The WAL belongs to the old file: left in place, SQLite would replay it into the new one.
            for suffix in ("-wal", "-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.replace(f"{self.path}{suffix}", f"{aside}{suffix}")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.path}-shm")
        except OSError as exc:
            self.problems.append(
                f"corrupt history database {self.path} ({why}); could not move it aside: {exc.strerror or exc}; "
                "nothing is recorded until it is removed"
            )
            return False
        self._keep_newest()
        self.problems.append(f"corrupt history database {self.path} ({why}); moved to {aside}; started a new one")
        self._reset = (why, aside)
        return True

    def _keep_newest(self) -> None:
        names = [
            p for p in self.path.parent.glob(f"{self.path.name}.corrupt-*") if not p.name.endswith(("-wal", "-journal"))
        ]
        with contextlib.suppress(OSError):  # a copy removed meanwhile: the next set-aside sorts again
            names.sort(key=lambda p: os.lstat(p).st_mtime, reverse=True)
            for old in names[KEEP_CORRUPT:]:
                for part in (old, Path(f"{old}-wal"), Path(f"{old}-journal")):
                    with contextlib.suppress(FileNotFoundError):
                        part.unlink()

    def _write(self, what: str, body: Callable[[sqlite3.Connection], T]) -> Optional[T]:
        """Run ``body`` in one write transaction; on corruption, set the database aside and retry once."""
        for attempt in (1, 2):
            conn = self._conn
            if conn is None:
                return None
            cached = self._boot, self._node  # what the body may change, kept only if it commits
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = body(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    self._boot, self._node = cached
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                    raise
                return result
            except (sqlite3.Error, Corrupt) as exc:
                if attempt == 1 and is_corruption(exc) and self._set_aside(str(exc)):
                    self._open_writer()
                    continue
                self.problems.append(f"{self.path}: could not record {what}: {exc}")
                return None
        return None

    def _insert(self, conn: sqlite3.Connection, at: float, kind: Kind, entry: _Entry, boot_id: str = "") -> Event:
        row = (at, kind.value, boot_id or self._boot, *entry._replace(message=entry.message[:MESSAGE_LIMIT]))
        cursor = conn.execute(_INSERT_EVENT, row)
        return row_event((cursor.lastrowid, *row))

    def _insert_now(self, kind: Kind, entry: _Entry) -> None:
        assert self._conn is not None
        self._conn.execute("BEGIN IMMEDIATE")
        self._insert(self._conn, time.time(), kind, entry)
        self._conn.execute("COMMIT")

    def record_pass(
        self, result: PassResult, *, at: float, boot_id: str, uncounted: Mapping[str, str] = _NONE
    ) -> tuple[Event, ...]:
        """Record the pass's finding transitions (see the module docstring); returns the events written.

        A finding raised in this pass whose key is in ``uncounted`` gets an ``uncounted``
        event beside its ``raised`` one, saying why: escalation does not count that raise.
        """
        return self._write("the pass", lambda conn: self._record_pass(conn, result, at, boot_id, uncounted)) or ()

    def _record_pass(
        self, conn: sqlite3.Connection, result: PassResult, at: float, boot_id: str, uncounted: Mapping[str, str]
    ) -> tuple[Event, ...]:
        if result.renames:
            _adopt_open(conn, result)
        stored = {
            row[0]: (_Entry(*row[1:8]), row[8], row[9])
            for row in conn.execute(
                "SELECT key, check_name, code, subject, unit, status, message, details, event, since FROM open_findings"
            )
        }
        observed = {r.check for r in result.results if r.state in _OBSERVED}
        gpus: Optional[dict[tuple[int, int, int], str]] = None
        written: list[Event] = []
        seen: set[str] = set()
        for finding in result.findings:
            if finding.key in seen:  # the same key twice in one pass: the first one stands
                continue
            seen.add(finding.key)
            entry, event = _Entry.of(finding), event_id(finding)
            old, old_event, since = stored.get(finding.key, (None, None, at))
            if old is None or (event is not None and old_event != event):
                kind, since = Kind.RAISED, at
            elif (old.status, old.message, old.details) != (entry.status, entry.message, entry.details):
                kind = Kind.CHANGED
            else:
                continue
            if gpus is None:
                gpus = gpu_units(conn, boot_id)
            entry = entry._replace(unit=unit_of(finding, gpus))
            written.append(self._insert(conn, at, kind, entry, boot_id))
            if kind is Kind.RAISED and finding.key in uncounted:
                why = entry._replace(message=uncounted[finding.key], details=details_json({"key": finding.key}))
                written.append(self._insert(conn, at, Kind.UNCOUNTED, why, boot_id))
            conn.execute(
                "INSERT OR REPLACE INTO open_findings (key, check_name, code, subject, unit, status, message, details,"
                " event, since) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (finding.key, *entry, event, since),
            )
        for key in sorted(stored.keys() - seen):
            old = stored[key][0]
            if old.check in observed:
                written.append(self._insert(conn, at, Kind.CLEARED, old, boot_id))
                conn.execute("DELETE FROM open_findings WHERE key = ?", (key,))
        if result.node != self._node:
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('node', ?)", (result.node,))
            self._node = result.node
        return tuple(written)

    def record_action(
        self,
        *,
        at: float,
        action: str,
        outcome: str,
        node: str,
        reason: str = "",
        details: Optional[Mapping[str, Any]] = None,
    ) -> Optional[Event]:
        """A Slurm action (``drain_after_jobs``, ``resume``, ...) and its outcome (``applied``, ``failed``, ...)."""
        entry = _Entry(code=action, subject=node, status=outcome, message=reason, details=details_json(details or {}))
        return self._write(f"the action {action}", lambda conn: self._insert(conn, at, Kind.ACTION, entry))

    def record_ack(self, *, at: float, refs: Iterable[FindingRef], by: str, revoked: bool = False) -> tuple[Event, ...]:
        """Acknowledgements of findings (``healthd ack``, or a resume by an administrator), or their revocation
        (``healthd ack --revoke``: status ``revoked``)."""
        entries = []
        said = "acknowledgement revoked" if revoked else "acknowledged"
        for ref in refs:
            check, code, subject = [*ref.key.split("/", 2), "", ""][:3]
            status = {} if ref.status is None else {"status": ref.status.name}
            details = details_json({"event": ref.event, "by": by, **status, **({"revoked": True} if revoked else {})})
            entries.append(
                _Entry(check, code, subject, subject, "revoked" if revoked else "", f"{said} by {by}", details)
            )
        acked = self._write("the acknowledgement", lambda c: tuple(self._insert(c, at, Kind.ACK, e) for e in entries))
        return acked or ()

    def record_boot(self, *, at: float, boot_id: str, gpus: Iterable[Device] = ()) -> bool:
        """Note the boot (cheap when it is known); True when ``boot_id`` is new.

        A new boot gets a ``boot`` event with its GPU inventory and the GPUs whose
        UUID or serial differs from the previous boot's at the same PCI address. For
        a known boot, GPUs (or ids) its inventory lacked are added with an
        ``inventory`` event: a GPU NVML could not see in a boot's first pass is
        listed once it can be.
        """
        listed = list(gpus)
        return bool(self._write("the boot", lambda conn: self._record_boot(conn, at, boot_id, listed)))

    def _record_boot(self, conn: sqlite3.Connection, at: float, boot_id: str, gpus: list[Device]) -> bool:
        known = {
            row[0]: row[1:]
            for row in conn.execute("SELECT pci_bus_id, uuid, serial FROM gpus WHERE boot_id = ?", (boot_id,))
        }
        is_new = conn.execute("SELECT 1 FROM boots WHERE boot_id = ?", (boot_id,)).fetchone() is None
        added = [
            g
            for g in gpus
            if g.address not in known or (g.uuid and not known[g.address][0]) or (g.serial and not known[g.address][1])
        ]
        if not is_new and not added:
            return False
        for g in added:
            # Not an UPSERT: that needs SQLite 3.24, newer than some distributions' Python 3.9 links.
            conn.execute(
                "INSERT OR IGNORE INTO gpus (boot_id, pci_bus_id, idx, uuid, serial) VALUES (?, ?, ?, ?, ?)",
                (boot_id, g.address, g.index, g.uuid, g.serial),
            )
            conn.execute(
                "UPDATE gpus SET uuid = coalesce(uuid, ?), serial = coalesce(serial, ?)"
                " WHERE boot_id = ? AND pci_bus_id = ?",
                (g.uuid, g.serial, boot_id, g.address),
            )
        listing = [gpu_dict(g) for g in sorted(added, key=lambda g: g.index)]
        if not is_new:
            message = f"{len(added)} GPU(s) added to this boot's inventory"
            entry = _Entry(subject=boot_id, message=message, details=details_json({"gpus": listing}))
            self._insert(conn, at, Kind.INVENTORY, entry, boot_id)
            return False
        previous = self._boot or None
        replaced = self._replaced(conn, previous, gpus) if previous else []
        conn.execute("INSERT INTO boots (boot_id, first_seen, previous) VALUES (?, ?, ?)", (boot_id, at, previous))
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('boot', ?)", (boot_id,))
        message = f"new boot, {len(gpus)} GPU(s)"
        if replaced:
            message += "; replaced: " + ", ".join(f"{r['pci_bus_id']} {r['before']} -> {r['after']}" for r in replaced)
        details = details_json({"previous_boot": previous, "gpus": listing, "replaced": replaced})
        self._insert(conn, at, Kind.BOOT, _Entry(subject=boot_id, message=message, details=details), boot_id)
        self._boot = boot_id
        return True

    @staticmethod
    def _replaced(conn: sqlite3.Connection, previous: str, gpus: list[Device]) -> list[dict[str, Any]]:
        """GPUs whose UUID or serial differs from the previous boot's at the same PCI address."""
        query = "SELECT pci_bus_id, uuid, serial FROM gpus WHERE boot_id = ?"
        before = {pci_key(pci): (uuid, serial) for pci, uuid, serial in conn.execute(query, (previous,))}
        replaced = []
        for gpu in gpus:
            for name, was, now in zip(("uuid", "serial"), before.get(pci_key(gpu.address), ()), (gpu.uuid, gpu.serial)):
                if was and now and was != now:
                    replaced.append({"pci_bus_id": gpu.address, "id": name, "before": was, "after": now})
                    break
        return replaced

    def record_reboot(self, *, at: float, phase: RebootPhase, boot_id: str, reason: str = "") -> Optional[Event]:
        """A reboot requested (``boot_id``: the boot it is to end) or done (``boot_id``: the boot it ended)."""
        kind = Kind.REBOOT_REQUESTED if phase is RebootPhase.REQUESTED else Kind.REBOOT_DONE
        entry = _Entry(subject=boot_id, message=reason)
        return self._write(f"the reboot ({phase.value})", lambda conn: self._insert(conn, at, kind, entry))

    def record_uncounted(self, *, at: float, unit: str, code: str, since: float, why: str) -> Optional[Event]:
        """Take back one raise of ``code`` on ``unit`` made since ``since`` (a wave seen later); None if none is left.

        Escalation counts a raise less for each ``uncounted`` event beside it (``repeats``):
        one is added only while a raise since then is still counted, so reading the same
        wave twice takes back nothing twice.
        """

        def body(conn: sqlite3.Connection) -> Optional[Event]:
            if counted_raises(conn, unit, code, since) <= 0:
                return None
            entry = _Entry(code=code, subject=unit, unit=unit, message=why)
            return self._insert(conn, at, Kind.UNCOUNTED, entry)

        return self._write("the raise taken back", body)

    def record_repaired(self, *, at: float, unit: str, subject: str, by: str) -> Optional[Event]:
        """Hardware work was done on ``unit``: escalation counts for it start again from here."""
        entry = _Entry(subject=subject, unit=unit, message=f"repaired ({by})", details=details_json({"by": by}))
        return self._write("the repair", lambda conn: self._insert(conn, at, Kind.REPAIRED, entry))

    def record_job(
        self,
        *,
        at: float,
        kind: Kind,
        subject: str,
        code: str = "",
        status: str = "",
        message: str = "",
        unit: str = "",
        details: Optional[Mapping[str, Any]] = None,
    ) -> Optional[Event]:
        """A job-scoped event (``JOB_START``, ``JOB_XID``, ``JOB_END``); ``unit``: by default the GPU at ``subject``."""

        def body(conn: sqlite3.Connection) -> Event:
            resolved = unit or gpu_units(conn, self._boot).get(pci_key(subject) or (-1, -1, -1), subject)
            entry = _Entry("jobs", code, subject, resolved, status, message, details_json(details or {}))
            return self._insert(conn, at, kind, entry)

        return self._write(f"the job event {kind.value}", body)

    def maintain(
        self, now: float, *, keep_days: float = KEEP_DAYS, max_bytes: int = MAX_BYTES, force: bool = False
    ) -> Optional[Maintenance]:
        """At most once a day (or when ``force``): ``PRAGMA quick_check``, then retention.

        Events older than ``keep_days`` go, then the oldest events until the database
        is under ``max_bytes`` (down to 80% of it). Open findings, and the current boot
        and its inventory, are never deleted. None when it was not due or failed.
        """
        conn = self._conn
        if conn is None:
            return None
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'maintained'").fetchone()
            last = float(row[0]) if row else None
            if not force and last is not None and 0 <= now - last < MAINTENANCE_INTERVAL:
                return None
            try:
                check = [str(row[0]) for row in conn.execute("PRAGMA quick_check")]
            except sqlite3.DatabaseError as exc:
                if not is_corruption(exc):
                    raise
                check = [str(exc)]  # a page too broken to walk stops the check itself
            if check != ["ok"]:
                raise Corrupt(f"PRAGMA quick_check: {'; '.join(check[:3])}")
        except (sqlite3.Error, Corrupt) as exc:
            if is_corruption(exc) and self._set_aside(str(exc)):
                self._open_writer()
            else:
                self.problems.append(f"{self.path}: maintenance failed: {exc}")
            return None
        done = self._write("the maintenance", lambda c: self._prune(c, now, keep_days, max_bytes))
        if done is None:
            return None
        try:
            # Give the freed pages back to the file system, and shrink the WAL.
            # executescript steps it to the end; execute() stops after its first page.
            conn.executescript("PRAGMA incremental_vacuum;")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            self.problems.append(f"{self.path}: could not shrink the file: {exc}")
        return Maintenance(done[0], done[1], self._size(conn, allocated=True))

    @staticmethod
    def _size(conn: sqlite3.Connection, *, allocated: bool = False) -> int:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        if not allocated:
            pages -= conn.execute("PRAGMA freelist_count").fetchone()[0]
        return int(pages * conn.execute("PRAGMA page_size").fetchone()[0])

    def _prune(self, conn: sqlite3.Connection, now: float, keep_days: float, max_bytes: int) -> tuple[int, int]:
        cutoff = now - keep_days * 86400.0
        by_age = conn.execute("DELETE FROM events WHERE at < ?", (cutoff,)).rowcount
        conn.execute(
            "DELETE FROM gpus WHERE boot_id IN (SELECT boot_id FROM boots WHERE first_seen < ? AND boot_id != ?)",
            (cutoff, self._boot),
        )
        conn.execute("DELETE FROM boots WHERE first_seen < ? AND boot_id != ?", (cutoff, self._boot))
        by_size = 0
        for _ in range(4):  # the estimate is proportional: a few rounds converge
            used, count = self._size(conn), conn.execute("SELECT count(*) FROM events").fetchone()[0]
            if used <= max_bytes or not count:
                break
            excess = math.ceil(count * (1 - _PRUNE_TARGET * max_bytes / used))
            row = conn.execute("SELECT at FROM events ORDER BY at, id LIMIT 1 OFFSET ?", (min(excess, count) - 1,))
            # Whole instants go together, so a pass's transitions are never split.
            by_size += conn.execute("DELETE FROM events WHERE at <= ?", (row.fetchone()[0],)).rowcount
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('maintained', ?)", (repr(now),))
        return by_age, by_size

    def problem_finding(self, check: str) -> Optional[Finding]:
        """The problems so far as one UNKNOWN finding of ``check`` (then forgotten); None when there were none."""
        if not self.problems:
            return None
        problems, self.problems = self.problems, []
        message = problems[0] + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else "")
        return Finding(check, Status.UNKNOWN, PROBLEM_CODE, str(self.path), message, {"problems": "; ".join(problems)})
