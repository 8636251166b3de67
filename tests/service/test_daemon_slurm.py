"""The daemon against a real (local) Slurm cluster: it takes a node out, then resumes it.

Uses the throwaway cluster of tests/healthd_testkit/cluster.py; skipped where Slurm or root is missing.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import pytest
from healthd_testkit.faults import DaemonKit
from healthd_testkit.net import free_ports
from prometheus_client.parser import text_string_to_metric_families


def _metric(port: int, name: str, **labels: str) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:  # not listening yet
        return float("nan")
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return float("nan")


def test_daemon_takes_the_node_out_and_resumes_it(
    daemons: DaemonKit,
    cluster: Any,
    tmp_path: Path,
    logs: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    (port,) = free_ports(1)
    slurm_table = f'[slurm]\nenabled = true\nconf = "{cluster.conf}"\nnode_name = "node2"\ntimeout = 8\n'
    extra = f'[policy]\nmax_out_fraction = 1.0\n[metrics]\nlisten = "127.0.0.1:{port}"\n'

    def write(report: str) -> Path:
        path = daemons.config(tmp_path / "healthd.toml", tmp_path / "state", interval=1, report=report, extra=extra)
        text = path.read_text().replace('[slurm]\nenabled = false\nnode_name = "node-test"\n', slurm_table)
        path.write_text(text)
        return path

    daemon = daemons.make(config=write("critical"))
    handle = daemons.start(daemon)
    try:
        daemons.wait(lambda: cluster.state("node2") in ("drained", "down", "draining"), timeout=30, what="node2 out")
        assert cluster.reason("node2").startswith("healthd: FLAG_RAISED flag")
        daemons.wait(lambda: _metric(port, "healthd_actions_total", outcome="taken") >= 1, what="taken counter")
        assert _metric(port, "healthd_check_status", check="flag") == 2
        assert _metric(port, "healthd_circuit_breaker_open") == 0
        taken = [r for r in logs.records if getattr(r, "healthd_fields", {}).get("HEALTHD_OUTCOME") == "taken"]
        assert taken and taken[0].healthd_fields["HEALTHD_CHECK"] == "policy"  # type: ignore[attr-defined]

        write("ok")
        daemon.request_reload()
        daemons.wait(lambda: cluster.state("node2") == "idle", timeout=30, what="node2 resumed")
        daemons.wait(
            lambda: _metric(port, "healthd_actions_total", action="resume", outcome="taken") == 1, what="resume"
        )
    finally:
        assert handle.stop() == 0
        cluster.run("scontrol", "update", "NodeName=node2", "State=RESUME", check=False)


def test_circuit_breaker_holds_the_take_out_and_says_so(
    daemons: DaemonKit,
    cluster: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    (port,) = free_ports(1)
    # Another node is already out by healthd: taking node3 out too would exceed 10% of the partition.
    cluster.run("scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=healthd: XID_79 gpu0")
    config = daemons.config(
        tmp_path / "healthd.toml",
        tmp_path / "state",
        interval=1,
        report="critical",
        extra=f'[policy]\nmax_out_fraction = 0.1\n[metrics]\nlisten = "127.0.0.1:{port}"\n',
    )
    config.write_text(
        config.read_text().replace(
            '[slurm]\nenabled = false\nnode_name = "node-test"\n',
            f'[slurm]\nenabled = true\nconf = "{cluster.conf}"\nnode_name = "node3"\ntimeout = 8\n',
        )
    )
    handle = daemons.start(daemons.make(config=config))
    try:
        daemons.wait(lambda: _metric(port, "healthd_circuit_breaker_open") == 1, timeout=30, what="breaker open")
        assert _metric(port, "healthd_actions_total", outcome="held_back") >= 1
        assert _metric(port, "healthd_findings", check="policy", severity="critical") == 1
        assert cluster.state("node3") == "idle"
    finally:
        assert handle.stop() == 0
        cluster.run("scontrol", "update", "NodeName=node1", "State=RESUME", check=False)
