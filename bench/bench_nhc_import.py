"""Time of ``healthd import-nhc`` on hostile shapes of one 20 MB line, and on a 20 MB file of ordinary lines.

Run: python bench/bench_nhc_import.py [MEGABYTES]. Prints the best of three runs of
``healthd.config.nhcimport.convert`` for each shape at a tenth of the size and at the full size,
and their ratio: about 10 for a reader linear in its input (the reader before took 85 s
for a 2 MB quoted word, 200 times its time for 200 kB).
"""

from __future__ import annotations

import sys
import time
from typing import Callable

from healthd.config.nhcimport import convert

SHAPES: dict[str, Callable[[int], str]] = {
    "one line of many words": lambda n: "* || check_fs_mount_rw -f " + " /m" * (n // 3) + "\n",
    "one line of continuations": lambda n: "* || check_hw_eth e \\\n" * (n // 20) + "\n",
    "one quoted word": lambda n: '* || check_fs_mount_rw -s "' + "x" * n + '" -f /a\n',
    "one line of $VARIABLES": lambda n: "* || check_hw_eth " + "$X" * (n // 2) + "\n",
    "ordinary lines, each converted": lambda n: "* || check_hw_eth eth0\n" * (n // 22),
}


def best(text: str, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        convert(text)
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    megabytes = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    size = megabytes * 1_000_000
    for name, shape in SHAPES.items():
        small, large = best(shape(size // 10)), best(shape(size))
        ratio = large / small
        print(f"{name:32} {megabytes / 10:g} MB: {small:7.3f} s   {megabytes} MB: {large:7.3f} s   x{ratio:5.1f}")


if __name__ == "__main__":
    main()
