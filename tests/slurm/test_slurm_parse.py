"""The adapter's pure parts over real captures (22.05 text) and the documented 23.02 JSON format."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from healthd_testkit.paths import FIXTURES as ALL_FIXTURES

from healthd.checks.plugin import CheckContext, CheckSettings, CheckSpec
from healthd.config.models import ConfigError, RunnerSettings, SlurmSettings, parse_config
from healthd.cycle.engine import Engine
from healthd.cycle.pipeline import PassRequest, PassTools, run_pass
from healthd.model import Finding, Status
from healthd.plan.breaker import group_views, out_by_healthd
from healthd.plan.spread import act_delay
from healthd.slurm.adapter import (
    SlurmClient,
    SlurmError,
    node_in_groups,
    parse_show_node_json,
    parse_show_node_line,
    parse_show_node_text,
    parse_sinfo_groups,
    parse_sinfo_node,
    split_reason,
)
from healthd.slurm.nodestate import NodeGroup, PartitionView
from healthd.slurm.reasons import Reasons, sanitize
from healthd.store.lock import StateLock

CAPTURES = ALL_FIXTURES / "slurm"


def _line(name: str) -> str:
    return (CAPTURES / name).read_text()


@pytest.mark.parametrize(
    ("capture", "state", "flags", "reason", "user"),
    [
        ("show-node-22.05-idle.txt", "IDLE", set(), "", ""),
        ("show-node-22.05-allocated.txt", "ALLOCATED", set(), "", ""),
        ("show-node-22.05-idle-drain-healthd.txt", "IDLE", {"DRAIN"}, "healthd: MOUNT_MISSING /scratch", "root"),
        ("show-node-22.05-draining-admin.txt", "ALLOCATED", {"DRAIN"}, "admin: bad DIMM, ticket 42", "root"),
        ("show-node-22.05-down-drain.txt", "DOWN", {"DRAIN"}, "healthd: XID_79 gpu0", "root"),
        ("show-node-22.05-idle-drain-after-take-out.txt", "IDLE", {"DRAIN"}, "healthd: XID_79 gpu0", "root"),
        ("show-node-22.05-idle-drain-comment.txt", "IDLE", {"DRAIN"}, "healthd: MOUNT_MISSING /scratch", "root"),
        (
            "show-node-22.05-idle-drain-comment-extra.txt",
            "IDLE",
            {"DRAIN"},
            "healthd: MOUNT_MISSING /scratch",
            "root",
        ),
        ("show-node-22.05-allocated-fail-admin.txt", "ALLOCATED", {"FAIL"}, "admin: PSU fault, ticket 7", "root"),
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
    failing = parse_show_node_line(_line("show-node-22.05-allocated-fail-admin.txt"))
    assert failing.out and failing.failed and failing.busy and not failing.drained
    taken_out = parse_show_node_line(_line("show-node-22.05-down-drain.txt"))
    assert taken_out.down and taken_out.drained and taken_out.state_text == "DOWN+DRAIN"


def test_fields_after_the_reason_are_not_part_of_it() -> None:
    """Slurm prints Comment=/Extra= after ``Reason=... [user@time]``; without the stamp they still end it."""
    line = _line("show-node-22.05-idle-drain-comment-extra.txt").strip()
    assert line.endswith("Comment=rack 12 swap pending Extra=foo=bar")
    node = parse_show_node_line(line)
    assert node.reason == "healthd: MOUNT_MISSING /scratch" and node.partitions == ("batch",)
    stampless = line.replace(" [root@", " (root@").replace("] Comment=", ") Comment=")
    assert parse_show_node_line(stampless).reason.endswith("(root@" + line.split("[root@")[1].split("]")[0] + ")")
    assert split_reason("admin: a [b] c [bob@2024-01-01T00:00:00] Comment=x") == (
        "admin: a [b] c",
        "bob",
        " Comment=x",
        datetime(2024, 1, 1).timestamp(),
    )


def test_parse_all_nodes() -> None:
    nodes = parse_show_node_text(_line("show-node-22.05-all.txt"))
    assert [n.name for n in nodes] == ["node1", "node2", "node3"]
    assert nodes[0].reason_time == datetime(2026, 11, 22, 4, 47, 38).timestamp()
    assert nodes[1].reason_time is None, "no reason, no stamp"


def _stamp(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()


def test_sinfo_node_lines_give_state_reason_user_time_and_partitions() -> None:
    text = _line("sinfo-22.05-nodes.txt")
    node1, node3, far = (parse_sinfo_node(text, n) for n in ("node1", "node3", "n00007"))
    assert node1 is not None and node3 is not None and far is not None
    assert (node1.state, set(node1.flags), node1.reason, node1.reason_user) == (
        "DOWN",
        {"DRAIN"},
        "healthd: XID_79 gpu0",
        "root",
    )
    assert node1.partitions == ("batch",), "the default partition's '*' is sinfo's mark, not its name"
    assert node1.reason_time == _stamp("2026-11-24T13:53:30") and node1.out and node1.boot_time is None
    assert node3.reason == "admin: bad DIMM | ticket 42", "a '|' in the last field stays in the reason"
    assert "NOT_RESPONDING" in far.flags and far.drained and far.state == "UNKNOWN"
    assert parse_sinfo_node(text, "node9") is None


def test_sinfo_node_in_two_partitions_and_without_a_reason() -> None:
    text = "node4|gpu*|idle|Unknown|Unknown|none\nnode4|debug|idle|Unknown|Unknown|none\n"
    node = parse_sinfo_node(text, "node4")
    assert node is not None
    assert (node.partitions, node.reason, node.reason_user, node.reason_time) == (("gpu", "debug"), "", "", None)


def test_sinfo_groups_count_the_partition_and_list_only_healthds_out_nodes() -> None:
    groups = parse_sinfo_groups(_line("sinfo-22.05-groups-10k.txt"))
    assert sum(g.count for g in groups) == 10003
    assert {g.reason_user for g in groups} == {"root"}
    views = group_views(groups, ("batch",), Reasons())
    mount, xid = _stamp("2026-11-24T15:12:27"), _stamp("2026-11-24T15:12:26")
    # DOWN first (it kept its place), then by stamp and name; node3's drain is the administrator's.
    assert views == {
        "batch": PartitionView(
            "batch",
            10003,
            ((False, xid, "node1"), (True, mount, "n00007"), (True, mount, "n00009"), (True, mount, "node2")),
            (("n00007", "MOUNT_MISSING"), ("n00009", "MOUNT_MISSING"), ("node1", "XID_79"), ("node2", "MOUNT_MISSING")),
        )
    }
    assert out_by_healthd("n00009", views) and not out_by_healthd("node3", views)
    assert group_views(groups, ("other",), Reasons()) == {}


@pytest.mark.parametrize("name", ["node1", "node2", "node3", "n00007"])
def test_the_groups_read_gives_each_node_as_its_own_read_does(name: str) -> None:
    """One ``sinfo --all`` of the groups answers for the node (plan.Read.NODE_AND_PARTITIONS): same NodeInfo."""
    groups = parse_sinfo_groups(_line("sinfo-22.05-groups-10k.txt"))
    assert node_in_groups(groups, name) == parse_sinfo_node(_line("sinfo-22.05-nodes-10k.txt"), name)


def test_a_node_in_two_partitions_is_in_a_group_of_each_and_an_unlisted_node_in_none() -> None:
    text = (
        "gpu*|3|mixed+drain|2026-11-24T15:12:27|alice(1000)|g[1-2],h7|healthd: XID_79 gpu0\n"
        "debug|1|mixed+drain|2026-11-24T15:12:27|alice(1000)|h7|healthd: XID_79 gpu0\n"
        "debug|4|idle|Unknown|Unknown|h[1-4]|none\n"
    )
    groups = parse_sinfo_groups(text)
    node = node_in_groups(groups, "h7")
    assert node is not None
    assert (node.partitions, node.state, node.flags, node.reason_user) == (
        ("gpu", "debug"),
        "MIXED",
        frozenset({"DRAIN"}),
        "alice",
    )
    idle = node_in_groups(groups, "h1")
    assert idle is not None and (idle.partitions, idle.reason, idle.reason_user) == (("debug",), "", "")
    assert node_in_groups(groups, "h9") is None
    with pytest.raises(SlurmError, match="host list"):
        node_in_groups(parse_sinfo_groups("gpu|1|idle|Unknown|Unknown|g[1-|none"), "g1")


@pytest.mark.parametrize(
    "garbage",
    [
        "batch*|many|idle|Unknown|root(0)|n1|none",
        "batch*|1|idle",
        "batch*|1||Unknown|root(0)|n1|none",
        "batch*|1|idle|Unknown|n1|none",
    ],
)
def test_sinfo_garbage_is_a_slurm_error(garbage: str) -> None:
    with pytest.raises(SlurmError):
        parse_sinfo_groups(garbage)


# What sinfo prints (22.05, the reads' -O fields) after `scontrol update NodeName=n9 State=DRAIN
# Reason=$'admin: RMA pending\n\nticket 42 | see jira'`: slurmctld keeps the reason verbatim and
# sinfo prints it as it is, newlines and all.
NEWLINE_REASON = "admin: RMA pending\n\nticket 42 | see jira"
NEWLINE_GROUPS = (
    f"batch*|1|idle+drain|2026-11-24T15:12:27|root(0)|n9|{NEWLINE_REASON}\n"
    "batch*|1|mixed+drain|2026-11-24T15:12:28|root(0)|n3|healthd: XID_79 gpu0\n"
    "batch*|97|idle|Unknown|root(0)|n[1-2,4-8,10-99]|none\n"
    f"debug|1|idle+drain|2026-11-24T15:12:27|root(0)|n9|{NEWLINE_REASON}\n"
)


def test_a_reason_over_several_lines_is_read_whole_and_every_row_after_it_too() -> None:
    """A line that is not a row (the second line of a reason, even one with the row's "|"s) continues the reason."""
    groups = parse_sinfo_groups(NEWLINE_GROUPS)
    assert [(g.partition, g.count, g.nodelist, g.reason) for g in groups] == [
        ("batch", 1, "n9", NEWLINE_REASON),
        ("batch", 1, "n3", "healthd: XID_79 gpu0"),
        ("batch", 97, "n[1-2,4-8,10-99]", ""),
        ("debug", 1, "n9", NEWLINE_REASON),
    ]
    views = group_views(groups, ("batch", "debug"), Reasons())
    assert views["batch"] == PartitionView(
        "batch", 99, ((True, _stamp("2026-11-24T15:12:28"), "n3"),), (("n3", "XID_79"),)
    )
    assert views["debug"] == PartitionView("debug", 1, ())
    n9, n1 = node_in_groups(groups, "n9"), node_in_groups(groups, "n1")
    assert n9 is not None and (n9.reason, n9.partitions, n9.drained) == (NEWLINE_REASON, ("batch", "debug"), True)
    assert n1 is not None and (n1.state, n1.reason) == ("IDLE", "")


@pytest.mark.parametrize(
    "line",
    [
        "batch*|many|idle|Unknown|root(0)|n1|none",  # a count that is no number
        "batch*|1|idle now|Unknown|root(0)|n1|none",  # a state with a blank
        "batch*|1|idle|Unknown|root|n1|none",  # a user without its uid
        "batch*|1|idle|Unknown|root(0)|n1 n2|none",  # a host list with a blank
        "batch*|1|idle|Unknown|root(0)|n1",  # a field short
    ],
)
def test_a_line_of_a_reason_is_a_row_only_if_every_field_before_the_reason_reads_as_sinfos(line: str) -> None:
    reason = f"admin: see\n{line}"
    groups = parse_sinfo_groups(f"batch*|1|idle+drain|2026-11-24T15:12:27|Unk(1234)|n9|{reason}\n")
    assert [(g.nodelist, g.reason, g.reason_user) for g in groups] == [("n9", reason, "Unk")]
    # A user from the user database may have a blank in its name: still a row.
    (group,) = parse_sinfo_groups("batch*|1|idle+drain|2026-11-24T15:12:27|Jane Doe(1234)|n9|admin: x")
    assert group.reason_user == "Jane Doe"


def test_the_nodes_own_reads_take_a_reason_over_several_lines() -> None:
    """``sinfo -N -n n9`` and ``scontrol -o show node n9`` of the node whose reason holds newlines."""
    rows = (
        f"n9|batch*|idle+drain|2026-11-24T15:12:27|root(0)|{NEWLINE_REASON}\n"
        f"n9|debug|idle+drain|2026-11-24T15:12:27|root(0)|{NEWLINE_REASON}\n"
    )
    node = parse_sinfo_node(rows, "n9")
    assert node is not None and (node.reason, node.reason_user, node.partitions) == (
        NEWLINE_REASON,
        "root",
        ("batch", "debug"),
    )
    # 22.05 prints the reason's stamp and Comment=/Extra= after the reason: on its last line here.
    capture = _line("show-node-22.05-idle-drain-comment-extra.txt")
    text = capture.replace("Reason=healthd: MOUNT_MISSING /scratch [", f"Reason={NEWLINE_REASON} [")
    (shown,) = parse_show_node_text(text)
    assert (shown.name, shown.reason, shown.reason_user) == ("node2", NEWLINE_REASON, "root")
    assert shown.reason_time == _stamp("2026-11-22T05:23:08") and shown.drained
    every = _line("show-node-22.05-all.txt").replace("Reason=healthd: XID_79 gpu0 [", "Reason=admin: RMA\nticket 42 [")
    assert [(n.name, n.reason) for n in parse_show_node_text(every)] == [
        ("node1", "admin: RMA\nticket 42"),
        ("node2", ""),
        ("node3", "kernel update : reboot issued"),
    ]


@pytest.mark.parametrize("separator", ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"])
def test_a_reason_holding_what_python_but_not_slurm_calls_a_line_break_stays_one_row(separator: str) -> None:
    reason = f"admin: RMA{separator}ticket 42"
    groups = parse_sinfo_groups(f"batch*|1|idle+drain|2026-11-24T15:12:27|root(0)|n9|{reason}\n")
    assert [g.reason for g in groups] == [reason]
    line = _line("show-node-22.05-idle-drain-healthd.txt").strip()
    (node,) = parse_show_node_text(line.replace("Reason=healthd: MOUNT_MISSING /scratch", f"Reason={reason}"))
    assert node.reason == reason


def test_output_that_does_not_start_with_a_row_is_still_an_error() -> None:
    with pytest.raises(SlurmError, match="not a `sinfo -O"):
        parse_sinfo_groups("sinfo: error: something\n" + NEWLINE_GROUPS)
    with pytest.raises(SlurmError, match="not a `scontrol -o show node` line"):
        parse_show_node_text("scontrol: error\n" + _line("show-node-22.05-idle.txt"))


def test_a_reason_with_a_newline_on_another_node_does_not_block_a_take_out(tmp_path: Path) -> None:
    """The whole pass, with sinfo and scontrol stand-ins: the read that failed on such a reason now answers."""
    groups = tmp_path / "groups.txt"
    groups.write_text(NEWLINE_GROUPS.replace("n3", "n2").replace("n[1-2,4-8,10-99]", "n[1,3-8,10-99]"))
    updates = tmp_path / "updates"
    bin_dir = _fake_scontrol(
        tmp_path / "bin",
        f'case "$1" in\n--version) echo "slurm-wlm 22.05.8" ;;\nupdate) echo "$2 $3" >> {updates} ;;\n'
        '-o) echo "PartitionName=batch Nodes=n[1-99] TotalNodes=99" ;;\nesac\n',
        # The node read (-N) first, then the partition's groups.
        sinfo=f'case "$*" in\n*-N*) echo "n1|batch*|idle|Unknown|Unknown|none" ;;\n*) cat {groups} ;;\nesac\n',
    )
    config = (
        f'[paths]\nstate_dir = "{tmp_path}/state"\n[slurm]\nbin_dir = "{bin_dir}"\nnode_name = "n1"\n'
        "act_splay = 0\n[policy]\nmax_out_fraction = 1.0\n"
    )
    spec = CheckSpec(name="fake", description="", settings=_Settings, run=_critical)
    outcome = run_pass(
        Engine(parse_config(config, "t.toml", {"fake": _Settings}), [spec]), tools=PassTools(clock=lambda: 1e6)
    )
    assert outcome.action.errors == ()
    assert outcome.action.decision.action.value == "take_out_now" and outcome.action.applied
    assert updates.read_text().splitlines() == ["NodeName=n1 State=DRAIN", "NodeName=n1 State=DOWN"]


def test_reason_stamp_orders_the_breaker_and_unreadable_stamps_sort_last() -> None:
    """The breaker's confirmation orders healthd-out nodes by when slurmctld stamped their reasons, then by name."""
    reason = "healthd: MOUNT_MISSING /scratch"

    def group(nodelist: str, stamp: str, state: str = "IDLE") -> NodeGroup:
        when = None if stamp == "Unknown" else _stamp(stamp)
        return NodeGroup("batch", len(nodelist.split(",")), state, frozenset({"DRAIN"}), reason, when, nodelist)

    groups = [
        group("a0", "Unknown"),
        group("b1,a1", "2026-11-22T05:23:08"),
        group("z9", "2026-11-22T05:23:07"),
        # DOWN is sent only to a node that kept its place, and it stamps the reason again: it still comes first.
        group("y0", "2026-11-22T05:23:59", state="DOWN"),
        NodeGroup("batch", 5, "IDLE", frozenset(), "", None, "c[1-5]"),
    ]
    view = group_views(groups, ("batch",), Reasons())["batch"]
    assert [name for *_, name in view.out] == ["y0", "z9", "a1", "b1", "a0"]
    assert view.size == 10


def test_parse_json_sample() -> None:
    nodes = parse_show_node_json((CAPTURES / "show-node-23.02-json-modelled.json").read_text())
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
    reason = Reasons().reason([finding])
    assert reason.startswith("healthd: MOUNT_HUNG /mnt/x_ State_RESUME")
    assert all(c.isascii() and c.isprintable() for c in reason) and '"' not in reason and "=" not in reason
    long = Finding("x", Status.WARNING, "CODE", "s" * 200, "m")
    many = [long, *[Finding("x", Status.WARNING, "C", str(i), "m") for i in range(12)]]
    assert len(Reasons().reason(many)) <= 64
    assert Reasons().reason(many).endswith("(+12 more)")
    assert sanitize("a\tb\x00c") == "a b_c"


def test_ownership_needs_the_prefix_as_a_word() -> None:
    assert Reasons().owns("healthd: X y")
    assert not Reasons().owns("healthd:x y")
    assert not Reasons().owns("admin: healthd: X")


def test_a_configured_prefix_of_two_words_writes_and_owns_every_reason() -> None:
    """``[slurm] reason_prefix`` may be several words: every reason healthd writes starts with it,
    and only a reason that starts with it (as words) is healthd's, whatever the default's."""
    reasons = Reasons(parse_config('[slurm]\nreason_prefix = "site hc:"\n', "t.toml", {}).config.slurm.reason_prefix)
    findings = [
        Finding("gpu", Status.WARNING, "ECC_SBE", "gpu1", "m"),
        Finding("xid", Status.CRITICAL, "XID_79", "0000:17:00.0", "m"),
    ]
    assert reasons.reason(findings) == "site hc: XID_79 0000:17:00.0 (+1 more)"
    assert reasons.reboot(findings) == "site hc: REBOOT XID_79 0000:17:00.0 (+1 more)"
    repair = reasons.repair("XID_79", "GPU-" + "a" * 60, 3)
    assert repair == "site hc: REPAIR XID_79 GPU-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa... x3"
    lemon = reasons.lemon("9 incidents, 3/40 runs failed, score 12.5")
    assert lemon == "site hc: LEMON 9 incidents, 3/40 runs failed, score 12.5"
    assert all(reasons.owns(r) for r in (reasons.prefix, reasons.reason(findings), repair, lemon))
    assert [reasons.code(r) for r in (reasons.reboot(findings), repair, lemon)] == ["XID_79", "XID_79", ""]
    assert reasons.is_repair(repair) and reasons.is_lemon(lemon) and not reasons.is_lemon(repair)
    # The default prefix, a prefix's first word alone, or the prefix glued to a word: someone else's.
    for other in ("healthd: XID_79 gpu0", "site XID_79", "site hc:XID_79 gpu0", "site  hc: XID_79"):
        assert not reasons.owns(other) and reasons.code(other) == ""
    assert not Reasons().owns(repair)
    # A prefix from elsewhere than the validated config is made safe; nothing left is the default.
    assert Reasons('a"b').prefix == "a_b" and Reasons("  ").prefix == "healthd:" == Reasons().prefix


class _Settings(CheckSettings):
    pass


def _healthy_check(ctx: CheckContext[_Settings]) -> list[Finding]:
    return []


def _critical(ctx: CheckContext[_Settings]) -> list[Finding]:
    return [ctx.finding(Status.CRITICAL, "MOUNT_MISSING", "/scratch", "not mounted")]


def test_missing_scontrol_is_reported_not_raised(tmp_path: Path) -> None:
    text = f'[paths]\nstate_dir = "{tmp_path}/state"\n[slurm]\nbin_dir = "{tmp_path}/nope"\nnode_name = "n1"\n'
    text += "act_splay = 0\n"
    spec = CheckSpec(name="fake", description="", settings=_Settings, run=_critical)
    engine = Engine(parse_config(text, "t.toml", {"fake": _Settings}), [spec])
    outcome = run_pass(engine)
    assert outcome.exit_code == 2
    assert outcome.action.pending and not outcome.action.applied
    assert "sinfo not found" in outcome.action.errors[0]
    assert outcome.document["action"]["decision"] == "take_out_now"
    saved = (tmp_path / "state" / "last-pass.json").read_text()
    assert '"pending":true' in saved


def test_defaults_keep_a_hook_run_inside_slurmds_60_s_kill() -> None:
    settings = SlurmSettings()
    assert (settings.timeout, settings.budget, settings.lock_timeout) == (5.0, 12.0, 3.0)
    worst_case = RunnerSettings().pass_timeout + settings.lock_timeout + settings.act_splay + settings.budget
    assert worst_case <= 55


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ('reason_prefix = "   "', "slurm.reason_prefix"),
        ('reason_prefix = "healthd: "', "slurm.reason_prefix"),
        ('reason_prefix = "a=b"', "slurm.reason_prefix"),
        ('bin_dir = "opt/slurm/bin"', "slurm.bin_dir"),
        ('conf = "slurm.conf"', "slurm.conf"),
        ("budget = 0", "slurm.budget"),
    ],
)
def test_bad_slurm_settings_are_rejected_naming_the_key(table: str, key: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(key)):
        parse_config(f"[slurm]\n{table}\n", "t.toml", {})


