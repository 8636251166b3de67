"""Import time of the ``healthd check --once`` path, from ``python -X importtime``.

    python bench/bench_import.py [--runs 10]

Imports exactly what ``check --once`` imports before its first check starts (the CLI,
the check command, the engine, the config and every built-in check plugin) in a fresh
interpreter: the median wall time above a bare interpreter's start, and the ten
imports with the largest cumulative time in one run. Asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

PATH = (
    "import healthd.cli.main, healthd.commands.check, healthd.cycle.engine, healthd.cycle.pipeline;"
    "from healthd.checks.plugin import discover; discover()"
)


def wall(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def heaviest(count: int) -> list[tuple[int, str]]:
    """The ``count`` imports with the largest cumulative time (microseconds, module) in one run."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", PATH], capture_output=True, text=True, check=True)
    rows = []
    for line in done.stderr.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if len(fields) == 3 and fields[1].strip().isdigit():
            rows.append((int(fields[1]), fields[2].strip()))
    return sorted(rows, reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    bare = statistics.median(wall("pass") for _ in range(args.runs))
    full = statistics.median(wall(PATH) for _ in range(args.runs))
    print(f"interpreter start: {bare * 1000:.0f} ms; check --once imports on top: {(full - bare) * 1000:.0f} ms")
    print("heaviest imports (cumulative, one run):")
    for cumulative, name in heaviest(10):
        print(f"  {cumulative / 1000:7.1f} ms  {name}")


if __name__ == "__main__":
    main()
