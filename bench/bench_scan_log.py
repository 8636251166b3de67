"""End-to-end ``healthd scan-log --json FILE``: lines/s, wall time and peak RSS, against a bare regex loop.

    python bench/bench_scan_log.py [--lines 1000000] [--runs 3] [--before DIR]

Four generated dmesg files of ``--lines`` lines, each starting with the driver's
``NVRM: GPU at PCI:... GPU-<uuid>`` line for each of 4 GPUs (as at driver load): one
with 1% Xid lines (the rest ordinary kernel noise), their messages repeating as a
flood's do (16 distinct ones), one where 12% of the lines mention a GPU without being
Xid events (``NVRM:`` RmInitAdapter failures and persistence-mode notes, nvidia-modeset
and PCI core lines), the first again with no two Xid messages alike (each ends with
its line number), so that scan-log parses and encodes every one, and the first again
with 11% of its lines other driver (``NVRM:``) messages: the driver's load banner, its
``GPU at PCI:`` lines naming each GPU's UUID (as after every driver load), and other
notes. With ``--before DIR`` (an export of older code, with ``healthd_checks`` linked to
its ``checks``) each case also runs that code, on ``PYTHONPATH``, alternating. Each run is a new
process, as an operator's would be; the runs of healthd and of the baseline (a
Python loop with one compiled regex, reading the same file line by line)
alternate, and the ratio is taken from their medians in the same run. scan-log runs as
an operator runs it, without ``--config``: it then reads no config at all. Asserts
nothing.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_check_once import one_run
from bench_xid_parse import NOISE, XIDS

# Lines that name a GPU without being an Xid event: the driver's own (NVRM) and other programs'.
GPU_NOTES = [
    "[{t:12.6f}] NVRM: GPU 0000:{b:02x}:00.0: RmInitAdapter failed! (0x22:0x56:742)",
    "[{t:12.6f}] NVRM: Persistence mode is enabled for GPU 0000:{b:02x}:00.0",
    "[{t:12.6f}] nvidia-modeset: Allocated GPU:0 (GPU-{b:02x}0a1b2c-3d4e-5f60-7182) @ PCI:0000:{b:02x}:00.0",
    "[{t:12.6f}] nvidia 0000:{b:02x}:00.0: GPU ECC mode query returned; GPU fan speed 40%",
]
# Other driver messages, as a node that reloads the driver or logs often writes them: the load banner,
# a GPU's UUID (at every load), and notes that name a GPU without being an Xid.
DRIVER_NOTES = [
    "[{t:12.6f}] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Mar  5 22:42:15 UTC 2024",
    "[{t:12.6f}] NVRM: GPU at PCI:0000:{b:02x}:00: GPU-{b:02x}0a1b2c-3d4e-5f60-7182-93a4b5c6d7e8",
    "[{t:12.6f}] NVRM: GPU Board Serial#: 1652321045678",
    "[{t:12.6f}] NVRM: GPU 0000:{b:02x}:00.0: RmInitAdapter failed! (0x22:0x56:742)",
    "[{t:12.6f}] NVRM: Persistence mode is enabled for GPU 0000:{b:02x}:00.0",
]
# The driver names each GPU's UUID once, when it loads (one line per GPU, at the top of the log).
IDENTITIES = [
    f"[    2.{b:06d}] NVRM: GPU at PCI:0000:{b:02x}:00: GPU-{b:02x}0a1b2c-3d4e-5f60-7182-93a4b5c6d7e8"
    for b in (0x3B, 0x5E, 0x86, 0xAF)
]

BASELINE = r"""
import re, sys
xid = re.compile(r"NVRM: Xid \(PCI:([0-9a-f:]+)\): (\d+)")
count = 0
with open(sys.argv[1], encoding="utf-8", errors="replace") as handle:
    for line in handle:
        if xid.search(line):
            count += 1
print(count)
"""


def generate(
    path: Path,
    lines: int,
    *,
    xid_every: int,
    gpu_percent: int,
    vary: bool = False,
    notes: list[str] = GPU_NOTES,
    seed: int = 11,
) -> None:
    rng = random.Random(seed)
    with path.open("w") as out:
        out.write("".join(line + "\n" for line in IDENTITIES))
        for i in range(len(IDENTITIES), lines):
            if i % xid_every == 0:
                pool = XIDS
            elif rng.randrange(100) < gpu_percent:
                pool = notes
            else:
                pool = NOISE
            line = rng.choice(pool).format(t=i / 1000, b=rng.choice((0x3B, 0x5E, 0x86, 0xAF)))
            # ``vary``: no two Xid messages alike, unlike a flood, so nothing scan-log remembers is reused.
            out.write(f"{line} (line {i})\n" if vary and pool is XIDS else line + "\n")


def _alternate(
    commands: dict[str, list[str]], runs: int, before: Optional[Path]
) -> tuple[dict[str, float], dict[str, float]]:
    """Median wall seconds and peak RSS (MiB) of each command, run in turn ``runs`` times ("before" on its path)."""
    samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, command in commands.items():
            if name == "before":
                os.environ["PYTHONPATH"] = str(before)
            samples[name].append(one_run(command))
            os.environ.pop("PYTHONPATH", None)
    wall = {k: statistics.median(s[0] for s in v) for k, v in samples.items()}
    return wall, {k: max(s[1] for s in v) for k, v in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=Path, help="an export of older code to run alternately, on PYTHONPATH")
    args = parser.parse_args()
    healthd = os.path.join(os.path.dirname(sys.executable), "healthd")
    with tempfile.TemporaryDirectory() as tmp:
        cases = {
            "1% Xid": (100, 0, False, GPU_NOTES),
            '12% "GPU"': (100_000_000, 12, False, GPU_NOTES),
            "1% Xid, all different": (100, 0, True, GPU_NOTES),
            "1% Xid, 11% other NVRM": (100, 11, False, DRIVER_NOTES),
        }
        for label, (every, gpu, vary, notes) in cases.items():
            path = Path(tmp) / "dmesg.log"
            generate(path, args.lines, xid_every=every, gpu_percent=gpu, vary=vary, notes=notes)
            # As an operator runs it: no --config, so no config is read (with one, its validation adds about 0.1 s).
            ours = [healthd, "scan-log", "--json", str(path)]
            commands = {"healthd": ours, "baseline": [sys.executable, "-c", BASELINE, str(path)]}
            if args.before is not None:
                commands["before"] = ours
            wall, rss = _alternate(commands, args.runs, args.before)
            print(
                f"{label}: {args.lines:,} lines, {path.stat().st_size / 2**20:.0f} MiB; "
                f"healthd {args.lines / wall['healthd']:,.0f} lines/s "
                f"({wall['healthd']:.2f}s, {rss['healthd']:.0f} MiB); "
                f"bare regex loop {args.lines / wall['baseline']:,.0f} lines/s ({wall['baseline']:.2f}s, "
                f"{rss['baseline']:.0f} MiB); ratio {wall['baseline'] / wall['healthd']:.2f}x the loop's speed"
                + (
                    f"; before {args.lines / wall['before']:,.0f} lines/s "
                    f"({wall['before']:.2f}s, {rss['before']:.0f} MiB)"
                    if "before" in wall
                    else ""
                )
            )
    print(f"command: {' '.join(sys.argv)}; python {sys.version.split()[0]}, cpus {os.cpu_count()}")


if __name__ == "__main__":
    main()
