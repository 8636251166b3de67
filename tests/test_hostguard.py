"""The host guard (``healthd_testkit.hostguard``) fails each test that touches the host; ``write_config`` is private.

The guard is shown at work in an inner pytest session run in a subprocess, whose
guarded paths are directories under tmp_path standing in for /etc/healthd and
/var/lib/healthd (and one more that only another program creates): nothing here touches the
real ones.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.hostguard import private_config

from healthd.config.defaults import toml_module

# Slow (runs inner pytest sessions in subprocesses): left out of the fast tier, `pytest -m "not slow"`.
pytestmark = pytest.mark.slow

HOSTGUARD = Path(__file__).resolve().parent / "healthd_testkit" / "hostguard.py"

INNER_CONFTEST = """
import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(HOSTGUARD).parents[1]))  # healthd_testkit, which the guard imports
spec = importlib.util.spec_from_file_location("healthd_test_hostguard", HOSTGUARD)
hostguard = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = hostguard
spec.loader.exec_module(hostguard)


def pytest_configure(config):
    guard = hostguard.HostGuard([ETC, VAR, ABSENT])
    config.pluginmanager.register(hostguard.HostGuardPlugin(guard), "healthd-host-guard")


@pytest.fixture
def host_guard(pytestconfig):
    return pytestconfig.pluginmanager.get_plugin("healthd-host-guard").guard
"""

FILE_TESTS = """
import contextlib
import subprocess
import time

# At collection, outside any test: the session fails even though every test below could pass.
with contextlib.suppress(OSError):
    (VAR / "collected.json").write_text("{}")


def test_clean(tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "last-pass.json").write_text("{}")


def _while_another_program_writes(step):
    (VAR.parent / f"ready-{step}").write_text("go")  # the outer test's writer waits for this
    for _ in range(600):
        if (VAR.parent / f"written-{step}").exists():
            return
        time.sleep(0.05)


def test_starts_no_process_while_another_program_writes():
    _while_another_program_writes(1)


def test_starts_a_process_while_another_program_writes():
    # The host's own healthd writing its state while a test runs a program: not the test's doing.
    subprocess.run(["true"], check=True)
    _while_another_program_writes(2)


def test_writes_in_process():
    with contextlib.suppress(OSError):
        (VAR / "last-pass.json").write_text("{}")


def test_reads_in_process():
    with contextlib.suppress(OSError):
        (VAR / "policy.json").read_text()


def test_reads_through_a_directory_swapped_for_a_link(tmp_path):
    # The guard caches each directory's resolution: a swap after a first open must not slip past it.
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "policy.json").write_text("{}")
    (tmp_path / "state").rename(tmp_path / "old")
    (tmp_path / "state").symlink_to(VAR)
    with contextlib.suppress(OSError):
        (tmp_path / "state" / "policy.json").read_text()


def test_writes_in_a_subprocess():
    subprocess.run(["sh", "-c", f"echo written > {VAR}/policy.json"], check=True)


def test_creates_the_config_dir_in_a_subprocess():
    subprocess.run(["mkdir", str(ETC)], check=True)
"""

SLURM_TESTS = """
import subprocess
import sys
from pathlib import Path

import pytest

from healthd.config.models import SlurmSettings
from healthd.slurm.adapter import SlurmClient, SlurmError

HEALTHD = Path(sys.executable).with_name("healthd")


def test_stray_slurm_client_in_process():
    with pytest.raises(SlurmError, match="host guard"):
        SlurmClient(SlurmSettings(node_name="node1")).show_node("node1")


def test_scontrol_from_a_shell():
    done = subprocess.run(["sh", "-c", "scontrol -o show node node1"], capture_output=True, text=True)
    assert done.returncode != 0 and "ClusterName" in done.stderr  # the tripwire conf: no slurmctld contacted


def test_stray_healthd_check_subprocess(tmp_path):
    config = tmp_path / "healthd.toml"
    config.write_text(
        f'[paths]\\nstate_dir = "{tmp_path}/state"\\n[slurm]\\nnode_name = "node1"\\n'
        '[checks.mounts]\\nexpect = [{ path = "/no/such/mount" }]\\n'
    )
    done = subprocess.run(
        [str(HEALTHD), "check", "--once", "--only", "mounts", "--config", str(config)], capture_output=True, timeout=60
    )
    assert done.returncode == 2


