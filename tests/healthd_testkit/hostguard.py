"""The host guard: a pytest plugin that fails any test that touches this machine's healthd or its Slurm.

The suite runs as root on machines that may be Slurm nodes, so a test that forgets
its own state directory or its ``[slurm] enabled = false`` would write
/var/lib/healthd and drain the host (the bug this guard exists for). Four layers:

- Blocking, in the test process: an audit hook (PEP 578) refuses, with a
  PermissionError, any file access under a guarded path (open, create, delete,
  rename, chmod, list) and any start of a Slurm client command (scontrol, sinfo, ...)
  whose ``SLURM_CONF`` is not a test cluster registered with ``allow_slurm_conf``,
  unless the command is a stand-in the test wrote under the temporary directory
  (healthd's own commands start through ``healthd.slurm.command``'s shell, whose arguments
  name the command and where it is looked for).
- Blocking, in every child process: for the whole session ``SLURM_CONF`` points at
  a tripwire slurm.conf the guard wrote. Slurm's client commands respect
  ``SLURM_CONF`` whenever it is set (no fallback to /etc/slurm or DNS), and this
  file has no ClusterName, so a stray scontrol fails before it contacts anything.
  A path that does not exist would not do: scontrol then retries for 60 seconds.
- Detecting, in every child process: inotify watches the tripwire, so any process
  that reads it (a ``healthd check`` subprocess without the test cluster's conf, a
  shell running scontrol) is reported against the test that was running.
- Detecting, for any process: the guarded trees are snapshotted (existence, type,
  mode, owner, size, mtime, ctime of every entry) before and after each test; a
  difference fails that test, one outside any test fails the session.

A failing test gets an error at teardown that names what it touched. A snapshot
cannot tell who wrote, and on a node where healthd is installed its daemon, or slurmd's
``healthd-hook``, writes /var/lib/healthd while the suite runs. So, where fanotify(7) can
watch (root), the guard also notes who wrote each changed path (``healthd_testkit.writers``):
a change that only processes outside this run made (not descendants of the test process,
without the session's mark in their environment) is another program's, reported as a
warning, not a failure. Any other change is charged to the suite whenever a process of this
run could have made it. Only when the test process started no program and had no child
process alive over the whole interval (its own accesses being blocked) is it known to come
from another program (another test run), and reported as a warning too.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import shutil
import stat
import struct
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence, TypeVar

import pytest

from healthd.config.defaults import DEFAULT_CONFIG_PATH, DEFAULT_STATE_DIR, toml_module
from healthd.slurm.command import SHELL, SHELL_NAME
from healthd_testkit.writers import Writer, Writers

# Where an installed healthd keeps its config and its state.
HOST_PATHS = (DEFAULT_CONFIG_PATH.parent, DEFAULT_STATE_DIR)

# Slurm's client commands (slurm-wlm's /usr/bin): each reads slurm.conf and talks to slurmctld.
SLURM_CLIENTS = frozenset(
    {
        "sacct",
        "sacctmgr",
        "salloc",
        "sattach",
        "sbatch",
        "sbcast",
        "scancel",
        "scontrol",
        "scrontab",
        "sdiag",
        "sinfo",
        "sprio",
        "squeue",
        "sreport",
        "srun",
        "sshare",
        "sstat",
        "strigger",
    }
)

TRIPWIRE_TEXT = """\
# Written by the healthd test suite's host guard. While the suite runs, SLURM_CONF points here,
# so that a Slurm command a test did not point at its own test cluster reaches no real
# slurmctld. It is deliberately not a valid slurm.conf (no ClusterName). Any process that
# reads it is reported as a failure of the test that was running.
"""

# Audit events (https://docs.python.org/3/library/audit_events.html) that name a file, and
# the positions of their path arguments. "open" covers builtins.open and os.open.
_PATH_EVENTS: dict[str, tuple[int, ...]] = {
    "open": (0,),
    "os.chdir": (0,),
    "os.chflags": (0,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.link": (0, 1),
    "os.listdir": (0,),
    "os.mkdir": (0,),
    "os.remove": (0,),
    "os.removexattr": (0,),
    "os.rename": (0, 1),
    "os.rmdir": (0,),
    "os.scandir": (0,),
    "os.setxattr": (0,),
    "os.symlink": (1,),
    "os.truncate": (0,),
    "os.utime": (0,),
    "shutil.rmtree": (0,),
}
# Audit events that start a program: event -> (index of the program, index of the environment).
_EXEC_EVENTS: dict[str, tuple[int, int]] = {
    "subprocess.Popen": (0, 3),
    "os.exec": (0, 2),
    "os.posix_spawn": (0, 2),
    "os.spawn": (1, 3),
}

# Audit events that create a process.
_SPAWN_EVENTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system"})

# inotify(7)
_IN_ACCESS = 0x00000001
_IN_OPEN = 0x00000020
_EVENT_HEADER = struct.Struct("iIII")

# The environment variable that marks the session's processes; its value names the session.
GUARD_MARK = "HEALTHD_HOST_GUARD"
T = TypeVar("T")

_ACTIVE: Optional[HostGuard] = None
_HOOK_INSTALLED = False
_LOCAL = threading.local()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # Called for every audit event of the process (imports, compiles...): cheapest tests first.
    guard = _ACTIVE
    if guard is None:
        return
    if event in _PATH_EVENTS:
        if not getattr(_LOCAL, "bypass", False):  # the guard's own snapshot
            guard._check_paths(event, args)
        return
    if event in _SPAWN_EVENTS:
        guard._spawned = True
    if event in _EXEC_EVENTS:
        guard._check_exec(event, args)


# Directory -> (device, inode, its realpath). A full realpath costs an lstat per path
# component on every open of the test process; most of a check test's time went there.
_RESOLVED_DIRS: dict[str, tuple[int, int, str]] = {}


def _resolved(path: str) -> str:
    """``os.path.realpath(path)`` for an absolute, normalised path, its directory's part cached.

    The cached resolution holds while the directory still names the same inode (one
    ``stat``, which follows every symbolic link on the way): a directory or any
    component above it replaced by a link elsewhere is resolved afresh. A final
    component that is itself a link is always resolved in full.
    """
    head, tail = os.path.split(path)
    try:
        found = os.stat(head)
    except OSError:
        return os.path.realpath(path)
    cached = _RESOLVED_DIRS.get(head)
    if cached is None or cached[:2] != (found.st_dev, found.st_ino):
        cached = (found.st_dev, found.st_ino, os.path.realpath(head))
        _RESOLVED_DIRS[head] = cached
    resolved = os.path.join(cached[2], tail)
    return os.path.realpath(resolved) if os.path.islink(resolved) else resolved


class _Tripwire:
    """A slurm.conf that no Slurm command accepts, and an inotify watch on who opens it."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "slurm.conf"
        self.path.write_text(TRIPWIRE_TEXT, encoding="utf-8")
        libc = ctypes.CDLL(None, use_errno=True)
        self._fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        if libc.inotify_add_watch(self._fd, os.fsencode(self.path), _IN_OPEN | _IN_ACCESS) < 0:
            os.close(self._fd)
            raise OSError(ctypes.get_errno(), f"inotify_add_watch({self.path}) failed")
        # Prove the watch reports an open here, before trusting its silence.
        self.path.read_text(encoding="utf-8")
        if not self.reads():
            self.close()
            raise OSError(errno.ENOTSUP, f"inotify reported no open of {self.path}")

    def reads(self) -> int:
        """How many opens or reads of the tripwire happened since the last call."""
        count = 0
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return count
            offset = 0
            while offset + _EVENT_HEADER.size <= len(data):
                _wd, mask, _cookie, length = _EVENT_HEADER.unpack_from(data, offset)
                count += bool(mask & (_IN_OPEN | _IN_ACCESS))
                offset += _EVENT_HEADER.size + length

    def close(self) -> None:
        os.close(self._fd)


