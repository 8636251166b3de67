"""The documented textfile path on a stock Debian node_exporter: the real package, the real exporter.

In a throwaway copy-on-write root of this machine (healthd_testkit.namespace), Debian's
prometheus-node-exporter is installed with apt as an operator would, leaving its textfile
directory as the package makes it (owned by ``prometheus``). healthd then validates a config
that names the documented path, its daemon writes its metrics there after its first pass, and the real
node_exporter, pointed at that directory, serves them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from healthd_testkit.namespace import in_throwaway_root
from healthd_testkit.net import free_ports

pytestmark = [pytest.mark.slow, pytest.mark.root]

TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
SCRAPE = "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())"


def test_healthds_metrics_reach_a_stock_debian_node_exporter(tmp_path: Path) -> None:
    healthd = Path(sys.executable).with_name("healthd")
    (port,) = free_ports(1)
    config = f"""[paths]
state_dir = "/var/lib/healthd-test"
[slurm]
enabled = false
[metrics]
textfile = "{TEXTFILE_DIR}/healthd.prom"
"""
    script = f"""set -e
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends prometheus-node-exporter > /tmp/apt.log 2>&1 \
    || {{ tail -20 /tmp/apt.log; exit 1; }}
echo OWNER=$(stat -c %U $(dirname {TEXTFILE_DIR}))
mkdir -p /etc/healthd-test && printf '%s' '{config}' > /etc/healthd-test/healthd.toml
chmod 600 /etc/healthd-test/healthd.toml
{healthd} config validate --config /etc/healthd-test/healthd.toml > /tmp/validate.log 2>&1; echo VALIDATE_RC=$?
set +e
{healthd} run --dry-run --config /etc/healthd-test/healthd.toml > /tmp/daemon.log 2>&1 &
daemon=$!
for _ in $(seq 100); do test -f {TEXTFILE_DIR}/healthd.prom && break; sleep 0.2; done
kill $daemon
echo PROM=$(test -f {TEXTFILE_DIR}/healthd.prom && echo yes)
prometheus-node-exporter --web.listen-address=127.0.0.1:{port} --collector.disable-defaults \\
    --collector.textfile --collector.textfile.directory={TEXTFILE_DIR} > /tmp/exporter.log 2>&1 &
exporter=$!
for _ in $(seq 50); do
    python3 -c "{SCRAPE}" http://127.0.0.1:{port}/metrics > /tmp/scrape.txt 2>/dev/null && break
    sleep 0.2
done
kill $exporter
grep -E '^(healthd_last_pass_timestamp_seconds|node_textfile_scrape_error) ' /tmp/scrape.txt
"""
    done = in_throwaway_root(script, tmp_path / "root", timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = dict(line.split("=", 1) for line in done.stdout.splitlines() if re.match(r"^[A-Z_]+=", line))
    # Debian 12's package hands /var/lib/prometheus, above the textfile directory, to its account:
    # the trust rule refused that path until [metrics].textfile_owner.
    assert report["OWNER"] == "prometheus", "the tree as Debian's package makes it"
    assert report["VALIDATE_RC"] == "0" and report["PROM"] == "yes", done.stdout
    assert re.search(r"^healthd_last_pass_timestamp_seconds \d", done.stdout, re.M), done.stdout
    assert re.search(r"^node_textfile_scrape_error 0$", done.stdout, re.M), done.stdout
