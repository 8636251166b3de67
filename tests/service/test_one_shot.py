"""A one-shot pass (``check --once``, the hook) within slurmd's 60 s: what follows the decision
(a GPU reset, ``[remediation] on_repair``) is saved for first, cut to the time left, and ends with the pass.

slurmctld is faked at the adapter's boundary (no cluster here: ``_OutAndIdle``), nvidia-smi and
on_repair are real scripts run as real processes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from healthd_testkit.checks import only_checks
from healthd_testkit.faults import FAULT, FaultSettings
from healthd_testkit.paths import FIXTURES

from healthd.config.models import Config, parse_config
from healthd.cycle.engine import Engine
from healthd.cycle.pipeline import (
    ONE_SHOT_SECONDS,
    POLICY_STATE,
    RESET_FLOOR_SECONDS,
    SAVE_MARGIN_SECONDS,
    PassRequest,
    PassTools,
    pass_budget,
    run_pass,
)
from healthd.model import Finding, Status
from healthd.plan.acks import FindingRef
from healthd.plan.state import PolicyState
from healthd.slurm.adapter import SlurmClient
from healthd.slurm.nodestate import NodeInfo
from healthd.store.history import History
from healthd.store.historyschema import Kind

PCI = "00000000:3B:00.0"
REMAP: dict[str, Any] = {
    "status": "CRITICAL",
    "code": "ROW_REMAP_PENDING",
    "subject": "gpu3",
    "details": {"remedy": "reset", "pci": PCI},
}
OUT = NodeInfo("node1", "DOWN", frozenset({"DRAIN"}), "healthd: ROW_REMAP_PENDING gpu3", "root", ("batch",))


class _OutAndIdle(SlurmClient):
    """The Slurm adapter with slurmctld faked at its boundary: the node is out by healthd's hand and runs no job."""

    def node(self, name: str) -> NodeInfo:
        return OUT

    def _run(self, *args: str, program: str = "scontrol") -> str:
        raise AssertionError(f"nothing is sent to Slurm for a node already out: {program} {args}")


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def _engine(tmp_path: Path, extra: str, faults: list[dict[str, Any]], slurm: bool = True) -> Engine:
    (tmp_path / "faults.json").write_text(json.dumps(faults))
    text = (
        f'[paths]\nstate_dir = "{tmp_path / "state"}"\n'
        f'[slurm]\nenabled = {"true" if slurm else "false"}\nnode_name = "node1"\nact_splay = 0\n'
        f'[policy]\nmax_out_fraction = 1.0\n[checks.fault]\nfile = "{tmp_path / "faults.json"}"\n{extra}'
    )
    return Engine(parse_config(text, str(tmp_path / "healthd.toml"), {"fault": FaultSettings}), [FAULT])


def _reset_engine(tmp_path: Path) -> Engine:
    # nvidia-smi shows what policy.json says while the reset runs: what a hook killed now would leave.
    smi = _script(
        tmp_path / "nvidia-smi",
        f'case "$1" in --gpu-reset) cp "{tmp_path}/state/policy.json" "{tmp_path}/during-reset.json";'
        f' echo "$*" >> "{tmp_path}/resets";; esac',
    )
    engine = _engine(tmp_path, f'[remediation]\nreset = true\nnvidia_smi = "{smi}"\n', [REMAP])
    # An earlier pass took the node out for the finding.
    fault = Finding("fault", Status.CRITICAL, "ROW_REMAP_PENDING", "gpu3", "injected", REMAP["details"])
    engine.state.file(POLICY_STATE).save(PolicyState(took_out=(FindingRef.of(fault),)).to_dict())
    return engine


def _actions(tmp_path: Path, action: str) -> list[tuple[str, str]]:
    with History.open(tmp_path / "state") as history:
        events = list(history.events(since=0))
    return [(e.status, e.message) for e in events if e.kind is Kind.ACTION and e.code == action]


def test_the_reset_try_is_saved_before_nvidia_smi_runs(tmp_path: Path) -> None:
    engine = _reset_engine(tmp_path)
    outcome = run_pass(
        engine,
        PassRequest(deadline=time.monotonic() + ONE_SHOT_SECONDS),
        PassTools(client=_OutAndIdle(engine.config.slurm)),
    )
    assert outcome.action.steps == ("reset",)
    # Had slurmd killed the hook during the reset, the next pass would know it was tried.
    during = json.loads((tmp_path / "during-reset.json").read_text())
    assert during["reset_tried"] == ["fault/ROW_REMAP_PENDING/gpu3"]
    assert _actions(tmp_path, "gpu_reset") == [("done", "GPU reset")]
    again = run_pass(
        engine,
        PassRequest(deadline=time.monotonic() + ONE_SHOT_SECONDS),
        PassTools(client=_OutAndIdle(engine.config.slurm)),
    )
    assert again.action.steps == () and (tmp_path / "resets").read_text().count("--gpu-reset") == 1


