"""The pure plan for remediation: a reboot in place of a take-out, the node kept out until it booted,
and the Slurm states healthd leaves alone, against real 22.05 captures (fixtures/slurm)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Optional

import pytest
from healthd_testkit.paths import FIXTURES

from healthd.config.models import EscalationSettings, PolicySettings, parse_config
from healthd.model import CheckResult, Finding, PassResult, RunState, Status
from healthd.plan.acks import FindingRef
from healthd.plan.plan import Executed, Observed, Plan, Read, Situation, Step, conclude, plan
from healthd.plan.rules import PolicyRules
from healthd.plan.state import Action, PolicyState, RebootRequest
from healthd.slurm.adapter import parse_show_node_line
from healthd.slurm.command import SlurmError
from healthd.slurm.nodestate import NodeInfo, PartitionView
from healthd.slurm.reasons import Reasons, place_stamp, reason_head, with_place

CAPTURES = FIXTURES / "slurm"
NOW = 1_800_000_000.0
SETTINGS = PolicySettings(max_out_fraction=1.0)
EMPTY = PolicyState()
WIDE = {"batch": PartitionView("batch", 4, ())}
XID_79 = Finding("xid", Status.CRITICAL, "XID_79", "gpu0", "fell off the bus", {"remedy": "reboot"})
XID_48 = Finding("xid", Status.CRITICAL, "XID_48", "gpu0", "double-bit ECC error", {})
REBOOT_REASON = "healthd: REBOOT XID_79 gpu0"


def _capture(name: str) -> NodeInfo:
    return parse_show_node_line((CAPTURES / f"show-node-22.05-{name}.txt").read_text())


def _plan(
    node: Optional[NodeInfo],
    *findings: Finding,
    state: PolicyState = EMPTY,
    boot: str = "boot-a",
    reboot: bool = True,
    views: Mapping[str, PartitionView] = WIDE,
    settings: PolicySettings = SETTINGS,
    repeats: Optional[dict[str, tuple[str, int]]] = None,
    escalation: Optional[EscalationSettings] = None,
) -> Plan:
    name = node.name if node else "node1"
    result = PassResult(name, NOW, 0.1, (CheckResult("xid", RunState.RAN, findings, 0.1),))
    observed = Observed(asked=frozenset(Read), node=node, views=views)
    situation = Situation(result, state, (), observed, NOW, False, True, False, repeats or {}, boot)
    made = plan(
        situation,
        PolicyRules(settings, Reasons(), escalation=escalation, reboot=reboot, reconcile_interval=300.0),
    )
    assert isinstance(made, Plan)
    return made


def _requested(boot: str = "boot-a") -> PolicyState:
    """The state after healthd drained the node and asked for the reboot in boot ``boot``."""
    return PolicyState(
        took_out=(FindingRef.of(XID_79),),
        reboot=RebootRequest(boot, NOW - 600, REBOOT_REASON, XID_79.key),
        fail_streaks={"xid": 1},
    )


def test_reboot_is_off_by_default_and_the_take_out_is_ordinary() -> None:
    assert parse_config("", "healthd.toml", {}).config.remediation.reboot is False
    made = _plan(_capture("allocated"), XID_79, reboot=False)
    assert made.decision.action is Action.TAKE_OUT_NOW
    assert made.steps == (Step.DRAIN, Step.DOWN)
    assert made.decision.reason == "healthd: XID_79 gpu0"


def test_a_reboot_class_finding_drains_then_asks_for_a_plain_reboot_and_remembers_the_boot() -> None:
    made = _plan(_capture("allocated"), XID_79)
    assert made.decision.action is Action.REBOOT
    assert made.steps == (Step.DRAIN, Step.REBOOT), "no DOWN: the reboot waits for the running job"
    assert made.decision.reason == REBOOT_REASON
    assert made.interrupted is not None and made.interrupted.reboot == made.reboot
    done = conclude(made, Executed(done=made.steps), EMPTY, NOW)
    assert done.applied and done.state.reboot == RebootRequest("boot-a", NOW, REBOOT_REASON, XID_79.key)
    assert done.state.took_out == (FindingRef.of(XID_79),)


def test_a_reboot_that_failed_to_send_is_not_remembered_as_asked() -> None:
    made = _plan(_capture("allocated"), XID_79)
    done = conclude(made, Executed(done=(Step.DRAIN,), error=SlurmError("scontrol: timed out").problem), EMPTY, NOW)
    assert done.state.reboot is None and done.state.pending is not None
    assert done.state.pending.action is Action.REBOOT
    retried = _plan(_capture("idle-drain-healthd")._replace(reason=REBOOT_REASON), XID_79, state=done.state)
    assert retried.steps == (Step.REBOOT,), "already drained with the reboot reason: only the reboot is left"


def test_a_finding_without_a_reboot_remedy_is_an_ordinary_take_out() -> None:
    made = _plan(_capture("allocated"), XID_48, XID_79)
    assert made.decision.action is Action.TAKE_OUT_NOW, "the top finding (XID_48) names no remedy"


@pytest.mark.parametrize("capture", ["drain-then-reboot-requested", "healthd-reboot-issued", "reboot-requested"])
def test_a_pending_reboot_is_left_alone_whether_the_fault_is_there_or_not(capture: str) -> None:
    node = _capture(capture)
    for findings in ((XID_79,), ()):
        made = _plan(node, *findings, state=_requested())
        assert made.steps == () and made.decision.action is Action.NONE, (capture, findings)


def test_before_the_boot_changed_a_clean_pass_resumes_nothing() -> None:
    """The finding stays until the reboot happened, however long the jobs take."""
    made = _plan(_capture("drain-then-reboot-requested"), state=_requested(), settings=SETTINGS)
    assert made.steps == () and made.state.reboot is not None


def test_a_reboot_that_did_not_happen_is_not_asked_for_again() -> None:
    node = _capture("idle-drain-healthd")._replace(reason=REBOOT_REASON + " : reboot timed out")
    made = _plan(node, XID_79, state=_requested())
    assert made.steps == () and "did not happen" in made.decision.explanation
    assert made.state.reboot is not None, "still waiting: a person decides"


def test_after_the_new_boot_the_node_returns_only_after_clean_passes() -> None:
    node = _capture("drain-then-reboot-complete")
    assert node.reason == REBOOT_REASON + " : reboot issued"
    settings = PolicySettings(clean_passes=2, max_out_fraction=1.0)
    first = _plan(node, state=_requested(), boot="boot-b", settings=settings)
    assert first.state.reboot is None and first.state.rebooted == XID_79.key
    assert first.decision.action is Action.HOLD and first.steps == ()
    second = _plan(node, state=first.state, boot="boot-b", settings=settings)
    assert second.decision.action is Action.RESUME and second.steps == (Step.RESUME,)


def test_the_same_fault_after_the_reboot_is_an_ordinary_take_out_not_a_second_reboot() -> None:
    node = _capture("drain-then-reboot-complete")
    made = _plan(node, XID_79, state=_requested(), boot="boot-b")
    assert made.decision.action is Action.DRAIN_AFTER_JOBS, "already out: the reason is updated"
    assert made.decision.reason == "healthd: XID_79 gpu0"
    assert Step.REBOOT not in made.steps
    again = _plan(node, XID_79, state=made.state, boot="boot-b")
    assert Step.REBOOT not in again.steps


def test_without_a_boot_id_slurms_boot_time_tells_the_reboot_happened() -> None:
    node = _capture("drain-then-reboot-complete")
    assert node.boot_time is not None
    state = _requested(boot="")
    assert state.reboot is not None
    state = state._replace(reboot=state.reboot._replace(at=node.boot_time - 10))
    made = _plan(node, state=state, boot="")
    assert made.state.reboot is None and made.decision.action is Action.RESUME


@pytest.mark.parametrize("capture", ["power-down", "powering-down", "powered-down", "powering-up"])
def test_a_power_saving_node_is_never_acted_on(capture: str) -> None:
    made = _plan(_capture(capture), XID_79)
    assert made.steps == () and "power saving" in made.decision.explanation


def test_a_powered_down_node_healthd_drained_is_not_resumed() -> None:
    node = _capture("powered-down-drain")
    made = _plan(node, state=PolicyState(took_out=(FindingRef("xid/TEST/x"),)))
    assert made.steps == () and "power saving" in made.decision.explanation


def test_a_maintenance_reservation_is_the_administrators() -> None:
    assert _plan(_capture("maint-reservation"), XID_79).steps == ()
    out = PolicyState(took_out=(FindingRef("xid/MOUNT_MISSING/x"),))
    drained = _plan(_capture("maint-reservation-drain"), state=out)
    assert drained.steps == () and "maintenance" in drained.decision.explanation


def test_a_reservation_without_maint_is_an_ordinary_node() -> None:
    made = _plan(_capture("reserved"), XID_79)
    assert made.steps == (Step.DRAIN, Step.REBOOT)


def test_a_node_in_repair_is_never_rebooted() -> None:
    escalation = EscalationSettings(repeats=3)
    made = _plan(_capture("allocated"), XID_79, repeats={XID_79.key: ("GPU-1", 3)}, escalation=escalation)
    assert made.decision.action is Action.TAKE_OUT_NOW and made.decision.reason.startswith("healthd: REPAIR")
    assert Step.REBOOT not in made.steps


def test_the_circuit_breaker_holds_a_reboot_like_a_take_out() -> None:
    # node9 was taken out a minute before this pass: inside the breaker's window.
    full = {"batch": PartitionView("batch", 2, ((False, NOW - 60.0, "node9"),))}
    made = _plan(_capture("allocated"), XID_79, views=full, settings=PolicySettings(max_out_fraction=0.5))
    assert made.decision.action is Action.HOLD and made.decision.intended is Action.REBOOT
    assert made.steps == ()


def test_reason_head_strips_slurms_reboot_suffixes() -> None:
    for suffix in (" : reboot issued", " : reboot issued : reboot complete", " : reboot timed out"):
        assert reason_head(REBOOT_REASON + " (+1 more)" + suffix) == REBOOT_REASON


def test_a_take_outs_reason_carries_its_drains_stamp_and_is_still_the_same_reason() -> None:
    reason = "healthd: XID_79 gpu3 (+2 more)"
    down = with_place(reason, 1_764_000_123.0)
    assert down == reason + " #1764000123"
    assert place_stamp(down) == 1_764_000_123.0 and place_stamp(reason) is None
    assert reason_head(down) == reason_head(reason) == "healthd: XID_79 gpu3"
    assert with_place(down, 5.0) == reason + " #5", "one stamp, never two"
    assert place_stamp(down + " : reboot issued") == 1_764_000_123.0


def test_policy_state_keeps_the_reboot_request() -> None:
    state = _requested()
    assert PolicyState.from_dict(state.to_dict()) == state
    with pytest.raises(ValueError, match="bad policy state"):
        PolicyState.from_dict({"reboot": {"at": 1}})


def test_the_breakers_confirmation_sits_between_the_drain_and_the_reboot() -> None:
    made = _plan(_capture("allocated"), XID_79, settings=PolicySettings(max_out_fraction=0.5))
    assert made.steps == (Step.DRAIN, Step.CONFIRM, Step.REBOOT), "a node that loses its place is never rebooted"


# -- the checks declare the remedy --------------------------------------------------------

XID_154 = "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None)"
NVML = FIXTURES / "nvml"


def _xid_findings(tmp_path: Path, *messages: str) -> dict[str, Finding]:
    """The xid check over a kmsg file of real-format records (``PRI,SEQ,USEC,FLAGS;MESSAGE``)."""
    from healthd.checks.plugin import CheckContext
    from healthd.config.models import Paths
    from healthd.store.state import StateFile
    from healthd_checks.xid.check import CHECK
    from healthd_checks.xid.settings import XidSettings

    proc = tmp_path / "proc" / "sys" / "kernel" / "random"
    proc.mkdir(parents=True)
    (proc / "boot_id").write_text("11111111-2222-3333-4444-555555555555\n")
    (tmp_path / "sys").mkdir()
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("".join(f"4,{n},{(n + 1) * 1000},-;{m}\n SUBSYSTEM=pci\n" for n, m in enumerate(messages)))
    paths = Paths(sysfs=tmp_path / "sys", procfs=tmp_path / "proc", kmsg=kmsg, state_dir=tmp_path / "state")
    ctx = CheckContext(
        name="xid",
        settings=XidSettings(source="kmsg"),
        paths=paths,
        state=StateFile(tmp_path / "state", "check-xid"),
        clock=lambda: 1_000_000.0,
    )
    return {f"{f.code}@{f.subject}": f for f in CHECK.run(ctx)}


@pytest.mark.parametrize(
    ("message", "remedy"),
    [
        ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.", "reboot"),
        (
            f"{XID_154} to 0x2 (Node Reboot Required)",
            "reboot",
        ),
        (
            f"{XID_154} to 0x1 (GPU Reset Required)",
            "reset",
        ),
        (f"{XID_154} to 0x6 (Bus Reset)", None),
        ("NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python, An uncorrectable double bit error", None),
    ],
)
def test_the_xid_check_declares_the_remedy_from_nvidias_catalog(tmp_path: Path, message: str, remedy: str) -> None:
    finding = next(iter(_xid_findings(tmp_path, message).values()))
    assert finding.status is Status.CRITICAL
    assert finding.details.get("remedy") == remedy
    if remedy == "reset":
        assert finding.details["pci"] == "0000:3b:00"


def test_an_xid_154_back_to_none_has_no_remedy(tmp_path: Path) -> None:
    found = _xid_findings(
        tmp_path,
        f"{XID_154} to 0x1 (GPU Reset Required)",
        "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)",
    )
    assert found["XID_154@0000:3b:00"].status is Status.OK and "remedy" not in found["XID_154@0000:3b:00"].details


def test_the_gpu_check_declares_the_remedy() -> None:
    import dataclasses

    from healthd_checks.common.sysfs import VENDOR_NVIDIA, scan_pci
    from healthd_checks.gpu.check import evaluate
    from healthd_checks.gpu.settings import GpuSettings
    from healthd_checks.nvml.snapshot import SnapshotFile
    from healthd_checks.nvml.source import RemappedRows

    def make(status: Status, code: str, subject: str, message: str, **details: Any) -> Finding:
        return Finding("gpu", status, code, subject, message, details)

    pci = scan_pci(NVML / "sysfs-h100", frozenset({VENDOR_NVIDIA}))
    lost = SnapshotFile(NVML / "h100-gpu-lost.json").read()
    found = {f.code: f for f in evaluate(lost, pci, 8, GpuSettings(), {}, 0.0, make).findings}
    assert found["GPU_LOST"].details["remedy"] == "reboot"
    healthy = SnapshotFile(NVML / "h100-healthy.json").read()
    gpus = list(healthy.gpus)
    gpus[3] = dataclasses.replace(gpus[3], remapped_rows=RemappedRows(1, 8, True, False))
    pending = dataclasses.replace(healthy, gpus=tuple(gpus))
    found = {f.code: f for f in evaluate(pending, pci, 8, GpuSettings(), {}, 0.0, make).findings}
    assert found["ROW_REMAP_PENDING"].status is Status.WARNING
    assert found["ROW_REMAP_PENDING"].details["remedy"] == "reset"
    assert found["ROW_REMAP_PENDING"].details["pci"] == found["ROW_REMAP_PENDING"].details["pci_bus_id"]


# -- GPU reset ----------------------------------------------------------------------------

# A pending remap is a WARNING (docs/gpu.md): the node drains after its jobs, then the GPU is reset.
REMAP = Finding(
    "gpu", Status.WARNING, "ROW_REMAP_PENDING", "gpu3", "remap pending", {"remedy": "reset", "pci": "3b:00"}
)


def _reset_plan(node: NodeInfo, *findings: Finding, state: PolicyState = EMPTY, reset: bool = True) -> Plan:
    result = PassResult(node.name, NOW, 0.1, (CheckResult("gpu", RunState.RAN, findings, 0.1),))
    observed = Observed(asked=frozenset(Read), node=node, views=WIDE)
    situation = Situation(result, state, (), observed, NOW, False, True, False, {}, "boot-a")
    made = plan(situation, PolicyRules(SETTINGS, Reasons(), reset=reset, reconcile_interval=300.0))
    assert isinstance(made, Plan)
    return made


OUT_FOR_REMAP = _capture("idle-drain-healthd")._replace(reason="healthd: ROW_REMAP_PENDING gpu3")


def test_a_reset_class_finding_on_a_drained_idle_node_resets_its_gpu_once() -> None:
    made = _reset_plan(OUT_FOR_REMAP, REMAP)
    assert made.steps == (Step.RESET,) and made.reset is not None
    assert (made.reset.pci, made.reset.key) == ("3b:00", REMAP.key)
    done = conclude(made, Executed(done=(Step.RESET,), reset="done"), EMPTY, NOW)
    assert done.state.reset_tried == (REMAP.key,) and not done.applied
    again = _reset_plan(OUT_FOR_REMAP, REMAP, state=done.state)
    assert again.steps == (), "still there after the reset: a person's, not a reset loop"
    clean = _reset_plan(OUT_FOR_REMAP, state=done.state)
    assert clean.state.reset_tried == () and clean.steps == (Step.RESUME,)


def test_the_reset_try_is_saved_before_nvidia_smi_runs() -> None:
    # slurmd kills the hook at 60 s, during a reset that takes longer: the next pass must not start another.
    made = _reset_plan(OUT_FOR_REMAP, REMAP)
    assert made.interrupted is not None and made.interrupted.reset_tried == (REMAP.key,)
    killed = _reset_plan(OUT_FOR_REMAP, REMAP, state=made.interrupted)
    assert killed.steps == () and killed.reset is None


def test_a_refused_reset_is_tried_once_too() -> None:
    made = _reset_plan(OUT_FOR_REMAP, REMAP)
    done = conclude(made, Executed(reset="refused", reset_message="processes use the GPU: 977"), EMPTY, NOW)
    assert done.state.reset_tried == (REMAP.key,)


@pytest.mark.parametrize(
    ("node", "reset", "why"),
    [
        (_capture("allocated"), True, "not drained yet: the take-out comes first"),
        (
            _capture("allocated")._replace(flags=frozenset({"DRAIN"}), reason="healthd: ROW_REMAP_PENDING gpu3"),
            True,
            "jobs run",
        ),
        (_capture("idle-drain-healthd")._replace(reason="admin: DIMM"), True, "someone else's drain"),
        (OUT_FOR_REMAP, False, "[remediation] reset is off"),
        (OUT_FOR_REMAP._replace(flags=frozenset({"DRAIN", "MAINTENANCE", "RESERVED"})), True, "maintenance"),
    ],
)
def test_no_reset_unless_healthd_drained_the_idle_node_and_reset_is_on(node: NodeInfo, reset: bool, why: str) -> None:
    assert Step.RESET not in _reset_plan(node, REMAP, reset=reset).steps, why


def test_a_reset_finding_without_a_pci_is_not_reset() -> None:
    bare = replace(REMAP, details={"remedy": "reset"})
    assert _reset_plan(OUT_FOR_REMAP, bare).steps == ()


def test_a_pass_cut_short_before_the_reboot_was_sent_sends_it_next_pass() -> None:
    made = _plan(_capture("allocated"), XID_79)
    assert made.interrupted is not None and made.interrupted.reboot is not None
    drained = _capture("idle-drain-healthd")._replace(state="ALLOCATED", reason=REBOOT_REASON)
    retried = _plan(drained, XID_79, state=made.interrupted)
    assert retried.steps == (Step.REBOOT,)
    pending = drained._replace(flags=frozenset({"DRAIN", "REBOOT_REQUESTED"}))
    sent = _plan(pending, XID_79, state=made.interrupted)
    assert sent.steps == () and sent.state.reboot is not None, "it did reach Slurm: wait for it"


def test_remediation_config_is_off_by_default_and_checks_the_nvidia_smi_path() -> None:
    from healthd.config.models import ConfigError

    remediation = parse_config("", "healthd.toml", {}).config.remediation
    assert (remediation.reboot, remediation.reset, str(remediation.nvidia_smi)) == (False, False, "/usr/bin/nvidia-smi")
    with pytest.raises(ConfigError, match="nvidia_smi") as caught:
        parse_config('[remediation]\nnvidia_smi = "nvidia-smi"\n', "healthd.toml", {})
    assert "absolute path" in str(caught.value)
    with pytest.raises(ConfigError, match="reboot"):
        parse_config('[remediation]\nreboot = "yes please"\n', "healthd.toml", {})


def test_a_repair_the_breaker_holds_back_is_not_kept_nor_its_raise_counted() -> None:
    """A held take-out was never carried out: keeping its repair would take out a node whose next pass is clean."""
    escalation = EscalationSettings(repeats=3)
    full = {"batch": PartitionView("batch", 3, ((False, NOW - 60.0, "node9"),))}
    repeats = {XID_48.key: ("GPU-1", 3)}
    settings = PolicySettings(max_out_fraction=0.34)
    made = _plan(_capture("allocated"), XID_48, views=full, settings=settings, repeats=repeats, escalation=escalation)
    # A partition whose breaker holds is in a wave (healthd.plan.wave): no repair is even decided.
    assert made.decision.action is Action.HOLD and made.decision.reason == "healthd: XID_48 gpu0"
    assert made.state.repair is None and made.state.pending is None
    assert list(made.uncounted) == [XID_48.key] and "circuit breaker" in made.uncounted[XID_48.key]
    clean = _plan(_capture("allocated"), state=made.state, views=full, settings=settings, escalation=escalation)
    assert clean.decision.action is Action.NONE, "a clean pass of a held node has nothing pending"


def test_a_code_other_nodes_of_the_partition_are_out_for_does_not_escalate() -> None:
    """The same code on another node of the partition is a shared fault (a switch, a driver), not a repeat here."""
    escalation = EscalationSettings(repeats=3)
    repeats = {XID_48.key: ("GPU-1", 3)}
    shared = {"batch": PartitionView("batch", 4, ((False, NOW - 60.0, "node9"),), (("node9", "XID_48"),))}
    made = _plan(_capture("allocated"), XID_48, views=shared, repeats=repeats, escalation=escalation)
    assert made.decision.reason == "healthd: XID_48 gpu0" and made.state.repair is None
    assert made.uncounted == {XID_48.key: "other nodes of the partition were out for XID_48"}
    other = {"batch": PartitionView("batch", 4, ((False, NOW - 60.0, "node9"),), (("node9", "XID_79"),))}
    alone = _plan(_capture("allocated"), XID_48, views=other, repeats=repeats, escalation=escalation)
    assert alone.decision.reason == "healthd: REPAIR XID_48 gpu0 x3" and alone.uncounted == {}
