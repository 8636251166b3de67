"""The policy state file through a pass: a damaged key is reported by name, the rest is acted on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from healthd.plan.acks import FindingRef
from healthd.plan.state import BreakerHold, PolicyState, Repair

DAMAGED = {"skips_breaker": "false"}
NAMED = "policy.json: bad policy state: skips_breaker: TypeError: 'false' is not true or false"


def _save(tmp_path: Path, state: PolicyState) -> Path:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700, exist_ok=True)
    (state_dir / "policy.json").write_text(json.dumps({**state.to_dict(), **DAMAGED}))
    return state_dir / "policy.json"


def test_a_damaged_key_is_reported_and_the_rest_of_the_state_kept(
    write_config: Callable[..., Path], cli_json: Any, tmp_path: Path
) -> None:
    config = write_config("")
    took_out = PolicyState(took_out=(FindingRef("gpu/XID_79/gpu0"),))
    policy = _save(tmp_path, took_out)
    _, document = cli_json("check", "--once", "--json", "--config", str(config))
    errors = document["action"]["errors"]
    assert any(NAMED in error for error in errors), errors
    saved = PolicyState.from_dict(json.loads(policy.read_text()))
    assert saved.took_out == took_out.took_out, "what healthd took out is not forgotten"
    assert saved.skips_breaker is False


def test_ack_repaired_names_a_damaged_key_and_ends_the_repair(
    write_config: Callable[..., Path], cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    config = write_config("")
    repair = Repair("XID_48", "0000:3b:00", "GPU-aaaa", 3, "CRITICAL", 100.0)
    in_repair = PolicyState(took_out=(FindingRef("gpu/XID_48/0000:3b:00"),), repair=repair)
    policy = _save(tmp_path, in_repair)
    code, out, err = cli("ack", "--repaired", "GPU-aaaa", "--config", str(config))
    assert code == 0 and "the next clean pass puts the node back" in out and NAMED in err, err
    saved = PolicyState.from_dict(json.loads(policy.read_text()))
    assert saved.repair is None and saved.took_out == in_repair.took_out
    assert saved.repair_ended, "the REPAIR drain is now healthd's to lift on the next clean pass"


def test_problems_of_the_policy_and_acks_files_are_reported_once_in_the_order_read(
    write_config: Callable[..., Path], cli_json: Any, tmp_path: Path
) -> None:
    config = write_config("")
    _save(tmp_path, PolicyState())
    (tmp_path / "state" / "acks.json").write_text(json.dumps({"acks": [{"key": 3}, "not an object"]}))
    _, document = cli_json("check", "--once", "--json", "--config", str(config))
    errors = document["action"]["errors"]
    acks = [e for e in errors if "acks.json: acks[" in e]
    assert [e.split("acks.json: ")[1].split(" ignored")[0] for e in acks] == ["acks[0]", "acks[1]"], errors
    assert errors.index(acks[0]) > next(i for i, e in enumerate(errors) if NAMED in e), errors


def test_a_bad_list_of_holders_keeps_the_hold_and_its_backoff() -> None:
    """``held.by`` only orders a shard's reads: a damaged one is read as none, the hold and its backoff kept."""
    held = {"why": "full", "since": 100.0, "attempts": 3, "next_check": 400.0}
    for by in ("node1", [1, 2], None):
        assert BreakerHold.from_dict({**held, "by": by}) == BreakerHold("full", 100.0, 3, 400.0, ())
    assert BreakerHold.from_dict({**held, "by": ["node1"]}).by == ("node1",)
    assert BreakerHold.from_dict(held).to_dict() == held, "no by is written when there is none"
