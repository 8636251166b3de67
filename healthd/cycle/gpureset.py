"""Resets one GPU with ``nvidia-smi --gpu-reset``, and only when nothing can be hurt by it.

The remediation for the reset class of faults: NVIDIA's XID catalog gives Xid 154
with recovery action "GPU reset" (and Xid 48, 62, 64, 95, ...) the RESET_GPU action,
and NVML reports a pending row remap that only a reset applies (nvmlDeviceGetRemappedRows).
A reset kills whatever runs on the GPU, so it runs only when

- the node is drained and idle in Slurm (no job can have or get the GPU), when the
  caller has a scheduler view of the node at all, and
- no process has the GPU open as a compute application: ``nvidia-smi
  --query-compute-apps=pid,gpu_bus_id`` lists none on its PCI bus id. If that list
  cannot be had, the reset is refused: a GPU is never reset blind.

nvidia-smi itself also refuses while any process (graphics, monitoring, DCGM, another
nvidia-smi) holds the GPU; its message then comes back as the failure's output.

nvidia-smi is run by absolute path (root runs it: the path must pass healthd's trust
rule), with an argument list, no shell, a fixed environment and a deadline. A reset
stuck in the driver can leave nvidia-smi in uninterruptible sleep; it is then killed,
abandoned (never waited for) and no second reset of that GPU starts while it lives,
in this process or any later one: ``ResetMarks`` keeps each running reset in the
state directory (``gpu-reset.json``) with its pid, the process's start time and the
boot id, written before nvidia-smi starts. The hook that started a reset may be
killed by slurmd while nvidia-smi goes on; the next hook finds the mark, sees that
process alive in the same boot, and starts nothing.
This module decides nothing: ``reset_gpu`` returns a ``ResetResult`` record and the
caller's policy chooses what follows (check again, or reboot).
"""

from __future__ import annotations

import contextlib
import enum
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional

from healthd.checks.bounded import TimedOut, process_start, run_bounded
from healthd.slurm.nodestate import NodeInfo
from healthd.store.historyschema import pci_key
from healthd.store.state import StateError
from healthd.store.trust import untrusted_reason

if TYPE_CHECKING:
    from healthd.store.state import StateFile

DEFAULT_NVIDIA_SMI = Path("/usr/bin/nvidia-smi")
# What nvidia-smi's output may cost us in results and logs.
OUTPUT_LIMIT = 500
# The state file of the resets that may still run (``ResetMarks``).
MARKS_NAME = "gpu-reset"


class ResetOutcome(enum.Enum):
    DONE = "done"  # nvidia-smi reset the GPU (exit status 0)
    REFUSED = "refused"  # not attempted: ``message`` says why; the GPU was not touched
    FAILED = "failed"  # attempted and failed, or timed out: the GPU's state is unknown


class ResetSettings(NamedTuple):
    """Where nvidia-smi is and how long it may take."""

    nvidia_smi: Path = DEFAULT_NVIDIA_SMI
    # A reset takes a few seconds; the driver may wait for the GPU to drain first.
    reset_timeout: float = 60.0
    query_timeout: float = 15.0


class ResetResult(NamedTuple):
    outcome: ResetOutcome
    pci_bus_id: str
    message: str
    # Processes found on the GPU (when refused for them).
    pids: tuple[int, ...] = ()
    # nvidia-smi's stdout and stderr, trimmed (for a failure: its own explanation).
    output: str = ""
    seconds: float = 0.0
    # What reading the reset marks met (a corrupt ``gpu-reset.json``), for the pass to report.
    problems: tuple[str, ...] = ()

    @property
    def done(self) -> bool:
        return self.outcome is ResetOutcome.DONE


class GpuResetError(Exception):
    """nvidia-smi could not be run or printed what we cannot read."""


class ComputeApp(NamedTuple):
    """One line of ``nvidia-smi --query-compute-apps=pid,gpu_bus_id --format=csv,noheader``."""

    pid: int
    pci_bus_id: str


def parse_compute_apps(text: str) -> list[ComputeApp]:
    """``12345, 00000000:3B:00.0`` per line; no lines when no process runs.

    Raises ``GpuResetError`` naming the line that is not a pid and a PCI bus id: an
    unreadable answer must not read as "no process".
    """
    apps = []
    # nvidia-smi ends each CSV row with "\n"; the two fields asked for are numbers it prints itself.
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        pid_text, sep, bus_id = (part.strip() for part in line.partition(","))
        if not sep or not pid_text.isdigit() or pci_key(bus_id) is None:
            raise GpuResetError(f"--query-compute-apps line {number} is not 'pid, pci bus id': {line[:120]!r}")
        apps.append(ComputeApp(int(pid_text), bus_id))
    return apps


