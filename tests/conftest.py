"""Fixtures shared by every test area: the host guard, private configs, running the CLI in-process.

The host guard (``healthd_testkit.hostguard``) fails any test that touches
/etc/healthd, /var/lib/healthd or a Slurm that is not a test cluster; every config
written here is private (see ``write_config``). The tests' shared helpers live in
the ``healthd_testkit`` package next to this file.
"""

from __future__ import annotations

import contextlib
import itertools
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

import healthd.config.load
from healthd.cli.main import main
from healthd_checks.common.procs import system_uid

# With pytest's importlib import mode test modules cannot import each other: the helpers
# they share are one package, importable once tests/ is on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from healthd_testkit import hostguard
from healthd_testkit.checks import mounted
from healthd_testkit.paths import FIXTURES, REPO

HANGFS = REPO / "tests" / "healthd_testkit" / "hangfs.py"

GUARD_PLUGIN = "healthd-host-guard"


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(hostguard.HostGuardPlugin(hostguard.HostGuard()), GUARD_PLUGIN)


@pytest.fixture(scope="session")
def host_guard(pytestconfig: pytest.Config) -> Any:
    """The session's HostGuard: a test cluster's fixture calls ``host_guard.allow_slurm_conf(conf)``."""
    return pytestconfig.pluginmanager.get_plugin(GUARD_PLUGIN).guard


@pytest.fixture(scope="session")
def _default_configs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Where each test's default config goes, numbered (one directory: no numbered-dir scan per test)."""
    return tmp_path_factory.mktemp("default-config"), tmp_path_factory.getbasetemp()


_DEFAULT_CONFIG_NUMBER = itertools.count()


@pytest.fixture(autouse=True)
def _private_default_config(_default_configs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """In this process, healthd's default config (read when no --config is given) is private to the test."""
    directory, basetemp = _default_configs
    number = next(_DEFAULT_CONFIG_NUMBER)
    path = directory / f"healthd-{number}.toml"
    path.write_text(hostguard.private_config("", directory / f"state-{number}", basetemp))
    monkeypatch.setattr(healthd.config.load, "DEFAULT_CONFIG_PATH", path)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory, host_guard: Any) -> Iterator[Any]:
    """The session's one throwaway Slurm cluster (healthd_testkit.cluster), started on first use."""
    from healthd_testkit import cluster as cluster_module

    why = cluster_module.missing_prerequisite()
    if why:
        print(f"skipping the tests of the real Slurm cluster: {why}")
        pytest.skip(why)
    no_accounting = cluster_module.missing_accounting()
    if no_accounting:
        print(f"the test cluster runs without accounting: {no_accounting}")
    cluster = cluster_module.Cluster(
        root=tmp_path_factory.mktemp("slurm"),
        healthd_bin=Path(sys.executable).with_name("healthd"),
        accounting=no_accounting is None,
    )
    with cluster_module.running(cluster, host_guard.allow_slurm_conf):
        yield cluster


@pytest.fixture(scope="session")
def release_installs(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[str], tuple[Optional[Path], Path]]]:
    """``release_installs("slurm-24.11")``: (its root, the healthd installed there), made on first use.

    The root is built (or taken from the cache) and healthd installed in it once per
    session, and removed when the session ends. This machine's release has no root
    (None) and runs this checkout's healthd.
    """
    from healthd_testkit import releases

    made: dict[str, tuple[Optional[Path], Path]] = {}
    logs = tmp_path_factory.mktemp("releases")
    with contextlib.ExitStack() as stack:

        def get(release_id: str) -> tuple[Optional[Path], Path]:
            if release_id == releases.HOST.id:
                return None, Path(sys.executable).with_name("healthd")
            if release_id not in made:
                release = releases.by_id(release_id)
                root = releases.build_root(release, logs / f"{release.id}-build.log")
                healthd_bin = releases.install_healthd(root, logs / f"{release.id}-install.log")
                stack.callback(releases.remove_healthd, root, healthd_bin)
                made[release_id] = root, healthd_bin
            return made[release_id]

        yield get