def _fake_scontrol(directory: Path, body: str, sinfo: str = "") -> Path:
    """scontrol and sinfo stand-ins (shell scripts) for behaviour the test cluster's 22.05 cannot show."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in (("scontrol", body), ("sinfo", sinfo)):
        script = directory / name
        script.write_text("#!/bin/sh\n" + text)
        script.chmod(0o755)
    return directory


def test_json_that_fails_falls_back_to_text_and_is_remembered(tmp_path: Path) -> None:
    capture = CAPTURES / "show-node-22.05-idle-drain-healthd.txt"
    bin_dir = _fake_scontrol(
        tmp_path / "bin",
        f"""case "$1" in
--version) echo "slurm 23.02.7" ;;
--json) echo "scontrol: unrecognized option '--json'" >&2; exit 1 ;;
-o) cat {capture} ;;
esac
""",
    )
    client = SlurmClient(SlurmSettings(bin_dir=bin_dir))
    assert client.show_node("node1").reason == "healthd: MOUNT_MISSING /scratch"
    assert client.calls == [("--json", "show", "node", "node1"), ("-o", "show", "node", "node1")]
    assert client.output_format == "text"
    client.calls.clear()
    client.show_node("node1")
    assert client.calls == [("-o", "show", "node", "node1")]


def test_json_ignored_with_exit_0_falls_back_to_text(tmp_path: Path) -> None:
    """A build that ignores ``--json`` and prints its table with exit 0 (as 24.11's sacctmgr does) is read as text."""
    capture = CAPTURES / "show-node-22.05-idle-drain-healthd.txt"
    bin_dir = _fake_scontrol(
        tmp_path / "bin",
        f"""case "$1" in
--version) echo "slurm 24.11.5" ;;
--json) cat {capture} ;;
-o) cat {capture} ;;
esac
""",
    )
    client = SlurmClient(SlurmSettings(bin_dir=bin_dir))
    assert client.show_node("node1").reason == "healthd: MOUNT_MISSING /scratch"
    assert client.calls == [("--json", "show", "node", "node1"), ("-o", "show", "node", "node1")]
    assert client.output_format == "text"


def test_a_missing_slurm_conf_fails_at_once_and_says_which(tmp_path: Path) -> None:
    """scontrol itself retries a missing slurm.conf for about a minute; the adapter does not start it."""
    ran = tmp_path / "ran"
    bin_dir = _fake_scontrol(tmp_path / "bin", f"touch {ran}\n", sinfo=f"touch {ran}\n")
    client = SlurmClient(SlurmSettings(bin_dir=bin_dir, conf=tmp_path / "absent" / "slurm.conf", timeout=30))
    started = time.monotonic()
    with pytest.raises(SlurmError, match=r"absent/slurm\.conf does not exist \(\[slurm\]\.conf\)"):
        client.show_node("node1")
    assert time.monotonic() - started < 5
    assert client.calls == [] and not ran.exists()


def test_all_calls_of_a_pass_share_one_time_budget(tmp_path: Path) -> None:
    bin_dir = _fake_scontrol(tmp_path / "bin", "sleep 2\n")
    now = [100.0]
    client = SlurmClient(SlurmSettings(bin_dir=bin_dir, timeout=5, budget=12), "text", monotonic=lambda: now[0])
    client.start_budget()
    now[0] = 111.8
    with pytest.raises(SlurmError, match=r"timed out after 0\.2s"):
        client.drain("node1", "healthd: X y")
    now[0] = 112.0
    with pytest.raises(SlurmError, match=r"Slurm time budget \(\[slurm\]\.budget = 12s\) is used up"):
        client.resume("node1")
    assert len(client.calls) == 1, "a call past the budget is not even started"


def _engine(tmp_path: Path, run: Any = None, slurm: str = "") -> Engine:
    text = f'[paths]\nstate_dir = "{tmp_path}/state"\n[slurm]\nbin_dir = "{tmp_path}/nope"\nnode_name = "n1"\n'
    text += f"act_splay = 0\n{slurm}"
    spec = CheckSpec(name="fake", description="", settings=_Settings, run=run or _critical)
    return Engine(parse_config(text, "t.toml", {"fake": _Settings}), [spec])


def test_acks_file_of_the_wrong_shape_is_reported_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "acks.json").write_text('{"acks": null}')
    outcome = run_pass(_engine(tmp_path))
    assert outcome.exit_code == 2
    assert outcome.action.decision.action.value == "take_out_now" and outcome.action.pending
    assert any("acks is NoneType, not a list" in e for e in outcome.action.errors), outcome.action.errors
    (tmp_path / "state" / "acks.json").write_text('{"acks": [3, {"key": 4}, {"key": "fake/X/y", "at": "soon"}]}')
    outcome = run_pass(_engine(tmp_path))
    assert sum("ignored" in e for e in outcome.action.errors) == 3, outcome.action.errors


