"""Fixtures shared by every test area: repository paths and running the CLI in-process."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest

from healthd.cli import main

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
HANGFS = REPO / "tests" / "core" / "hangfs.py"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[[str], Path]:
    """Write a TOML config whose state_dir is private to the test; returns its path."""

    def write(body: str) -> Path:
        path = tmp_path / "healthd.toml"
        if "[paths]" not in body:
            body = f'[paths]\nstate_dir = "{tmp_path / "state"}"\n' + body
        path.write_text(body)
        return path

    return write


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """Run ``healthd ARGS`` in-process; returns (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def cli_json(cli: Callable[..., tuple[int, str, str]]) -> Callable[..., tuple[int, dict[str, Any]]]:
    def run(*args: str) -> tuple[int, dict[str, Any]]:
        code, out, err = cli(*args)
        assert out, f"no output; stderr: {err}"
        return code, json.loads(out)

    return run


def _mounted(path: str) -> bool:
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        return any(line.split(" ")[4] == path for line in handle)


def _fuse_skip_reason() -> Optional[str]:
    # Only machines without FUSE or root skip; CI (Debian 12, root, fuse3 + libfuse2) runs it.
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is absent on this machine"
    if os.geteuid() != 0:
        return "mounting FUSE with allow_other needs root"
    try:
        import fuse  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"fusepy or libfuse2 is not installed: {exc}"
    return None


def stat_probes_of(path: str) -> list[int]:
    """Pids of the mounts check's ``stat --file-system`` probes of ``path`` that are alive."""
    import psutil

    return [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if (p.info["cmdline"] or [])[-1:] == [path] and "--file-system" in (p.info["cmdline"] or [])
    ]


@pytest.fixture
def stat_probes() -> Callable[[str], list[int]]:
    return stat_probes_of


@pytest.fixture
def hung_mount() -> Iterator[str]:
    """A real FUSE mount (tests/core/hangfs.py) whose getattr and statfs never return."""
    reason = _fuse_skip_reason()
    if reason:
        print(f"skipping the FUSE hung-mount test: {reason}")
        pytest.skip(reason)
    mnt = tempfile.mkdtemp(prefix="healthd-hung-")
    server = subprocess.Popen([sys.executable, str(HANGFS), mnt], start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        while not _mounted(mnt):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"FUSE server did not mount {mnt} (exit {server.poll()})")
            time.sleep(0.05)
        yield mnt
    finally:
        # Killing the server fails every blocked request with ENOTCONN, which frees stuck probes and threads.
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        subprocess.run(["umount", "-l", mnt], check=False, capture_output=True)
        deadline = time.monotonic() + 10
        while stat_probes_of(mnt) and time.monotonic() < deadline:
            time.sleep(0.05)
        shutil.rmtree(mnt, ignore_errors=True)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str, str], Path]]:
    """Mount a small real tmpfs: ``tmpfs(name, options)``; unmounted after the test."""
    mounted: list[Path] = []

    def mount(name: str, options: str) -> Path:
        # Needs root; CI runs as root, so only a developer's unprivileged run skips.
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        target = tmp_path / name
        target.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], check=False).returncode:
            pytest.skip("cannot mount a tmpfs here")
        mounted.append(target)
        return target

    yield mount
    for target in mounted:
        subprocess.run(["umount", "-l", str(target)], check=False)


# A real unprivileged account for the trust tests: no home, no shell, no password.
INTRUDER = "healthd-intruder"


@pytest.fixture(scope="session")
def intruder() -> tuple[int, int]:
    """(uid, gid) of a real unprivileged user, created with useradd if missing and left in place (harmless)."""
    if os.geteuid() != 0:
        pytest.skip("creating a user and handing files to it need root")
    try:
        entry = pwd.getpwnam(INTRUDER)
    except KeyError:
        # Exit 9 ("already exists") is another test run creating it at the same moment: fine.
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", INTRUDER],
            check=False,
            capture_output=True,
        )
        entry = pwd.getpwnam(INTRUDER)
    assert entry.pw_uid != 0
    return entry.pw_uid, entry.pw_gid


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under tests/run.sh (HEALTHD_NO_SKIPS=1) every real component is installed, so a skip is a failure.

    The skips above guard developers' machines without root, FUSE, Slurm or promtool;
    in CI they would hide a missing install step behind a green run.
    """
    if os.environ.get("HEALTHD_NO_SKIPS") != "1":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped:
        names = ", ".join(report.nodeid for report in skipped[:10])
        print(f"\nHEALTHD_NO_SKIPS=1 but {len(skipped)} test(s) skipped: {names}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
