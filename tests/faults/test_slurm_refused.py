"""A one-shot pass with every slurmctld refusing the connection: a quick, short answer; a reachable one still acts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from healthd_testkit.faults import FAULT, Harness
from healthd_testkit.net import free_ports
from healthd_testkit.paths import run_healthd

from healthd.cli.hook import hook_summary
from healthd.cycle.pipeline import PassRequest, run_pass
from healthd.cycle.render import ONE_SHOT_RETRY, action_lines
from healthd.slurm.ping import refused_everywhere

_REFUSED = "scontrol: debug2: Error connecting slurm stream socket at 127.0.0.1:6999: Connection refused"
_DOWN = "Slurmctld(primary) at vm is DOWN"


def test_only_every_controller_refusing_is_definitive() -> None:
    assert refused_everywhere(f"{_REFUSED}\n{_DOWN}\n") == "127.0.0.1:6999"
    backup = "Slurmctld(backup) at vm2 is UP"
    assert refused_everywhere(f"{_REFUSED}\n{_DOWN}\n{backup}\n") is None
    # Two controllers DOWN, one refusal: the other may be down for any reason (a timeout, munge).
    assert refused_everywhere(f"{_REFUSED}\n{_DOWN}\nSlurmctld(backup) at vm2 is DOWN\n") is None
    assert refused_everywhere(f"{_DOWN}\n") is None  # DOWN with no reason said
    assert refused_everywhere("") is None
    # A refusal quoted inside another line is not scontrol's own.
    assert refused_everywhere(f"x {_REFUSED}\n{_DOWN}\n") is None


def _refusing_conf(cluster: Any, tmp_path: Path, host_guard: Any) -> Path:
    """The test cluster's slurm.conf with a port nobody listens on and Slurm's default MessageTimeout (10 s)."""
    port = free_ports(1)[0]
    lines = [
        f"SlurmctldPort={port}" if line.startswith("SlurmctldPort=") else line
        for line in cluster.conf.read_text().split("\n")
        if not line.startswith("MessageTimeout=")
    ]
    conf = tmp_path / "refused-slurm.conf"
    conf.write_text("\n".join(lines))
    host_guard.allow_slurm_conf(conf)
    return conf


def _one_shot(node: Harness, dry_run: bool = False) -> Any:
    return run_pass(node.engine(), PassRequest(dry_run=dry_run, deadline=time.monotonic() + 60))


def test_a_one_shot_against_a_refusing_slurmctld_answers_at_once_in_one_short_line(
    cluster: Any, harness: Callable[..., Harness], tmp_path: Path, host_guard: Any
) -> None:
    node = harness(FAULT, slurm_conf=_refusing_conf(cluster, tmp_path, host_guard))
    node.faults(("CRITICAL", "INJECTED", "gpu0"))
    started = time.monotonic()
    outcome = _one_shot(node)
    took = time.monotonic() - started
    # Without the probe sinfo retries for MessageTimeout (10 s) and is killed at [slurm].timeout (3 s).
    assert took < 2.5, took
    assert outcome.action.pending and not outcome.action.applied
    lines = action_lines(outcome.document, time.time(), one_shot=True)
    assert len(lines) == 1, lines
    assert "Slurm not reachable (slurmctld 127.0.0.1:" in lines[0], lines
    assert "refused the connection)" in lines[0] and len(lines[0]) < 250, lines
    assert "next try" not in lines[0] and lines[0].endswith(ONE_SHOT_RETRY), lines
    # The daemon's pass has a next pass of its own: its line keeps the retry time.
    assert "next try in" in action_lines(outcome.document, time.time())[0]
    # The hook's one line: its own pass says who retries; the daemon's pass, when.
    hooked = hook_summary(outcome.document, time.time())
    assert hooked.endswith(ONE_SHOT_RETRY) and "next try" not in hooked, hooked
    assert "next try in" in hook_summary(outcome.document, time.time(), daemon=True)
    # `healthd status` of that pass, read from disk, says who retries it as the pass itself did.
    status = run_healthd("status", "--config", str(node.config), timeout=30)
    assert status.returncode in (2, 3), status.stdout + status.stderr  # 3: the harness's 1 s interval makes it stale
    [pending] = [line for line in status.stdout.split("\n") if "PENDING" in line]
    assert pending.endswith(ONE_SHOT_RETRY) and "next try" not in pending, status.stdout


def test_a_clean_dry_run_against_a_refusing_slurmctld_says_so_in_one_phrase(
    cluster: Any, harness: Callable[..., Harness], tmp_path: Path, host_guard: Any
) -> None:
    node = harness(FAULT, slurm_conf=_refusing_conf(cluster, tmp_path, host_guard))
    started = time.monotonic()
    outcome = _one_shot(node, dry_run=True)
    assert time.monotonic() - started < 2.5
    port = outcome.document["action"]["slurm_errors"][0]["detail"].split(":")[1].split(" ")[0]
    assert action_lines(outcome.document, time.time(), one_shot=True) == [
        f"Slurm not reachable (slurmctld 127.0.0.1:{port} refused the connection); dry run: nothing to do"
        " (all checks pass)"
    ]


def test_a_one_shot_on_a_reachable_slurmctld_still_takes_the_node_out(
    cluster: Any, harness: Callable[..., Harness]
) -> None:
    node = harness(FAULT, slurm_conf=cluster.conf)
    node.faults(("CRITICAL", "INJECTED", "gpu0"))
    outcome = _one_shot(node)
    assert outcome.action.applied, outcome.action.errors
    assert cluster.state("node1") in ("down", "drained")
    assert cluster.reason("node1").startswith("healthd: INJECTED gpu0")
