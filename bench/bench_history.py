"""The history store's cost: the size of a year of passes, and the time it adds to each pass.

Run: python bench/bench_history.py [--dir DIR] [--passes N] [--worst]

1. A simulated year: 105,120 passes, one every 5 minutes, recorded through the
   store's API with a simulated clock, one transaction per pass, on one open store
   (reopening it each pass would change the time, not the size). The churn is that
   of a node with trouble: a WARNING open all year; an application Xid (graded OK)
   three times a day; a mount that goes and comes back twice a day; an IB error-rate
   WARNING for two hours every week, its message changing every pass; every week an
   Xid 79 taking the node out (action, ack, reboot requested, a new boot with 8 GPUs,
   reboot done, resume); daily maintenance as it falls due, with retention off so the
   whole year stays. Printed: the files' size and events kept, then the same after one
   maintenance run with the default retention (180 days). ``--worst`` adds one finding whose message
   changes in every pass of the year.
2. The cost per pass on that year-old database, as the pipeline pays it: open the store,
   note the boot (known, 8 GPUs), record a pass of 8 checks and 4 findings, see whether
   maintenance is due, close. Printed: median and 95th percentile over ``--passes``
   passes that change nothing, and over passes with a transition.
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
from typing import Callable

from healthd.model import CheckResult, Device, Finding, PassResult, RunState, Status
from healthd.plan.acks import FindingRef
from healthd.store.history import KEEP_DAYS, History
from healthd.store.historyschema import DB_NAME, RebootPhase

INTERVAL = 300.0
YEAR_PASSES = 105_120
DAY_PASSES = 288
WEEK_PASSES = 7 * DAY_PASSES
CHECKS = ("mounts", "services", "xid", "gpu", "infiniband", "pcie", "nvlink", "disk")
START = 1_700_000_000.0


def gpus(boot: int) -> list[Device]:
    # GPU 5 is replaced at the sixth boot: a new UUID and serial at the same address.
    return [
        Device(
            "gpu",
            i,
            f"00000000:{0x18 + 0x10 * i:02X}:00.0",
            f"GPU-{i}{'-new' if i == 5 and boot >= 5 else ''}",
            f"165{i:010d}",
        )
        for i in range(8)
    ]


def steady_findings() -> list[Finding]:
    return [
        Finding(
            "gpu",
            Status.WARNING,
            "ECC_DISABLED",
            "gpu0",
            "ECC is disabled",
            {"uuid": "GPU-0", "pci_bus_id": "00000000:18:00.0"},
        ),
        Finding(
            "xid",
            Status.OK,
            "KERNEL_LOG_TRUNCATED",
            "/dev/kmsg",
            "the kernel log starts at record 1234: earlier records of this boot were overwritten",
            {"first_seq": 1234},
        ),
    ]


def year_pass(n: int, boot: int, worst: bool) -> list[Finding]:
    """The findings of pass ``n`` of the year (see the module docstring)."""
    findings = steady_findings()
    day_pass, week_pass = n % DAY_PASSES, n % WEEK_PASSES
    app = n // (DAY_PASSES // 3)  # a new application Xid event three times a day
    findings.append(
        Finding(
            "xid",
            Status.OK,
            "XID_13",
            "gpu2",
            f"Xid 13 on gpu2: Graphics Engine Exception ({app % 50 + 1} this boot)",
            {"event": f"boot{boot}:{app}", "xid": 13, "gpu": 2, "pci": "0000:38:00", "count": app % 50 + 1},
        )
    )
    if day_pass % (DAY_PASSES // 2) < 6:  # a mount missing for half an hour, twice a day
        findings.append(Finding("mounts", Status.CRITICAL, "MOUNT_MISSING", "/scratch", "/scratch is not mounted", {}))
    if WEEK_PASSES // 2 <= week_pass < WEEK_PASSES // 2 + 24:  # two hours of IB errors, each pass its own rate
        rate = 130 + week_pass % 24
        findings.append(
            Finding(
                "infiniband",
                Status.WARNING,
                "IB_SYMBOL_ERRORS",
                "mlx5_0:1",
                f"symbol_error rising {rate}/h (limit 120/h)",
                {"rate": rate},
            )
        )
    if worst:
        findings.append(
            Finding(
                "pcie",
                Status.WARNING,
                "PCIE_REPLAY_RATE",
                "0000:b8:00.0",
                f"{9 + n % 7} replays a minute",
                {"rate": 9 + n % 7},
            )
        )
    return findings


def as_pass(findings: list[Finding], started: float) -> PassResult:
    results = tuple(CheckResult(c, RunState.RAN, tuple(f for f in findings if f.check == c), 0.01) for c in CHECKS)
    return PassResult("gpu0001", started, 0.3, results)


def simulate_year(state_dir: Path, worst: bool, keep_days: float) -> None:
    """Write the year, with daily maintenance keeping ``keep_days``."""
    boot = 0
    with History.open(state_dir) as history:
        history.record_boot(at=START, boot_id=f"boot{boot}", gpus=gpus(boot))
        for n in range(YEAR_PASSES):
            at = START + n * INTERVAL
            boot_id = f"boot{boot}"
            week_pass = n % WEEK_PASSES
            findings = year_pass(n, boot, worst)
            if week_pass == 100:  # the weekly Xid 79, and what follows it
                xid79 = Finding(
                    "xid",
                    Status.CRITICAL,
                    "XID_79",
                    "gpu5",
                    "Xid 79 on gpu5: GPU has fallen off the bus (1 this boot)",
                    {"event": f"{boot_id}:9{n}", "xid": 79, "gpu": 5, "pci": "0000:68:00", "count": 1, "sticky": True},
                )
                findings.append(xid79)
                history.record_pass(as_pass(findings, at), at=at, boot_id=boot_id)
                history.record_action(
                    at=at,
                    action="take_out_now",
                    outcome="applied",
                    node="gpu0001",
                    reason="healthd: XID_79 gpu5",
                    details={"steps": "drain,confirm,down"},
                )
                history.record_ack(at=at + 60, refs=[FindingRef("xid/XID_79/gpu5", f"{boot_id}:9{n}")], by="resume")
                history.record_reboot(at=at + 120, phase=RebootPhase.REQUESTED, boot_id=boot_id, reason="XID_79 gpu5")
                boot += 1
                history.record_boot(at=at + 400, boot_id=f"boot{boot}", gpus=gpus(boot))
                history.record_reboot(at=at + 400, phase=RebootPhase.DONE, boot_id=boot_id)
                history.record_action(at=at + 600, action="resume", outcome="applied", node="gpu0001")
            else:
                history.record_pass(as_pass(findings, at), at=at, boot_id=boot_id)
            history.maintain(at, keep_days=keep_days)
            if history.problems:
                raise SystemExit(f"pass {n}: {history.problems}")


def footprint(state_dir: Path) -> str:
    """The files' size on disk (database, WAL, shared memory) and the events kept."""
    size = sum(p.stat().st_size for p in state_dir.iterdir() if p.name.startswith(DB_NAME))
    with History.open(state_dir) as history:
        events = sum(1 for _ in history.events())
    return f"{size / 1e6:.2f} MB, {events:,} events"