Snapshot = dict[str, tuple[int, ...]]


def snapshot(roots: Sequence[Path]) -> Snapshot:
    """Every entry under ``roots`` (the roots included) -> its type, mode, inode, owner, size, mtime, ctime."""
    entries: Snapshot = {}
    _LOCAL.bypass = True
    try:
        for root in roots:
            _walk(str(root), entries)
    finally:
        _LOCAL.bypass = False
    return entries


def _walk(path: str, entries: Snapshot) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        entries[path] = (-1, exc.errno or 0)
        return
    entries[path] = (st.st_mode, st.st_ino, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if stat.S_ISDIR(st.st_mode):
        try:
            names = sorted(os.listdir(path))
        except OSError:  # not root: the directory's own mtime and ctime still show entries added or removed
            return
        for name in names:
            _walk(os.path.join(path, name), entries)


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    """What differs between two snapshots: "PATH was created|deleted|changed", one per entry."""
    lines = []
    for path in sorted(before.keys() | after.keys()):
        old, new = before.get(path), after.get(path)
        if old != new:
            lines.append(f"{path} was {'created' if old is None else 'deleted' if new is None else 'changed'}")
    return lines


class HostGuard:
    """The guard for one pytest session; ``guarded`` is injectable so the guard's own tests stay in tmp."""

    def __init__(self, guarded: Sequence[Path] = HOST_PATHS) -> None:
        self.guarded = [Path(os.path.abspath(p)) for p in guarded]
        self._prefixes = sorted({str(p) for p in self.guarded} | {os.path.realpath(p) for p in self.guarded})
        self._clusters: set[str] = set()
        self._stand_in_roots = [os.path.realpath(tempfile.gettempdir())]
        self._current: Optional[str] = None
        self._problems: list[tuple[Optional[str], str]] = []
        self._last: Snapshot = {}
        self._tripwire: Optional[_Tripwire] = None
        self._directory: Optional[Path] = None
        self._saved_conf: Optional[str] = None
        # Whether a process of this run could have written since the last look.
        self._spawned = False
        self._children = False
        self.foreign: list[str] = []
        self._writers: Optional[Writers] = None

    # -- what tests call -----------------------------------------------------------

    def allow_slurm_conf(self, conf: Path) -> None:
        """Declare ``conf`` the slurm.conf of a test cluster this session started: commands using it may run."""
        self._clusters.update({os.path.abspath(conf), os.path.realpath(conf)})

    def is_test_cluster(self, conf: Optional[str | Path]) -> bool:
        return conf is not None and os.path.realpath(conf) in self._clusters

    # -- session and tests ---------------------------------------------------------

    def start(self) -> None:
        global _ACTIVE, _HOOK_INSTALLED
        self._directory = Path(tempfile.mkdtemp(prefix="healthd-host-guard-"))
        try:
            self._tripwire = _Tripwire(self._directory)
        except OSError as exc:
            shutil.rmtree(self._directory)
            raise pytest.UsageError(f"host guard: cannot watch its Slurm tripwire: {exc}") from None
        self._saved_conf = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = str(self._tripwire.path)
        # Every process the session starts inherits this: the writers' test knows the session's own by it.
        os.environ[GUARD_MARK] = str(self._directory)
        self._writers = _bypassed(_watch_writers, self.guarded, f"{GUARD_MARK}={self._directory}")
        self._last = snapshot(self.guarded)
        if not _HOOK_INSTALLED:  # an audit hook cannot be removed: one per process, idle when no guard is active
            sys.addaudithook(_audit)
            _HOOK_INSTALLED = True
        _ACTIVE = self

    def begin(self, nodeid: str) -> None:
        self._settle(None)
        self._current = nodeid

    def end(self, nodeid: str) -> list[str]:
        """Everything the test ``nodeid`` touched (its fixtures' setup and teardown included)."""
        self._settle(nodeid)
        self._current = None
        mine = [text for owner, text in self._problems if owner == nodeid]
        self._problems = [(owner, text) for owner, text in self._problems if owner != nodeid]
        return list(dict.fromkeys(mine))

    def stop(self) -> list[str]:
        """Stop guarding; what was touched outside any test (collection, session start and end)."""
        global _ACTIVE
        self._settle(None)
        _ACTIVE = None
        if self._saved_conf is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = self._saved_conf
        os.environ.pop(GUARD_MARK, None)
        if self._writers is not None:
            self._writers.close()
        if self._tripwire is not None:
            self._tripwire.close()
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
        left = [text for _owner, text in self._problems]
        self._problems = []
        return list(dict.fromkeys(left))

    def describe(self, problems: Sequence[str], when: str) -> str:
        """The failure text: what may not be touched, then one line per thing that was."""
        guarded = ", ".join(map(str, self.guarded))
        lines = [f"host guard: {when}, {guarded} or a Slurm that is not a test cluster was touched:"]
        return "\n".join([*lines, *(f"  - {p}" for p in problems)])

    def _settle(self, owner: Optional[str]) -> None:
        """Charge what happened since the last look (tree changes, tripwire reads) to ``owner``."""
        now = snapshot(self.guarded)
        ours = self._spawned or self._children
        self._spawned = False
        if ours:
            import psutil

            self._children = bool(psutil.Process().children(recursive=True))
        written: dict[str, set[Writer]] = {}
        if self._writers is not None:
            written = self._writers.take()
            _bypassed(self._writers.mark)  # directories created since
        for line in changes(self._last, now):
            writers = written.get(line.rsplit(" was ", 1)[0], set())
            if writers == {Writer.OTHER}:
                self.foreign.append(f"{line} while {owner or 'no test'} ran, by a process outside this run")
            elif ours:
                self._problems.append((owner, f"{line} (by a process of this run, or by another program)"))
            else:
                self.foreign.append(f"{line} while {owner or 'no test'} ran, which started no process")
        self._last = now
        reads = self._tripwire.reads() if self._tripwire is not None else 0
        if reads:
            self._problems.append(
                (
                    owner,
                    f"a process read the guard's tripwire slurm.conf ({reads} time(s)): a Slurm command ran"
                    " without SLURM_CONF pointing at a test cluster",
                )
            )

    # -- the audit hook --------------------------------------------------------------

    def _guarded(self, path: str) -> bool:
        return any(path == prefix or path.startswith(prefix + "/") for prefix in self._prefixes)

    def _refuse(self, what: str) -> None:
        self._problems.append((self._current, f"{what} (blocked)"))
        raise PermissionError(errno.EPERM, f"host guard: {what}: tests must not touch the host")

    def _check_paths(self, event: str, args: tuple[Any, ...]) -> None:
        for index in _PATH_EVENTS[event]:
            raw = args[index] if index < len(args) else None
            if raw is None or isinstance(raw, int):
                continue
            # A path relative to a dir_fd is read as relative to the working directory: the
            # dir_fd's own open was checked when it was made.
            absolute = os.path.abspath(os.fsdecode(raw))
            if self._guarded(absolute) or self._guarded(_resolved(absolute)):
                self._refuse(f"{event} {absolute}")

    def _check_exec(self, event: str, args: tuple[Any, ...]) -> None:
        program_index, env_index = _EXEC_EVENTS[event]
        program = args[program_index] if program_index < len(args) else None
        if program is None:
            return
        env = args[env_index] if env_index < len(args) else None
        conf = _env_value(env, "SLURM_CONF") if env is not None else os.environ.get("SLURM_CONF")
        launched = _launched(event, args)
        if launched is not None:
            self._check_launched(*launched, conf)
            return
        name = os.path.basename(os.fsdecode(program))
        if name not in SLURM_CLIENTS:
            return
        if self.is_test_cluster(conf):
            return
        where = shutil.which(os.fsdecode(program), path=_env_value(env, "PATH") if env is not None else None)
        resolved = os.path.realpath(where) if where else ""
        if any(resolved.startswith(root + "/") for root in self._stand_in_roots):
            return  # a stand-in the test wrote under the temporary directory, not Slurm
        self._refuse_slurm(os.fsdecode(program), conf)

    def _check_launched(self, name: str, dirs: list[str], conf: Optional[str]) -> None:
        """A Slurm command started through ``healthd.slurm.command``'s shell, which looks for ``name`` in ``dirs``.

        Decided on the paths' text first: a test may put them on a hung mount, where a
        stat would hang the test process itself.
        """
        if name not in SLURM_CLIENTS or (conf is not None and os.path.abspath(conf) in self._clusters):
            return
        if all(any(os.path.abspath(d).startswith(root + "/") for root in self._stand_in_roots) for d in dirs):
            return  # stand-ins the test wrote under the temporary directory, not Slurm
        if self.is_test_cluster(conf):
            return
        found = [os.path.join(d, name) for d in dirs if os.path.isfile(os.path.join(d, name))]
        if found:  # else the shell finds no command to run, and says so
            self._refuse_slurm(found[0], conf)

    def _refuse_slurm(self, program: str, conf: Optional[str]) -> None:
        self._refuse(
            f"ran {program} with SLURM_CONF={conf}, which is not a test cluster"
            " (a test cluster's fixture calls host_guard.allow_slurm_conf(conf))"
        )


def _watch_writers(guarded: Sequence[Path], mark: str) -> Optional[Writers]:
    try:
        return Writers(guarded, mark)
    except OSError:  # not root, or no fanotify: who wrote is judged from the processes started alone
        return None


def _bypassed(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` with the audit hook's path checks off in this thread: the guard's own look."""
    _LOCAL.bypass = True
    try:
        return function(*args)
    finally:
        _LOCAL.bypass = False


def _launched(event: str, args: tuple[Any, ...]) -> Optional[tuple[str, list[str]]]:
    """The command's name and where it is looked for, when ``event`` starts ``healthd.slurm.command``'s shell."""
    if event != "subprocess.Popen" or len(args) < 2 or os.fsdecode(args[0]) != SHELL:
        return None
    argv = [os.fsdecode(a) for a in args[1]]
    # [SHELL, "-c", script, SHELL_NAME, name, conf, count, *dirs, *arguments]
    if len(argv) < 7 or argv[3] != SHELL_NAME or not argv[6].isdigit():
        return None
    return argv[4], argv[7 : 7 + int(argv[6])]


def _env_value(env: Any, key: str) -> Optional[str]:
    for name, value in dict(env).items():
        if os.fsdecode(name) == key:
            return os.fsdecode(value)
    return None


class HostGuardPlugin:
    """Wires a ``HostGuard`` into pytest: started at session start, checked around each test."""

    def __init__(self, guard: HostGuard) -> None:
        self.guard = guard

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.guard.start()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.guard.begin(item.nodeid)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
        outcome = yield
        if call.when != "teardown":
            return
        problems = self.guard.end(item.nodeid)
        if problems:
            report = outcome.get_result()
            report.outcome = "failed"
            report.longrepr = self.guard.describe(problems, "while this test ran")

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        problems = self.guard.stop()
        lines: list[tuple[str, bool]] = []
        if self.guard.foreign:
            lines.append(("host guard: warning: another program on this machine changed the guarded paths:", False))
            lines.extend((f"  - {line}", False) for line in self.guard.foreign)
        if problems:
            lines.extend((line, True) for line in self.guard.describe(problems, "outside any test").splitlines())
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        for line, failed in lines:
            if reporter is not None:
                reporter.write_line(line, red=failed, yellow=not failed)
            else:
                print(line)


def _inside(path: str, root: Path) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return os.path.isabs(path) and real.startswith(base + "/")


def _with_key(text: str, table: str, line: str) -> str:
    """``text`` with ``line`` added to ``[table]``: under its header, or in a new table at the end."""
    header = re.search(rf"^[ \t]*\[[ \t]*{table}[ \t]*\][ \t]*(?:#.*)?$", text, re.MULTILINE)
    if header is None:
        return f"{text}\n[{table}]\n{line}\n"
    return f"{text[: header.end()]}\n{line}{text[header.end() :]}"


def private_config(body: str, state_dir: Path, tmp_root: Path, slurm_conf: Optional[Path] = None) -> str:
    """``body`` made unable to reach the host: a private ``[paths] state_dir``, and Slurm off or on a test cluster.

    A state_dir the body chose is kept if it lies under ``tmp_root``; any other is an
    error, as is a ``[slurm] enabled`` other than false without ``slurm_conf`` (the test cluster's
    slurm.conf, which becomes ``[slurm] conf``) or a ``[slurm] bin_dir`` under ``tmp_root``
    (a stand-in scontrol the test wrote). A body that is not valid TOML, or whose
    ``[paths]`` or ``[slurm]`` is not a table, is returned as it is: healthd refuses to
    load it, so it can act on nothing.
    """
    tomllib = toml_module()
    try:
        document = tomllib.loads(body)
    except tomllib.TOMLDecodeError:
        return body
    paths, slurm = document.get("paths", {}), document.get("slurm", {})
    if not isinstance(paths, dict) or not isinstance(slurm, dict):
        return body
    text = body
    chosen = paths.get("state_dir")
    if chosen is None:
        text = _with_key(text, "paths", f"state_dir = {json.dumps(str(state_dir))}")
    elif isinstance(chosen, str) and not _inside(chosen, tmp_root):
        raise ValueError(f"[paths].state_dir = {chosen!r} is not under the test session's directory {tmp_root}")
    # A scontrol the test wrote under the session's directory is a stand-in: it reaches no Slurm.
    stand_in = isinstance(slurm.get("bin_dir"), str) and _inside(slurm["bin_dir"], tmp_root)
    if stand_in:
        pass
    elif slurm_conf is None:
        if "enabled" in slurm and slurm["enabled"] is not False:
            raise ValueError("[slurm].enabled other than false needs a test cluster: pass slurm_cluster=cluster.conf")
        if "enabled" not in slurm:
            text = _with_key(text, "slurm", "enabled = false")
    elif "conf" not in slurm:
        text = _with_key(text, "slurm", f"conf = {json.dumps(str(slurm_conf))}")
    elif slurm["conf"] != str(slurm_conf):
        raise ValueError(f"[slurm].conf = {slurm['conf']!r} is not the test cluster's {slurm_conf}")
    try:
        result = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"cannot add private settings ({exc}): write [paths] and [slurm] as tables") from None
    final_state, final_slurm = result["paths"].get("state_dir"), result["slurm"]
    if final_state not in (chosen, str(state_dir)) or not (
        stand_in or final_slurm.get("enabled") is False or final_slurm.get("conf") == str(slurm_conf)
    ):
        raise ValueError(f"could not make this config private; write [paths] and [slurm] as tables:\n{text}")
    return text
