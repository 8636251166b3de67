"""What one check's read of the kernel log costs, three ways, on this machine's /dev/kmsg.

- every record parsed: a reader without a cursor (what a not-applicable ``edac`` or
  ``disks`` did every pass before it kept its cursor);
- a new descriptor with the cursor at the newest record: the records are only numbered
  (what each check pays in a new process, ``check --once``);
- the reader's kept descriptor, nothing new since: what each check pays per daemon pass.

Prints the median CPU time of each over ``--runs`` reads and the number of records; asserts
nothing. Needs read access to the device (root on most distributions).

    python bench/bench_kmsg_read.py [--runs 50] [--kmsg /dev/kmsg]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Callable

from healthd_checks.kernlog import source as kernlog


def _median_ms(read: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.process_time()
        read()
        times.append(time.process_time() - t0)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--kmsg", type=Path, default=Path("/dev/kmsg"))
    args = parser.parse_args()
    whole = kernlog.read_kmsg(args.kmsg, None)
    newest = int(whole.cursor or 0)
    print(f"{args.kmsg}: {len(whole.lines)} records, SEQ {whole.oldest} to {newest}")
    parsed = _median_ms(lambda: kernlog.read_kmsg(args.kmsg, None), args.runs)
    print(f"every record parsed:               {parsed:6.2f} ms")
    numbered = _median_ms(lambda: kernlog.read_kmsg(args.kmsg, newest), args.runs)
    print(f"new descriptor, only numbered:     {numbered:6.2f} ms")
    state = {"cursor": kernlog.read_kmsg(args.kmsg, None, keep="bench").cursor}

    def again() -> None:
        state["cursor"] = kernlog.read_kmsg(args.kmsg, int(state["cursor"] or 0), keep="bench").cursor

    kept = _median_ms(again, args.runs)
    print(f"kept descriptor, nothing new:      {kept:6.2f} ms")


if __name__ == "__main__":
    main()
