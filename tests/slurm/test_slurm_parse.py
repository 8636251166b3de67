"""The adapter's pure parts over real captures (22.05 text) and the documented 23.02 JSON format."""

from __future__ import annotations

from pathlib import Path

import pytest

from healthd.config import SlurmSettings, parse_config
from healthd.cycle import run_cycle
from healthd.engine import Engine
from healthd.model import Finding, Status
from healthd.plugin import CheckContext, CheckSettings, CheckSpec
from healthd.slurm import (
    SlurmError,
    SlurmNotFound,
    find_binary,
    make_reason,
    out_fraction,
    owned,
    parse_show_node_json,
    parse_show_node_line,
    parse_show_node_text,
    sanitize,
)

CAPTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"


def _line(name: str) -> str:
    return (CAPTURES / name).read_text()


@pytest.mark.parametrize(
    ("capture", "state", "flags", "reason", "user"),
    [
        ("show-node-22.05-idle.txt", "IDLE", set(), "", ""),
        ("show-node-22.05-allocated.txt", "ALLOCATED", set(), "", ""),
        ("show-node-22.05-idle-drain-healthd.txt", "IDLE", {"DRAIN"}, "healthd: MOUNT_MISSING /scratch", "root"),
        ("show-node-22.05-draining-admin.txt", "ALLOCATED", {"DRAIN"}, "admin: bad DIMM, ticket 42", "root"),
        ("show-node-22.05-down-drain.txt", "IDLE", {"DRAIN"}, "healthd: XID_79 gpu0", "root"),
        ("show-node-22.05-down-admin.txt", "DOWN", set(), "admin down", "root"),
        ("show-node-22.05-reboot-requested.txt", "ALLOCATED", {"DRAIN", "REBOOT_REQUESTED"}, "kernel update", "root"),
        (
            "show-node-22.05-reboot-issued.txt",
            "DOWN",
            {"DRAIN", "REBOOT_ISSUED"},
            "kernel update : reboot issued",
            "root",
        ),
    ],
)
def test_parse_captured_22_05_lines(capture: str, state: str, flags: set[str], reason: str, user: str) -> None:
    node = parse_show_node_line(_line(capture))
    assert (node.state, set(node.flags), node.reason, node.reason_user) == (state, flags, reason, user)
    assert node.partitions == ("batch",)


def test_derived_properties() -> None:
    assert parse_show_node_line(_line("show-node-22.05-reboot-requested.txt")).reboot_pending
    draining = parse_show_node_line(_line("show-node-22.05-draining-admin.txt"))
    assert draining.drained and draining.busy and draining.out and not draining.down
    assert parse_show_node_line(_line("show-node-22.05-down-admin.txt")).out


def test_parse_all_nodes_and_count_healthd_out() -> None:
    nodes = parse_show_node_text(_line("show-node-22.05-all.txt"))
    assert [n.name for n in nodes] == ["node1", "node2", "node3"]
    assert out_fraction(nodes, ["batch"], "healthd:") == {"batch": (1, 3)}


def test_parse_json_sample() -> None:
    nodes = parse_show_node_json((CAPTURES / "show-node-23.02-json.json").read_text())
    first, second, third, fourth = nodes
    assert (first.state, set(first.flags), first.reason, first.partitions) == (
        "MIXED",
        {"DRAIN"},
        "healthd: XID_79 gpu3 (+1 more)",
        ("gpu", "debug"),
    )
    assert second.state == "IDLE" and not second.out and second.reason_user == ""
    assert third.reboot_pending and third.reason_user == "alice"
    assert fourth.down and "NOT_RESPONDING" in fourth.flags


@pytest.mark.parametrize(
    "garbage", ["", "Hello world", "NodeName=x Arch=x86_64", '{"nodes": 3}', "{not json", '{"nodes": [{"name": "x"}]}']
)
def test_garbage_is_a_clear_error(garbage: str) -> None:
    with pytest.raises(SlurmError):
        if garbage.startswith("{"):
            parse_show_node_json(garbage)
        else:
            parse_show_node_line(garbage)


def test_reason_is_sanitized_and_short() -> None:
    finding = Finding("mounts", Status.CRITICAL, "MOUNT_HUNG", '/mnt/x" State=RESUME\n\x1b[31méé', "m")
    reason = make_reason("healthd:", [finding])
    assert reason.startswith("healthd: MOUNT_HUNG /mnt/x_ State_RESUME")
    assert all(c.isascii() and c.isprintable() for c in reason) and '"' not in reason and "=" not in reason
    long = Finding("x", Status.WARNING, "CODE", "s" * 200, "m")
    many = [long, *[Finding("x", Status.WARNING, "C", str(i), "m") for i in range(12)]]
    assert len(make_reason("healthd:", many)) <= 64
    assert make_reason("healthd:", many).endswith("(+12 more)")
    assert sanitize("a\tb\x00c") == "a b_c"


def test_ownership_needs_the_prefix_as_a_word() -> None:
    assert owned("healthd: X y", "healthd:")
    assert not owned("healthd:x y", "healthd:")
    assert not owned("admin: healthd: X", "healthd:")


def test_find_binary(tmp_path: Path) -> None:
    (tmp_path / "scontrol").write_text("")
    assert find_binary("scontrol", tmp_path) == tmp_path / "scontrol"
    with pytest.raises(SlurmNotFound, match=r"set \[slurm\]\.bin_dir"):
        find_binary("scontrol", tmp_path / "nope")


class _Settings(CheckSettings):
    pass


def _critical(ctx: CheckContext[_Settings]) -> list[Finding]:
    return [ctx.finding(Status.CRITICAL, "MOUNT_MISSING", "/scratch", "not mounted")]


def test_missing_scontrol_is_reported_not_raised(tmp_path: Path) -> None:
    text = f'[paths]\nstate_dir = "{tmp_path}/state"\n[slurm]\nbin_dir = "{tmp_path}/nope"\nnode_name = "n1"\n'
    spec = CheckSpec(name="fake", description="", settings=_Settings, run=_critical)
    engine = Engine(parse_config(text, "t.toml", {"fake": _Settings}), [spec])
    outcome = run_cycle(engine)
    assert outcome.exit_code == 2
    assert outcome.action.pending and not outcome.action.applied
    assert "scontrol not found" in outcome.action.errors[0]
    assert outcome.document["action"]["decision"] == "take_out_now"
    saved = (tmp_path / "state" / "last-pass.json").read_text()
    assert '"pending":true' in saved


def test_timeout_setting_bounds() -> None:
    assert SlurmSettings().timeout == 15.0
