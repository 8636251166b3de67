"""``healthd.slurm.command``: a Slurm command, or a hung filesystem under it, cannot hold a pass past its deadline.

The commands are stand-in shell scripts run as real processes; the hung filesystem
is a real FUSE mount whose getattr never returns (``hung_mount``), so the stat and
the exec sleep uninterruptibly, as on a hung NFS server.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import pytest

from healthd.config.models import SlurmSettings
from healthd.slurm.adapter import SlurmClient, SlurmError, SlurmNotFound
from healthd.slurm.command import ClientTimedOut, NotRun, run_client

MISSING = '[checks.mounts]\nexpect = [{ path = "/definitely-not-mounted" }]\n'


def _stand_ins(directory: Path, body: str) -> Path:
    """scontrol and sinfo that both run ``body``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("scontrol", "sinfo"):
        script = directory / name
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    return directory


def _dead(pid: int, within: float = 2.0) -> bool:
    """Whether ``pid`` has exited (a zombie its new parent has not reaped yet counts) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.02)
    return False


def test_a_command_whose_child_holds_its_output_open_is_abandoned_at_the_deadline(tmp_path: Path) -> None:
    # subprocess.run's timeout killed scontrol alone: the grandchild lived on for its 30 s,
    # holding the output pipe. SIGTERM is ignored by both; the process group gets SIGKILL.
    pidfile = tmp_path / "grandchild.pid"
    bin_dir = _stand_ins(tmp_path / "bin", f"trap '' TERM\nsleep 30 &\necho $! > {pidfile}\nexit 0")
    client = SlurmClient(SlurmSettings(bin_dir=bin_dir, timeout=0.3), "text")
    started = time.monotonic()
    with pytest.raises(ClientTimedOut, match=r"^`scontrol update NodeName=n1 State=RESUME` timed out after 0\.3s$"):
        client.resume("n1")
    assert time.monotonic() - started < 2
    assert _dead(int(pidfile.read_text())), "the grandchild was killed with the command's process group"
    # Nothing was stuck: the next call starts.
    with pytest.raises(ClientTimedOut):
        client.resume("n1")
    assert client.calls == [("update", "NodeName=n1", "State=RESUME")] * 2


def test_missing_command_and_conf_are_named_and_nothing_is_sent(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    client = SlurmClient(SlurmSettings(bin_dir=empty), "text")
    with pytest.raises(SlurmNotFound, match=rf"^sinfo not found in {empty} \(set \[slurm\]\.bin_dir\)$"):
        client.node("n1")
    bin_dir = _stand_ins(tmp_path / "bin", "echo answered")
    conf = tmp_path / "etc" / "slurm.conf"
    client = SlurmClient(SlurmSettings(bin_dir=bin_dir, conf=conf), "text")
    with pytest.raises(
        NotRun, match=rf"^`scontrol cancel_reboot n1` not run: {conf} does not exist \(\[slurm\]\.conf\)$"
    ):
        client.cancel_reboot("n1")
    assert client.calls == []
    conf.parent.mkdir()
    conf.write_text("ClusterName=c\n")
    assert run_client("sinfo", ["-h"], bin_dir, conf, 5, "sinfo -h").out == "answered\n"


def test_a_command_that_cannot_be_executed_says_which_file(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\n")  # not executable
    with pytest.raises(SlurmError, match=rf"^cannot run {bin_dir / 'scontrol'}: .*[Pp]ermission denied$"):
        SlurmClient(SlurmSettings(bin_dir=bin_dir), "text").drain("n1", "healthd: X y")


def test_arguments_reach_the_command_as_they_are(tmp_path: Path) -> None:
    bin_dir = _stand_ins(tmp_path / "bin", 'for a in "$@"; do printf "<%s>" "$a"; done')
    odd = "healthd: X $(touch pwned) `id` ; * \"q\" 'q'"
    finished = run_client("scontrol", ["update", f"Reason={odd}", ""], bin_dir, None, 5, "scontrol update")
    assert finished.out == f"<update><Reason={odd}><>"
    assert not (Path("/") / "pwned").exists() and not list(tmp_path.glob("**/pwned"))


@pytest.mark.parametrize("where", ["conf", "bin_dir"])
def test_slurm_on_a_hung_filesystem_costs_the_timeout_once_and_is_named(
    tmp_path: Path, hung_mount: str, where: str
) -> None:
    stand_ins = _stand_ins(tmp_path / "bin", "echo answered")
    hung = Path(hung_mount)
    settings = (
        SlurmSettings(bin_dir=stand_ins, conf=hung / "slurm.conf", timeout=0.5, budget=2)
        if where == "conf"
        else SlurmSettings(bin_dir=hung / "bin", timeout=0.5, budget=2)
    )
    client = SlurmClient(settings)
    client.start_budget()
    started = time.monotonic()
    with pytest.raises(ClientTimedOut) as first:
        client.node("n1")
    assert time.monotonic() - started < 2
    suspects = f"{hung}/slurm.conf, {stand_ins}" if where == "conf" else f"{hung}/bin"
    assert f"stuck in the kernel after SIGKILL (pid {first.value.stuck}): is the filesystem of {suspects} hung?" in str(
        first.value
    )
    # The stuck child is not followed by a second one: the next call is refused at once.
    started = time.monotonic()
    with pytest.raises(NotRun, match=rf"an earlier Slurm command \(pid {first.value.stuck}\) is still stuck"):
        client.drain("n1", "healthd: X y")
    assert time.monotonic() - started < 0.5
    assert len(client.calls) == 1


def test_a_pass_whose_slurm_conf_is_on_a_hung_filesystem_finishes_within_its_budget(
    tmp_path: Path, hung_mount: str, write_config: Callable[[str], Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    stand_ins = _stand_ins(tmp_path / "bin", "echo answered")
    path = write_config(
        f'[slurm]\nbin_dir = "{stand_ins}"\nconf = "{hung_mount}/slurm.conf"\n'
        f'timeout = 0.5\nbudget = 1\nact_splay = 0\nnode_name = "n1"\n{MISSING}'
    )
    started = time.monotonic()
    code, out, _ = cli("check", "--once", "--only", "mounts", "--config", str(path))
    assert time.monotonic() - started < 3
    assert code == 2
    last = out.splitlines()[-1]
    assert last.startswith("action: PENDING: take the node out now"), out
    # A one-shot's first Slurm command is its scontrol ping (docs/slurm.md).
    assert ": Slurm not reachable (scontrol timed out after 0.5s; stuck in the kernel after SIGKILL (pid " in last, out
