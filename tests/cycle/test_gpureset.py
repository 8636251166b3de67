"""GPU reset through nvidia-smi: refused unless the node is drained and idle and no process uses the GPU.

There is no GPU here, so nvidia-smi is a shell script under tmp_path that answers
``--query-compute-apps`` from a file and logs every call; it runs as a real
subprocess, so deadlines, exit statuses and output are real. A reset stuck in the
kernel is a real one too: the stand-in stats a file on a hung FUSE mount.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from healthd.cycle.gpureset import (
    MARKS_NAME,
    ComputeApp,
    GpuResetError,
    ResetMarks,
    ResetOutcome,
    ResetSettings,
    parse_compute_apps,
    reset_gpu,
)
from healthd.slurm.nodestate import NodeInfo
from healthd.store.state import StateFile

BUS = "00000000:3B:00.0"
REBOOTING = "node node1 is rebooting or in power saving"
DRAINED = NodeInfo("node1", "IDLE", frozenset({"DRAIN"}), "healthd: XID_154 gpu3", "root", ("batch",))

FAKE = """#!/bin/sh
echo "$*" >> {log}
case "$1" in
--query-compute-apps=pid,gpu_bus_id) {query} ;;
--gpu-reset) {reset} ;;
*) echo "unexpected arguments: $*" >&2; exit 2 ;;
esac
"""
APPS = 'cat "{apps}"'
RESET_OK = 'echo "GPU $3 was successfully reset."; echo "All done."'


def _marks(tmp_path: Path, boot_id: str = "boot-a") -> ResetMarks:
    """The record of running resets, in a private state directory under ``tmp_path``."""
    return ResetMarks(StateFile(tmp_path / "state", MARKS_NAME), boot_id)


class FakeSmi:
    def __init__(self, directory: Path, query: str = APPS, reset: str = RESET_OK) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "nvidia-smi"
        self.log = directory / "calls.log"
        self.apps = directory / "apps.csv"
        self.apps.write_text("")
        self.path.write_text(FAKE.format(log=self.log, query=query.format(apps=self.apps), reset=reset))
        self.path.chmod(0o755)

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def settings(self, reset_timeout: float = 10, query_timeout: float = 10) -> ResetSettings:
        return ResetSettings(nvidia_smi=self.path, reset_timeout=reset_timeout, query_timeout=query_timeout)


def test_an_idle_gpu_on_a_drained_node_is_reset(tmp_path: Path) -> None:
    smi = FakeSmi(tmp_path / "bin")
    smi.apps.write_text("4242, 00000000:18:00.0\n")  # a process on another GPU does not matter
    result = reset_gpu(BUS, node=DRAINED, marks=_marks(tmp_path), settings=smi.settings())
    assert (result.outcome, result.done, result.pids) == (ResetOutcome.DONE, True, ())
    assert result.output == f"GPU {BUS} was successfully reset. All done."
    assert smi.calls() == ["--query-compute-apps=pid,gpu_bus_id --format=csv,noheader", f"--gpu-reset -i {BUS}"]


def test_a_process_on_the_gpu_refuses_the_reset_whatever_the_bus_id_spelling(tmp_path: Path) -> None:
    smi = FakeSmi(tmp_path / "bin")
    smi.apps.write_text("4242, 0000:3b:00.0\n977, 00000000:3B:00.0\n12, 00000000:18:00.0\n")
    result = reset_gpu("3b:00.0", node=DRAINED, marks=_marks(tmp_path), settings=smi.settings())
    assert (result.outcome, result.pids) == (ResetOutcome.REFUSED, (977, 4242))
    assert result.message == "processes use the GPU: 977, 4242"
    assert not any(call.startswith("--gpu-reset") for call in smi.calls())


@pytest.mark.parametrize(
    ("state", "flags", "why"),
    [
        ("IDLE", set(), "node node1 is not drained (IDLE)"),
        ("MIXED", {"DRAIN"}, "node node1 still runs jobs (MIXED+DRAIN)"),
        ("IDLE", {"DRAIN", "REBOOT_REQUESTED"}, f"{REBOOTING} (IDLE+DRAIN+REBOOT_REQUESTED)"),
        ("IDLE", {"DRAIN", "POWERING_DOWN"}, f"{REBOOTING} (IDLE+DRAIN+POWERING_DOWN)"),
    ],
)
def test_a_node_not_drained_and_idle_refuses_without_running_nvidia_smi(
    tmp_path: Path, state: str, flags: set[str], why: str
) -> None:
    smi = FakeSmi(tmp_path / "bin")
    node = NodeInfo("node1", state, frozenset(flags), "", "", ("batch",))
    result = reset_gpu(BUS, node=node, marks=_marks(tmp_path), settings=smi.settings())
    assert (result.outcome, result.message) == (ResetOutcome.REFUSED, why)
    assert smi.calls() == []


def test_without_a_scheduler_only_the_process_check_guards(tmp_path: Path) -> None:
    smi = FakeSmi(tmp_path / "bin")
    assert reset_gpu(BUS, node=None, marks=_marks(tmp_path), settings=smi.settings()).outcome is ResetOutcome.DONE


@pytest.mark.parametrize("bus", ["-q", "--gpu-reset", "00000000:3B:00.0 -i 0", "GPU-5a3c", "", "3B:00.0;reboot"])
def test_anything_but_a_pci_bus_id_is_refused_before_nvidia_smi_sees_it(tmp_path: Path, bus: str) -> None:
    smi = FakeSmi(tmp_path / "bin")
    result = reset_gpu(bus, node=DRAINED, marks=_marks(tmp_path), settings=smi.settings())
    assert result.outcome is ResetOutcome.REFUSED and result.message.endswith("is not a PCI bus id")
    assert smi.calls() == []


def test_when_the_processes_cannot_be_listed_the_gpu_is_not_reset(tmp_path: Path) -> None:
    smi = FakeSmi(tmp_path / "bin", query='echo "NVIDIA-SMI has failed because it could not communicate" >&2; exit 9')
    result = reset_gpu(BUS, node=DRAINED, marks=_marks(tmp_path), settings=smi.settings())
    assert result.outcome is ResetOutcome.REFUSED
    assert result.message == (
        "cannot tell whether a process uses the GPU: `--query-compute-apps=pid,gpu_bus_id --format=csv,noheader`"
        " failed with exit status 9: NVIDIA-SMI has failed because it could not communicate"
    )
    assert len(smi.calls()) == 1


def test_an_unreadable_process_list_is_not_read_as_no_process(tmp_path: Path) -> None:
    smi = FakeSmi(tmp_path / "bin")
    smi.apps.write_text("4242, 00000000:18:00.0\n[Insufficient Permissions], 00000000:3B:00.0\n")
    result = reset_gpu(BUS, node=DRAINED, marks=_marks(tmp_path), settings=smi.settings())
    assert result.outcome is ResetOutcome.REFUSED
    assert "line 2 is not 'pid, pci bus id': '[Insufficient Permissions], 00000000:3B:00.0'" in result.message


def test_a_hanging_process_query_is_abandoned_at_its_deadline(tmp_path: Path) -> None:
    smi = FakeSmi(tmp_path / "bin", query="exec sleep 30")
    started = time.monotonic()
    result = reset_gpu(BUS, node=DRAINED, marks=_marks(tmp_path), settings=smi.settings(query_timeout=0.5))
    assert time.monotonic() - started < 3
    assert result.outcome is ResetOutcome.REFUSED
    assert result.message.endswith("did not answer within 0.5s")


def test_a_reset_past_its_deadline_is_killed_and_reported_failed(tmp_path: Path) -> None:
    smi = FakeSmi(tmp_path / "bin", reset="exec sleep 30")
    started = time.monotonic()
    result = reset_gpu(
        "00000000:5D:00.0", node=DRAINED, marks=_marks(tmp_path), settings=smi.settings(reset_timeout=0.5)
    )
    assert time.monotonic() - started < 3
    assert result.outcome is ResetOutcome.FAILED
    assert result.message == (
        "nvidia-smi --gpu-reset did not finish within 0.5s and was killed; the GPU's state is unknown"
    )


def test_a_reset_stuck_in_the_kernel_is_not_waited_for_and_not_started_twice(tmp_path: Path, hung_mount: str) -> None:
    # stat on the hung FUSE mount sleeps uninterruptibly, as a reset stuck in the driver does: SIGKILL waits.
    smi = FakeSmi(tmp_path / "bin", reset=f"exec /usr/bin/stat {hung_mount}/gpu")
    bus = "00000000:9A:00.0"
    started = time.monotonic()
    first = reset_gpu(bus, node=DRAINED, marks=_marks(tmp_path), settings=smi.settings(reset_timeout=0.5))
    assert time.monotonic() - started < 3
    assert first.outcome is ResetOutcome.FAILED
    second = reset_gpu(bus, node=DRAINED, marks=_marks(tmp_path), settings=smi.settings(reset_timeout=0.5))
    assert second.outcome is ResetOutcome.REFUSED
    assert second.message.startswith("an earlier reset of this GPU (pid ") and second.message.endswith(
        ") is still stuck"
    )
    assert [c for c in smi.calls() if c.startswith("--gpu-reset")] == [f"--gpu-reset -i {bus}"]


EARLIER = """
import sys
from pathlib import Path
from healthd.cycle.gpureset import MARKS_NAME, ResetMarks, ResetSettings, reset_gpu
from healthd.store.state import StateFile
state, smi, bus = sys.argv[1:]
reset_gpu(bus, node=None, marks=ResetMarks(StateFile(Path(state), MARKS_NAME), "boot-a"),
          settings=ResetSettings(nvidia_smi=Path(smi)))
