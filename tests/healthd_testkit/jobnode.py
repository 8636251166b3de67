"""A node's config for healthd's Prolog= and Epilog= on the test cluster (tests/healthd_testkit/cluster.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def job_node(
    cluster: Any,
    node: str,
    tmp_path: Path,
    extra: str = "",
    kmsg: str = "/dev/kmsg",
    jobs: str = "prolog_timeout = 20",
    paths: str = "",
    slurm_conf: bool = True,
    only: bool = True,
) -> Path:
    """The node's job config; the prolog gets 20 s (a loaded test machine is no production node) unless `jobs`.

    ``slurm_conf`` False leaves ``[slurm] conf`` out, as on a configless node (the client
    commands find slurmd's cached copy); ``only`` False adds the node to those that run
    healthd's prolog instead of making it the only one.
    """
    state = tmp_path / node / "state"
    state.mkdir(parents=True)
    config = cluster.job_config(node)
    config.write_text(
        f"""
[paths]
state_dir = "{state}"
kmsg = "{kmsg}"
{paths}
[slurm]
{f'conf = "{cluster.conf}"' if slurm_conf else ""}
node_name = "{node}"
timeout = 8
act_splay = 0
[policy]
max_out_fraction = 1.0
[checks.xid]
source = "kmsg"
accept_userspace_kmsg = true
[checks.jobs]
{jobs}
{extra}
"""
    )
    config.chmod(0o600)
    listed = cluster.prolog_nodes.read_text() if not only and cluster.prolog_nodes.exists() else ""
    cluster.prolog_nodes.write_text(f"{listed}{node}\n")
    return state


def missing_mount_node(cluster: Any, node: str, tmp_path: Path, mount: str, **options: bool) -> Path:
    """A job node whose prolog checks only that ``mount`` is there, which it is not: every prolog there is CRITICAL.

    ``options``: ``slurm_conf`` and ``only``, as ``job_node`` takes them; returns the node's state directory.
    """
    mounts = f'[checks.mounts]\nexpect = [{{path = "{mount}"}}]\n'
    return job_node(cluster, node, tmp_path, mounts, jobs='prolog_timeout = 20\nprolog_checks = ["mounts"]', **options)


def warm_on_node(cluster: Any, node: str) -> None:
    """Validate the node's job config once on a configless ``node``, as its daemon or hook would have run with it.

    The prolog then reads the validated config back from the config cache
    (healthd.config.cache) within its first second instead of validating it cold, which
    a loaded test machine can make miss that second. ``--only jobs`` in a dry run: the
    pass changes nothing in Slurm and sees no other check's findings.
    """
    argv = ("check", "--once", "--dry-run", "--only", "jobs", "--config", str(cluster.job_config(node)))
    done = cluster.on_node(node, str(cluster.healthd_bin), *argv)
    assert done.returncode == 0, done.stdout + done.stderr
