"""The active pass on the real cluster: refused beside a job or on a node in service, run on an idle, drained one.

The daemon's own active passes too (``[active] when_drained``): on its own idle drain,
once per interval across restarts, keeping the node out while they fail.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.dcgmi import Dcgmi

from healthd.exitcodes import EX_TEMPFAIL
from healthd.service.daemon import run_one_pass

pytestmark = pytest.mark.slurm

Cli = Callable[..., tuple[int, str, str]]


def _config(write_config: Callable[..., Path], cluster: Any, node: str, dcgmi: Dcgmi) -> str:
    body = f'[slurm]\nnode_name = "{node}"\nact_splay = 0\n[checks.dcgm]\ndcgmi = "{dcgmi.tool}"\nlevel = 2\n'
    return str(write_config(body, slurm_cluster=cluster.conf))


def test_active_checks_wait_for_an_idle_drained_node(
    cluster: Any, tmp_path: Path, write_config: Callable[..., Path], cli: Cli
) -> None:
    dcgmi = Dcgmi(tmp_path)
    dcgmi.prints("level2-pcie-fail.json", rc=226)
    config = _config(write_config, cluster, "node1", dcgmi)

    code, _, err = cli("check", "--once", "--active", "--config", config)
    assert code == EX_TEMPFAIL and "not drained" in err, err

    job = cluster.submit("node1")
    cluster.run("scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=burn-in")
    cluster.wait(lambda: cluster.state("node1") == "draining", 20, "node1 draining")
    code, _, err = cli("check", "--once", "--active", "--config", config)
    assert code == EX_TEMPFAIL and "jobs may still run" in err, err
    assert dcgmi.levels == [], "dcgmi never ran beside the job"

    cluster.run("scancel", job)
    cluster.wait(lambda: cluster.state("node1") == "drained", 20, "node1 drained after its job")
    code, out, err = cli("check", "--once", "--active", "--config", config)
    assert code == 1 and "DCGM_PCIE_FAILED" in out, (out, err)
    assert dcgmi.levels == ["2", "2"]
    assert cluster.state("node1") == "drained"
    # An administrator's drain stays theirs (docs/policy.md): the finding is reported, the reason kept.
    assert cluster.reason("node1").startswith("burn-in"), cluster.reason("node1")
    assert "not healthd's, left alone" in out

    dcgmi.prints("level2-pass-slow-pcie.json")
    code, out, err = cli("check", "--once", "--active", "--config", config)
    assert code == 0, (out, err)
    assert cluster.state("node1") == "drained", "an active pass is partial: it never resumes the node"


def test_a_failed_active_check_puts_its_own_code_on_healthds_drain(
    cluster: Any, healthd_on: Any, tmp_path: Path, write_config: Callable[..., Path], cli: Cli
) -> None:
    hd = healthd_on("node2")
    hd.faults(("WARNING", "IB_SYMBOL_ERRORS", "mlx5_0:1"))
    assert hd.cycle().action.applied
    cluster.wait(lambda: cluster.state("node2") == "drained", 20, "node2 drained by healthd")
    dcgmi = Dcgmi(tmp_path)
    dcgmi.prints("level2-pcie-fail.json", rc=226)
    body = hd.config_text().split("[checks.fault]")[0] + f'[checks.dcgm]\ndcgmi = "{dcgmi.tool}"\nlevel = 2\n'
    code, out, err = cli("check", "--once", "--active", "--config", str(write_config(body, slurm_cluster=cluster.conf)))
    assert code == 1, (out, err)
    assert cluster.state("node2") == "drained"
    assert cluster.reason("node2").startswith("healthd: DCGM_PCIE_FAILED GPU 1"), cluster.reason("node2")


def test_the_daemon_runs_the_active_checks_on_its_own_idle_drain_once_per_interval(
    cluster: Any, healthd_on: Any, tmp_path: Path
) -> None:
    from healthd_checks.dcgm.check import CHECK as DCGM

    hd = healthd_on("node3")
    dcgmi = Dcgmi(tmp_path)
    dcgmi.prints("level2-pcie-fail.json", rc=226)
    extra = f'[checks.dcgm]\ndcgmi = "{dcgmi.tool}"\nlevel = 2\n[active]\nwhen_drained = true\n'
    start = time.time()

    def daemon_pass(after: float) -> None:
        """One daemon pass, by a new engine (a restart) whose clock reads ``after`` seconds on."""
        run_one_pass(hd.engine(extra, [DCGM], clock=lambda: start + after), False)

    job = cluster.submit("node3")
    daemon_pass(0)
    hd.faults(("WARNING", "IB_SYMBOL_ERRORS", "mlx5_0:1"))
    daemon_pass(0)
    cluster.wait(lambda: cluster.state("node3") == "draining", 20, "node3 draining")
    daemon_pass(0)
    assert dcgmi.levels == [], "never beside a job, never on a node in service"

    cluster.run("scancel", job)
    cluster.wait(lambda: cluster.state("node3") == "drained", 20, "node3 drained after its job")
    daemon_pass(0)
    assert dcgmi.levels == ["2", "2"], "healthd's own idle drain: every check, the active ones too"
    hd.faults()
    daemon_pass(60)
    assert dcgmi.levels == ["2", "2"], "within [active] interval, a restart does not run them again"
    assert cluster.state("node3") == "drained", "the failed active check holds the node out"
    last = json.loads((hd.state_dir / "last-pass.json").read_text())
    assert last["action"]["explanation"].startswith("not resuming: dcgm"), last["action"]

    dcgmi.prints("level2-pass-slow-pcie.json")
    daemon_pass(6 * 3600 + 1)
    assert dcgmi.levels == ["2", "2", "2"]
    assert cluster.state("node3") == "idle", "everything passes: healthd resumes its own drain"
