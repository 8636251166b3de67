"""The policy state file through a pass: a damaged key is reported by name, the rest is acted on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from healthd.acks import FindingRef
from healthd.policy import PolicyState


def test_a_damaged_key_is_reported_and_the_rest_of_the_state_kept(
    write_config: Callable[..., Path], cli_json: Any, tmp_path: Path
) -> None:
    config = write_config("")
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700, exist_ok=True)
    took_out = PolicyState(took_out=(FindingRef("gpu/XID_79/gpu0"),), clean_streak=0)
    (state_dir / "policy.json").write_text(json.dumps({**took_out.to_dict(), "skips_breaker": "false"}))
    _, document = cli_json("check", "--once", "--json", "--config", str(config))
    errors = document["action"]["errors"]
    named = "policy.json: bad policy state: skips_breaker: TypeError: 'false' is not true or false"
    assert any(named in error for error in errors), errors
    saved = PolicyState.from_dict(json.loads((state_dir / "policy.json").read_text()))
    assert saved.took_out == took_out.took_out, "what healthd took out is not forgotten"
    assert saved.skips_breaker is False
