"""Wall time of a clean ``healthd prolog`` (exit 0), medians of N runs each, as slurmd would start it.

    .venv/bin/python bench/bench_prolog.py [N]

Two nodes' worth of config, each with a private state directory, ``[slurm] enabled =
false`` and the default ``prolog_checks`` (xid, gpu; with no GPU the gpu check is n/a):
one beside a running ``healthd run`` whose last pass is fresh (the prolog reads that
pass and the kernel log since it), one with no daemon (the prolog runs its checks).
``healthd-prolog`` runs as a new process each time, with a job's environment, the two
alternating so that both see the same machine load.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _config(root: Path, name: str) -> Path:
    config = root / f"{name}.toml"
    # A long interval: the daemon's one pass stays fresh for the whole run and nothing else competes.
    config.write_text(f'[paths]\nstate_dir = "{root}/{name}"\n[slurm]\nenabled = false\n[daemon]\ninterval = 3600\n')
    config.chmod(0o600)
    return config


def _prolog(prolog: Path, config: Path, number: int, want: str) -> float:
    env = {**os.environ, "SLURM_JOB_ID": str(1000 + number), "SLURM_JOB_USER": "bench"}
    start = time.perf_counter()
    done = subprocess.run([str(prolog), "--config", str(config)], env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0 or want not in done.stdout:
        raise SystemExit(f"prolog exited {done.returncode}, expected {want!r}: {done.stdout!r} {done.stderr!r}")
    return took


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    bin_dir = Path(sys.executable).parent
    prolog = bin_dir / "healthd-prolog"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(__file__).resolve().parents[1])], check=False)
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        beside, alone = _config(root, "daemon"), _config(root, "alone")
        daemon = subprocess.Popen([str(bin_dir / "healthd"), "run", "--config", str(beside)], stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while not (root / "daemon" / "daemon-pass.json").exists():
                if time.monotonic() > deadline or daemon.poll() is not None:
                    raise SystemExit("the daemon recorded no pass")
                time.sleep(0.1)
            # The first prolog of a new config would validate it in full (no cache yet), past the 1 s
            # deadline on a busy machine: an epilog, whose budget is 20 s, caches it first, as a node's
            # earlier jobs have.
            env = {**os.environ, "SLURM_JOB_ID": "999", "SLURM_JOB_USER": "bench"}
            subprocess.run([str(bin_dir / "healthd-epilog"), "--config", str(alone)], env=env, capture_output=True)
            fresh, full = [], []
            for number in range(runs):
                fresh.append(_prolog(prolog, beside, number, "(daemon's pass)"))
                full.append(_prolog(prolog, alone, number, "job allowed"))
        finally:
            daemon.terminate()
            daemon.wait()
    for what, times in (("daemon running, its pass fresh", fresh), ("no daemon", full)):
        median, worst = statistics.median(times) * 1000, max(times) * 1000
        print(f"clean prolog, {what}, {runs} runs: median {median:.0f} ms, max {worst:.0f} ms")


if __name__ == "__main__":
    main()
