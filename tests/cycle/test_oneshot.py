"""``check_once`` (healthd.cycle.oneshot), the flow behind ``healthd check``: each of its branches, in process.

A real config file with its own state directory and Slurm off; every installed check is off
but ``files``, whose one expectation (a marker file) a test makes true by creating it, and
``dcgm``, the active check, not applicable here (its dcgmi is absent). The outcomes asserted
are what the command prints and exits with: the exit code, the pass document's fields, the
``Declined`` lines, and what the state directory records.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, NamedTuple

import pytest
from healthd_testkit.checks import only_checks

from healthd.cycle.daemonpass import DaemonClaim
from healthd.cycle.oneshot import Declined, Done, OneShot, check_once
from healthd.exitcodes import EX_DATAERR, EX_TEMPFAIL, EX_USAGE


class Node(NamedTuple):
    config: Path
    state: Path
    marker: Path


@pytest.fixture
def node(write_config: Callable[[str], Path], tmp_path: Path) -> Node:
    marker = tmp_path / "marker"
    body = (
        f'[checks.files]\nexpect_files = [{{ path = "{marker}" }}]\n'
        f'[checks.dcgm]\nenabled = true\ndcgmi = "{tmp_path}/no-dcgmi"\n' + only_checks("files", "dcgm")
    )
    config = write_config(body)
    return Node(config, tmp_path / "state", marker)


def _done(asked: OneShot) -> dict[str, Any]:
    """The pass document of ``check_once(asked)``, which must have run, with its exit code checked against it."""
    done = check_once(asked)
    assert isinstance(done, Done), done
    assert done.outcome.exit_code == done.outcome.document["exit_code"]
    return done.outcome.document


def _ran(document: dict[str, Any]) -> dict[str, str]:
    """Each check the pass did not leave out (disabled, or not of its tier): its state."""
    return {c["name"]: c["state"] for c in document["checks"] if c["state"] not in ("disabled", "skipped")}


def _findings(document: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(f["status"], f["code"], f["subject"]) for c in document["checks"] for f in c["findings"]}


def _recorded(state: Path, name: str) -> Any:
    path = state / name
    return json.loads(path.read_text()) if path.exists() else None


def test_a_pass_judges_the_node_and_is_recorded_as_its_last(node: Node) -> None:
    document = _done(OneShot(node.config))
    assert (document["status"], document["exit_code"]) == ("CRITICAL", 2)
    assert _ran(document) == {"files": "ran"}, "the active check stays out of an ordinary pass"
    assert _findings(document) == {("CRITICAL", "FILE_MISSING", str(node.marker))}
    assert document["action"]["decision"] == "take_out_now" and document["action"]["one_shot"] is True
    assert (document["action"]["dry_run"], document["action"]["slurm_enabled"]) == (False, False)
    assert _recorded(node.state, "last-pass.json") == document
    node.marker.touch()
    healed = _done(OneShot(node.config, dry_run=True))
    assert (healed["status"], healed["exit_code"], healed["action"]["dry_run"]) == ("OK", 0, True)
    assert _recorded(node.state, "last-pass.json") == healed


@pytest.mark.parametrize(
    ("asked", "said"),
    [
        ({"only": ("filez",)}, "--only: filez: unknown check; did you mean files?"),
        ({"force": True}, "--force goes with --active"),
        ({"expect": ("dcgm:",)}, "--expect: dcgm: an active check, run with --active alone"),
    ],
)
def test_options_that_do_not_go_together_exit_64_and_run_nothing(node: Node, asked: dict[str, Any], said: str) -> None:
    declined = check_once(OneShot(node.config, **asked))
    assert isinstance(declined, Declined)
    assert (declined.exit_code, declined.lines[0]) == (EX_USAGE, said)
    assert _recorded(node.state, "last-pass.json") is None


def test_only_names_the_known_checks_when_one_is_unknown(node: Node) -> None:
    declined = check_once(OneShot(node.config, only=("files", "nope")))
    assert isinstance(declined, Declined) and len(declined.lines) == 2
    known = declined.lines[1].removeprefix("known checks: ").split(", ")
    assert {"files", "dcgm", "mounts", "xid"} <= set(known) and "nope" not in known


def test_only_runs_the_named_checks(node: Node) -> None:
    document = _done(OneShot(node.config, only=("files",)))
    assert _ran(document) == {"files": "ran"} and document["exit_code"] == 2


def test_an_nhc_line_not_converted_whole_exits_65_and_runs_nothing(node: Node) -> None:
    declined = check_once(OneShot(node.config, expect=("check_nv_drv_version 535",)))
    assert isinstance(declined, Declined) and declined.exit_code == EX_DATAERR
    assert declined.lines[0].startswith("--expect 'check_nv_drv_version 535': not converted: ")
    assert _recorded(node.state, "last-pass.json") is None


def test_an_expectation_runs_its_check_alone_as_a_dry_run_beside_the_node_s_state(node: Node) -> None:
    _done(OneShot(node.config))
    before = {p.name: p.read_bytes() for p in node.state.iterdir()}
    document = _done(OneShot(node.config, expect=('files: expect_files = [{ path = "/" }]',)))
    # The expectation's list replaces the configured one: the missing marker is not judged.
    assert (document["status"], _ran(document), _findings(document)) == ("OK", {"files": "ran"}, set())
    assert document["action"]["dry_run"] is True, "a trial never changes what Slurm holds"
    assert {p.name: p.read_bytes() for p in node.state.iterdir()} == before


def test_the_active_checks_wait_for_slurm_unless_forced(node: Node) -> None:
    declined = check_once(OneShot(node.config, active=True))
    assert isinstance(declined, Declined) and declined.exit_code == EX_TEMPFAIL
    assert declined.lines == (
        "not running the active checks: [slurm] enabled = false, so whether the node is idle and drained"
        " is not known (--force runs anyway)",
    )
    assert _recorded(node.state, "active.json") is None
    document = _done(OneShot(node.config, active=True, force=True))
    # The active pass runs the active check alone: the missing marker is not judged.
    assert (_ran(document), document["exit_code"]) == ({"dcgm": "not_applicable"}, 0)
    assert _recorded(node.state, "active.json")["by"] == "check --once --active"


def test_a_pass_with_another_config_than_the_running_daemon_s_is_saved_aside(node: Node) -> None:
    claim = DaemonClaim(node.state)
    node.state.mkdir(mode=0o700, exist_ok=True)
    assert claim.acquire(0.0)
    try:
        claim.record({}, fresh_for=60.0, config_sha256="0" * 64, dry_run=False, now=0.0)
        document = _done(OneShot(node.config))
    finally:
        claim.release()
    assert _recorded(node.state, "other-pass.json") == document
    assert _recorded(node.state, "last-pass.json") is None, "the daemon's last pass stands for the node"