def test_an_unexpected_exception_is_a_reported_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("simulated bug")

    monkeypatch.setattr("healthd.plan.plan.decide", broken)
    outcome = run_pass(_engine(tmp_path))
    assert outcome.exit_code == 2, "CRITICAL still outranks the UNKNOWN PASS_FAILED"
    codes = {(f.check, f.code): f.status for f in outcome.result.findings}
    assert codes[("healthd", "PASS_FAILED")] is Status.UNKNOWN
    assert codes[("fake", "MOUNT_MISSING")] is Status.CRITICAL, "the checks' results are still reported"
    saved = json.loads((tmp_path / "state" / "last-pass.json").read_text())
    assert saved["action"]["decision"] == "none" and "simulated bug" in saved["action"]["errors"][0]
    assert not (tmp_path / "state" / "policy.json").exists()


def test_a_pass_that_fails_after_reading_the_state_still_reports_what_the_reads_met(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A corrupt policy.json is moved aside and the pass starts empty: if the pass then fails,
    # nothing else will ever say that the node's policy memory (took_out, pending, repair) was lost.
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "policy.json").write_text("{not json")
    (tmp_path / "state" / "acks.json").write_text('{"acks": null}')

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("simulated bug")

    monkeypatch.setattr("healthd.plan.plan.decide", broken)
    errors = run_pass(_engine(tmp_path)).action.errors
    assert "simulated bug" in errors[0]
    assert any(e.startswith("corrupt state file") and "policy.json" in e for e in errors[1:]), errors
    assert any("acks is NoneType, not a list" in e for e in errors[1:]), errors
    saved = json.loads((tmp_path / "state" / "last-pass.json").read_text())
    assert saved["action"]["errors"] == list(errors)


