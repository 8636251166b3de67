"""What the store records: finding transitions, units, boots and inventories, actions, acks, reboots."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Callable

from healthd.model import Device, Finding, PassResult, RunState, Status
from healthd.plan.acks import FindingRef
from healthd.store.history import MESSAGE_LIMIT, PROBLEM_CODE, History
from healthd.store.historyschema import Kind, RebootPhase

Make = Callable[..., PassResult]
Find = Callable[..., Finding]

GPU3 = Device("gpu", 3, "00000000:3B:00.0", "GPU-aaaa", "1650000000001")


def _raised(store: History, codes: list[str], unit: str, since: float) -> int:
    """How many times one of ``codes`` was raised on ``unit`` since ``since``, from the events as recorded."""
    return sum(1 for e in store.events(since=since, kinds=[Kind.RAISED]) if e.code in codes and e.unit == unit)


def kinds(store: History) -> list[tuple[str, str]]:
    return [(e.kind.value, f"{e.check}/{e.code}/{e.subject}") for e in store.events()]


def test_raised_then_unchanged_then_changed_then_cleared(store: History, make_pass: Make, finding: Find) -> None:
    ecc = finding("gpu", "ECC_UNCORRECTED", "gpu3", count=2)
    mount = finding("mounts", "MOUNT_MISSING", "/scratch", Status.CRITICAL)
    raised = store.record_pass(make_pass(ecc, mount), at=100.0, boot_id="b1")
    # In the pass's order (its checks', then each check's findings').
    assert [(e.kind, e.code) for e in raised] == [(Kind.RAISED, "MOUNT_MISSING"), (Kind.RAISED, "ECC_UNCORRECTED")]
    assert store.record_pass(make_pass(ecc, mount), at=400.0, boot_id="b1") == ()

    worse = finding("gpu", "ECC_UNCORRECTED", "gpu3", count=5)
    changed = store.record_pass(make_pass(worse, mount), at=700.0, boot_id="b1")
    assert [(e.kind, e.details["count"]) for e in changed] == [(Kind.CHANGED, 5)]

    cleared = store.record_pass(make_pass(worse), at=1000.0, boot_id="b1")
    assert [(e.kind, e.subject, e.status) for e in cleared] == [(Kind.CLEARED, "/scratch", "CRITICAL")]
    assert [f.key for f in store.open_findings()] == ["gpu/ECC_UNCORRECTED/gpu3"]
    assert store.open_findings()[0].since == 100.0  # a change keeps the time it was raised


def test_a_change_of_status_or_message_is_a_change(store: History, make_pass: Make, finding: Find) -> None:
    store.record_pass(make_pass(finding("pcie", "PCIE_SPEED_LOW", "0000:3b:00.0", Status.WARNING)), at=1, boot_id="b")
    graver = finding("pcie", "PCIE_SPEED_LOW", "0000:3b:00.0", Status.CRITICAL)
    assert [e.kind for e in store.record_pass(make_pass(graver), at=2, boot_id="b")] == [Kind.CHANGED]
    reworded = finding("pcie", "PCIE_SPEED_LOW", "0000:3b:00.0", Status.CRITICAL, message="now Gen3")
    assert [e.kind for e in store.record_pass(make_pass(reworded), at=3, boot_id="b")] == [Kind.CHANGED]


def test_a_new_event_id_on_an_open_finding_is_a_new_raise(store: History, make_pass: Make, finding: Find) -> None:
    first = finding("xid", "XID_79", "gpu3", event="b1:100", count=1)
    store.record_pass(make_pass(first), at=1, boot_id="b1")
    same_event = finding("xid", "XID_79", "gpu3", event="b1:100", count=3)
    assert [e.kind for e in store.record_pass(make_pass(same_event), at=2, boot_id="b1")] == [Kind.CHANGED]
    new_event = finding("xid", "XID_79", "gpu3", event="b1:900", count=4)
    assert [e.kind for e in store.record_pass(make_pass(new_event), at=3, boot_id="b1")] == [Kind.RAISED]
    assert _raised(store, ["XID_79"], "gpu3", since=0) == 2
    assert store.open_findings()[0].since == 3  # the new occurrence is open since it was raised


def test_a_check_that_did_not_finish_clears_nothing(store: History, make_pass: Make, finding: Find) -> None:
    ib = finding("infiniband", "IB_PORT_DOWN", "mlx5_0:1")
    store.record_pass(make_pass(ib), at=1, boot_id="b")
    for state in (RunState.TIMEOUT, RunState.ERROR, RunState.STUCK):
        assert store.record_pass(make_pass(states={"infiniband": state}), at=2, boot_id="b") == ()
    # Left out of the pass altogether (`check --once --only mounts`): nothing said about it either.
    assert store.record_pass(make_pass(checks=("mounts",)), at=3, boot_id="b") == ()
    assert [f.key for f in store.open_findings()] == ["infiniband/IB_PORT_DOWN/mlx5_0:1"]


def test_a_check_that_is_not_applicable_or_disabled_clears_its_findings(
    store: History, make_pass: Make, finding: Find
) -> None:
    store.record_pass(make_pass(finding("gpu", "GPU_MISSING", "gpus"), finding("pcie", "X", "p")), at=1, boot_id="b")
    states = {"gpu": RunState.NOT_APPLICABLE, "pcie": RunState.DISABLED}
    cleared = store.record_pass(make_pass(states=states), at=2, boot_id="b")
    assert sorted(e.check for e in cleared if e.kind is Kind.CLEARED) == ["gpu", "pcie"]
    assert store.open_findings() == ()


def test_ok_notes_are_recorded_too(store: History, make_pass: Make, finding: Find) -> None:
    # An application Xid (13) is graded OK, yet its count on a GPU is what finds a lemon node.
    note = finding("xid", "XID_13", "gpu1", Status.OK, event="b:5")
    assert [e.status for e in store.record_pass(make_pass(note), at=1, boot_id="b")] == ["OK"]


def test_a_duplicate_key_in_one_pass_counts_once(store: History, make_pass: Make, finding: Find) -> None:
    one = finding("mounts", "MOUNT_HUNG", "/a", message="first")
    two = finding("mounts", "MOUNT_HUNG", "/a", message="second")
    assert len(store.record_pass(make_pass(one, two), at=1, boot_id="b")) == 1
    assert store.record_pass(make_pass(one, two), at=2, boot_id="b") == ()


def test_units_follow_the_gpu_not_its_index(store: History, make_pass: Make, finding: Find) -> None:
    store.record_boot(at=1, boot_id="b1", gpus=[GPU3, Device("gpu", 0, "0000:18:00.0", None, "1650000000002")])
    events = store.record_pass(
        make_pass(
            finding("gpu", "ECC_UNCORRECTED", "gpu3", uuid="GPU-aaaa", pci_bus_id="00000000:3B:00.0"),
            finding("xid", "XID_79", "gpu3", event="b1:1", pci="0000:3b:00"),  # no uuid in the log: by address
            finding("pcie", "PCIE_WIDTH_LOW", "0000:3b:00.0"),  # the subject is the address
            finding("xid", "XID_48", "gpu0", event="b1:2", pci="0000:18:00"),  # no uuid known: the serial
            finding("infiniband", "IB_PORT_DOWN", "mlx5_0:1"),
            finding("mounts", "MOUNT_MISSING", "/scratch"),
        ),
        at=2,
        boot_id="b1",
    )
    units = {e.code: e.unit for e in events}
    assert units == {
        "ECC_UNCORRECTED": "GPU-aaaa",
        "XID_79": "GPU-aaaa",
        "PCIE_WIDTH_LOW": "GPU-aaaa",
        "XID_48": "1650000000002",
        "IB_PORT_DOWN": "mlx5_0:1",
        "MOUNT_MISSING": "/scratch",
    }


def test_a_gpu_swapped_at_the_same_address_starts_its_count_afresh(
    store: History, make_pass: Make, finding: Find
) -> None:
    xid = finding("xid", "XID_79", "gpu3", event="b1:1", pci="0000:3b:00")
    store.record_boot(at=1, boot_id="b1", gpus=[GPU3])
    store.record_pass(make_pass(xid), at=2, boot_id="b1")
    assert _raised(store, ["XID_79"], "GPU-aaaa", since=0) == 1

    new = Device("gpu", 3, "00000000:3B:00.0", "GPU-bbbb", "1650000000009")
    assert store.record_boot(at=3, boot_id="b2", gpus=[new]) is True
    boot = next(store.events(kinds={Kind.BOOT}, subject="b2"))
    assert boot.details["previous_boot"] == "b1"
    assert boot.details["replaced"] == [
        {"pci_bus_id": "00000000:3B:00.0", "id": "uuid", "before": "GPU-aaaa", "after": "GPU-bbbb"}
    ]
    assert "replaced: 00000000:3B:00.0 GPU-aaaa -> GPU-bbbb" in boot.message
    store.record_pass(make_pass(finding("xid", "XID_79", "gpu3", event="b2:1", pci="0000:3b:00")), at=4, boot_id="b2")
    assert _raised(store, ["XID_79"], "GPU-bbbb", since=0) == 1
    assert _raised(store, ["XID_79"], "GPU-aaaa", since=0) == 1
    assert _raised(store, ["XID_79", "XID_48"], "GPU-bbbb", since=5) == 0  # outside the window


def test_boot_is_recorded_once_and_its_inventory_fills_in(store: History) -> None:
    assert store.record_boot(at=1, boot_id="b1", gpus=[Device("gpu", 3, "0000:3b:00.0", None, None)]) is True
    assert store.record_boot(at=2, boot_id="b1", gpus=[Device("gpu", 3, "0000:3b:00.0", None, None)]) is False
    assert [e.kind for e in store.events()] == [Kind.BOOT]
    # NVML could not read the UUID in the first pass, and GPU 0 was not visible yet.
    later = [Device("gpu", 3, "0000:3b:00.0", "GPU-aaaa", "s3"), Device("gpu", 0, "0000:18:00.0", "GPU-0000", "s0")]
    assert store.record_boot(at=3, boot_id="b1", gpus=later) is False
    inventory = list(store.events(kinds={Kind.INVENTORY}))
    assert [g["index"] for g in inventory[0].details["gpus"]] == [0, 3]
    assert store.boots()[0].gpus == (Device("gpu", 0, "0000:18:00.0", "GPU-0000", "s0"), later[0])
    assert store.boot_id == "b1"


def test_actions_acks_and_reboots(store: History) -> None:
    store.record_boot(at=1, boot_id="b1")
    action = store.record_action(
        at=2,
        action="take_out_now",
        outcome="applied",
        node="node0001",
        reason="healthd: XID_79 gpu3",
        details={"steps": "drain,confirm,down"},
    )
    assert action is not None and (action.code, action.subject, action.status) == (
        "take_out_now",
        "node0001",
        "applied",
    )
    acks = store.record_ack(at=3, refs=[FindingRef("mounts/MOUNT_MISSING//scratch/a", None)], by="cli")
    assert (acks[0].check, acks[0].code, acks[0].subject) == ("mounts", "MOUNT_MISSING", "/scratch/a")
    assert acks[0].details == {"by": "cli", "event": None}
    store.record_reboot(at=4, phase=RebootPhase.REQUESTED, boot_id="b1", reason="XID_79 gpu3")
    store.record_boot(at=5, boot_id="b2")
    store.record_reboot(at=6, phase=RebootPhase.DONE, boot_id="b1")
    reboots = list(store.events(kinds={Kind.REBOOT_REQUESTED, Kind.REBOOT_DONE}, subject="b1"))
    assert [(e.kind, e.boot_id) for e in reboots] == [(Kind.REBOOT_REQUESTED, "b1"), (Kind.REBOOT_DONE, "b2")]
    assert [e.boot_id for e in store.events()] == ["b1", "b1", "b1", "b1", "b2", "b2"]


def test_text_is_stored_as_given_and_bounded(store: History, make_pass: Make, finding: Find) -> None:
    hostile = "evil\n<0>healthd: forged\x1b[2J" + "x" * (2 * MESSAGE_LIMIT)
    weird = finding("mounts", "MOUNT_HUNG", "/a\nb", message=hostile, rate=math.nan, big=math.inf, text="\x00")
    event = store.record_pass(make_pass(weird), at=1, boot_id="b")[0]
    assert len(event.message) == MESSAGE_LIMIT and event.message.startswith("evil\n<0>")
    assert event.details == {"big": "inf", "rate": "nan", "text": "\x00"}
    assert json.loads(json.dumps(event.to_dict(), allow_nan=False))["subject"] == "/a\nb"
    huge = finding("mounts", "MOUNT_HUNG", "/b", text="y" * 20000)
    assert store.record_pass(make_pass(weird, huge), at=2, boot_id="b")[0].details["truncated"] is True


def test_details_json_cannot_encode_are_kept_as_text(store: History, make_pass: Make, finding: Find) -> None:
    """A NaN nested in a list or a mapping, a value JSON has no form for, a non-text key, a loop:
    the writer never raises, and every event is valid JSON."""
    loop: list[object] = []
    loop.append(loop)
    odd = finding(
        "gpu",
        "GPU_ODD",
        "gpu0",
        nested={"rates": [1.5, math.nan, -math.inf], (1, 2): {3}},
        thing=object,
        loop=loop,
    )
    event = store.record_pass(make_pass(odd), at=1, boot_id="b")[0]
    assert store.problems == []
    assert event.details["nested"] == {"rates": [1.5, "nan", "-inf"], "(1, 2)": "{3}"}
    assert event.details["thing"] == "<class 'object'>"
    assert isinstance(event.details["loop"], list)
    assert json.loads(json.dumps(event.to_dict(), allow_nan=False))["details"]["nested"]["rates"][1] == "nan"


def test_the_node_name_is_kept(state_dir: Path, make_pass: Make) -> None:
    with History.open(state_dir) as history:
        history.record_pass(make_pass(), at=1, boot_id="b")
    with History.open(state_dir) as history:
        assert history.node == "node0001"


def test_the_database_is_private(state_dir: Path, store: History, make_pass: Make, finding: Find) -> None:
    store.record_pass(make_pass(finding("gpu", "GPU_MISSING", "gpus")), at=1, boot_id="b")
    files = sorted(p.name for p in state_dir.iterdir())
    assert files == ["history.sqlite", "history.sqlite-shm", "history.sqlite-wal"]
    for name in files:
        info = os.stat(state_dir / name)
        assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.geteuid(), name


def test_problems_become_one_unknown_finding(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    history = History.open(blocked / "state")  # the state directory cannot be created under a file
    assert not history.usable
    assert history.record_boot(at=1, boot_id="b") is False
    found = history.problem_finding("healthd")
    assert found is not None
    assert (found.check, found.status, found.code) == ("healthd", Status.UNKNOWN, PROBLEM_CODE)
    assert found.message.startswith(f"cannot open the history {blocked}/state/history.sqlite: Not a directory")
    assert history.problem_finding("healthd") is None  # reported once


def test_an_uncounted_raise_is_recorded_and_taken_back_from_the_repeats(
    store: History, make_pass: Make, finding: Find
) -> None:
    """A raise the breaker held, or one other nodes of the partition shared, is history but no repeat."""
    first = finding("xid", "XID_79", "gpu3", event="b1:100")
    store.record_pass(make_pass(first), at=1, boot_id="b1")
    held = finding("xid", "XID_79", "gpu3", event="b1:200")
    written = store.record_pass(make_pass(held), at=2, boot_id="b1", uncounted={held.key: "held back"})
    assert [(e.kind, e.message) for e in written] == [(Kind.RAISED, held.message), (Kind.UNCOUNTED, "held back")]
    later = finding("xid", "XID_79", "gpu3", event="b1:300")
    assert store.repeats([later], since=0) == {later.key: ("gpu3", 2)}, "the first raise and this one: not the held"
    assert _raised(store, ["XID_79"], "gpu3", since=0) == 2, "the held raise is still in the history"