def test_test_cluster_conf_is_let_through(tmp_path, host_guard):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=inner\\nSlurmctldHost=localhost\\nNodeName=node1 CPUs=1\\n")
    host_guard.allow_slurm_conf(conf)
    done = subprocess.run(["scontrol", "--version"], env={"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0
"""


def _stand_ins(tmp_path: Path) -> tuple[Path, Path]:
    """The inner session's /etc/healthd (absent at first) and /var/lib/healthd."""
    var = tmp_path / "var-lib-healthd"
    var.mkdir(exist_ok=True)
    return tmp_path / "etc-healthd", var


def _absent(tmp_path: Path) -> Path:
    """A third guarded directory that no one creates but another program (absent at first)."""
    return tmp_path / "absent"


def _inner_session(tmp_path: Path, tests: str) -> tuple[int, str, dict[str, str]]:
    """Run ``tests`` in an inner pytest session guarding the stand-ins of tmp_path.

    Returns the exit code, the output, and each test's teardown error text ("" if none).
    """
    inner = tmp_path / "inner"
    etc, var = _stand_ins(tmp_path)
    inner.mkdir()
    # Each inner file starts by naming the guard module and the two stand-ins.
    header = f"from pathlib import Path\nHOSTGUARD = {str(HOSTGUARD)!r}\n"
    header += f"ETC, VAR, ABSENT = Path({str(etc)!r}), Path({str(var)!r}), Path({str(_absent(tmp_path))!r})\n"
    (inner / "conftest.py").write_text(header + INNER_CONFTEST)
    (inner / "test_inner.py").write_text(header + tests)
    report = tmp_path / "report.xml"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'inner-tmp'}"]
    done = subprocess.run(
        [*argv, f"--junitxml={report}", str(inner)],
        cwd=inner,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    errors: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        bad = [element for element in case if element.tag in ("error", "failure")]
        errors[case.get("name", "")] = "\n".join((e.get("message") or "") + (e.text or "") for e in bad)
    return done.returncode, done.stdout + done.stderr, errors


def test_touching_a_guarded_path_fails_the_test_that_did(tmp_path: Path) -> None:
    etc, var = _stand_ins(tmp_path)
    absent = _absent(tmp_path)
    # Another program on the machine (the host's healthd), not started by the inner session,
    # writes while two of its tests run: the first starts no process, the second does.
    script = f"""cd "{tmp_path}"
while [ ! -e ready-1 ]; do sleep 0.05; done; echo x > "{var}/foreign.json"; mkdir "{absent}"; touch written-1
while [ ! -e ready-2 ]; do sleep 0.05; done; echo x > "{var}/foreign-2.json"; touch written-2
exec sleep 60
"""
    writer = subprocess.Popen(["sh", "-c", script])
    try:
        code, output, errors = _inner_session(tmp_path, FILE_TESTS)
    finally:
        writer.kill()
        writer.wait()
    assert code == 1, output
    assert errors["test_clean"] == "", output
    assert errors["test_starts_no_process_while_another_program_writes"] == "", output
    assert errors["test_starts_a_process_while_another_program_writes"] == "", output
    # The writer (a shell's own echo) lives outside the inner session's process tree: its changes are a
    # warning, whatever the test ran. Its mkdir, a process that may be gone before it is placed, is a
    # warning either way there, since that test started no process.
    assert "host guard: warning: another program on this machine changed the guarded paths:" in output
    for path, test in ((var / "foreign.json", "no"), (var / "foreign-2.json", "a")):
        name = f"test_starts_{test}_process_while_another_program_writes"
        assert f"{path} was created while test_inner.py::{name} ran, by a process outside this run" in output
    name = "test_starts_no_process_while_another_program_writes"
    assert f"{absent} was created while test_inner.py::{name} ran, " in output
    assert f"open {var / 'last-pass.json'} (blocked)" in errors["test_writes_in_process"]
    assert f"open {var / 'policy.json'} (blocked)" in errors["test_reads_in_process"]
    assert "policy.json (blocked)" in errors["test_reads_through_a_directory_swapped_for_a_link"]
    assert "/state/policy.json" in errors["test_reads_through_a_directory_swapped_for_a_link"]
    assert f"{var / 'policy.json'} was created (by a process of this run" in errors["test_writes_in_a_subprocess"]
    assert f"{etc} was created (by a process of this run" in errors["test_creates_the_config_dir_in_a_subprocess"]
    assert "host guard: outside any test, " in output
    assert f"open {var / 'collected.json'} (blocked)" in output
    # What ran in the test process was stopped; a subprocess can only be caught afterwards.
    assert not (var / "last-pass.json").exists() and not (var / "collected.json").exists()
    assert (var / "policy.json").exists() and etc.is_dir()


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="Slurm's scontrol is not installed")
def test_a_slurm_command_outside_the_test_cluster_fails_the_test_that_ran_it(tmp_path: Path) -> None:
    code, output, errors = _inner_session(tmp_path, SLURM_TESTS)
    assert code == 1, output
    assert "ran /usr/bin/scontrol with SLURM_CONF=" in errors["test_stray_slurm_client_in_process"]
    assert "which is not a test cluster" in errors["test_stray_slurm_client_in_process"]
    for name in ("test_scontrol_from_a_shell", "test_stray_healthd_check_subprocess"):
        assert "a process read the guard's tripwire slurm.conf" in errors[name], output
    assert errors["test_test_cluster_conf_is_let_through"] == "", output


def test_write_config_adds_a_private_state_dir_and_turns_slurm_off(
    write_config: Callable[..., Path], tmp_path: Path
) -> None:
    tomllib = toml_module()
    path = write_config('[paths]\nprocfs = "/proc"\n[checks.gpu]\nexpect_gpus = 8\n')
    document = tomllib.loads(path.read_text())
    assert document["paths"] == {"procfs": "/proc", "state_dir": str(tmp_path / "state")}
    assert document["slurm"] == {"enabled": False} and document["checks"] == {"gpu": {"expect_gpus": 8}}
    path = write_config('[slurm]\nnode_name = "n1"\n')
    assert tomllib.loads(path.read_text())["slurm"] == {"enabled": False, "node_name": "n1"}


def test_write_config_keeps_a_state_dir_under_tmp_and_refuses_any_other(
    write_config: Callable[..., Path], tmp_path: Path
) -> None:
    chosen = tmp_path / "elsewhere"
    path = write_config(f'[paths]\nstate_dir = "{chosen}"\n')
    assert toml_module().loads(path.read_text())["paths"]["state_dir"] == str(chosen)
    with pytest.raises(ValueError, match=r"\[paths\]\.state_dir = '/var/lib/healthd' is not under"):
        write_config('[paths]\nstate_dir = "/var/lib/healthd"\n')


@pytest.mark.parametrize("value", ["true", '"yes"', "1"])
def test_write_config_refuses_slurm_on_without_a_test_cluster(write_config: Callable[..., Path], value: str) -> None:
    with pytest.raises(ValueError, match="needs a test cluster"):
        write_config(f"[slurm]\nenabled = {value}\n")


def test_write_config_points_slurm_at_a_test_cluster_only(
    write_config: Callable[..., Path], host_guard: Any, tmp_path: Path
) -> None:
    conf = tmp_path / "cluster" / "slurm.conf"
    with pytest.raises(ValueError, match=r"not the slurm\.conf of a test cluster"):
        write_config("", slurm_cluster=conf)
    host_guard.allow_slurm_conf(conf)
    slurm = toml_module().loads(write_config("", slurm_cluster=conf).read_text())["slurm"]
    assert slurm == {"conf": str(conf)}


def test_private_config_leaves_what_healthd_refuses_to_load_as_it_is(tmp_path: Path) -> None:
    for body in ("[daemon\n", "paths = 3\n"):
        assert private_config(body, tmp_path / "state", tmp_path) == body
    with pytest.raises(ValueError, match="write \\[paths\\] and \\[slurm\\] as tables"):
        private_config('paths = { procfs = "/proc" }\n', tmp_path / "state", tmp_path)


def test_the_default_config_of_a_test_is_private(cli: Callable[..., tuple[int, str, str]]) -> None:
    import healthd.config.load

    text = healthd.config.load.DEFAULT_CONFIG_PATH.read_text()
    document = toml_module().loads(text)
    assert document["slurm"] == {"enabled": False}
    assert not document["paths"]["state_dir"].startswith("/var/lib/healthd")
    code, out, _ = cli("config", "validate")
    assert code == 0 and str(healthd.config.load.DEFAULT_CONFIG_PATH) in out
