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
) -> Path:
    """The node's job config; the prolog gets 20 s (a loaded test machine is no production node) unless `jobs`."""
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
conf = "{cluster.conf}"
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
    cluster.prolog_nodes.write_text(f"{node}\n")
    return state
