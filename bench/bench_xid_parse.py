"""Throughput of the Xid parser: a generated 1,000,000-line dmesg log with 1% Xid lines.

Run: python bench/bench_xid_parse.py [LINES]. Prints lines/s for ``scan_lines`` over
in-memory lines and over the file read from disk (what ``healthd scan-log`` does).
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

from healthd_checks.xid.parse import scan_lines

NOISE = [
    "[{t:12.6f}] e1000e 0000:00:1f.6 eth0: NIC Link is Up 1000 Mbps Full Duplex, Flow Control: None",
    "[{t:12.6f}] EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.",
    '[{t:12.6f}] audit: type=1400 audit(1700000000.123:42): apparmor="STATUS" operation="profile_load"',
    "[{t:12.6f}] nvidia-uvm: Loaded the UVM driver, major device number 510.",
    "[{t:12.6f}] IPv6: ADDRCONF(NETDEV_CHANGE): veth1a2b3c: link becomes ready",
    "[{t:12.6f}] mlx5_core 0000:1a:00.0: mlx5_pcie_event:301: PCIe slot advertised sufficient power (75W).",
]
XIDS = [
    "[{t:12.6f}] NVRM: Xid (PCI:0000:{b:02x}:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
    "[{t:12.6f}] NVRM: Xid (PCI:0000:{b:02x}:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception",
    "[{t:12.6f}] NVRM: Xid (PCI:0000:{b:02x}:00 GPU-I:01 GPU-CI:00): 31, pid=42, name=train, MMU Fault",
    "[{t:12.6f}] nvidia-nvswitch0: SXid (PCI:0000:{b:02x}:00.0): 20034, Fatal, Link 28 LTSSM Fault Up",
]


def generate(lines: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        pool = XIDS if i % 100 == 0 else NOISE
        out.append(rng.choice(pool).format(t=i / 1000, b=rng.choice((0x3B, 0x5E, 0x86, 0xAF))) + "\n")
    return out


def measure(label: str, lines: int, run: object) -> None:
    start = time.perf_counter()
    events = run()  # type: ignore[operator]
    elapsed = time.perf_counter() - start
    print(f"{label}: {lines:,} lines, {events:,} events, {elapsed:.3f}s, {lines / elapsed:,.0f} lines/s")


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    lines = generate(count)
    measure("in memory", count, lambda: sum(1 for _ in scan_lines(lines)))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dmesg.txt"
        path.write_text("".join(lines))

        def from_file() -> int:
            with path.open(encoding="utf-8", errors="replace") as handle:
                return sum(1 for _ in scan_lines(handle))

        measure("from file", count, from_file)


if __name__ == "__main__":
    main()