def test_a_one_shot_pass_short_of_time_leaves_the_reset_to_a_later_pass(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = _reset_engine(tmp_path)
    client = _OutAndIdle(engine.config.slurm)
    short = time.monotonic() + SAVE_MARGIN_SECONDS + RESET_FLOOR_SECONDS - 5
    outcome = run_pass(engine, PassRequest(deadline=short), PassTools(client=client))
    assert outcome.action.steps == () and not (tmp_path / "resets").exists()
    assert outcome.state.reset_tried == (), "not tried: the next pass may"
    assert f"GPU reset of {PCI} left to a later pass: 1" in caplog.text  # 15 s or a little less
    assert "s left of this one-shot pass, 20s needed" in caplog.text
    assert run_pass(engine, tools=PassTools(client=client)).action.steps == ("reset",), (
        "the daemon's pass has no such limit"
    )


def _repair_engine(tmp_path: Path, on_repair: Path) -> Engine:
    extra = f'[escalation]\nrepeats = 1\n[remediation]\non_repair = "{on_repair}"\n'
    return _engine(tmp_path, extra, [{"status": "CRITICAL", "code": "XID_48", "subject": "gpu0"}], slurm=False)


def test_on_repair_runs_after_the_pass_is_saved(tmp_path: Path) -> None:
    state = tmp_path / "state"
    on_repair = _script(
        tmp_path / "ticket.sh", f'cp "{state}/last-pass.json" "{state}/policy.json" "{tmp_path}/seen/"; cat > /dev/null'
    )
    (tmp_path / "seen").mkdir()
    outcome = run_pass(_repair_engine(tmp_path, on_repair), PassRequest(deadline=time.monotonic() + ONE_SHOT_SECONDS))
    assert outcome.action.decision.reason == "healthd: REPAIR XID_48 gpu0 x1"
    # What a hook killed while on_repair runs leaves behind: this pass, its repair, its history.
    seen = json.loads((tmp_path / "seen" / "last-pass.json").read_text())
    assert seen["action"]["reason"] == "healthd: REPAIR XID_48 gpu0 x1"
    assert json.loads((tmp_path / "seen" / "policy.json").read_text())["repair"]["code"] == "XID_48"
    assert _actions(tmp_path, "on_repair") == [("ok", f"{on_repair} exited 0")]


def test_on_repair_gets_what_is_left_of_a_one_shot_pass(tmp_path: Path) -> None:
    on_repair = _script(tmp_path / "ticket.sh", "exec sleep 30")
    started = time.monotonic()
    run_pass(_repair_engine(tmp_path, on_repair), PassRequest(deadline=started + SAVE_MARGIN_SECONDS + 0.5))
    assert time.monotonic() - started < 5, "not its own 30 s"
    assert [outcome for outcome, _ in _actions(tmp_path, "on_repair")] == ["timeout"]


def test_slurmds_sigterm_takes_the_on_repair_script_and_its_children_with_the_pass(
    write_config: Callable[..., Path], tmp_path: Path
) -> None:
    pid_file = tmp_path / "child.pid"
    # A ticketing script whose curl hangs: its own child, in the script's session.
    on_repair = _script(tmp_path / "ticket.sh", f'sleep 300 & echo $! > "{pid_file}"; wait')
    # A hardware fault (an IB port down, from the fixture tree): only such a code escalates.
    sysfs = tmp_path / "sys"
    shutil.copytree(FIXTURES / "sysfs" / "base", sysfs, symlinks=True)
    shutil.copytree(FIXTURES / "sysfs" / "overlays" / "ib-port-down", sysfs, symlinks=True, dirs_exist_ok=True)
    config = write_config(
        f'[paths]\nsysfs = "{sysfs}"\n'
        f'[escalation]\nrepeats = 1\n[remediation]\non_repair = "{on_repair}"\n' + only_checks("infiniband")
    )
    # slurmd runs the hook in a process group of its own and signals that group (slurm.conf(5)).
    hook = subprocess.Popen(
        [sys.executable, "-m", "healthd.cli.main", "check", "--once", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        cwd=tmp_path,
        start_new_session=True,
    )
    child: Optional[int] = None
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.02)
        child = int(pid_file.read_text())
        os.killpg(hook.pid, signal.SIGTERM)
        assert hook.wait(10) == -signal.SIGTERM
        deadline = time.monotonic() + 5
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(child), "the script's child outlived the hook"
        saved = json.loads((tmp_path / "state" / "last-pass.json").read_text())
        assert saved["action"]["reason"] == "healthd: REPAIR IB_PORT_DOWN mlx5_5:1 x1"
    finally:
        hook.kill()
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# -- the budget: the daemon's watchdog and the hook's 55 s ----------------------------------------------


def _config(text: str) -> Config:
    return parse_config(text, "healthd.toml", {}).config


def test_the_pass_budget_counts_on_repair_and_a_reset() -> None:
    plain = pass_budget(_config(""), grace=0)
    assert plain == 55.0, "30 s checks + 3 s lock + 10 s act_splay + 12 s Slurm"
    with_repair = _config('[remediation]\non_repair = "/usr/local/sbin/ticket"\n')
    assert pass_budget(with_repair, grace=0) == plain + 30
    with_reset = _config("[remediation]\nreset = true\n")
    assert pass_budget(with_reset, grace=0) == plain + 15 + 60, "nvidia-smi's query and reset"
    both = _config('[remediation]\nreset = true\non_repair = "/usr/local/sbin/ticket"\n')
    assert pass_budget(both, grace=0) == plain + 75, "a node in repair is never reset: the longer of the two"
    assert pass_budget(_config("[slurm]\nenabled = false\n[remediation]\nreset = true\n"), grace=0) == 33


def test_config_validate_warns_when_the_hook_may_run_past_55_s(
    write_config: Callable[..., Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    ticket = '[remediation]\non_repair = "/usr/local/sbin/ticket"\non_repair_timeout = 20\n'
    fits = write_config(ticket)
    code, _, err = cli("config", "validate", "--config", str(fits))
    assert code == 0 and "warning" not in err, "30 s checks + 3 s lock + 20 s on_repair (Slurm off)"
    slow = write_config(ticket + "[runner]\npass_timeout = 40\n")
    code, _, err = cli("config", "validate", "--config", str(slow))
    assert code == 0, "valid: the daemon has no such limit"
    assert err.startswith(
        f"{slow}: warning: as the hook (HealthCheckProgram): one pass may take 63s ([runner].pass_timeout 40"
        " + [slurm].lock_timeout 3 + [remediation].on_repair_timeout 20), more than the 55s the hook has"
    )
