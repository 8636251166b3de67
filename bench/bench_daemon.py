"""Benchmark of the daemon: CPU time per pass, resident memory while idle, and what reads its results.

Runs a real `healthd run` (every installed check, Slurm off) with a one-second interval
in a temporary directory, counts passes through its sd_notify STATUS messages, and
reads its CPU time and RSS with psutil. Then, while it runs, alternates three fresh
processes: `healthd status`, `healthd-hook` reporting the daemon's fresh pass (run
through `healthd.cli.hook.hook_main` with the default config path pointed at the benchmark's config,
since the real hook reads only /etc/healthd/healthd.toml), and a bare `python -c pass`
(the interpreter floor); the ratios to the floor come from the same run. Bytecode is
compiled first, as a wheel install does. Prints figures; asserts nothing.

``--install wheel`` runs those three from a wheel of this checkout installed (without
its dependencies: neither command imports them) in a fresh virtual environment of the
same Python, as a node has it; ``editable`` (the default) runs them from the environment
running the benchmark. They differ in the floor: an editable install's finder is imported
by ``site`` in every process, with pathlib and urllib.parse, and so hides what healthd
would import of those. The daemon itself always runs from the benchmark's environment.

    python bench/bench_daemon.py [--passes 20] [--status-runs 20] [--install {editable,wheel}]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_check_once import compile_bytecode

HOOK = (
    "import sys, pathlib, healthd.config.load as c; c.DEFAULT_CONFIG_PATH = pathlib.Path(sys.argv[1]);"
    "from healthd.cli.hook import hook_main; sys.exit(hook_main([]))"
)


def _timed(command: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return time.perf_counter() - t0, done.stdout


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


def wheel_environment(directory: Path, *, dependencies: bool = False) -> Path:
    """A virtual environment in ``directory`` with a wheel of this checkout installed; returns its ``bin``.

    Without ``dependencies`` only healthd itself: status and the hook import none of them.
    """
    repo = Path(__file__).resolve().parent.parent
    wheels, env = directory / "wheels", directory / "venv"
    pip = [sys.executable, "-m", "pip", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(repo)], check=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    wheel = next(wheels.glob("healthd-*.whl"))
    install = [*pip, "--python", str(env / "bin" / "python"), "install", *([] if dependencies else ["--no-deps"])]
    subprocess.run([*install, str(wheel)], check=True)
    return env / "bin"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--status-runs", type=int, default=20)
    parser.add_argument("--install", choices=("editable", "wheel"), default="editable")
    args = parser.parse_args()
    compile_bytecode()
    healthd = [sys.executable, "-m", "healthd.cli.main"]

    with tempfile.TemporaryDirectory() as tmp:
        bin_dir = wheel_environment(Path(tmp)) if args.install == "wheel" else Path(sys.executable).parent
        python, script = str(bin_dir / "python"), str(bin_dir / "healthd")
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

            runs, hooks, floors = [], [], []
            hook_line = ""
            for _ in range(args.status_runs):
                runs.append(_timed([script, "status", "--config", str(config)])[0])
                elapsed, hook_line = _timed([python, "-c", HOOK, str(config)])
                hooks.append(elapsed)
                floors.append(_timed([python, "-c", "pass"])[0])
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
    floor = statistics.median(floors)
    for label, times in (("healthd status", runs), ("healthd-hook from the daemon's pass", hooks)):
        print(
            f"{label}, fresh result ({len(times)} runs): median {statistics.median(times) * 1000:.0f} ms, "
            f"max {max(times) * 1000:.0f} ms, {statistics.median(times) / floor:.1f}x the interpreter floor"
        )
    print(f"interpreter floor (python -c pass): median {floor * 1000:.0f} ms ({args.install} install)")
    print(f"the hook said: {hook_line.strip()}")
    print(f"SIGTERM to exit: {stop * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
