"""A pass's checks read the kernel log once: ``PassShared`` and ``read_kmsg`` on a saved log (no root needed)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from healthd.checks.plugin import PassShared
from healthd_checks.kernlog.source import LogUnavailable, read_kmsg

RECORDS = "".join(f"6,{seq},{seq * 1000},-;record {seq}\n" for seq in range(1, 6))


def test_the_readers_of_one_pass_share_one_read_of_the_log(tmp_path: Path) -> None:
    log = tmp_path / "kmsg"
    log.write_text(RECORDS)
    shared = PassShared()
    first = read_kmsg(log, 2, shared=shared)
    log.unlink()  # what the others get can only be the first reader's records
    second = read_kmsg(log, None, shared=shared)
    assert [line.record_id for line in first.lines] == ["3", "4", "5"]
    assert [line.message for line in second.lines] == [f"record {seq}" for seq in range(1, 6)]
    assert first.oldest == second.oldest == 1 and second.cursor == "5"
    with pytest.raises(LogUnavailable, match="cannot open"):
        read_kmsg(log, None, shared=PassShared())  # the next pass reads afresh


def test_a_failed_read_leaves_nothing_and_waiters_get_the_one_value() -> None:
    shared = PassShared()

    def fails() -> int:
        raise OSError("gone")

    with pytest.raises(OSError):
        shared.once("log", fails)
    calls: list[int] = []
    started = threading.Event()

    def slow() -> int:
        started.set()
        calls.append(1)
        threading.Event().wait(0.05)
        return 42

    got: list[int] = []
    reader = threading.Thread(target=lambda: got.append(shared.once("log", slow)))
    reader.start()
    started.wait(5)
    got.append(shared.once("log", slow))  # waits for the thread's read instead of reading again
    reader.join(5)
    assert got == [42, 42] and calls == [1]
