"""``healthd check --expect``, ``-q``, ``--debug``, ``--timeout`` through the installed command (cli.checkmodes).

The mounts are real tmpfs mounts; every run is a separate process, as an operator's is.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

import pytest
from healthd_testkit.checks import only_checks
from healthd_testkit.paths import HEALTHD
from healthd_testkit.waiting import wait_for

Run = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def check(write_config: Callable[[str], Path]) -> Run:
    """``check(*args, body=...)``: ``healthd check -c CONFIG ARGS``; the config expects a mount that is not there."""

    def run(*args: str, body: str = "") -> subprocess.CompletedProcess[str]:
        config = write_config(body or '[checks.mounts]\nexpect = [{ path = "/definitely-not-mounted" }]\n')
        command = [str(HEALTHD), "check", "-c", str(config), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)

    return run


@pytest.fixture
def read_only(tmpfs: Callable[[str, str], Path]) -> Path:
    return tmpfs("scratch", "ro,size=1m")


def test_an_nhc_line_is_judged_alone_of_its_check_s_list(check: Run, read_only: Path) -> None:
    # The configured mount is missing: the expectation's list is the one judged, so the node passes.
    assert check().returncode == 2
    done = check("--expect", f"check_fs_mount_ro -f {read_only}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "mounts  OK" in done.stdout and "definitely-not-mounted" not in done.stdout
    failed = check("--expect", f"check_fs_mount_rw -f {read_only}")
    assert failed.returncode == 2
    assert f"MOUNT_READ_ONLY {read_only}" in failed.stdout, failed.stdout


def test_expectations_add_up_and_only_their_checks_run(check: Run, read_only: Path) -> None:
    done = check("--expect", f"check_fs_mount_ro -f {read_only}", "--expect", "check_fs_mount -f /nowhere-at-all")
    assert done.returncode == 2
    assert "MOUNT_MISSING /nowhere-at-all" in done.stdout and str(read_only) not in done.stdout
    assert [line.split()[0] for line in done.stdout.splitlines()[1:2]] == ["mounts"]
    assert "services" not in done.stdout and "xid" not in done.stdout


def test_healthd_s_own_form_is_one_check_s_toml(check: Run, read_only: Path) -> None:
    done = check("--expect", f'mounts: expect = [{{path = "{read_only}", rw = false}}]')
    assert done.returncode == 0, done.stdout + done.stderr
    done = check("--expect", f'mounts: expect = [{{path = "{read_only}", rw = true}}]')
    assert done.returncode == 2 and f"MOUNT_READ_ONLY {read_only}" in done.stdout


def test_an_nhc_line_not_converted_whole_exits_65_with_its_reason(check: Run) -> None:
    done = check("--expect", "check_fs_mount -o nosuid /scratch")
    assert done.returncode == 65 and done.stdout == ""
    assert done.stderr.startswith("healthd: --expect 'check_fs_mount -o nosuid /scratch': not converted: ")
    assert "mount options 'nosuid'" in done.stderr
    refused = check("--expect", "check_nv_drv_version 535")
    assert refused.returncode == 65 and "check_nv_drv_version has no healthd equivalent" in refused.stderr


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ('mounts: expect = [{path = "scratch"}]', "checks.mounts.expect[0].path: mount path must be absolute"),
        ('mounts: expect = [{path = "/x"', "not valid TOML"),
        ("mounnts: enabled = true", "checks.mounnts: unknown check; did you mean mounts?"),
    ],
)
def test_a_bad_toml_expectation_exits_78_naming_it(check: Run, line: str, said: str) -> None:
    done = check("--expect", "check_fs_mount -f /", "--expect", line)
    assert done.returncode == 78 and done.stdout == ""
    assert f"\n--expect '{line}': " in done.stderr and said in done.stderr, done.stderr


def test_a_bad_config_is_named_as_the_file_not_the_expectation(check: Run) -> None:
    done = check("--expect", "check_fs_mount -f /", body="[checks.mounts]\nmin_free_percent = 101\n")
    assert done.returncode == 78
    assert "healthd.toml: checks.mounts.min_free_percent" in done.stderr and "--expect" not in done.stderr


def test_a_trial_tells_slurm_nothing_and_leaves_the_node_s_state_alone(
    check: Run, write_config: Callable[[str], Path]
) -> None:
    state = write_config("").parent / "state"
    assert check().returncode == 2  # the node's own pass: its state directory as it is
    before = {p.name: p.read_bytes() for p in state.iterdir()}
    left = set(Path(tempfile.gettempdir()).glob("healthd-expect-*"))
    done = check("--expect", "check_fs_mount -f /nowhere-at-all", "--expect", "check_gpu_xid")
    assert done.returncode == 2
    assert "dry run: would take the node out now" in done.stdout and "nothing was changed in Slurm" in done.stdout
    assert {p.name: p.read_bytes() for p in state.iterdir()} == before
    assert set(Path(tempfile.gettempdir()).glob("healthd-expect-*")) == left, "the private copy is removed"


def test_an_active_check_is_not_tried_in_an_ordinary_pass(check: Run) -> None:
    done = check("--expect", "dcgm:")
    assert done.returncode == 64 and "dcgm: an active check" in done.stderr


@pytest.mark.parametrize("quiet", ["-q", "--quiet"])
def test_quiet_says_nothing_when_all_is_well_and_everything_otherwise(check: Run, quiet: str) -> None:
    healthy = '[checks.mounts]\nexpect = [{ path = "/" }]\n' + only_checks("mounts")
    done = check("--once", "--dry-run", quiet, body=healthy)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    done = check("--once", "--dry-run", "--json", quiet, body=healthy)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    failed = check("--dry-run", quiet, "--only", "mounts")
    assert failed.returncode == 2 and "MOUNT_MISSING /definitely-not-mounted" in failed.stdout


def test_debug_logs_what_each_check_read_one_bounded_line_each(check: Run, read_only: Path) -> None:
    done = check("--dry-run", "--debug", "--only", "mounts", "--expect", f"check_fs_mount_ro -f {read_only}")
    assert done.returncode == 0, done.stderr
    read = [line for line in done.stderr.split("\n") if line.startswith("healthd: DEBUG: mounts read: ")]
    # The whole of mountinfo is more than a line may hold: cut, and said to be.
    assert len(read) == 1 and "MountsObservation(source=PosixPath('/proc/1/mountinfo')" in read[0]
    assert len(read[0]) <= len("healthd: DEBUG: mounts read: ") + 2000 and read[0].endswith("...")
    assert "healthd: DEBUG: mounts: settings MountsSettings(enabled=True" in done.stderr
    quiet = check("--dry-run", "--only", "mounts", "--expect", f"check_fs_mount_ro -f {read_only}")
    assert "DEBUG" not in quiet.stderr


def test_timeout_bounds_the_pass(check: Run) -> None:
    healthy = '[checks.mounts]\nexpect = [{ path = "/" }]\n' + only_checks("mounts")
    done = check("--dry-run", "--timeout", "0.000001", "--json", body=healthy)
    assert done.returncode == 3 and '"code": "CHECK_TIMEOUT"' in done.stdout, done.stdout[-2000:]
    assert check("--dry-run", "--timeout", "700").returncode == 78
    assert check("--dry-run", "--timeout", "0").returncode == 64


def test_a_trial_killed_mid_pass_leaves_its_copy_only_until_the_next_trial(
    hung_mount: str, tmp_path: Path, write_config: Callable[[str], Path], stat_probes: Callable[[str], list[int]]
) -> None:
    # The trial waits on a hung mount's probe, its copy of the state directory made: SIGKILL
    # runs no exit handler, so the copy stays; the next trial of the same user removes it.
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "TMPDIR": str(temporary)}
    config = write_config("[checks.mounts]\ninclude_root = false\ntimeout = 60\nprobe_timeout = 50\n")
    line = f'mounts: expect = [{{ path = "{hung_mount}" }}]'
    trial = subprocess.Popen([str(HEALTHD), "check", "-c", str(config), "--expect", line], env=env)
    try:
        wait_for(lambda: stat_probes(hung_mount), timeout=30, what="the trial's probe of the hung mount")
        (copy,) = temporary.glob("healthd-expect-*")
    finally:
        trial.kill()
        trial.wait()
    assert copy.is_dir()
    done = subprocess.run(
        [str(HEALTHD), "check", "-c", str(config), "--expect", "check_fs_mount -f /nowhere-at-all"],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert list(temporary.glob("healthd-expect-*")) == []
