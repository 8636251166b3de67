from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from healthd_testkit.checks import only_checks
from healthd_testkit.paths import HEALTHD, REPO

from healthd import __version__
from healthd.cli.schema import PassOut, json_schema
from healthd.cycle.render import ONE_SHOT_RETRY
from healthd.model import RunState


def test_version(cli: Callable[..., tuple[int, str, str]]) -> None:
    with pytest.raises(SystemExit) as info:
        cli("--version")
    assert info.value.code == 0


def test_list_checks_names_every_builtin(cli: Callable[..., tuple[int, str, str]]) -> None:
    _code, out, _ = cli("list-checks", "--json")
    rows = json.loads(out)
    assert {"mounts", "services"} <= {r["name"] for r in rows}
    assert all(r["description"] for r in rows)


def test_json_output_validates_against_the_documented_schema(
    write_config: Callable[[str], Path], cli_json: Any
) -> None:
    path = write_config('[checks.mounts]\nexpect = [{ path = "/definitely-not-mounted" }]\n')
    code, doc = cli_json("check", "--once", "--json", "--only", "mounts,services", "--config", str(path), "--dry-run")
    parsed = PassOut.model_validate(doc)
    assert parsed.exit_code == code == 2
    assert parsed.healthd_version == __version__
    assert [c.name for c in parsed.checks] == ["mounts", "services"]


def test_schema_file_is_up_to_date() -> None:
    assert (REPO / "docs/check-output.schema.json").read_text() == json_schema()