def per_pass(state_dir: Path, passes: int, change_every: int) -> tuple[list[float], list[float]]:
    """Milliseconds per pass: (passes that change nothing, passes with a transition)."""
    quiet: list[float] = []
    changing: list[float] = []
    at = START + YEAR_PASSES * INTERVAL
    gpu_list = gpus(99)
    for n in range(passes):
        findings = steady_findings()
        findings.append(
            Finding("xid", Status.OK, "XID_13", "gpu2", "Xid 13 on gpu2 (3 this boot)", {"event": "b:1", "count": 3})
        )
        findings.append(
            Finding("infiniband", Status.WARNING, "IB_RATE_LOW", "mlx5_1:1", "200 Gb/sec, expected 400", {})
        )
        changes = n % change_every == 0
        if changes and (n // change_every) % 2 == 0:
            findings.append(
                Finding("mounts", Status.CRITICAL, "MOUNT_MISSING", "/scratch", "/scratch is not mounted", {})
            )
        result = as_pass(findings, at)
        started = time.perf_counter()
        with History.open(state_dir) as history:
            history.record_boot(at=at, boot_id="boot-bench", gpus=gpu_list)
            written = history.record_pass(result, at=at, boot_id="boot-bench")
            history.maintain(at)
        elapsed = (time.perf_counter() - started) * 1000
        (changing if written else quiet).append(elapsed)
        at += INTERVAL
    return quiet, changing


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) >= 20 else max(values)


def _filesystem(path: Path) -> str:
    done = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def _timed(label: str, run: Callable[[], object]) -> object:
    started = time.perf_counter()
    value = run()
    print(f"{label}: {time.perf_counter() - started:.1f} s")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="where to put the database (default: a temporary dir)")
    parser.add_argument("--passes", type=int, default=3000, help="passes timed for the per-pass cost")
    parser.add_argument("--worst", action="store_true", help="add a finding that changes in every pass of the year")
    args = parser.parse_args()
    print("command:", " ".join([os.path.relpath(sys.executable), *sys.argv]))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        state_dir = Path(tmp) / "state"
        print(f"database in {state_dir} ({_filesystem(Path(tmp))}), Python {sys.version.split()[0]}")
        # Retention off for the year (nothing is older than 400 days), so the whole year is measured.
        _timed("year written in", lambda: simulate_year(state_dir, args.worst, keep_days=400))
        print(f"after a year of 5-minute passes ({YEAR_PASSES:,}), all of it kept: {footprint(state_dir)}")
        with History.open(state_dir) as history:
            started = time.perf_counter()
            history.maintain(START + YEAR_PASSES * INTERVAL, force=True)
            elapsed = (time.perf_counter() - started) * 1000
        print(f"daily maintenance (quick_check + retention to {KEEP_DAYS} days) on it: {elapsed:.0f} ms")
        print(f"after it, as the default retention keeps it: {footprint(state_dir)}")
        quiet, changing = per_pass(state_dir, args.passes, change_every=50)
        for label, values in (("unchanged pass", quiet), ("pass with transitions", changing)):
            print(
                f"history cost per {label} (open, boot, record, maintenance check, close), {len(values)} passes:"
                f" median {statistics.median(values):.2f} ms, p95 {_p95(values):.2f} ms"
            )


if __name__ == "__main__":
    main()