def node_refusal(node: Optional[NodeInfo]) -> Optional[str]:
    """Why Slurm's view of the node forbids a reset now, or None (also None without a scheduler)."""
    if node is None:
        return None
    if not node.drained:
        return f"node {node.name} is not drained ({node.state_text})"
    if node.busy:
        return f"node {node.name} still runs jobs ({node.state_text})"
    if node.reboot_pending or node.power_saving:
        return f"node {node.name} is rebooting or in power saving ({node.state_text})"
    return None


def _trim(*texts: str) -> str:
    return " ".join(" ".join(t.split()) for t in texts if t.strip())[:OUTPUT_LIMIT]


class ResetMarks:
    """The GPU resets started by any healthd process that may still run, in ``gpu-reset.json``.

    ``{"<pci key>": {"pid": N, "start": T, "boot_id": B}}``: a reset is running while
    process N, started at T, is alive in boot B. The mark is written (with healthd's own
    pid) before nvidia-smi starts, then names nvidia-smi; a reset that ended is unmarked,
    one that outlived its deadline stays marked until its process has gone.
    """

    def __init__(self, file: StateFile, boot_id: str) -> None:
        self.file = file
        self.boot_id = boot_id

    def running(self, bus_id: str) -> tuple[Optional[int], tuple[str, ...]]:
        """The pid of an earlier reset of this GPU that may still run (or None), and what reading the marks met."""
        marks, problems = self.file.read()
        mark = marks.get(_mark_key(bus_id))
        if not isinstance(mark, dict):
            return None, problems
        pid, start, boot = mark.get("pid"), mark.get("start"), mark.get("boot_id")
        if not isinstance(pid, int) or not isinstance(start, (int, float)) or boot != self.boot_id:
            return None, problems  # another boot's reset is over; an unreadable mark names no process
        now_start = process_start(pid)
        # The start time tells the reset's process from a later one that got its pid.
        return (pid if now_start is not None and abs(now_start - start) < 1.0 else None), problems

    def mark(self, bus_id: str, pid: int) -> None:
        """Record process ``pid`` as resetting this GPU; raises ``StateError``."""
        start = process_start(pid)
        if start is None:
            return  # already gone: nothing can still be resetting
        marks = self._others(bus_id)
        marks[_mark_key(bus_id)] = {"pid": pid, "start": start, "boot_id": self.boot_id}
        self.file.save(marks)

    def unmark(self, bus_id: str) -> None:
        with contextlib.suppress(StateError):  # the mark names a process that has ended: it blocks nothing
            self.file.save(self._others(bus_id))

    def _others(self, bus_id: str) -> dict[str, Any]:
        # Read after ``running``, which reported what this read could meet: a write follows, and fails if it must.
        return {key: mark for key, mark in self.file.read()[0].items() if key != _mark_key(bus_id)}


def _mark_key(bus_id: str) -> str:
    return "%04x:%02x:%02x" % (pci_key(bus_id) or (0, 0, 0))


def compute_apps(settings: ResetSettings, timeout: Optional[float] = None) -> list[ComputeApp]:
    """Every compute process on every GPU, from nvidia-smi; ``GpuResetError`` when that cannot be known.

    ``timeout`` is ``settings.query_timeout`` unless given (a shorter one).
    """
    argv = [str(settings.nvidia_smi), "--query-compute-apps=pid,gpu_bus_id", "--format=csv,noheader"]
    timeout = settings.query_timeout if timeout is None else timeout
    try:
        finished = run_bounded(argv, timeout)
    except TimedOut:
        raise GpuResetError(f"`{' '.join(argv[1:])}` did not answer within {timeout:g}s") from None
    except OSError as exc:
        raise GpuResetError(f"cannot run {settings.nvidia_smi}: {exc.strerror or exc}") from None
    if finished.returncode != 0:
        output = _trim(finished.err, finished.out) or "no output"
        raise GpuResetError(f"`{' '.join(argv[1:])}` failed with exit status {finished.returncode}: {output}")
    return parse_compute_apps(finished.out)


def reset_gpu(
    pci_bus_id: str,
    *,
    node: Optional[NodeInfo],
    marks: ResetMarks,
    settings: ResetSettings = ResetSettings(),
    monotonic: Callable[[], float] = time.monotonic,
    deadline: Optional[float] = None,
) -> ResetResult:
    """Reset the GPU at ``pci_bus_id`` (NVML's ``00000000:3B:00.0`` or any spelling) if it is safe now.

    ``node`` is Slurm's view of this node (None where healthd runs without Slurm): the
    reset is refused unless it is drained and idle. ``marks`` holds the resets that
    may still run (refused while one of this GPU does). ``deadline`` (on ``monotonic``)
    cuts both nvidia-smi calls short, for a pass that must end by then (the hook).
    Never raises for nvidia-smi's troubles: they come back as REFUSED (before the
    reset) or FAILED (during it).
    """
    started = monotonic()

    def within(timeout: float) -> float:
        return timeout if deadline is None else max(0.0, min(timeout, deadline - monotonic()))

    refused, users, problems = _refusal(pci_bus_id, node, marks, settings, within)

    def result(outcome: ResetOutcome, message: str, pids: tuple[int, ...] = (), output: str = "") -> ResetResult:
        seconds = monotonic() - started
        return ResetResult(outcome, pci_bus_id, message, pids=pids, output=output, seconds=seconds, problems=problems)

    if refused is not None:
        return result(ResetOutcome.REFUSED, refused, pids=users)
    timeout = within(settings.reset_timeout)
    if timeout <= 0:
        return result(ResetOutcome.REFUSED, "no time left in this pass for a reset")
    outcome, message, output = _run_reset(pci_bus_id, marks, settings, timeout)
    return result(outcome, message, output=output)


