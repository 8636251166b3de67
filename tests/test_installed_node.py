"""The README's two commands, in its order, on one machine: its install one-liner, then the tests.

The README promises that the suite passes on a node where healthd is installed and has run
(it may be a production node). Here the install runs for real, as the README writes it, in
a throwaway copy-on-write root of this machine (healthd_testkit.namespace), where it leaves
/opt/healthd and, through its first `healthd check --once`, /var/lib/healthd. The tests that
read logs, configs and state directories then run in that same root: none of them may touch
what the installed healthd keeps.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from healthd_testkit.namespace import in_throwaway_root
from healthd_testkit.paths import REPO

pytestmark = [pytest.mark.slow, pytest.mark.root]

# Tests that run healthd's commands against logs, configs and state directories of their own.
SUITES = ("tests/checks/xid/test_scan_log.py", "tests/core/test_statenode.py", "tests/service/test_status.py")


def _install_line() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Install and run once", 1)[1]
    (line,) = re.findall(r"```sh\n(.+?)\n```", section, re.S)[:1]
    assert "pip install ." in line and "healthd check --once" in line
    return line


def test_the_suite_passes_after_the_readmes_install_ran(tmp_path: Path) -> None:
    pytest_bin = Path(sys.executable).with_name("pytest")
    script = f"""set -e
cd {REPO}
( {_install_line()} ) > /tmp/install.log 2>&1 || true
echo INSTALLED=$(test -x /opt/healthd/bin/healthd && echo yes)
echo STATE=$(test -d /var/lib/healthd && ls /var/lib/healthd | tr '\\n' ' ')
echo STATE_BEFORE=$(ls -la --time-style=+%s.%N /var/lib/healthd | md5sum)
set +e
HEALTHD_NO_SKIPS=1 {pytest_bin} -q -p no:cacheprovider -m "not slow" {" ".join(SUITES)} > /tmp/tests.log 2>&1
echo TESTS_RC=$?
tail -n 15 /tmp/tests.log
echo STATE_AFTER=$(ls -la --time-style=+%s.%N /var/lib/healthd | md5sum)
"""
    done = in_throwaway_root(script, tmp_path / "root", timeout=900)
    report = dict(line.split("=", 1) for line in done.stdout.splitlines() if re.match(r"^[A-Z_]+=", line))
    assert report.get("INSTALLED") == "yes", done.stdout[-4000:] + done.stderr[-2000:]
    assert "last-pass.json" in report["STATE"], report
    assert report["TESTS_RC"] == "0", done.stdout[-4000:]
    assert re.search(r"\d+ passed", done.stdout) and " error" not in done.stdout
    assert report["STATE_AFTER"] == report["STATE_BEFORE"], "a test touched the installed healthd's state"