@pytest.mark.slow
def test_a_locked_state_dir_skips_acting_and_never_hangs(tmp_path: Path, cli: Any) -> None:
    engine = _engine(tmp_path, slurm="lock_timeout = 0.3\n")
    with StateLock(tmp_path / "state", 1.0):
        outcome = run_pass(engine)
        assert outcome.exit_code == 2
        assert outcome.action.decision.action.value == "none" and not outcome.action.pending
        assert "held by another healthd process" in outcome.action.decision.explanation
        assert not (tmp_path / "state" / "policy.json").exists()
        config = tmp_path / "t.toml"
        config.write_text(
            f'[paths]\nstate_dir = "{tmp_path}/state"\n[slurm]\nenabled = false\nlock_timeout = 0.3\nnode_name = "n1"\n'
            '[checks.mounts]\nexpect = [{path = "/no/such/mount"}]\n'
        )
        code, _, err = cli("check", "--once", "--json", "--only", "mounts", "--dry-run", "--config", str(config))
        assert code == 2
        code, _, err = cli("ack", "MOUNT_MISSING", "--config", str(config))
        assert code == 75 and "nothing acknowledged" in err
    assert run_pass(engine).action.pending, "the lock is free again once released"
    code, out, _ = cli("ack", "MOUNT_MISSING", "--config", str(config))
    assert code == 0 and "acknowledged" in out


