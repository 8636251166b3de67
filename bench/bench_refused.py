"""Cold ``healthd check --dry-run`` with every slurmctld refusing the connection: wall time and the line it prints.

    python bench/bench_refused.py [--runs 7] [--before DIR] [--message-timeout 10]

Writes a slurm.conf whose ``SlurmctldHost=localhost`` has nothing listening on its
``SlurmctldPort`` (a free port), a config with a private state directory and
``[slurm].timeout`` 5 (the default), then runs ``healthd check --dry-run`` as a new
process ``--runs`` times; with ``--before DIR`` (an export of older code, put first on
``PYTHONPATH``) the two alternate. Prints the median and worst wall times and the
last line of each, and the same pass with Slurm off (the floor); asserts nothing
(tests/faults/test_slurm_refused.py asserts).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from healthd_testkit.net import free_ports


def write_setup(directory: Path, message_timeout: int) -> Path:
    """A refusing slurm.conf and a healthd config that uses it; returns the config's path."""
    conf = directory / "slurm.conf"
    conf.write_text(
        f"ClusterName=bench\nSlurmctldHost=localhost\nSlurmctldPort={free_ports(1)[0]}\n"
        f"MessageTimeout={message_timeout}\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1 Default=YES\n"
    )
    config = directory / "healthd.toml"
    config.write_text(f'[paths]\nstate_dir = "{directory / "state"}"\n[slurm]\nconf = "{conf}"\nnode_name = "n1"\n')
    return config


def slurm_off(config: Path) -> Path:
    """The same config with ``[slurm] enabled = false``: the floor, healthd's own cold pass."""
    off = config.with_name("slurm-off.toml")
    off.write_text(config.read_text().replace("[slurm]\n", "[slurm]\nenabled = false\n"))
    return off


def one_run(config: Path, before: Optional[Path]) -> tuple[float, str]:
    """Wall seconds and the last line printed of one ``healthd check --dry-run``."""
    env = dict(os.environ)
    if before is not None:
        env["PYTHONPATH"] = str(before)
    command = [sys.executable, "-m", "healthd", "check", "--dry-run", "--config", str(config)]
    start = time.perf_counter()
    # From the config's directory: ``-m`` puts the working directory first on sys.path.
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False, cwd=config.parent)
    elapsed = time.perf_counter() - start
    lines = done.stdout.strip().split("\n")
    return elapsed, lines[-1] if lines else done.stderr.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--before", type=Path, help="an export of older code, run alternately")
    parser.add_argument("--message-timeout", type=int, default=10, help="slurm.conf MessageTimeout (default 10)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="healthd-bench-refused-") as tmp:
        config = write_setup(Path(tmp), args.message_timeout)
        runs = {"this": (config, None), "Slurm off": (slurm_off(config), None)}
        if args.before is not None:
            runs["before"] = (config, args.before)
        times: dict[str, list[float]] = {name: [] for name in runs}
        last: dict[str, str] = {}
        for _ in range(args.runs):
            for name, (path, before) in runs.items():
                elapsed, last[name] = one_run(path, before)
                times[name].append(elapsed)
        for name in runs:
            median, worst = statistics.median(times[name]), max(times[name])
            print(f"{name}: median {median:.2f} s, worst {worst:.2f} s over {args.runs} runs")
            print(f"  {len(last[name])} characters: {last[name]}")
        print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
