"""The state directory and the metrics textfile directory under the trust rule, with a real second user.

A user who can write the state directory could plant ``cycle.lock`` as a link (root
then creates or opens the file it names) or an ``acks.json`` that silences a
CRITICAL finding. Every entry point must refuse such a directory with exit 78 and
name the path, without creating, truncating or reading anything there. The configs
disable Slurm; tests/faults/test_state_faults.py shows the same against the real
test cluster. tmp_path lies under /tmp (sticky, world-writable), which the rule
accepts above a path: the directories these tests make untrusted are their own.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import stat
import subprocess
import time
from pathlib import Path
from typing import Callable

import pytest
from healthd_testkit.acl import ACCESS, DEFAULT, set_acl
from healthd_testkit.checks import only_checks
from healthd_testkit.paths import HEALTHD

import healthd.config.load
from healthd.cli.hook import hook_main
from healthd.cli.main import main
from healthd.service.metrics import HealthdCollector, new_registry, write_textfile
from healthd.store.trust import UntrustedPath, acl_reason

# A victim file the attacker points root at (never a real system path).
VICTIM_TEXT = "the victim's own content\n"


def write_config(tmp_path: Path, state: Path, extra: str = "") -> Path:
    """A config with Slurm off, a CRITICAL finding (a missing mount) and one pass a second."""
    path = tmp_path / "healthd.toml"
    path.write_text(
        f'[paths]\nstate_dir = "{state}"\n'
        '[slurm]\nenabled = false\nnode_name = "node-test"\n'
        "[daemon]\ninterval = 1\nsplay = false\n"
        '[checks.mounts]\nexpect = [{ path = "/no/such/mount" }]\n' + only_checks("mounts") + extra
    )
    return path


def _plant_link(state: Path, victim: Path, owner: tuple[int, int]) -> None:
    link = state / "cycle.lock"
    link.symlink_to(victim)
    os.lchown(link, *owner)


def _owned_by_intruder(state: Path, victim: Path, intruder: tuple[int, int]) -> None:
    state.mkdir(mode=0o755)
    os.chown(state, *intruder)
    _plant_link(state, victim, intruder)


def _world_writable(state: Path, victim: Path, intruder: tuple[int, int]) -> None:
    state.mkdir()
    state.chmod(0o777)
    _plant_link(state, victim, intruder)


def _link_left_in_a_private_dir(state: Path, victim: Path, intruder: tuple[int, int]) -> None:
    # Planted while the directory was open, which was then closed again: the link alone is refused.
    state.mkdir(mode=0o700)
    _plant_link(state, victim, (0, 0))


def _ack_of_another_user(state: Path, victim: Path, intruder: tuple[int, int]) -> None:
    state.mkdir(mode=0o700)
    acks = state / "acks.json"
    acks.write_text(json.dumps({"acks": [{"key": "mounts/MOUNT_MISSING//no/such/mount", "event": None}]}))
    os.chown(acks, *intruder)


def _acl_of_another_user(state: Path, victim: Path, intruder: tuple[int, int]) -> None:
    # root:root 0770 to the eye (ls -l shows a "+"), the group bits being the ACL's mask; nothing
    # else is planted, as any link or file of theirs would be refused on its own.
    state.mkdir(mode=0o700)
    set_acl(state, group=0, other=0, mask=7, users={intruder[0]: 7})


PLANTS: dict[str, Callable[[Path, Path, tuple[int, int]], None]] = {
    "acl-of-another-user": _acl_of_another_user,
    "owned-by-user": _owned_by_intruder,
    "world-writable": _world_writable,
    "link-in-private-dir": _link_left_in_a_private_dir,
    "ack-of-another-user": _ack_of_another_user,
}


def _hook(config: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(healthd.config.load, "DEFAULT_CONFIG_PATH", config)  # slurmd passes no arguments
    return hook_main([])


ENTRY_POINTS: dict[str, Callable[[Path, pytest.MonkeyPatch], int]] = {
    "check": lambda config, _: main(["check", "--once", "--config", str(config)]),
    "check-json": lambda config, _: main(["check", "--once", "--json", "--config", str(config)]),
    "ack": lambda config, _: main(["ack", "--all", "--config", str(config)]),
    "status": lambda config, _: main(["status", "--config", str(config)]),
    "hook": _hook,
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_every_entry_point_refuses_an_untrusted_state_dir(
    entry: str,
    plant: str,
    tmp_path: Path,
    intruder: tuple[int, int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state, victim = tmp_path / "state", tmp_path / "victim"
    PLANTS[plant](state, victim, intruder)
    before = sorted(p.name for p in state.iterdir())
    code = ENTRY_POINTS[entry](write_config(tmp_path, state), monkeypatch)
    captured = capsys.readouterr()
    assert code == 78, captured
    assert f"refusing {state}, which others could have written: " in captured.err
    assert "nothing was done" in captured.err
    assert captured.out in ("", "healthd: no result (exit 78); see the errors above\n")
    assert not victim.exists() and not victim.is_symlink()
    assert sorted(p.name for p in state.iterdir()) == before  # no lock, no last pass, nothing set aside


@pytest.mark.parametrize("plant", ["owned-by-user", "world-writable", "link-in-private-dir"])
def test_a_planted_lock_link_never_truncates_its_target(
    plant: str, tmp_path: Path, intruder: tuple[int, int], capsys: pytest.CaptureFixture[str]
) -> None:
    state, victim = tmp_path / "state", tmp_path / "victim"
    victim.write_text(VICTIM_TEXT)
    os.utime(victim, (1_000_000, 1_000_000))
    PLANTS[plant](state, victim, intruder)
    assert main(["check", "--once", "--config", str(write_config(tmp_path, state))]) == 78
    assert f"refusing {state}" in capsys.readouterr().err
    assert victim.read_text() == VICTIM_TEXT and victim.stat().st_mtime == 1_000_000
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644


@pytest.fixture
def checked(tmp_path: Path, cli: Callable[..., tuple[int, str, str]]) -> tuple[Path, str]:
    """A private state directory after one pass that found the missing mount (exit 2), and the config."""
    state = tmp_path / "state"
    config = str(write_config(tmp_path, state))
    assert cli("check", "--once", "--config", config)[0] == 2
    return state, config


def test_an_ack_another_user_could_write_does_not_silence_a_critical_finding(
    checked: tuple[Path, str], intruder: tuple[int, int], cli: Callable[..., tuple[int, str, str]]
) -> None:
    state, config = checked
    assert cli("ack", "mounts", "--config", config)[0] == 0
    # The control: an acknowledgement healthd itself stored does silence the finding.
    assert cli("check", "--once", "--config", config)[0] == 0
    os.chown(state / "acks.json", *intruder)
    code, out, err = cli("check", "--once", "--json", "--config", config)
    assert code == 78 and out == ""
    assert f"{state / 'acks.json'} belongs to uid {intruder[0]}, not root" in err
    os.chown(state / "acks.json", 0, 0)
    (state / "acks.json").chmod(0o666)  # root's file, but anyone may rewrite it
    code, out, err = cli("check", "--once", "--config", config)
    assert code == 78 and f"{state / 'acks.json'} is writable by group or others" in err


def test_an_entry_an_acl_lets_another_user_write_is_refused(
    checked: tuple[Path, str], intruder: tuple[int, int], cli: Callable[..., tuple[int, str, str]]
) -> None:
    state, config = checked
    assert cli("ack", "mounts", "--config", config)[0] == 0
    set_acl(state / "acks.json", owner=6, group=0, other=0, mask=6, users={intruder[0]: 6})
    code, out, err = cli("check", "--once", "--config", config)
    assert code == 78 and out == ""
    name = pwd.getpwuid(intruder[0]).pw_name
    assert f"{state / 'acks.json'} is writable by user {name} (uid {intruder[0]}) through its ACL" in err


def test_a_default_acl_on_the_state_dir_gives_no_one_else_write_to_what_healthd_creates(
    tmp_path: Path, intruder: tuple[int, int], cli: Callable[..., tuple[int, str, str]]
) -> None:
    # The trust rule reads only access ACLs (healthd/store/trust.py): every file healthd makes here is
    # created without group write, which caps the mask of the ACL it inherits.
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    set_acl(state, which=DEFAULT, group=0, other=0, mask=7, users={intruder[0]: 7})
    config = str(write_config(tmp_path, state))
    assert cli("check", "--once", "--config", config)[0] == 2
    assert cli("ack", "mounts", "--config", config)[0] == 0
    assert cli("check", "--once", "--config", config)[0] == 0
    created = sorted(p.name for p in state.iterdir())
    assert {"acks.json", "last-pass.json", "history.sqlite"} <= set(created)
    for name in created:
        assert acl_reason(state / name) is None, name
        assert os.getxattr(state / name, ACCESS), f"{name} did not inherit the default ACL: the test shows nothing"


def test_a_last_pass_another_user_wrote_is_not_shown_by_status(
    checked: tuple[Path, str], intruder: tuple[int, int], cli: Callable[..., tuple[int, str, str]]
) -> None:
    state, config = checked
    assert cli("status", "--config", config)[0] == 2
    os.chown(state / "last-pass.json", *intruder)
    code, out, err = cli("status", "--json", "--config", config)
    assert code == 78 and out == "" and f"{state / 'last-pass.json'} belongs to uid {intruder[0]}" in err


def test_healthd_creates_its_state_dir_private_and_owned_by_itself(
    tmp_path: Path, cli: Callable[..., tuple[int, str, str]]
) -> None:
    state = tmp_path / "var" / "lib" / "healthd"
    config = str(write_config(tmp_path, state))
    old = os.umask(0)
    try:
        code, _, err = cli("check", "--once", "--config", config)
    finally:
        os.umask(old)
    assert code == 2, err
    assert stat.S_IMODE(state.stat().st_mode) == 0o700 and state.stat().st_uid == os.geteuid()
    assert stat.S_IMODE(state.parent.stat().st_mode) == 0o755
    assert {"acks.json", "cycle.lock", "last-pass.json", "policy.json"} <= {p.name for p in state.iterdir()}
    for entry in state.iterdir():
        info = entry.lstat()
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600, entry


def test_a_state_dir_reached_through_another_users_directory_is_refused(
    tmp_path: Path, intruder: tuple[int, int], cli: Callable[..., tuple[int, str, str]]
) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    (theirs / "state").symlink_to(real)  # they can point it anywhere root may write
    os.chown(theirs, *intruder)
    code, _, err = cli("check", "--once", "--config", str(write_config(tmp_path, theirs / "state")))
    assert code == 78 and f"{theirs} belongs to uid {intruder[0]}, not root" in err
    assert list(real.iterdir()) == []


def test_a_sticky_world_writable_state_dir_is_refused(tmp_path: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o1777)  # like /tmp: others cannot replace our files, but can take the names first
    code, _, err = cli("check", "--once", "--config", str(write_config(tmp_path, state)))
    assert code == 78 and f"{state} is writable by group or others (mode drwxrwxrwt)" in err


# -- the daemon -------------------------------------------------------------------------------------


def _start(config: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen([str(HEALTHD), "run", "--config", str(config)], stdout=sink, stderr=sink)


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_the_daemon_refuses_to_start_on_an_untrusted_state_dir(tmp_path: Path, intruder: tuple[int, int]) -> None:
    state, victim = tmp_path / "state", tmp_path / "victim"
    _owned_by_intruder(state, victim, intruder)
    log = tmp_path / "daemon.log"
    daemon = _start(write_config(tmp_path, state), log)
    assert daemon.wait(timeout=60) == 78
    text = log.read_text()
    assert f"refusing {state}, which others could have written: {state} belongs to uid {intruder[0]}" in text
    assert "not starting" in text
    assert not victim.exists() and sorted(p.name for p in state.iterdir()) == ["cycle.lock"]


def test_the_daemon_stops_with_78_when_its_state_dir_becomes_untrusted(
    tmp_path: Path, intruder: tuple[int, int]
) -> None:
    state, victim = tmp_path / "state", tmp_path / "victim"
    log = tmp_path / "daemon.log"
    daemon = _start(write_config(tmp_path, state), log)
    try:
        _wait(lambda: (state / "last-pass.json").exists(), "the first pass")
        state.chmod(0o777)
        (state / "cycle.lock").unlink()
        _plant_link(state, victim, intruder)
        assert daemon.wait(timeout=60) == 78
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    text = log.read_text()
    assert f"refusing {state}, which others could have written: {state} is writable by group or others" in text
    assert "stopping" in text and not victim.exists()


@pytest.mark.slow
def test_a_reload_onto_an_untrusted_state_dir_keeps_the_old_one(tmp_path: Path) -> None:
    state, other = tmp_path / "state", tmp_path / "other"
    other.mkdir()
    other.chmod(0o777)
    log = tmp_path / "daemon.log"
    daemon = _start(write_config(tmp_path, state), log)
    try:
        _wait(lambda: (state / "last-pass.json").exists(), "the first pass")
        write_config(tmp_path, other)
        daemon.send_signal(signal.SIGHUP)
        _wait(lambda: "reload: new configuration rejected" in log.read_text(), "the reload to be refused")
        last = (state / "last-pass.json").stat().st_mtime_ns
        _wait(lambda: (state / "last-pass.json").stat().st_mtime_ns != last, "a pass in the old state dir")
        assert daemon.poll() is None and list(other.iterdir()) == []
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    assert f"refusing {other}, which others could have written" in log.read_text()


# -- the metrics textfile ---------------------------------------------------------------------------


def test_the_textfile_is_never_written_into_a_directory_others_can_write(
    tmp_path: Path, intruder: tuple[int, int]
) -> None:
    registry = new_registry(HealthdCollector())
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UntrustedPath, match=f"{shared} is writable by group or others"):
        write_textfile(shared / "healthd.prom", registry)
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, *intruder)
    with pytest.raises(UntrustedPath, match=f"{theirs} belongs to uid {intruder[0]}"):
        write_textfile(theirs / "healthd.prom", registry)
    assert list(shared.iterdir()) == [] and list(theirs.iterdir()) == []


def test_a_link_at_the_textfile_name_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text(VICTIM_TEXT)
    directory = tmp_path / "textfile"
    directory.mkdir(mode=0o755)
    textfile = directory / "healthd.prom"
    textfile.symlink_to(victim)
    write_textfile(textfile, new_registry(HealthdCollector()))
    assert victim.read_text() == VICTIM_TEXT
    assert not textfile.is_symlink() and "healthd_build_info" in textfile.read_text()


def test_the_daemon_refuses_to_start_with_an_untrusted_textfile_dir(tmp_path: Path, intruder: tuple[int, int]) -> None:
    state, theirs = tmp_path / "state", tmp_path / "node-exporter"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, *intruder)
    log = tmp_path / "daemon.log"
    config = write_config(tmp_path, state, f'[metrics]\ntextfile = "{theirs / "healthd.prom"}"\n')
    daemon = _start(config, log)
    assert daemon.wait(timeout=60) == 78
    assert f"refusing {theirs}, which others could have written: {theirs} belongs to uid {intruder[0]}" in (
        log.read_text()
    )
    assert not (state / "last-pass.json").exists() and list(theirs.iterdir()) == []


@pytest.fixture(scope="session")
def prometheus_user() -> tuple[int, int]:
    """(uid, gid) of ``prometheus``, node_exporter's account on Debian (its prometheus packages make it)."""
    if os.geteuid() != 0:
        pytest.skip("handing files to the prometheus account needs root")
    try:
        entry = pwd.getpwnam("prometheus")
    except KeyError:
        # As Debian's postinst does (adduser --system); exit 9 is another run creating it first.
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "prometheus"],
            check=False,
            capture_output=True,
        )
        entry = pwd.getpwnam("prometheus")
    return entry.pw_uid, entry.pw_gid