"""


def test_a_reset_left_running_by_an_earlier_process_is_not_started_again(tmp_path: Path) -> None:
    # The hook that started a reset was killed by slurmd; its nvidia-smi (in its own session) goes on.
    started = tmp_path / "started"
    smi = FakeSmi(tmp_path / "bin", reset=f'touch "{started}"; exec sleep 30')
    earlier = subprocess.Popen([sys.executable, "-c", EARLIER, str(tmp_path / "state"), str(smi.path), BUS])
    deadline = time.monotonic() + 10
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    earlier.kill()
    earlier.wait()
    stuck = _marks(tmp_path).running(BUS)[0]
    assert stuck is not None and stuck != earlier.pid, "the mark names the nvidia-smi still running"
    try:
        later = reset_gpu(BUS, node=DRAINED, marks=_marks(tmp_path), settings=smi.settings())
        assert (later.outcome, later.message) == (
            ResetOutcome.REFUSED,
            f"an earlier reset of this GPU (pid {stuck}) is still stuck",
        )
        assert [c for c in smi.calls() if c.startswith("--gpu-reset")] == [f"--gpu-reset -i {BUS}"]
        # It holds back no other GPU, and nothing in another boot.
        assert _marks(tmp_path).running("00000000:5D:00.0")[0] is None
        assert _marks(tmp_path, boot_id="boot-b").running(BUS)[0] is None
    finally:
        os.killpg(stuck, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while _marks(tmp_path).running(BUS)[0] is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    # Once that process has gone, the GPU may be reset again (when the policy asks for it).
    smi.path.write_text(smi.path.read_text().replace("exec sleep 30", "exit 0"))
    again = reset_gpu(BUS, node=DRAINED, marks=_marks(tmp_path), settings=smi.settings())
    assert again.outcome is ResetOutcome.DONE
    assert _marks(tmp_path).file.load() == {}, "a reset that ended leaves no mark"


def test_a_mark_whose_pid_now_names_another_process_blocks_nothing(tmp_path: Path) -> None:
    marks = _marks(tmp_path)
    # This test's own pid, but with another start time: the reset's process has gone, its pid was reused.
    marks.file.save({"0000:3b:00": {"pid": os.getpid(), "start": 1.0, "boot_id": "boot-a"}})
    assert marks.running(BUS)[0] is None
    marks.mark(BUS, os.getpid())
    assert marks.running(BUS)[0] == os.getpid()


def test_a_reset_that_cannot_be_recorded_is_not_started(tmp_path: Path) -> None:
    smi = FakeSmi(tmp_path / "bin")
    blocker = tmp_path / "file"
    blocker.write_text("")
    unrecordable = ResetMarks(StateFile(blocker / "state", MARKS_NAME), "boot-a")
    result = reset_gpu(BUS, node=DRAINED, marks=unrecordable, settings=smi.settings())
    assert result.outcome is ResetOutcome.REFUSED
    assert result.message.startswith("cannot record the reset, so a later pass could repeat it: cannot write")
    assert not any(call.startswith("--gpu-reset") for call in smi.calls())


def test_a_deadline_cuts_the_reset_short(tmp_path: Path) -> None:
    smi = FakeSmi(tmp_path / "bin", reset="exec sleep 30")
    started = time.monotonic()
    result = reset_gpu(BUS, node=DRAINED, marks=_marks(tmp_path), settings=smi.settings(), deadline=started + 0.5)
    assert time.monotonic() - started < 3
    assert result.outcome is ResetOutcome.FAILED
    assert result.message.startswith("nvidia-smi --gpu-reset did not finish within 0.")  # what was left of 0.5 s
    none_left = reset_gpu(BUS, node=None, marks=_marks(tmp_path / "other"), settings=smi.settings(), deadline=0.0)
    assert none_left.outcome is ResetOutcome.REFUSED


def test_nvidia_smis_own_refusal_comes_back_as_the_failure(tmp_path: Path) -> None:
    message = (
        "Unable to reset this GPU because it's being used by some other process"
        " (e.g. CUDA application, graphics application like X server, monitoring application like other instance"
        " of nvidia-smi). Please first kill all processes using this GPU and all compute applications running in"
        " the system."
    )
    smi = FakeSmi(tmp_path / "bin", reset=f'echo "{message}" >&2; exit 255')
    result = reset_gpu(BUS, node=DRAINED, marks=_marks(tmp_path), settings=smi.settings())
    assert (result.outcome, result.message) == (ResetOutcome.FAILED, "nvidia-smi --gpu-reset exited with status 255")
    assert result.output == message[:500]


def test_an_nvidia_smi_others_could_have_written_is_never_run(tmp_path: Path) -> None:
    smi = FakeSmi(tmp_path / "bin")
    smi.path.chmod(0o777)
    result = reset_gpu(BUS, node=DRAINED, marks=_marks(tmp_path), settings=smi.settings())
    assert result.outcome is ResetOutcome.REFUSED
    assert result.message == (f"not running {smi.path}: {smi.path} is writable by group or others (mode -rwxrwxrwx)")
    assert smi.calls() == []


def test_a_relative_or_missing_nvidia_smi_is_refused(tmp_path: Path) -> None:
    relative = reset_gpu(
        BUS, node=DRAINED, marks=_marks(tmp_path), settings=ResetSettings(nvidia_smi=Path("nvidia-smi"))
    )
    assert (relative.outcome, relative.message) == (ResetOutcome.REFUSED, "nvidia-smi path nvidia-smi is not absolute")
    missing = reset_gpu(
        BUS, node=DRAINED, marks=_marks(tmp_path), settings=ResetSettings(nvidia_smi=tmp_path / "none" / "nvidia-smi")
    )
    assert missing.outcome is ResetOutcome.REFUSED and "cannot check" in missing.message


def test_parse_compute_apps() -> None:
    assert parse_compute_apps("") == []
    assert parse_compute_apps("12, 00000000:3B:00.0\n\n977,0000:3b:00.0\n") == [
        ComputeApp(12, "00000000:3B:00.0"),
        ComputeApp(977, "0000:3b:00.0"),
    ]
    for text in ("No running processes found", "12 00000000:3B:00.0", "12, gpu0", "-1, 00000000:3B:00.0"):
        with pytest.raises(GpuResetError, match="line 1 is not 'pid, pci bus id'"):
            parse_compute_apps(text)


def test_a_corrupt_record_of_resets_is_returned_with_the_reset(tmp_path: Path) -> None:
    """The marks file's problem comes back in the result, for the pass to report: nothing collects it aside."""
    smi = FakeSmi(tmp_path / "bin")
    marks = _marks(tmp_path)
    marks.file.save({})
    marks.file.path.write_text("{torn")
    result = reset_gpu(BUS, node=DRAINED, marks=marks, settings=smi.settings())
    assert result.outcome is ResetOutcome.DONE, "a corrupt record names no running reset"
    [problem] = result.problems
    assert problem.startswith(f"corrupt state file {marks.file.path} (") and problem.endswith("; starting empty")
    assert marks.file.problems == [], "read returns what it met: the check framework's collector stays empty"