def test_table_output_lists_checks_and_findings(
    write_config: Callable[[str], Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    path = write_config('[checks.mounts]\nexpect = [{ path = "/definitely-not-mounted" }]\n')
    code, out, _ = cli("check", "--once", "--only", "mounts", "--config", str(path), "--dry-run")
    assert code == 2
    lines = out.splitlines()
    assert lines[0].split() == ["CHECK", "STATUS", "TIME", "DETAIL"]
    assert lines[1].split()[:2] == ["mounts", "CRITICAL"]
    assert "MOUNT_MISSING /definitely-not-mounted" in out


def test_unknown_only_name_is_a_usage_error(cli: Callable[..., tuple[int, str, str]], write_config: Any) -> None:
    code, out, err = cli("check", "--once", "--only", "mounts,gpus,zzz", "--config", str(write_config("")))
    assert code == 64 and out == ""
    assert "healthd: --only: gpus: unknown check; did you mean gpu?\n" in err
    assert "healthd: --only: zzz: unknown check\n" in err, "no guess for a name like none of them"


def test_module_entry_point_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "healthd", "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == f"healthd {__version__}"


def test_table_counts_notes_but_lists_only_problems() -> None:
    from healthd.cycle.render import render_table
    from healthd.model import CheckResult, Finding, PassResult, RunState, Status

    findings = (
        Finding("xid", Status.OK, "XID_63", "gpu1", "row remapping recorded"),
        Finding("xid", Status.CRITICAL, "XID_79", "gpu3", "fallen off the bus"),
    )
    table = render_table(PassResult("n1", 0.0, 0.1, (CheckResult("xid", RunState.RAN, findings, 0.01),)))
    assert "1 problem(s), 1 note(s)" in table
    assert "XID_79 gpu3" in table and "XID_63" not in table


# --- what the table says about the action (item: a first dry run without Slurm) ---------------------------

MISSING = '[checks.mounts]\nexpect = [{ path = "/definitely-not-mounted" }]\n'
WOULD = "would take the node out now (CRITICAL from mounts; reason 'healthd: MOUNT_MISSING /definitely-not-mounted')"


def _fake_slurm(tmp_path: Path, body: str) -> Path:
    """A bin_dir whose scontrol and sinfo both run ``body`` (``$0`` names which)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("scontrol", "sinfo"):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    return bin_dir


def test_dry_run_with_a_broken_slurm_conf_says_so_in_one_line(
    tmp_path: Path,
    write_config: Callable[..., Path],
    cli: Callable[..., tuple[int, str, str]],
    cli_json: Any,
    controllerless_slurm_conf: Path,
) -> None:
    conf = controllerless_slurm_conf
    path = write_config(f'[slurm]\nconf = "{conf}"\nnode_name = "n1"\nact_splay = 0\n{MISSING}', slurm_cluster=conf)
    code, out, err = cli("check", "--once", "--only", "mounts", "--dry-run", "--config", str(path))
    assert code == 2, err
    lines = out.splitlines()
    assert lines[-2].startswith("n1: CRITICAL (")
    assert lines[-1] == f"Slurm not reachable (sinfo: Unable to process configuration file); dry run: {WOULD}"
    assert "sinfo: error" not in out and "action error" not in out
    # The whole message stays in the JSON document; a dry run leaves nothing pending.
    code, doc = cli_json("check", "--once", "--only", "mounts", "--dry-run", "--json", "--config", str(path))
    assert code == 2 and doc["action"]["dry_run"] is True and doc["action"]["pending"] is False
    assert "No SlurmctldHost defined" in doc["action"]["errors"][0]
    # The failure as a value, next to its text: its kind, the command and what stopped it.
    [failure] = doc["action"]["slurm_errors"]
    assert failure["command"].startswith("sinfo -h --all ") and failure["command"] in doc["action"]["errors"][0]
    assert {k: failure[k] for k in ("kind", "detail", "error")} == {
        "kind": "unreachable",
        "detail": "sinfo: Unable to process configuration file",
        "error": 0,
    }
    assert json.loads((tmp_path / "state" / "policy.json").read_text()).get("pending") is None


def test_a_real_run_with_slurm_unreachable_shows_the_pending_take_out(
    write_config: Callable[..., Path], cli: Callable[..., tuple[int, str, str]], controllerless_slurm_conf: Path
) -> None:
    conf = controllerless_slurm_conf
    path = write_config(f'[slurm]\nconf = "{conf}"\nnode_name = "n1"\nact_splay = 0\n{MISSING}', slurm_cluster=conf)
    code, out, _ = cli("check", "--once", "--only", "mounts", "--config", str(path))
    assert code == 2
    pending = f"action: PENDING: {re.escape(WOULD[len('would ') :])}: "
    # A one-shot has no next pass of its own: it says who retries, never when (docs/slurm.md).
    retry = re.escape(f"; {ONE_SHOT_RETRY}")
    cause = re.escape("Slurm not reachable (sinfo: Unable to process configuration file)")
    assert re.fullmatch(pending + cause + retry, out.splitlines()[-1]), out
    # The next pass is inside the backoff: it does not call scontrol and says it is waiting.
    _, out, _ = cli("check", "--once", "--only", "mounts", "--config", str(path))
    assert re.fullmatch(pending + "backing off after a Slurm failure" + retry, out.splitlines()[-1]), out


def test_slurm_disabled_says_what_would_have_been_sent(
    write_config: Callable[[str], Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    path = write_config(f'[slurm]\nenabled = false\nnode_name = "n1"\n{MISSING}')
    code, out, _ = cli("check", "--once", "--only", "mounts", "--config", str(path))
    assert code == 2
    assert out.splitlines()[-1] == f"action: not sent, [slurm] enabled = false: {WOULD}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            # What Debian's Slurm clients print on a machine without slurm.conf (SRV lookup of the controller).
            'p=$(basename "$0")\n'
            'echo "$p: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host" >&2\n'
            'echo "$p: error: fetch_config: DNS SRV lookup failed" >&2\n'
            'echo "$p: error: _establish_config_source: failed to fetch config" >&2\n'
            'echo "$p: fatal: Could not establish a configuration source" >&2\nexit 1',
            "Slurm not reachable (sinfo: Could not establish a configuration source)",
        ),
        ("exec sleep 30", "Slurm not reachable (sinfo timed out after 1s)"),
        ("exit 1", "Slurm not reachable (sinfo: exit status 1)"),
    ],
    ids=["no-slurm-conf", "hangs", "silent-failure"],
)
def test_dry_run_names_why_slurm_was_not_reachable(
    tmp_path: Path,
    write_config: Callable[[str], Path],
    cli: Callable[..., tuple[int, str, str]],
    body: str,
    expected: str,
) -> None:
    bin_dir = _fake_slurm(tmp_path, body)
    path = write_config(f'[slurm]\nbin_dir = "{bin_dir}"\ntimeout = 1\nnode_name = "n1"\n{MISSING}')
    code, out, _ = cli("check", "--once", "--only", "mounts", "--dry-run", "--config", str(path))
    assert code == 2
    assert out.splitlines()[-1] == f"{expected}; dry run: {WOULD}"


def test_dry_run_without_scontrol_installed(
    tmp_path: Path, write_config: Callable[[str], Path], cli: Callable[..., tuple[int, str, str]], cli_json: Any
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    path = write_config(f'[slurm]\nbin_dir = "{empty}"\nnode_name = "n1"\n{MISSING}')
    _code, out, _ = cli("check", "--once", "--only", "mounts", "--dry-run", "--config", str(path))
    assert out.splitlines()[-1] == (
        f"Slurm not reachable (sinfo not found in {empty} (set [slurm].bin_dir)); dry run: {WOULD}"
    )
    _code, doc = cli_json("check", "--once", "--only", "mounts", "--dry-run", "--json", "--config", str(path))
    [failure] = doc["action"]["slurm_errors"]
    assert (failure["kind"], failure["detail"], failure["error"]) == (
        "not_found",
        f"sinfo not found in {empty} (set [slurm].bin_dir)",
        0,
    )
    assert failure["command"].startswith("sinfo -h --all ")
    assert doc["action"]["errors"] == [failure["detail"]]


def _document(decision: Any, checks: Any = (), **fields: Any) -> dict[str, Any]:
    """A pass document whose ``action`` section is what healthd.cycle.pipeline writes."""
    from healthd.cycle.outcome import ActionSection

    report: dict[str, Any] = {
        "node_state": None,
        "node_reason": None,
        "applied": False,
        "held": False,
        "pending": False,
        "dry_run": False,
        "slurm_enabled": True,
        "acknowledged": (),
        "errors": (),
    }
    report.update(fields)
    return {"checks": list(checks), "action": ActionSection(decision=decision, **report).to_dict()}


@pytest.mark.parametrize("state", list(RunState), ids=lambda state: state.value)
def test_state_label_reads_every_run_state_of_the_document(state: RunState) -> None:
    from healthd.cycle.render import state_label

    expected = {RunState.RAN: "WARNING", RunState.NOT_APPLICABLE: "n/a", RunState.DISABLED: "disabled"}
    assert state_label("WARNING", state.value) == expected.get(state, f"WARNING ({state.value})")


def test_action_lines_for_each_outcome() -> None:
    from healthd.cycle.render import action_lines
    from healthd.plan.acks import FindingRef
    from healthd.plan.state import Action, Decision
    from healthd.slurm.adapter import command_failed

    out = Decision(Action.TAKE_OUT_NOW, Action.TAKE_OUT_NOW, "healthd: XID_79 gpu3", "CRITICAL from xid")
    why = "(CRITICAL from xid; reason 'healthd: XID_79 gpu3')"
    applied = _document(out, applied=True, node_state="IDLE+DRAIN", node_reason="healthd: XID_79 gpu3")
    assert action_lines(applied, 0.0) == [
        f"action: took the node out now (DRAIN, then DOWN) {why}; node is IDLE+DRAIN with reason 'healthd: XID_79 gpu3'"
    ]
    breaker_why = "partition gpu: 3 of 20 nodes already out by healthd; taking this one out would exceed 0.1"
    held = Decision(Action.HOLD, Action.TAKE_OUT_NOW, out.reason, breaker_why)
    drain_held = {"name": "policy", "findings": [{"code": "DRAIN_HELD", "status": "CRITICAL"}]}
    assert action_lines(_document(held, [drain_held], held=True), 0.0) == [
        f"action: HELD by the circuit breaker, the node stays in service: {breaker_why} (would take the node out now)"
    ]
    waiting = Decision(Action.HOLD, Action.DRAIN_AFTER_JOBS, "healthd: X", "WARNING from ib for 1 of 2 passes needed")
    assert action_lines(_document(waiting, held=True), 0.0) == [
        "action: waiting before acting: WARNING from ib for 1 of 2 passes needed (would drain the node after its jobs)"
    ]
    refused = command_failed(
        "scontrol", "scontrol update NodeName=n1 State=DRAIN Reason=x", "scontrol: error: Invalid node state specified"
    ).problem
    pending = _document(out, pending=True, next_retry=130.0, errors=(refused.message,), slurm_errors=(refused,))
    assert action_lines(pending, 100.0) == [
        f"action: PENDING: take the node out now {why}: Slurm refused the change (scontrol: Invalid node state "
        "specified); next try in 30s"
    ]
    resumed = Decision(Action.NONE, Action.RESUME, "", "all checks pass")
    acked = _document(resumed, acknowledged=(FindingRef("xid/XID_79/gpu3", "b:12"),), errors=("state: disk full",))
    assert action_lines(acked, 0.0) == [
        "action: nothing to do (all checks pass)",
        "acknowledged by the node's resume in Slurm: xid/XID_79/gpu3",
        "action error: state: disk full",
    ]


def test_action_lines_survive_a_forged_record() -> None:
    from healthd.cycle.render import action_lines

    assert action_lines({"action": None}, 0.0) == ["action: none recorded (the pass failed before a decision)"]
    forged = {
        "decision": "take_out_now\nhealthd: OK",
        "explanation": "x\n\x1b[2Jforged line",
        "errors": "not a list",
        "acknowledged": [7, {"key": "a\nb"}],
        "next_retry": "soon",
        "pending": "yes",
    }
    lines = action_lines({"checks": "nope", "action": forged}, 0.0)
    assert lines == [
        "action: nothing to do (x [2Jforged line)",
        "acknowledged by the node's resume in Slurm: a b",
    ]
    # Errors are never read back for a phrase: only ``slurm_errors`` gives one, each field checked.
    odd = {"decision": "resume", "errors": ["`scontrol", "``", "`scontrol x` failed:", "x\ny", None]}
    assert action_lines({"action": odd}, 0.0) == [
        "action: resume the node was not done",
        "action error: `scontrol",
        "action error: ``",
        "action error: `scontrol x` failed:",
        "action error: x y",
    ]
    forged_slurm = [
        7,
        {"kind": ["unreachable"], "detail": "a", "error": 0},
        {"kind": "taken_over", "detail": "b", "error": 0},
        {"kind": "unreachable", "detail": 5, "error": 0},
        {"kind": "rejected", "detail": "x\n\x1b[2Jy" + "z" * 500, "error": True},
    ]
    lines = action_lines({"action": {**odd, "slurm_errors": forged_slurm}}, 0.0)
    assert lines[0] == f"Slurm refused the change (x [2Jy{'z' * 191}...); action: resume the node was not done"
    assert len(lines) == 5, "an index that is not one leaves every error its line"
    indexed = {**odd, "slurm_errors": [{"kind": "read_failed", "detail": "d", "error": 2}]}
    assert action_lines({"action": indexed}, 0.0) == [
        "Slurm read failed (d); action: resume the node was not done",
        "action error: `scontrol",
        "action error: ``",
        "action error: x y",
    ]


def test_pass_summary_names_the_first_problems_the_action_and_counts_other_errors() -> None:
    from healthd.cycle.render import pass_summary
    from healthd.plan.state import Action, Decision
    from healthd.slurm.adapter import command_failed

    findings = [{"check": "xid", "code": f"XID_{n}", "subject": f"gpu{n}", "status": "CRITICAL"} for n in range(5)]
    note = {"check": "xid", "code": "XID_43", "subject": "gpu7", "status": "OK"}
    out = Decision(Action.TAKE_OUT_NOW, Action.TAKE_OUT_NOW, "healthd: XID_0 gpu0", "CRITICAL from xid")
    said = "scontrol: error: s_p_parse_file: x; scontrol: fatal: Unable to process configuration file"
    slurm_error = command_failed("scontrol", "scontrol -o show node n1", said).problem
    document = _document(
        out,
        [{"name": "xid", "findings": [note, *findings]}],
        dry_run=True,
        errors=(
            "cannot write /x/policy.json: disk full",
            slurm_error.message,
            "cannot write /x/last-pass.json: disk full",
        ),
        slurm_errors=(slurm_error,),
    )
    assert pass_summary(document, 0.0, head="CRITICAL at 12:05:00 (0.4s)") == (
        "CRITICAL at 12:05:00 (0.4s): xid/XID_0 gpu0, xid/XID_1 gpu1, xid/XID_2 gpu2 (+2 more); Slurm not reachable "
        "(scontrol: Unable to process configuration file); dry run: would take the node out now (CRITICAL from xid; "
        "reason 'healthd: XID_0 gpu0'); 2 error(s)"
    )
    # A healthy pass with nothing to tell is its head alone; a failed one says so and counts its error.
    assert pass_summary(_document(Decision(Action.NONE, Action.NONE, "", "all checks pass")), 0.0, head="OK") == "OK"
    failed = _document(Decision(Action.NONE, Action.NONE, "", "the pass failed"), errors=("pass failed: OSError: x",))
    assert pass_summary(failed, 0.0, head="UNKNOWN") == "UNKNOWN; action: nothing to do (the pass failed); 1 error(s)"


def test_pass_summary_of_a_forged_record_is_one_bounded_line() -> None:
    from healthd.cycle.render import pass_summary

    hostile = {"check": "a\nb", "code": "\x1b[2J", "subject": "x" * 5000}
    forged = {
        "checks": [7, {"findings": "nope"}, {"findings": [hostile]}],
        "action": {"decision": 5, "errors": 9},
    }
    line = pass_summary(forged, 0.0, head="healthd: ? on n1")
    assert "\n" not in line and "\x1b" not in line and len(line) <= 1000
    assert line.startswith("healthd: ? on n1: a b/ [2J xxx")
    assert pass_summary({"action": "none"}, 0.0, head="h") == "h"


# --- output cut off by the reader (`| head`) ----------------------------------------------------------------


def _big_setup(tmp_path: Path, fixtures: Path) -> tuple[Path, Path]:
    """A config whose pass has 3,000 findings and a log of 4,000 Xid events: each prints far more than a pipe holds."""
    mounts = ", ".join(f'{{ path = "/not-mounted/{i:05d}" }}' for i in range(3000))
    config = tmp_path / "healthd.toml"
    config.write_text(
        f'[paths]\nstate_dir = "{tmp_path / "state"}"\n[slurm]\nenabled = false\nnode_name = "n1"\n'
        f"[checks.mounts]\nexpect = [{mounts}]\n{only_checks('mounts')}"
    )
    log = tmp_path / "dmesg.txt"
    log.write_text((fixtures / "kernlog" / "journalctl-k.txt").read_text() * 1000)
    return config, log


PIPED = {
    # A whole pass (of the mounts check alone): a partial one is not what `healthd status` shows.
    "check": (["check", "--once"], 2),
    "status": (["status"], 2),
    "list-checks": (["list-checks"], None),  # exits as it does without a pipe
    "scan-log": (["scan-log"], 2),
}


def _argv(name: str, config: Path, log: Path) -> list[str]:
    args, _ = PIPED[name]
    if name == "list-checks":  # reads no config
        return [str(HEALTHD), *args]
    return [str(HEALTHD), *args, *([str(log)] if name == "scan-log" else []), "--config", str(config)]


def _env(buffered: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONUNBUFFERED", "SLURM_CONF")}
    return env if buffered else {**env, "PYTHONUNBUFFERED": "1"}


def _expected_code(name: str, config: Path, log: Path) -> int:
    code = PIPED[name][1]
    if code is None:
        code = subprocess.run(_argv(name, config, log), stdout=subprocess.DEVNULL, timeout=120, check=False).returncode
    return code


@pytest.mark.parametrize("name", ["check", "status", "scan-log"])
def test_head_cuts_long_output_quietly_and_keeps_the_exit_code(tmp_path: Path, fixtures: Path, name: str) -> None:
    config, log = _big_setup(tmp_path, fixtures)
    if name == "status":
        subprocess.run(_argv("check", config, log), stdout=subprocess.DEVNULL, timeout=120, check=False)
    with open(tmp_path / "stderr", "w+") as stderr:
        producer = subprocess.Popen(_argv(name, config, log), stdout=subprocess.PIPE, stderr=stderr, env=_env(True))
        assert producer.stdout is not None
        head = subprocess.Popen(["head", "-1"], stdin=producer.stdout, stdout=subprocess.PIPE, text=True)
        producer.stdout.close()  # head alone reads the pipe: when it exits, the pipe has no reader
        first, _ = head.communicate(timeout=120)
        code = producer.wait(timeout=120)
        stderr.seek(0)
        errors = stderr.read()
    assert errors == ""
    assert code == 2
    assert first.count("\n") == 1 and len(first) < 300
    if name == "check":  # the pass ran to the end: it was saved after the output was cut
        assert json.loads((tmp_path / "state" / "last-pass.json").read_text())["status"] == "CRITICAL"


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("name", list(PIPED))
def test_a_reader_gone_before_any_output_is_no_error(
    write_config: Callable[[str], Path], fixtures: Path, name: str, buffered: bool
) -> None:
    # Buffered (the default) fails when the interpreter flushes stdout at exit; unbuffered at the first print.
    config = write_config(f'[slurm]\nenabled = false\nnode_name = "n1"\n{MISSING}{only_checks("mounts")}')
    log = fixtures / "kernlog" / "journalctl-k.txt"
    if name == "status":
        subprocess.run(_argv("check", config, log), stdout=subprocess.DEVNULL, timeout=120, check=False)
    expected = _expected_code(name, config, log)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            _argv(name, config, log),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(buffered),
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert done.stderr == ""
    assert done.returncode == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["status", "--json"],
        ["status", "--config", "/etc/x.toml"],
        ["status", "-c", "/etc/x.toml", "--json"],
        ["status", "--json", "-c", "a", "--config=b"],
        ["status", "--config=relative.toml", "--json"],
        ["status", "--json", "--config", "a", "--config", "b", "--json"],
        ["status", "--config=-odd"],
        ["check", "--once"],
        ["check", "--once", "--dry-run", "--config", "/etc/x.toml"],
        ["check", "--json", "--once", "-c", "a", "--only", "mounts,xid", "--dry-run"],
        ["check", "--once", "--only=mounts", "--config=b", "--only", "xid", "--once"],
        ["check", "--once", "--active", "--force", "--json"],
        ["check", "--once", "--only=-odd"],
        ["check"],
        ["check", "--dry-run", "--json"],
        ["check", "--once", "--quiet", "--debug", "--dry-run"],
    ],
)
def test_status_and_check_spelled_out_are_read_as_the_parser_reads_them(argv: list[str]) -> None:
    from healthd.cli.main import plain_command
    from healthd.cli.parser import build_parser

    plain = plain_command(argv)
    assert plain is not None and vars(plain) == vars(build_parser(argv).parse_args(argv))


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["status", "--js"],  # the parser takes abbreviations; this reader does not
        ["status", "-h"],
        ["status", "--config"],
        ["status", "--config", "--json"],
        ["status", "-c"],
        ["status", "-c", "-x"],
        ["status", "-c/etc/x.toml"],  # the parser reads it; this reader leaves it to the parser
        ["status", "--config", ""],
        ["status", "--config="],
        ["status", "extra"],
        ["status", "--once"],  # check's option
        ["status", "--json=yes"],
        ["--version", "status"],
        ["check", "--once", "--dry"],
        ["check", "--once", "--help"],
        ["check", "--once", "--only"],
        ["check", "--once", "--only", "--json"],
        ["check", "--once", "--only="],
        ["check", "--once", "--dry-run=1"],
        ["check", "--once", "mounts"],
        ["check", "--once", "-q"],  # the parser reads short flags
        ["check", "--expect", "check_fs_mount -f /"],  # options the parser alone reads
        ["check", "--timeout", "5"],
        ["list-checks"],
    ],
)
def test_any_other_command_line_is_left_to_the_parser(argv: list[str]) -> None:
    from healthd.cli.main import plain_command

    assert plain_command(argv) is None


# A healthy pass with Slurm off sends nothing and resets nothing: what only those would use stays unloaded.
_CHECK_IMPORTS = """
import sys
from healthd.cli.main import main
code = main(["check", "--once", "--dry-run", "--config", sys.argv[1]])
unused = ("argparse", "shutil", "healthd.cli.parser", "healthd.cycle.gpureset", "healthd.cycle.onrepair",
          "healthd.cycle.activerun", "healthd.plan.active", "healthd.checks.settings", "pydantic", "_hashlib")
print(code, sorted(m for m in unused if m in sys.modules))
from healthd_checks.xid.parse import _rare
print(_rare.cache_info().currsize)
"""


def test_a_healthy_check_once_imports_nothing_of_what_it_does_not_run(write_config: Callable[..., Path]) -> None:
    """Spelled out as cron or a person runs it: no argument parser, no GPU reset, no active checks, no
    on_repair, no OpenSSL (``_hashlib``: the config's SHA-256 is CPython's own, and only a partition
    counted by shards loads hashlib); the xid check reads /dev/kmsg and compiles no pattern of a
    text dump's envelopes."""
    config = write_config(only_checks("mounts", "xid") + '\n[checks.mounts]\nexpect = [{path = "/"}]\n')
    warm = [sys.executable, "-m", "healthd", "check", "--once", "--dry-run", "--config", str(config)]
    subprocess.run(warm, capture_output=True, timeout=120, check=False)  # validates the config and caches it
    probe = subprocess.run(
        [sys.executable, "-c", _CHECK_IMPORTS, str(config)], capture_output=True, text=True, timeout=120, check=False
    )
    assert probe.stdout.splitlines()[-2:] == ["0 []", "0"], probe.stdout + probe.stderr


@pytest.mark.parametrize(("command", "code"), [("status", 3), ("history", 70)])
def test_a_bug_in_status_or_history_exits_with_its_documented_code_not_a_grade(
    command: str,
    code: int,
    write_config: Callable[[str], Path],
    cli: Callable[..., tuple[int, str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Status is read by Nagios (3: UNKNOWN, nothing observed); history by people (70, as every other command).
    import healthd.commands.history
    import healthd.commands.status

    def bug(_: object) -> None:
        raise ValueError("embedded null byte")

    module = healthd.commands.status if command == "status" else healthd.commands.history
    monkeypatch.setattr(module, "read_source" if command == "status" else "read_settings", bug)
    got, out, err = cli(command, "--config", str(write_config("")))
    assert (got, out) == (code, "")
    assert err.endswith("healthd: internal error: ValueError: embedded null byte\n")


def test_toml_nested_too_deeply_is_a_config_error_in_every_command(
    write_config: Callable[[str], Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    path = write_config("")
    # Written here: the fixture's own reading of it would stop at the same recursion. A file
    # that cannot be read can make healthd do nothing, as the fixture requires.
    path.write_text("[x]\ny = " + "[" * 5000 + "]" * 5000 + "\n")
    for command in (["config", "validate"], ["check", "--once"], ["status"], ["history"]):
        code, out, err = cli(*command, "--config", str(path))
        assert (code, out) == (78, ""), command
        assert f"{path}: not valid TOML: arrays or inline tables nested too deeply to read" in err, command


def _config_options(parser: argparse.ArgumentParser, where: str) -> Iterator[tuple[str, list[str]]]:
    """(command, option strings) of every --config option of ``parser`` and its subcommands."""
    for action in parser._actions:
        if "--config" in action.option_strings:
            yield where, list(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _config_options(sub, f"{where} {name}".strip())


def test_every_command_that_takes_config_takes_c_too() -> None:
    from healthd.checks.plugin import discover_commands
    from healthd.cli.parser import build_parser
    from healthd.commands import COMMANDS

    names = [*COMMANDS, *(command.name for command in discover_commands())]
    found = [option for name in names for option in _config_options(build_parser([name]), "")]
    commands = {where.split()[0] for where, _ in found}
    assert {"check", "config", "status", "ack", "scan-log", "prolog", "epilog", "fleet"} <= commands
    assert [(where, options) for where, options in found if "-c" not in options] == []


def test_c_names_the_config_of_status_and_check(
    write_config: Callable[[str], Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    config = str(write_config('[checks.mounts]\nexpect = [{ path = "/definitely-not-mounted" }]\n'))
    code, out, _ = cli("check", "--once", "-c", config, "--only", "mounts")
    assert code == 2 and "MOUNT_MISSING /definitely-not-mounted" in out
    assert cli("check", "--once", "-c", config)[0] == 2
    code, out, _ = cli("status", "-c", config)
    assert code == 2 and "MOUNT_MISSING /definitely-not-mounted" in out


@pytest.mark.parametrize(
    ("flags", "written", "synced"),
    [
        ((), ["acks", "last-pass", "policy"], ["acks", "last-pass", "policy"]),
        (("--dry-run",), ["last-pass", "policy"], []),
    ],
)
def test_only_a_pass_that_may_act_syncs_the_state_directory_after_its_documents(
    flags: tuple[str, ...],
    written: list[str],
    synced: list[str],
    write_config: Callable[..., Path],
    cli: Callable[..., tuple[int, str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each document is synced before its rename either way; a dry run's renames are not synced (docs/policy.md)."""
    import stat

    config = write_config(only_checks("mounts") + '[checks.mounts]\nexpect = [{path = "/"}]\n')
    cli("check", "--once", "--config", str(config))  # the config cached, the node claimed
    renamed: list[str] = []
    directories: list[str] = []
    replace, fsync = os.replace, os.fsync

    def note_rename(source: str, target: str, **kwargs: Any) -> None:
        renamed.append(target.removesuffix(".json"))
        replace(source, target, **kwargs)

    def note_sync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            directories.append(renamed[-1])
        fsync(fd)

    monkeypatch.setattr(os, "replace", note_rename)
    monkeypatch.setattr(os, "fsync", note_sync)
    code, _, err = cli("check", "--once", *flags, "--config", str(config))
    assert (code, err) == (0, "")
    assert (sorted(renamed), sorted(directories)) == (written, synced)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["stauts"], "unknown command 'stauts'; did you mean status?"),
        (["check", "--jsn"], "unrecognized arguments: --jsn; did you mean --json?"),
        (["status", "--jsno=1"], "did you mean --json?"),
        (["zzzz"], "unknown command 'zzzz' (healthd --help lists them)"),
    ],
)
def test_a_misspelt_command_or_option_gets_a_guess(argv: list[str], said: str) -> None:
    done = subprocess.run([str(HEALTHD), *argv], capture_output=True, text=True, check=False)
    assert done.returncode == 64 and said in done.stderr


def test_check_alone_runs_one_pass(tmp_path: Path) -> None:
    config = tmp_path / "healthd.toml"
    config.write_text(f'[paths]\nstate_dir = "{tmp_path / "state"}"\n[slurm]\nenabled = false\n{only_checks("jobs")}')
    done = subprocess.run([str(HEALTHD), "check", "--json", "--config", str(config)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    ran = [check["name"] for check in json.loads(done.stdout)["checks"] if check["state"] != "disabled"]
    assert ran == ["jobs"]
