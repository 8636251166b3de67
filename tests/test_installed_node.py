"""The README's two commands, in its order, on one machine: its install one-liner, then the tests.

The README promises that the suite passes on a node where healthd is installed and has run
(it may be a production node). `tests/walk_readme.sh` takes both commands out of README.md and
runs them as written; CI runs it on its disposable machine (.ci/run). Here it runs in a
throwaway copy-on-write root of this machine (healthd_testkit.namespace), so the install's
/opt/healthd and /var/lib/healthd never reach a developer's machine, and the second command
is narrowed with HEALTHD_TESTS (tests/run.sh) to the tests that meet an installed healthd: the whole suite
in there would take as long again as the suite itself.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from healthd_testkit.namespace import HOST_INSTALL, in_throwaway_root
from healthd_testkit.paths import REPO

pytestmark = [pytest.mark.slow, pytest.mark.root]

# Tests that run healthd's commands against logs, configs and state directories of their own,
# and the host guard's, which a healthd writing its state beside them must not fail.
SUITES = (
    "tests/checks/xid/test_scan_log.py",
    "tests/store/test_statenode.py",
    "tests/service/test_status.py",
    "tests/test_hostguard.py",
)


def _checkout(into: Path) -> Path:
    """A copy of this checkout's files (tracked, and new ones git does not ignore), without its .venv.

    The walk builds its own .venv in it, as on a fresh clone, and never the developer's.
    """
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    archive = subprocess.run(["tar", "-C", str(REPO), "--null", "-T", "-", "-c"], input=listed, capture_output=True)
    archive.check_returncode()
    into.mkdir(parents=True)
    subprocess.run(["tar", "-C", str(into), "-x"], input=archive.stdout, check=True)
    return into


def test_the_readme_walks_in_order_on_a_fresh_root(tmp_path: Path) -> None:
    tree = _checkout(tmp_path / "healthd")
    # /tmp is a directory of this test's, bound in: the host guard's own test watches its stand-ins
    # there with fanotify, which needs file handles, and the throwaway root's overlay has none.
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tmp").chmod(0o1777)
    script = f"""cd /srv/healthd
HEALTHD_TESTS={shlex.quote(" ".join(SUITES))} bash tests/walk_readme.sh > /tmp/walk.log 2>&1; echo WALK_RC=$?
grep '^+ ' /tmp/walk.log
tail -n 25 /tmp/walk.log
echo INSTALLED=$(test -x /opt/healthd/bin/healthd && echo yes)
echo STATE=$(ls /var/lib/healthd | tr '\\n' ' ')
"""
    binds = {tree: "/srv/healthd", tmp_path / "tmp": "/tmp"}
    done = in_throwaway_root(script, tmp_path / "root", binds, timeout=1500)
    report = dict(line.split("=", 1) for line in done.stdout.split("\n") if re.match(r"^[A-Z_]+=", line))
    readme = (REPO / "README.md").read_text()
    commands = [line[2:] for line in done.stdout.split("\n") if line.startswith("+ ")]
    assert len(commands) == 2 and all(f"\n{c}\n" in readme for c in commands), done.stdout[-4000:]
    assert "pip install ." in commands[0] and commands[1] == "bash tests/run.sh"
    assert report.get("WALK_RC") == "0", done.stdout[-4000:] + done.stderr[-2000:]
    assert report["INSTALLED"] == "yes" and "last-pass.json" in report["STATE"], report
    assert re.search(r"\d+ passed", done.stdout) and " error" not in done.stdout


def test_the_throwaway_root_is_a_machine_without_healthd(tmp_path: Path) -> None:
    """Inside a root where healthd is installed and has state, a throwaway root hides all of it.

    The outer root stands in for an operator's node, so that this machine needs no healthd of
    its own; the inner one is what a package's test installs into.
    """
    hidden = " ".join(map(str, HOST_INSTALL))
    inner = f"for p in {hidden}; do test -e $p && echo SEEN=$p; done; echo INNER=done"
    code = (
        f"import sys; sys.path.insert(0, {str(REPO / 'tests')!r}); from pathlib import Path;"
        "from healthd_testkit.namespace import in_throwaway_root;"
        f"done = in_throwaway_root({inner!r}, Path('/tmp/inner')); print(done.stdout, done.stderr)"
    )
    script = f"""set -e
for p in {hidden}; do mkdir -p $p/bin && touch $p/bin/healthd; done
{sys.executable} -c {shlex.quote(code)}
for p in {hidden}; do test -e $p/bin/healthd && echo KEPT=$p; done
"""
    done = in_throwaway_root(script, tmp_path / "root")
    assert done.returncode == 0 and "INNER=done" in done.stdout, done.stdout + done.stderr
    assert "SEEN=" not in done.stdout, done.stdout
    assert done.stdout.count("KEPT=") == len(HOST_INSTALL), "the machine's own healthd is left as it was"