def test_write_rejected_backs_off_and_the_intent_is_saved_before_sending(tmp_path: Path) -> None:
    """slurmctld answers the read but rejects every write: retries back off (10, 20, 40 s), never restart at 10 s.

    The fake scontrol copies the policy state as it is while the write is being sent:
    the pending action must already be on disk then (slurmd may kill the hook mid-write).
    """
    capture = CAPTURES / "show-node-22.05-idle.txt"
    seen = tmp_path / "policy-during-write.json"
    bin_dir = _fake_scontrol(
        tmp_path / "bin",
        f"""case "$1" in
--version) echo "slurm-wlm 22.05.8" ;;
-o) case "$2" in --all) echo 'PartitionName=batch Nodes=node[1-3] TotalNodes=3' ;; *) cat {capture} ;; esac ;;
update) cp {tmp_path}/state/policy.json {seen}; echo "slurm_update error: Access/permission denied" >&2; exit 1 ;;
esac
""",
        sinfo="""case "$*" in
*-N*) echo 'node2|batch*|idle|Unknown|Unknown|none' ;;
*) echo 'batch*|3|idle|Unknown|root(0)|node[1-3]|none' ;;
esac
""",
    )
    engine = Engine(
        parse_config(
            f'[paths]\nstate_dir = "{tmp_path}/state"\n[slurm]\nbin_dir = "{bin_dir}"\nnode_name = "node2"\n'
            "act_splay = 0\n",
            "t.toml",
            {"fake": _Settings},
        ),
        [CheckSpec(name="fake", description="", settings=_Settings, run=_critical)],
    )
    now = 1_000_000.0
    for attempt, at, delay in ((1, 0.0, 10.0), (2, 11.0, 20.0), (3, 32.0, 40.0)):
        outcome = run_pass(engine, tools=PassTools(clock=lambda at=at: now + at))
        assert outcome.action.pending and not outcome.action.applied
        assert "Access/permission denied" in outcome.action.errors[-1]
        pending = json.loads((tmp_path / "state" / "policy.json").read_text())["pending"]
        assert (pending["attempts"], pending["next_try"]) == (attempt, now + at + delay)
        during = json.loads(seen.read_text())["pending"]
        assert during["action"] == "take_out_now" and during["error"].startswith("not confirmed")
    backing_off = run_pass(engine, tools=PassTools(clock=lambda: now + 40.0))
    assert backing_off.action.pending and backing_off.action.next_retry == now + 32.0 + 40.0