def _debian_textfile_dir(root: Path, owner: tuple[int, int]) -> Path:
    """/var/lib/prometheus/node-exporter as Debian's prometheus-node-exporter leaves it: both the exporter's, 0755."""
    directory = root / "var" / "lib" / "prometheus" / "node-exporter"
    directory.mkdir(parents=True)
    for made in (directory.parent, directory):
        made.chmod(0o755)
        os.chown(made, *owner)
    return directory


def test_the_documented_textfile_path_works_on_debians_node_exporter_layout(
    tmp_path: Path, prometheus_user: tuple[int, int], capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _debian_textfile_dir(tmp_path, prometheus_user)
    textfile = directory / "healthd.prom"
    config = write_config(tmp_path, tmp_path / "state", f'[metrics]\ntextfile = "{textfile}"\n')
    assert main(["config", "validate", "--config", str(config)]) == 0
    assert ": valid;" in capsys.readouterr().out
    log = tmp_path / "daemon.log"
    daemon = _start(config, log)
    try:
        _wait(lambda: textfile.exists() or daemon.poll() is not None, "the textfile")
        assert daemon.poll() is None, log.read_text()
        assert "healthd_pass_state" in textfile.read_text()
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    info = textfile.stat()
    # root's file, readable by node_exporter's account; the directory stays the exporter's.
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o644)
    assert directory.stat().st_uid == prometheus_user[0]


