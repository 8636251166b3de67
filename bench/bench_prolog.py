"""Wall time of a clean ``healthd prolog`` (exit 0), median of N runs, as slurmd would start it.

    .venv/bin/python bench/bench_prolog.py [N]

It writes a config with a private state directory and ``[slurm] enabled = false`` and
the default ``prolog_checks`` (xid, gpu; with no GPU the gpu check is n/a), and runs
``healthd-prolog`` as a new process each time, with a job's environment.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    prolog = Path(sys.executable).with_name("healthd-prolog")
    with tempfile.TemporaryDirectory() as root:
        config = Path(root) / "healthd.toml"
        config.write_text(f'[paths]\nstate_dir = "{root}/state"\n[slurm]\nenabled = false\n')
        config.chmod(0o600)
        times = []
        for number in range(runs):
            env = {**os.environ, "SLURM_JOB_ID": str(1000 + number), "SLURM_JOB_USER": "bench"}
            start = time.perf_counter()
            done = subprocess.run([str(prolog), "--config", str(config)], env=env, capture_output=True, check=False)
            times.append(time.perf_counter() - start)
            if done.returncode != 0:
                raise SystemExit(f"prolog exited {done.returncode}: {done.stdout!r} {done.stderr!r}")
    print(f"clean prolog, {runs} runs: median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
