"""healthd on configless Slurm nodes: no slurm.conf on the node, only the copy slurmd fetched from slurmctld.

slurmctld runs with ``SlurmctldParameters=enable_configless`` and each slurmd with
``--conf-server``, in a mount namespace of its own (healthd_testkit.cluster,
``configless``): the node has no /etc/slurm/slurm.conf, and slurmd caches what it fetched
under its spool directory (``conf-cache``) and links ``/run/slurm/conf`` to it, where the
client commands look when neither ``SLURM_CONF`` nor the default file is there. healthd
is configured as on such a node, with no ``[slurm] conf``, and runs there: by hand
(``on_node``), as slurmd's HealthCheckProgram and as its Prolog. Each test asserts what
Slurm itself then shows, read from the controller's side.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from healthd_testkit.jobnode import missing_mount_node, warm_on_node
from healthd_testkit.releases import every_release

pytestmark = [pytest.mark.slurm, pytest.mark.root]

MOUNT = "/no/such/configless/mount"


def _node_config(cluster: Any, tmp_path: Path, node: str, expect: str, node_name: bool = True) -> Path:
    """A config as on a configless node: no ``[slurm] conf``, no ``bin_dir`` (the root's own commands)."""
    config = tmp_path / f"{node}.toml"
    name = f'node_name = "{node}"' if node_name else ""
    config.write_text(
        f"""[paths]
state_dir = "{tmp_path / node / "state"}"
[slurm]
{name}
timeout = 8
act_splay = 0
[policy]
max_out_fraction = 1.0
[checks.mounts]
expect = [{expect}]
"""
    )
    config.chmod(0o600)
    return config


def _check(cluster: Any, node: str, config: Path) -> tuple[int, dict[str, Any]]:
    done = cluster.on_node(
        node, str(cluster.healthd_bin), "check", "--once", "--json", "--only", "mounts", "--config", str(config)
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


@every_release
def test_the_client_commands_on_a_configless_node_read_slurmds_cached_config(configless_cluster: Any) -> None:
    cluster = configless_cluster
    spool = cluster.root / "spool" / "node1"
    assert cluster.on_node("node1", "test", "-e", "/etc/slurm/slurm.conf").returncode == 1
    link = cluster.on_node("node1", "readlink", "/run/slurm/conf")
    assert link.stdout.strip() == str(spool / "conf-cache"), link.stderr
    assert (spool / "conf-cache" / "slurm.conf").is_file()
    # The node's own scontrol answers from that copy: its ClusterName, and the node as slurmctld has it.
    config = cluster.on_node("node1", "scontrol", "show", "config")
    assert config.returncode == 0, config.stderr
    assert any(line.split() == ["ClusterName", "=", cluster.name] for line in config.stdout.split("\n"))
    assert cluster.on_node("node1", "sinfo", "-h", "-N", "-n", "node1", "-o", "%T").stdout.strip() == "idle"


@every_release
def test_healthd_takes_a_configless_node_out_and_puts_it_back(configless_cluster: Any, tmp_path: Path) -> None:
    cluster = configless_cluster
    job = cluster.submit("node1")
    code, document = _check(cluster, "node1", _node_config(cluster, tmp_path, "node1", f'{{path = "{MOUNT}"}}'))
    assert code == 2, document
    assert document["action"]["decision"] == "take_out_now" and document["action"]["applied"] is True, document
    assert cluster.reason("node1").startswith(f"healthd: MOUNT_MISSING {MOUNT} [")
    cluster.wait(lambda: cluster.job_state(job) == "PENDING", 30, f"job {job} requeued")
    cluster.run("scancel", job)

    # The fault is gone: the next pass resumes the node it took out.
    code, document = _check(cluster, "node1", _node_config(cluster, tmp_path, "node1", '{path = "/"}'))
    assert code == 0, document
    assert document["action"]["decision"] == "resume" and document["action"]["applied"] is True, document
    cluster.wait(lambda: cluster.state("node1") == "idle", 30, "node1 idle")
    assert cluster.reason("node1") == ""


@every_release
def test_slurmd_runs_healthd_as_health_check_program_on_a_configless_node(
    configless_cluster: Any, tmp_path: Path
) -> None:
    cluster = configless_cluster
    # No node_name either: the hook finds its node from slurmd's SLURMD_NODENAME.
    _node_config(cluster, tmp_path, "node3", f'{{path = "{MOUNT}"}}', node_name=False).rename(cluster.hook_config)
    cluster.hook_nodes.write_text("node3\n")
    try:
        cluster.wait(lambda: cluster.state("node3") == "drained", 40, "slurmd's health check to drain node3")
    finally:
        cluster.hook_nodes.unlink()
    assert cluster.reason("node3").startswith(f"healthd: MOUNT_MISSING {MOUNT} [")
    assert "node node3: take_out_now" in Path(cluster.hook_log).read_text()


@every_release
def test_a_critical_prolog_on_a_configless_node_requeues_the_job(configless_cluster: Any, tmp_path: Path) -> None:
    cluster = configless_cluster
    missing_mount_node(cluster, "node2", tmp_path, MOUNT, slurm_conf=False)
    assert "conf =" not in cluster.job_config("node2").read_text()
    warm_on_node(cluster, "node2")
    out = cluster.run("sbatch", "--parsable", "--requeue", "-w", "node2", "-o", "/dev/null", "--wrap", "sleep 30")
    job = out.stdout.strip().split(";")[0]
    cluster.wait_state("node2", lambda s: "DRAIN" in s, 60, "drained by the prolog")
    cluster.wait(lambda: cluster.job_state(job) == "PENDING", 30, f"job {job} requeued")
    assert cluster.reason("node2").startswith(f"healthd: MOUNT_MISSING {MOUNT}"), cluster.reason("node2")