def _splay_engine(tmp_path: Path, run: Any, slurm: str = "") -> Engine:
    text = f'[paths]\nstate_dir = "{tmp_path}/state"\n[slurm]\nbin_dir = "{tmp_path}/nope"\nnode_name = "n42"\n{slurm}'
    spec = CheckSpec(name="fake", description="", settings=_Settings, run=run)
    return Engine(parse_config(text, "t.toml", {"fake": _Settings}), [spec])


def test_a_pass_with_a_fault_waits_its_nodes_stable_splay_before_slurm(tmp_path: Path) -> None:
    slept: list[float] = []
    engine = _splay_engine(tmp_path, _critical, "act_splay = 30\n")
    first = run_pass(engine, tools=PassTools(sleep=slept.append))
    assert first.action.pending and "sinfo not found" in first.action.errors[0], "the pass went on to Slurm"
    assert run_pass(engine, tools=PassTools(sleep=slept.append)).action.pending
    assert slept == [act_delay("n42", 30)] * 2, "the same wait on every pass"
    assert 0 <= slept[0] < 30
    delays = {act_delay(f"node{i:05d}", 30) for i in range(1000)}
    assert len(delays) > 400 and max(delays) < 30, "a fleet's waits are spread over the bound"


def test_a_healthy_pass_a_dry_run_and_slurm_off_never_wait(tmp_path: Path) -> None:
    slept: list[float] = []
    run_pass(_splay_engine(tmp_path / "a", _healthy_check, "act_splay = 30\n"), tools=PassTools(sleep=slept.append))
    run_pass(
        _splay_engine(tmp_path / "b", _critical, "act_splay = 30\n"),
        PassRequest(dry_run=True),
        PassTools(sleep=slept.append),
    )
    run_pass(
        _splay_engine(tmp_path / "c", _critical, "act_splay = 30\nenabled = false\n"),
        tools=PassTools(sleep=slept.append),
    )
    assert slept == []


@pytest.mark.parametrize("value", ["-1", "61"])
def test_act_splay_is_bounded_to_a_minute(value: str) -> None:
    with pytest.raises(ConfigError, match=r"slurm\.act_splay"):
        parse_config(f"[slurm]\nact_splay = {value}\n", "t.toml", {})
