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
abandoned (never waited for) and no second reset of that GPU starts while it lives.
This module decides nothing: ``reset_gpu`` returns a frozen ``ResetResult`` and the
caller's policy chooses what follows (check again, or reboot).
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from healthd.bounded import StuckChildren, TimedOut, run_bounded
from healthd.history import pci_key
from healthd.nodestate import NodeInfo
from healthd.trust import untrusted_reason

DEFAULT_NVIDIA_SMI = Path("/usr/bin/nvidia-smi")
# What nvidia-smi's output may cost us in results and logs.
OUTPUT_LIMIT = 500

_PciKey = tuple[int, int, int]


class ResetOutcome(enum.Enum):
    DONE = "done"  # nvidia-smi reset the GPU (exit status 0)
    REFUSED = "refused"  # not attempted: ``message`` says why; the GPU was not touched
    FAILED = "failed"  # attempted and failed, or timed out: the GPU's state is unknown


@dataclass(frozen=True)
class ResetSettings:
    """Where nvidia-smi is and how long it may take."""

    nvidia_smi: Path = DEFAULT_NVIDIA_SMI
    # A reset takes a few seconds; the driver may wait for the GPU to drain first.
    reset_timeout: float = 60.0
    query_timeout: float = 15.0


@dataclass(frozen=True)
class ResetResult:
    outcome: ResetOutcome
    pci_bus_id: str
    message: str
    # Processes found on the GPU (when refused for them).
    pids: tuple[int, ...] = ()
    # nvidia-smi's stdout and stderr, trimmed (for a failure: its own explanation).
    output: str = ""
    seconds: float = 0.0

    @property
    def done(self) -> bool:
        return self.outcome is ResetOutcome.DONE


class GpuResetError(Exception):
    """nvidia-smi could not be run or printed what we cannot read."""


@dataclass(frozen=True)
class ComputeApp:
    """One line of ``nvidia-smi --query-compute-apps=pid,gpu_bus_id --format=csv,noheader``."""

    pid: int
    pci_bus_id: str


def parse_compute_apps(text: str) -> list[ComputeApp]:
    """``12345, 00000000:3B:00.0`` per line; no lines when no process runs.

    Raises ``GpuResetError`` naming the line that is not a pid and a PCI bus id: an
    unreadable answer must not read as "no process".
    """
    apps = []
    for number, line in enumerate(text.splitlines(), 1):
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


_STUCK: StuckChildren[_PciKey] = StuckChildren()


def compute_apps(settings: ResetSettings) -> list[ComputeApp]:
    """Every compute process on every GPU, from nvidia-smi; ``GpuResetError`` when that cannot be known."""
    argv = [str(settings.nvidia_smi), "--query-compute-apps=pid,gpu_bus_id", "--format=csv,noheader"]
    try:
        finished = run_bounded(argv, settings.query_timeout)
    except TimedOut:
        raise GpuResetError(f"`{' '.join(argv[1:])}` did not answer within {settings.query_timeout:g}s") from None
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
    settings: ResetSettings = ResetSettings(),
    monotonic: Callable[[], float] = time.monotonic,
) -> ResetResult:
    """Reset the GPU at ``pci_bus_id`` (NVML's ``00000000:3B:00.0`` or any spelling) if it is safe now.

    ``node`` is Slurm's view of this node (None where healthd runs without Slurm): the
    reset is refused unless it is drained and idle. Never raises for nvidia-smi's
    troubles: they come back as REFUSED (before the reset) or FAILED (during it).
    """
    started = monotonic()

    def result(outcome: ResetOutcome, message: str, pids: tuple[int, ...] = (), output: str = "") -> ResetResult:
        return ResetResult(outcome, pci_bus_id, message, pids=pids, output=output, seconds=monotonic() - started)

    key = pci_key(pci_bus_id)
    if key is None:
        # Also keeps a hostile subject such as "-q" from reaching nvidia-smi as an option.
        return result(ResetOutcome.REFUSED, f"{pci_bus_id[:80]!r} is not a PCI bus id")
    why = node_refusal(node)
    if why is not None:
        return result(ResetOutcome.REFUSED, why)
    stuck = _STUCK.alive(key)
    if stuck is not None:
        return result(ResetOutcome.REFUSED, f"an earlier reset of this GPU (pid {stuck}) is still stuck")
    if not settings.nvidia_smi.is_absolute():
        return result(ResetOutcome.REFUSED, f"nvidia-smi path {settings.nvidia_smi} is not absolute")
    untrusted = untrusted_reason(settings.nvidia_smi)
    if untrusted is not None:
        return result(ResetOutcome.REFUSED, f"not running {settings.nvidia_smi}: {untrusted}")
    try:
        apps = compute_apps(settings)
    except GpuResetError as exc:
        return result(ResetOutcome.REFUSED, f"cannot tell whether a process uses the GPU: {exc}")
    users = tuple(sorted({app.pid for app in apps if pci_key(app.pci_bus_id) == key}))
    if users:
        listed = ", ".join(str(pid) for pid in users)
        return result(ResetOutcome.REFUSED, f"processes use the GPU: {listed}", pids=users)
    argv = [str(settings.nvidia_smi), "--gpu-reset", "-i", pci_bus_id.strip()]
    try:
        finished = run_bounded(argv, settings.reset_timeout)
    except TimedOut as exc:
        _STUCK.keep(key, exc.process)
        return result(
            ResetOutcome.FAILED,
            f"nvidia-smi --gpu-reset did not finish within {settings.reset_timeout:g}s and was killed;"
            " the GPU's state is unknown",
        )
    except OSError as exc:
        return result(ResetOutcome.FAILED, f"cannot run {settings.nvidia_smi}: {exc.strerror or exc}")
    output = _trim(finished.out, finished.err)
    if finished.returncode != 0:
        return result(
            ResetOutcome.FAILED, f"nvidia-smi --gpu-reset exited with status {finished.returncode}", output=output
        )
    return result(ResetOutcome.DONE, "GPU reset", output=output)
