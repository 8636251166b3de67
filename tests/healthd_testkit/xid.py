"""Helpers of the xid tests: a fake node whose /dev/kmsg is a file, and journal entries as systemd-python gives them.

The file holds records in the kernel's own format, ``PRI,SEQ,USEC,FLAGS;MESSAGE``
with PRI = facility * 8 + level, and ``[paths].kmsg`` points at it: the xid check
reads a regular file exactly as it reads the device (checks/healthd_checks/kernlog/source.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from healthd.checks.plugin import CheckContext
from healthd.model import Finding
from healthd_checks.xid.check import CHECK
from healthd_checks.xid.settings import XidSettings
from healthd_testkit.checks import check_context
from healthd_testkit.paths import FIXTURES as ALL_FIXTURES

FIXTURES = ALL_FIXTURES / "kernlog"
BOOT_A = "11111111-2222-3333-4444-555555555555"
BOOT_B = "99999999-2222-3333-4444-555555555555"
X79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


class Node:
    """A fake node root: procfs with a boot id, sysfs with NVIDIA GPUs, a kmsg dump, a state dir."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.seq = -1  # the kernel numbers a boot's records from 0
        self.now = 1_000_000.0
        self.boot(BOOT_A)
        (root / "sys" / "bus" / "pci" / "devices").mkdir(parents=True)
        self.kmsg.write_text("")

    @property
    def kmsg(self) -> Path:
        return self.root / "kmsg"

    def boot(self, boot_id: str) -> None:
        path = self.root / "proc" / "sys" / "kernel" / "random"
        path.mkdir(parents=True, exist_ok=True)
        (path / "boot_id").write_text(boot_id + "\n")

    def new_boot(self, boot_id: str) -> None:
        self.boot(boot_id)
        self.seq = -1
        self.kmsg.write_text("")

    def gpu(self, bdf: str, pci_class: str = "0x030200") -> None:
        device = self.root / "sys" / "bus" / "pci" / "devices" / bdf
        device.mkdir()
        (device / "vendor").write_text("0x10de\n")
        (device / "device").write_text("0x2330\n")
        (device / "class").write_text(pci_class + "\n")

    def booted_at(self, btime: int) -> None:
        """Give procfs a /proc/stat whose btime dates the kernel's records."""
        (self.root / "proc" / "stat").write_text(f"cpu  1 2 3 4\nbtime {btime}\nprocesses 99\n")

    def log(self, *messages: str, level: int = 4, at: Optional[float] = None, facility: int = 0) -> None:
        """Records 1 ms apart (or at ``at`` seconds after boot); the n-th has kernel timestamp n * 1000 us.

        ``facility`` 0 is the kernel's; the kernel gives what a process writes to /dev/kmsg
        facility 1 (LOG_USER) unless it asks for another non-zero one.
        """
        with self.kmsg.open("a") as handle:
            for number, message in enumerate(messages):
                self.seq += 1
                usec = (self.seq + 1) * 1000 if at is None else int(at * 1e6) + number * 1000
                handle.write(f"{facility * 8 + level},{self.seq},{usec},-;{message}\n SUBSYSTEM=pci\n")

    def append(self, text: str) -> None:
        """Raw /dev/kmsg records (a fixture's lines); later ``log`` records follow their SEQ."""
        with self.kmsg.open("a") as handle:
            handle.write(text)
        seqs = [int(line.split(",")[1]) for line in text.splitlines() if line[:1].isdigit()]
        self.seq = max([self.seq, *seqs])

    def context(self, **options: Any) -> CheckContext[XidSettings]:
        roots = {"sysfs": self.root / "sys", "procfs": self.root / "proc", "kmsg": self.kmsg}
        xid = XidSettings(**{"source": "kmsg", **options})
        return check_context("xid", xid, self.root, clock=lambda: self.now, **roots)

    def run(self, **options: Any) -> list[Finding]:
        return list(CHECK.run(self.context(**options)))


def by_code(findings: list[Finding]) -> dict[str, Finding]:
    return {f"{f.code}@{f.subject}": f for f in findings}


def reader_entry(raw: dict[str, str]) -> dict[str, Any]:
    """A ``journalctl -o json`` entry as systemd-python's ``journal.Reader`` yields it (its own converters)."""
    from systemd import journal

    entry: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "__CURSOR":
            entry[key] = value
        elif key == "__REALTIME_TIMESTAMP":
            entry[key] = journal._convert_realtime(int(value))
        elif key != "__MONOTONIC_TIMESTAMP":  # the Reader gives it as (timedelta, boot id) from its own call
            convert = journal.DEFAULT_CONVERTERS.get(key, bytes.decode)
            try:
                entry[key] = convert(value.encode())
            except ValueError:
                entry[key] = value.encode()
    return entry