def _release_cluster(
    release_id: str,
    installs: Callable[[str], tuple[Optional[Path], Path]],
    directory: Path,
    shared: Path,
    **options: Any,
) -> Any:
    """A Cluster (not started) of ``release_id`` with accounting: in its root, unless it is this machine's release."""
    from healthd_testkit import cluster as cluster_module

    root, healthd_bin = installs(release_id)
    return cluster_module.Cluster(
        root=directory, healthd_bin=healthd_bin, accounting=True, chroot=root, shared=(shared,), **options
    )


@pytest.fixture(scope="session")
def release_clusters(
    tmp_path_factory: pytest.TempPathFactory, host_guard: Any, release_installs: Callable[[str], Any]
) -> Iterator[Callable[[str], Any]]:
    """``release_clusters("slurm-24.11")``: a cluster of that release (healthd_testkit.releases), started on first use.

    It runs until the session ends, beside the session's own ``slurm_cluster``.
    """
    from healthd_testkit import cluster as cluster_module
    from healthd_testkit import releases

    started: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:

        def get(release_id: str) -> Any:
            if release_id not in started:
                release = releases.by_id(release_id)
                cluster = _release_cluster(
                    release_id,
                    release_installs,
                    tmp_path_factory.mktemp(release.id),
                    tmp_path_factory.getbasetemp(),
                )
                started[release_id] = stack.enter_context(cluster_module.running(cluster, host_guard.allow_slurm_conf))
                assert cluster.version == release.version, f"{release.suite} now carries Slurm {cluster.version}"
            return started[release_id]

        yield get


@pytest.fixture(scope="session")
def configless_clusters(
    tmp_path_factory: pytest.TempPathFactory, host_guard: Any, release_installs: Callable[[str], Any]
) -> Iterator[Callable[[str], Any]]:
    """``configless_clusters("slurm-24.11")``: that release's configless cluster (sched/backfill), started on first use.

    Its nodes fetch their configuration from slurmctld (healthd_testkit.cluster,
    ``configless``), backfill runs heterogeneous jobs, and ``PrologFlags=Alloc`` runs the
    Prolog on every node of a job as it starts (docs/jobs.md): what the session's other
    clusters do not do. This machine's release runs here without a root.
    """
    from healthd_testkit import cluster as cluster_module
    from healthd_testkit import releases

    why = cluster_module.missing_prerequisite() or cluster_module.missing_accounting()
    if why:
        print(f"skipping the tests of the configless cluster: {why}")
        pytest.skip(why)
    started: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:

        def get(release_id: str) -> Any:
            if release_id not in started:
                cluster = _release_cluster(
                    release_id,
                    release_installs,
                    tmp_path_factory.mktemp(f"{release_id}-configless"),
                    tmp_path_factory.getbasetemp(),
                    configless=True,
                    scheduler="sched/backfill",
                    prolog_flags="Alloc",
                )
                started[release_id] = stack.enter_context(cluster_module.running(cluster, host_guard.allow_slurm_conf))
                if cluster.chroot is not None:
                    assert cluster.version == releases.by_id(release_id).version
            return started[release_id]

        yield get


@pytest.fixture
def slurm_release(request: pytest.FixtureRequest) -> str:
    """The Slurm release a test of the real cluster runs against: this machine's, unless parametrized.

    A test runs against every release with ``@every_release`` (healthd_testkit.releases).
    """
    from healthd_testkit.releases import HOST

    return str(getattr(request, "param", HOST.id))


_REBUILD: pytest.StashKey[Any] = pytest.StashKey()


