"""Retention: events older than keep_days go, then the oldest until the file is under the size cap, once a day."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Callable

from healthd.model import Device, Finding, PassResult, Status
from healthd.store.history import MAINTENANCE_INTERVAL, History
from healthd.store.historyschema import DB_NAME, Kind

Make = Callable[..., PassResult]
Find = Callable[..., Finding]
DAY = 86400.0


def _flapping_year(store: History, make_pass: Make, finding: Find, days: int, per_day: int = 4) -> None:
    """Two mounts that go and come back ``per_day`` times a day, and one finding open all along."""
    steady = finding("gpu", "ECC_DISABLED", "gpu0", Status.WARNING)
    for day in range(days):
        for turn in range(per_day):
            at = day * DAY + turn * 3600.0
            text = f"day {day} turn {turn} " + "m" * 150
            flaps = [finding("mounts", "MOUNT_MISSING", mount, message=text) for mount in ("/home", "/scratch")]
            store.record_pass(make_pass(steady, *flaps), at=at, boot_id="b1")
            store.record_pass(make_pass(steady), at=at + 300.0, boot_id="b1")


def test_events_older_than_keep_days_go_and_open_findings_stay(store: History, make_pass: Make, finding: Find) -> None:
    store.record_boot(at=0.0, boot_id="b0", gpus=[Device("gpu", 0, "0000:18:00.0", "GPU-old", None)])
    store.record_boot(at=1.0, boot_id="b1", gpus=[Device("gpu", 0, "0000:18:00.0", "GPU-new", None)])
    _flapping_year(store, make_pass, finding, days=30)
    now = 30 * DAY
    done = store.maintain(now, keep_days=10)
    assert done is not None and done.deleted_by_age > 0 and done.deleted_by_size == 0
    assert min(e.at for e in store.events()) >= now - 10 * DAY
    # The finding raised on day 0 is still open, and still known since then.
    assert [(f.code, f.since) for f in store.open_findings()] == [("ECC_DISABLED", 0.0)]
    # Boots older than the window go, except the current one.
    assert [b.boot_id for b in store.boots()] == ["b1"]


def test_the_size_cap_deletes_the_oldest_whole_passes(
    state_dir: Path, store: History, make_pass: Make, finding: Find
) -> None:
    _flapping_year(store, make_pass, finding, days=200)
    cap = 96 * 1024
    before = os.path.getsize(state_dir / DB_NAME) + os.path.getsize(state_dir / f"{DB_NAME}-wal")
    assert before > 2 * cap
    done = store.maintain(200 * DAY, keep_days=365, max_bytes=cap)
    assert done is not None and done.deleted_by_size > 0 and done.deleted_by_age == 0
    assert done.size_bytes <= cap
    store.close()
    assert os.path.getsize(state_dir / DB_NAME) <= cap  # the pages went back to the file system
    with History.open(state_dir) as history:
        events = list(history.events())
        # The newest are kept; each kept instant has all of its pass's events.
        assert events[-1].message.startswith("day 199 turn 3 ")
        assert events[-1].kind is Kind.CLEARED
        per_instant = Counter(e.at for e in events)
        assert set(per_instant.values()) == {2}
        assert [(f.code, f.since) for f in history.open_findings()] == [("ECC_DISABLED", 0.0)]


def test_maintenance_runs_at_most_once_a_day(store: History) -> None:
    assert store.maintain(1000.0) is not None  # never run before
    assert store.maintain(1000.0 + MAINTENANCE_INTERVAL - 1) is None
    assert store.maintain(1000.0 + 10.0, force=True) is not None
    assert store.maintain(1010.0 + MAINTENANCE_INTERVAL) is not None
    # A clock set back (before the last run) does not stop it for the time the clock lost.
    assert store.maintain(500.0) is not None


def test_maintenance_is_remembered_across_opens(state_dir: Path) -> None:
    with History.open(state_dir) as history:
        assert history.maintain(1000.0) is not None
    with History.open(state_dir) as history:
        assert history.maintain(2000.0) is None