def test_config_validate_refuses_the_textfile_dir_run_refuses_with_the_same_message(
    tmp_path: Path, intruder: tuple[int, int], prometheus_user: tuple[int, int], capsys: pytest.CaptureFixture[str]
) -> None:
    """`config validate` said `valid` for a directory `run` then refused with 78: one check serves both now."""
    theirs = _debian_textfile_dir(tmp_path, intruder)  # another account than node_exporter's
    config = write_config(tmp_path, tmp_path / "state", f'[metrics]\ntextfile = "{theirs / "healthd.prom"}"\n')
    assert main(["config", "validate", "--config", str(config)]) == 78
    refusal = capsys.readouterr().err.strip()
    owner = f"{theirs.parent} belongs to uid {intruder[0]}, not root or uid {prometheus_user[0]}"
    why = f"refusing {theirs}, which others could have written: {owner}"
    assert refusal == f"healthd: {why}; nothing was done"
    log = tmp_path / "daemon.log"
    daemon = _start(config, log)
    assert daemon.wait(timeout=60) == 78
    assert f"{why}; not starting" in log.read_text()


def test_a_link_of_node_exporters_account_is_refused_as_the_textfile_dir(
    tmp_path: Path, prometheus_user: tuple[int, int], capsys: pytest.CaptureFixture[str]
) -> None:
    """The exporter's directories are trusted for the write, its links are not: one could aim root at /etc."""
    directory = _debian_textfile_dir(tmp_path, prometheus_user)
    mine = tmp_path / "root-only"
    mine.mkdir(mode=0o755)
    link = directory / "collector"
    link.symlink_to(mine)
    os.lchown(link, *prometheus_user)
    config = write_config(tmp_path, tmp_path / "state", f'[metrics]\ntextfile = "{link / "healthd.prom"}"\n')
    assert main(["config", "validate", "--config", str(config)]) == 78
    assert f"{link} belongs to uid {prometheus_user[0]}" in capsys.readouterr().err
    with pytest.raises(UntrustedPath):
        write_textfile(link / "healthd.prom", new_registry(HealthdCollector()), "prometheus")
    assert list(mine.iterdir()) == []


def test_an_untrusted_entry_found_mid_pass_refuses_with_78(
    write_config: Callable[..., Path], cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    """Something planted in the state dir after the lock is taken is a refusal, not a failed pass."""
    config = write_config("")
    assert cli("check", "--once", "--only", "mounts", "--config", str(config))[0] == 0
    policy = tmp_path / "state" / "policy.json"
    policy.unlink()
    policy.mkdir()
    code, _, err = cli("check", "--once", "--only", "mounts", "--config", str(config))
    assert code == 78, err
    assert str(policy) in err
