"""Benchmark of the daemon: CPU time per pass, resident memory while idle, `healthd status` latency.

Runs a real `healthd run` (every installed check, Slurm off) with a one-second interval
in a temporary directory, counts passes through its sd_notify STATUS messages, and
reads its CPU time and RSS with psutil. Prints figures; asserts nothing.

    python bench/bench_daemon.py [--passes 20] [--status-runs 20]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil


def _wait_for_statuses(sock: socket.socket, count: int, timeout: float) -> int:
    seen = 0
    deadline = time.monotonic() + timeout
    while seen < count and time.monotonic() < deadline:
        try:
            text = sock.recv(65536).decode()
        except socket.timeout:
            continue
        # One STATUS= per finished pass ("OK at ..." / "CRITICAL at ..."), plus READY's.
        if any(line.startswith("STATUS=") and " at " in line for line in text.splitlines()):
            seen += 1
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--status-runs", type=int, default=20)
    args = parser.parse_args()
    healthd = [sys.executable, "-m", "healthd.cli"]

    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "healthd.toml"
        config.write_text(
            f'[paths]\nstate_dir = "{tmp}/state"\n[slurm]\nenabled = false\nnode_name = "bench"\n'
            "[daemon]\ninterval = 1\nsplay = false\n"
        )
        address = f"{tmp}/notify.sock"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(address)
        sock.settimeout(0.2)
        started = time.monotonic()
        daemon = subprocess.Popen(
            [*healthd, "run", "--config", str(config)],
            env={**os.environ, "NOTIFY_SOCKET": address},
            stderr=subprocess.DEVNULL,
        )
        try:
            if _wait_for_statuses(sock, 1, 60) != 1:
                print("daemon did not become ready", file=sys.stderr)
                return 1
            startup = time.monotonic() - started
            process = psutil.Process(daemon.pid)
            cpu0 = sum(process.cpu_times()[:2])
            seen = _wait_for_statuses(sock, args.passes, args.passes * 3 + 30)
            cpu1 = sum(process.cpu_times()[:2])
            rss = process.memory_info().rss
            idle0 = sum(process.cpu_times()[:2])
            time.sleep(0.5)  # between passes
            idle1 = sum(process.cpu_times()[:2])

            runs = []
            for _ in range(args.status_runs):
                t0 = time.perf_counter()
                subprocess.run([*healthd, "status", "--config", str(config)], capture_output=True, check=False)
                runs.append(time.perf_counter() - t0)
        finally:
            daemon.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            daemon.wait(30)
            stop = time.monotonic() - t0
            sock.close()

    print(f"startup to READY=1 (first pass included): {startup * 1000:.0f} ms")
    print(f"CPU per pass ({seen} passes, all installed checks): {(cpu1 - cpu0) / max(seen, 1) * 1000:.1f} ms")
    print(f"CPU while waiting, over 0.5 s: {(idle1 - idle0) * 1000:.1f} ms")
    print(f"RSS between passes: {rss / 2**20:.1f} MiB")
    print(
        f"healthd status, fresh result ({len(runs)} runs): median {statistics.median(runs) * 1000:.0f} ms, "
        f"max {max(runs) * 1000:.0f} ms"
    )
    print(f"SIGTERM to exit: {stop * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
