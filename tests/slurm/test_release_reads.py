"""Each release's node reads, as healthd parses them, on the live cluster: ``scontrol --json`` against ``-o`` and sinfo.

From 23.02 healthd reads a node with ``scontrol --json show node`` (``SlurmClient.uses_json``);
24.11 and 26.05 print its state as a list and its times as ``{"set", "infinite",
"number"}``. The same nodes, read as JSON, as ``scontrol -o`` text and with sinfo, must
give the same ``NodeInfo``. ``HEALTHD_UPDATE_FIXTURES=1`` keeps each release's JSON as
``fixtures/slurm/show-node-<release>-json-<state>.json`` (fixtures/slurm/README.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

import pytest
from healthd_testkit.paths import FIXTURES
from healthd_testkit.releases import every_release

from healthd.config.sections import SlurmSettings
from healthd.slurm.adapter import SlurmClient, parse_show_node_json
from healthd.slurm.nodestate import NodeInfo

pytestmark = pytest.mark.slurm

# What a capture keeps of this machine: the kernel string is replaced by a stock Debian one.
STOCK_OS = "Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)"


def _client(cluster: Any, output_format: Optional[str]) -> SlurmClient:
    bin_dir = cluster.bin_dir if cluster.chroot is not None else None
    return SlurmClient(SlurmSettings(conf=cluster.conf, bin_dir=bin_dir, timeout=8), output_format=output_format)


def _comparable(node: NodeInfo) -> NodeInfo:
    # sinfo's read carries no boot time or next state (NODE_FIELDS): compared where it has them.
    return node._replace(boot_time=None, next_state="")


def _keep(cluster: Any, name: str, text: str) -> None:
    if not os.environ.get("HEALTHD_UPDATE_FIXTURES") or cluster.chroot is None:
        return
    document = json.loads(text)
    for node in document["nodes"]:
        node["operating_system"] = STOCK_OS
    document["meta"].pop("command", None)
    path = FIXTURES / "slurm" / f"show-node-{cluster.version}-json-{name}.json"
    path.write_text(json.dumps(document, indent=2) + "\n")


def _read_all_ways(cluster: Any, node: str, name: str) -> NodeInfo:
    """The node read as JSON (23.02+), as ``-o`` text and with sinfo; all agree; the JSON capture kept."""
    auto = _client(cluster, None)
    version = tuple(int(p) for p in (cluster.version or "22.05").split("."))
    assert auto.uses_json() == (version >= (23, 2)), f"Slurm {cluster.version}: JSON from 23.02 on"
    text = _client(cluster, "text").show_node(node)
    if version >= (23, 2):
        raw = cluster.run("scontrol", "--json", "show", "node", node).stdout
        _keep(cluster, name, raw)
        from_json = next(n for n in parse_show_node_json(raw) if n.name == node)
        assert from_json == text, f"JSON {from_json} != text {text}"
        assert auto.show_node(node) == text and auto.output_format == "json"
    assert _comparable(_client(cluster, None).node(node)) == _comparable(text)
    return text


@every_release
def test_json_text_and_sinfo_reads_of_each_state_agree(cluster: Any, healthd_on: Any) -> None:
    assert _read_all_ways(cluster, "node1", "idle").state == "IDLE"
    job = cluster.submit("node1")
    assert _read_all_ways(cluster, "node1", "allocated").state in ("ALLOCATED", "MIXED")

    hd = healthd_on("node1")
    hd.faults(("CRITICAL", "MOUNT_MISSING", "/scratch"))
    assert hd.cycle().action.applied
    cluster.wait(lambda: cluster.job_state(job) == "PENDING", 30, f"job {job} requeued")
    # ReturnToService=2 brings the node back from DOWN when slurmd registers again; DRAIN stays.
    cluster.wait_state("node1", lambda s: s.split("+")[0] == "IDLE", 30, "registered again")
    taken_out = _read_all_ways(cluster, "node1", "idle-drain-healthd")
    assert taken_out.drained and taken_out.reason.startswith("healthd: MOUNT_MISSING /scratch")
    assert taken_out.reason_user == "root" and taken_out.reason_time is not None

    busy = cluster.submit("node2")
    cluster.run("scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=admin: bad DIMM ticket 42")
    draining = _read_all_ways(cluster, "node2", "draining-admin")
    assert draining.drained and draining.busy and draining.reason == "admin: bad DIMM ticket 42"
    assert cluster.job_state(busy) == "RUNNING"


def test_kept_json_captures_parse_as_their_states(fixtures: Path) -> None:
    """The real captures of 24.11 and 26.05: state lists, wrapped times, no next state after a reboot."""
    captures = sorted((fixtures / "slurm").glob("show-node-2[4-9].*-json-*.json"))
    assert {p.name.split("-")[2] for p in captures} >= {"24.11", "26.05"}
    for path in captures:
        (node,) = parse_show_node_json(path.read_text())
        state = path.stem.split("-json-")[1]
        assert node.boot_time is not None and node.next_state == "", path.name
        if state == "idle-drain-healthd":
            assert (node.state, node.drained) == ("IDLE", True), path.name
            assert node.reason.startswith("healthd: MOUNT_MISSING /scratch") and node.reason_time, path.name
        elif state == "draining-admin":
            assert node.busy and node.drained and node.reason == "admin: bad DIMM ticket 42", path.name
        else:
            assert not node.drained and node.reason == "" and node.reason_time is None, path.name
