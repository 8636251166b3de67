"""A child process for the kill -9 test: records passes into a history until it is killed.

``python history_writer.py STATE_DIR FIRST_PASS``: pass ``n`` reports three steady
findings whose message names ``n`` (three ``changed`` events, ``raised`` the first
time) and one that is raised on even passes and cleared on odd ones: four events per
pass, each carrying its pass number. Like the real pipeline it opens and closes the
store every pass, records an action every fifth pass and forces a maintenance run
(quick_check, pruning, vacuum and WAL checkpoint) every twentieth. After its first
pass it prints ``ready``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from healthd.model import CheckResult, Finding, PassResult, RunState, Status
from healthd.store.history import History

STEADY = 3
PER_PASS = STEADY + 1


def the_pass(n: int) -> PassResult:
    findings = [
        Finding("gpu", Status.WARNING, "ECC_DISABLED", f"gpu{i}", f"pass {n}: " + "x" * 200, {"pass": n})
        for i in range(STEADY)
    ]
    if n % 2 == 0:
        findings.append(Finding("mounts", Status.CRITICAL, "MOUNT_MISSING", "/scratch", f"pass {n}", {"pass": n}))
    results = (
        CheckResult("gpu", RunState.RAN, tuple(f for f in findings if f.check == "gpu"), 0.01),
        CheckResult("mounts", RunState.RAN, tuple(f for f in findings if f.check == "mounts"), 0.01),
    )
    return PassResult("node0001", float(n), 0.1, results)


def main() -> None:
    state_dir, n = Path(sys.argv[1]), int(sys.argv[2])
    first = True
    while True:
        with History.open(state_dir) as history:
            history.record_boot(at=float(n), boot_id="boot-1")
            if len(history.record_pass(the_pass(n), at=float(n), boot_id="boot-1")) != PER_PASS:
                raise SystemExit(f"pass {n}: not recorded: {history.problems}")
            if n % 5 == 0:
                history.record_action(at=float(n), action="drain_after_jobs", outcome="applied", node="node0001")
            if n % 20 == 0:
                history.maintain(float(n), force=True)
            if history.problems:
                raise SystemExit(f"pass {n}: {history.problems}")
        if first:
            print("ready", flush=True)
            first = False
        n += 1


if __name__ == "__main__":
    main()