def _refusal(
    pci_bus_id: str,
    node: Optional[NodeInfo],
    marks: ResetMarks,
    settings: ResetSettings,
    within: Callable[[float], float],
) -> tuple[Optional[str], tuple[int, ...], tuple[str, ...]]:
    """Why the reset is not safe now (None when it is), the processes that use the GPU, the problems of the marks.

    Asked in order of cost: the node and the marks are read before nvidia-smi runs, and
    nvidia-smi runs only when it is absolute and trusted (``_unsafe``).
    """
    key = pci_key(pci_bus_id)
    if key is None:
        # Also keeps a hostile subject such as "-q" from reaching nvidia-smi as an option.
        return f"{pci_bus_id[:80]!r} is not a PCI bus id", (), ()
    why = node_refusal(node)
    if why is not None:
        return why, (), ()
    stuck, problems = marks.running(pci_bus_id)
    if stuck is not None:
        return f"an earlier reset of this GPU (pid {stuck}) is still stuck", (), problems
    return (*_unsafe(key, settings, within), problems)


def _unsafe(
    key: tuple[int, int, int], settings: ResetSettings, within: Callable[[float], float]
) -> tuple[Optional[str], tuple[int, ...]]:
    """Why nvidia-smi cannot be asked or says the GPU is in use (None when neither), and the processes that use it.

    ``within`` cuts the query to the time the pass has left.
    """
    if not settings.nvidia_smi.is_absolute():
        return f"nvidia-smi path {settings.nvidia_smi} is not absolute", ()
    untrusted = untrusted_reason(settings.nvidia_smi)
    if untrusted is not None:
        return f"not running {settings.nvidia_smi}: {untrusted}", ()
    try:
        apps = compute_apps(settings, within(settings.query_timeout))
    except GpuResetError as exc:
        return f"cannot tell whether a process uses the GPU: {exc}", ()
    users = tuple(sorted({app.pid for app in apps if pci_key(app.pci_bus_id) == key}))
    if users:
        return f"processes use the GPU: {', '.join(str(pid) for pid in users)}", users
    return None, ()


def _run_reset(
    pci_bus_id: str, marks: ResetMarks, settings: ResetSettings, timeout: float
) -> tuple[ResetOutcome, str, str]:
    """Mark the GPU, run ``nvidia-smi --gpu-reset`` under ``timeout`` and unmark it: the outcome, why, its output.

    REFUSED when the mark cannot be written (nothing ran); FAILED when nvidia-smi could not
    run, failed or was killed. A killed reset stays marked, so no other starts while it lives.
    """
    try:
        # Marked before nvidia-smi starts: a process that dies now leaves the next one a mark to heed.
        marks.mark(pci_bus_id, os.getpid())
    except StateError as exc:
        return ResetOutcome.REFUSED, f"cannot record the reset, so a later pass could repeat it: {exc}", ""
    argv = [str(settings.nvidia_smi), "--gpu-reset", "-i", pci_bus_id.strip()]
    try:
        finished = run_bounded(argv, timeout, started=lambda pid: _remark(marks, pci_bus_id, pid))
    except TimedOut:
        # Still marked with nvidia-smi's pid: no reset of this GPU starts while it lives.
        why = f"nvidia-smi --gpu-reset did not finish within {timeout:.3g}s and was killed; the GPU's state is unknown"
        return ResetOutcome.FAILED, why, ""
    except OSError as exc:
        marks.unmark(pci_bus_id)
        return ResetOutcome.FAILED, f"cannot run {settings.nvidia_smi}: {exc.strerror or exc}", ""
    marks.unmark(pci_bus_id)
    output = _trim(finished.out, finished.err)
    if finished.returncode != 0:
        return ResetOutcome.FAILED, f"nvidia-smi --gpu-reset exited with status {finished.returncode}", output
    return ResetOutcome.DONE, "GPU reset", output


def _remark(marks: ResetMarks, bus_id: str, pid: int) -> None:
    """The mark names nvidia-smi from now on: the reset runs as long as it does, whatever becomes of healthd."""
    with contextlib.suppress(StateError):  # healthd's own pid stays marked: it guards while healthd waits
        marks.mark(bus_id, pid)
