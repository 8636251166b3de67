"""Time of a ``check --once`` pass while a mount hangs: first pass, and a later one.

    python bench/bench_hung_mount.py [--probe-timeout 3] [--runs 5]   (root; needs /dev/fuse and fusepy)

Mounts the test suite's blocking FUSE filesystem (tests/healthd_testkit/hangfs.py), then runs
``healthd check --once --only mounts``: the first pass waits for the statvfs probe's
deadline; later passes find the stuck probe still alive and answer at once without
starting another. Prints the pass durations healthd reports; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from healthd.text import read_kernel_text
from healthd_checks.common.mountinfo import find_mount, parse_mountinfo

REPO = Path(__file__).resolve().parent.parent


def mounted(path: str) -> bool:
    # As the mounts check reads it: split on newline alone (another user's mount point may hold "\r").
    source = "/proc/self/mountinfo"
    return find_mount(parse_mountinfo(read_kernel_text(source, "surrogateescape"), source).entries, path) is not None


def one_pass(config: Path) -> float:
    done = subprocess.run(
        [sys.executable, "-m", "healthd", "check", "--once", "--json", "--only", "mounts", "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )
    doc = json.loads(done.stdout)
    assert doc["checks"][0]["findings"][0]["code"] == "MOUNT_HUNG", doc
    return float(doc["duration_seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probe-timeout", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mnt = tempfile.mkdtemp(prefix="healthd-bench-hung-")
        server = subprocess.Popen(
            [sys.executable, str(REPO / "tests/healthd_testkit/hangfs.py"), mnt], start_new_session=True
        )
        try:
            while not mounted(mnt):
                time.sleep(0.05)
            config = Path(tmp) / "healthd.toml"
            config.write_text(
                f'[paths]\nstate_dir = "{tmp}/state"\n[slurm]\nenabled = false\n'
                f'[checks.mounts]\nexpect = [{{ path = "{mnt}" }}]\n'
                f"include_root = false\nprobe_timeout = {args.probe_timeout}\n"
            )
            first = one_pass(config)
            later = [one_pass(config) for _ in range(args.runs)]
        finally:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
            subprocess.run(["umount", "-l", mnt], check=False, capture_output=True)
            os.rmdir(mnt)
    print(f"probe_timeout: {args.probe_timeout} s")
    print(f"first pass (waits for the probe's deadline): {first:.2f} s")
    print(f"later passes (stuck probe still alive), median of {args.runs}: {statistics.median(later) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