@pytest.fixture(scope="session")
def healthd_packages(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Any:
    """healthd's .deb and .rpm, built once per session from this checkout (healthd_testkit.packages).

    Where the session holds a test of ``healthd_packages_rebuilt``, the second build starts
    as soon as this one is done, and runs while the tests that install these packages do.
    """
    from healthd_testkit.packages import build_in_background, build_packages, missing_tool

    why = missing_tool()
    if why:
        pytest.skip(why)
    packages = build_packages(tmp_path_factory.mktemp("packages"))
    if any("healthd_packages_rebuilt" in getattr(item, "fixturenames", ()) for item in request.session.items):
        request.config.stash[_REBUILD] = build_in_background(tmp_path_factory.mktemp("packages-rebuilt"))
    return packages


@pytest.fixture(scope="session")
def healthd_packages_rebuilt(healthd_packages: Any, pytestconfig: pytest.Config) -> Any:
    """A second build of the same checkout, in another directory, started when ``healthd_packages`` was done."""
    return pytestconfig.stash[_REBUILD].result()


@pytest.fixture
def cluster(slurm_release: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The cluster for one test: slurmctld running, no jobs, every node idle, client commands pointed at it.

    It is the session's ``slurm_cluster``, or for a test parametrized over releases, that release's.
    """
    from healthd_testkit.releases import HOST

    if slurm_release == HOST.id:
        slurm_cluster = request.getfixturevalue("slurm_cluster")
    else:
        slurm_cluster = request.getfixturevalue("release_clusters")(slurm_release)
    if "slurmctld" not in slurm_cluster.procs or slurm_cluster.procs["slurmctld"].poll() is not None:
        slurm_cluster.start_ctld()  # a fault test may have stopped it
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    slurm_cluster.reset()
    return slurm_cluster


@pytest.fixture
def configless_cluster(
    slurm_release: str, configless_clusters: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch
) -> Any:
    """The release's configless cluster (``configless_clusters``) for one test: no jobs, every node idle."""
    cluster = configless_clusters(slurm_release)
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    cluster.reset()
    return cluster


@pytest.fixture
def accounting_cluster(cluster: Any) -> Any:
    """``cluster`` with Slurm accounting (its own slurmdbd and MariaDB): ``sacct`` and ``sacctmgr`` answer."""
    if not cluster.accounting:
        from healthd_testkit.cluster import missing_accounting

        why = f"the test cluster has no accounting: {missing_accounting()}"
        print(f"skipping: {why}")
        pytest.skip(why)
    return cluster


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def write_config(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, host_guard: Any) -> Callable[..., Path]:
    """``write_config(body, slurm_cluster=None)``: write ``body`` as tmp_path/healthd.toml, made private.

    The config gets ``[paths] state_dir = tmp_path/state`` (a state_dir the body chose is
    kept only under the session's temporary directory) and ``[slurm] enabled = false``;
    a test of the real cluster passes its slurm.conf as ``slurm_cluster``, which must be
    a test cluster the host guard knows, and becomes ``[slurm] conf``.
    """

    def write(body: str, *, slurm_cluster: Optional[Path] = None) -> Path:
        if slurm_cluster is not None and not host_guard.is_test_cluster(slurm_cluster):
            raise ValueError(f"{slurm_cluster} is not the slurm.conf of a test cluster this session started")
        text = hostguard.private_config(body, tmp_path / "state", tmp_path_factory.getbasetemp(), slurm_cluster)
        path = tmp_path / "healthd.toml"
        path.write_text(text)
        return path

    return write


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """Run ``healthd ARGS`` in-process (its default config is the test's private one); returns (code, out, err)."""

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


@pytest.fixture
def controllerless_slurm_conf(tmp_path: Path, host_guard: Any) -> Path:
    """A slurm.conf that names no SlurmctldHost: the real scontrol stops at once with a config error.

    It stands for a machine where Slurm is not reachable, and contacts no controller, so
    the host guard lets scontrol run with it (pass it to ``write_config`` as ``slurm_cluster``).
    """
    if not any((Path(d) / "scontrol").is_file() for d in ("/usr/bin", "/usr/local/bin", "/opt/slurm/bin")):
        pytest.skip("scontrol is not installed (Debian package slurm-wlm)")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=trial\n")
    host_guard.allow_slurm_conf(conf)
    return conf


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
    """Pids of the mounts check's live probes of ``path``: the child running ``probechild.py``."""
    import psutil

    def probes(cmdline: list[str]) -> bool:
        return path in cmdline[1:] and any(a.endswith("probechild.py") for a in cmdline)

    return [p.pid for p in psutil.process_iter(["cmdline"]) if probes(p.info["cmdline"] or [])]


@pytest.fixture
def stat_probes() -> Callable[[str], list[int]]:
    return stat_probes_of


@contextlib.contextmanager
def _hangfs(dead: bool = False) -> Iterator[str]:
    """A real FUSE mount (tests/healthd_testkit/hangfs.py) whose getattr and statfs never return.

    ``dead``: its server is killed before the mount is handed over, as a FUSE client that
    crashed: the mount stays, and every request on it fails with ENOTCONN.
    """
    reason = _fuse_skip_reason()
    if reason:
        print(f"skipping the FUSE mount test: {reason}")
        pytest.skip(reason)
    mnt = tempfile.mkdtemp(prefix="healthd-dead-" if dead else "healthd-hung-")
    server = subprocess.Popen([sys.executable, str(HANGFS), mnt], start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        while not mounted(mnt):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"FUSE server did not mount {mnt} (exit {server.poll()})")
            time.sleep(0.05)
        if dead:
            # SIGKILL, not SIGTERM: libfuse unmounts on a signal it can catch.
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
            assert mounted(mnt), f"{mnt} was unmounted when its server was killed"
        yield mnt
    finally:
        # Killing the server fails every blocked request with ENOTCONN, which frees stuck probes and threads.
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        subprocess.run(["umount", "-l", mnt], check=False, capture_output=True)
        deadline = time.monotonic() + 10
        while stat_probes_of(mnt) and time.monotonic() < deadline:
            time.sleep(0.05)
        shutil.rmtree(mnt, ignore_errors=True)


@pytest.fixture
def hung_mount() -> Iterator[str]:
    """A real FUSE mount whose getattr and statfs never return."""
    with _hangfs() as mnt:
        yield mnt


@pytest.fixture
def dead_mount() -> Iterator[str]:
    """A real FUSE mount whose server has been killed: mounted still, every access fails with ENOTCONN."""
    with _hangfs(dead=True) as mnt:
        yield mnt


@pytest.fixture
def hung_mounts() -> Iterator[tuple[str, str]]:
    """Two such mounts, each served by its own FUSE server."""
    with _hangfs() as first, _hangfs() as second:
        yield first, second


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


# A real unprivileged account for the trust tests: no home, no shell, no password. An ordinary
# account's uid (1000 and up, as useradd gives without --system): a person, not a system
# account, which healthd treats as the node's own (healthd_checks.common.procs.system_uid).
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
            ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", INTRUDER], check=False, capture_output=True
        )
        entry = pwd.getpwnam(INTRUDER)
    if system_uid(entry.pw_uid):
        # An account an older test run made with --system: given an ordinary uid (it owns nothing that lasts).
        moved = subprocess.run(
            ["usermod", "--uid", str(_free_ordinary_uid()), INTRUDER], check=False, capture_output=True
        )
        assert moved.returncode == 0, f"cannot give {INTRUDER} an ordinary uid: {moved.stderr!r}"
        entry = pwd.getpwnam(INTRUDER)
    assert not system_uid(entry.pw_uid)
    return entry.pw_uid, entry.pw_gid


def _free_ordinary_uid() -> int:
    taken = {user.pw_uid for user in pwd.getpwall()}
    return next(uid for uid in itertools.count(1000) if uid not in taken)


# The fast tier (`pytest -m "not slow"`, see CONTRIBUTING.md) leaves out every test that needs a
# component only root can start, or that takes seconds: a real Slurm cluster, FUSE or tmpfs
# mounts, real users, the kernel log, Ansible runs and wheel builds. A test is slow by what it
# uses (these fixtures and markers) or by its own mark: a module of slow tests says so itself,
# `pytestmark = pytest.mark.slow`, so a renamed or new module keeps or gets its tier where it is.
SLOW_FIXTURES = frozenset(
    {
        "healthd_packages",
        "healthd_packages_rebuilt",
        "slurm_cluster",
        "release_clusters",
        "release_installs",
        "configless_clusters",
        "configless_cluster",
        "cluster",
        "accounting_cluster",
        "healthd_on",
        "hung_mount",
        "hung_mounts",
        "dead_mount",
        "tmpfs",
        "intruder",
        "user",
        "start_process",
    }
)
SLOW_MARKERS = frozenset({"slurm", "root"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        markers = {mark.name for mark in item.iter_markers()}
        if fixtures & SLOW_FIXTURES or markers & SLOW_MARKERS:
            item.add_marker(pytest.mark.slow)


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
