"""The services check where systemd is PID 1: a stand-in systemctl (a real program) answers `systemctl show`.

systemd is not PID 1 where the tests run, so no real systemctl can answer for units;
the stand-in prints the replies a test prepares, one per call, and records its
arguments. Transient states (reloading, a restart's deactivating and activating) must
never grade a running daemon as dead: a fleet-wide reload would take out every node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pytest
from healthd_testkit.checks import FixtureNode, check_context, raises_only
from healthd_testkit.nvml import Clock
from healthd_testkit.paths import FIXTURES
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from healthd.checks.plugin import JudgeContext
from healthd.model import Finding, Status
from healthd_checks.services import check as services
from healthd_checks.services.check import BASELINE_SERVICES, CHECK, ServicesObservation, judge, span
from healthd_checks.services.settings import ServicesSettings
from healthd_checks.services.units import ShowError, UnitState, parse_show

PROPERTIES = "Id,LoadState,ActiveState,SubState,NRestarts,ActiveExitTimestampMonotonic,InactiveExitTimestampMonotonic"
SHOW = f"show --no-pager --property={PROPERTIES} --"


def block(unit: str, active: str, sub: str, load: str = "loaded", timing: str = "") -> str:
    """One unit's block as `systemctl show --property=...` prints it; ``timing`` adds the lines of ``timed``."""
    return f"Id={unit}\nLoadState={load}\nActiveState={active}\nSubState={sub}\n{timing}"


# CLOCK_MONOTONIC at the check's reads, in microseconds: 11.5 days after boot, whatever this host's uptime.
NOW = 10**12


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services, "_monotonic_us", lambda: NOW)


def timed(left_active: Optional[float], left_inactive: Optional[float], restarts: int = 0) -> str:
    """NRestarts and the exit timestamps, as seconds before NOW; None: never (systemd prints 0)."""

    def at(ago: Optional[float]) -> int:
        return 0 if ago is None else NOW - int(ago * 1e6)

    return (
        f"NRestarts={restarts}\nActiveExitTimestampMonotonic={at(left_active)}\n"
        f"InactiveExitTimestampMonotonic={at(left_inactive)}\n"
    )


def reply(*blocks: str) -> str:
    return "\n".join(blocks)


class Systemd(FixtureNode):
    """A node whose systemctl prints the test's Nth reply on its Nth call and logs its arguments."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, Clock())
        self.calls = root / "calls"
        count = root / "count"
        self.tool = self.program(
            "systemctl",
            f'n=$(( $(cat "{count}" 2>/dev/null || echo 0) + 1 )); echo "$n" > "{count}"\n'
            f'echo "$*" >> "{self.calls}"\n'
            f'[ -f "{root}/reply.$n" ] || exit 1\ncat "{root}/reply.$n"\n'
            f'exit $(cat "{root}/status.$n" 2>/dev/null || echo 0)',
        )

    def replies(self, *replies: str) -> None:
        for number, text in enumerate(replies, start=1):
            (self.root / f"reply.{number}").write_text(text)

    def fail(self, call: int, status: int) -> None:
        (self.root / f"status.{call}").write_text(f"{status}\n")

    def run(self, *expect: str, **settings: object) -> list[Finding]:
        chosen: dict[str, object] = {"manager": "systemd", "systemctl": self.tool, "transition_wait": 0.05}
        return self.passes(CHECK, ServicesSettings(expect=list(expect), **{**chosen, **settings}))

    def argv(self) -> list[str]:
        return self.calls.read_text().splitlines()


@pytest.fixture
def node(tmp_path: Path) -> Systemd:
    return Systemd(tmp_path)


def graded(findings: list[Finding]) -> list[tuple[Status, str, str]]:
    return [(f.status, f.code, f.subject) for f in findings]


def test_reloading_and_refreshing_units_run(node: Systemd) -> None:
    node.replies(
        reply(
            block("munge.service", "active", "running"),
            block("slurmd.service", "reloading", "reload"),
            block("nvidia-persistenced.service", "reloading", "reload-notify"),
            block("containerd.service", "refreshing", "running"),
        )
    )
    assert node.run("munge", "slurmd", "nvidia-persistenced", "containerd") == []
    units = "munge.service slurmd.service nvidia-persistenced.service containerd.service"
    assert node.argv() == [f"{SHOW} {units}"], "a running unit is read once"


@pytest.mark.parametrize(("active", "sub"), [("activating", "auto-restart"), ("activating", "auto-restart-queued")])
def test_a_unit_waiting_to_be_restarted_is_not_running(node: Systemd, active: str, sub: str) -> None:
    # A daemon that crashes over and over sits here between attempts: nothing runs.
    node.replies(reply(block("slurmd.service", active, sub), block("munge.service", active, sub)))
    findings = node.run("slurmd", "munge", severities={"munge": "WARNING"})
    assert graded(findings) == [
        (Status.CRITICAL, "SERVICE_INACTIVE", "slurmd"),
        (Status.WARNING, "SERVICE_INACTIVE", "munge"),
    ]
    assert f"systemd waits to restart it, {active} ({sub})" in findings[0].message
    assert findings[0].details["substate"] == sub
    assert len(node.argv()) == 1, "a unit waiting to restart is down: not read again"


def test_a_restart_seen_through_by_the_second_read_is_healthy(node: Systemd) -> None:
    node.replies(
        reply(
            block("munge.service", "active", "running"),
            block("slurmd.service", "deactivating", "stop-sigterm"),
            block("nvidia-persistenced.service", "activating", "start"),
        ),
        reply(block("slurmd.service", "active", "running"), block("nvidia-persistenced.service", "active", "running")),
    )
    assert node.run("munge", "slurmd", "nvidia-persistenced") == []
    assert node.argv()[1] == f"{SHOW} slurmd.service nvidia-persistenced.service", "only the moving units again"


def test_a_unit_still_moving_after_the_wait_is_unknown_never_dead(node: Systemd) -> None:
    node.replies(
        reply(block("slurmd.service", "activating", "start"), block("munge.service", "deactivating", "stop")),
        reply(block("slurmd.service", "activating", "start-post"), block("munge.service", "deactivating", "stop")),
    )
    findings = node.run("slurmd", "munge")
    assert graded(findings) == [
        (Status.UNKNOWN, "SERVICE_IN_TRANSITION", "slurmd"),
        (Status.UNKNOWN, "SERVICE_IN_TRANSITION", "munge"),
    ]
    assert findings[0].message.startswith("slurmd is still activating (start-post) after 0.05s: systemd is starting")
    assert (findings[0].details["state"], findings[0].details["substate"]) == ("activating", "start-post")
    # This systemctl prints no timestamps: how long is unknown, and an unknown is never the severity.
    assert findings[0].message.endswith(
        "(for how long is not known: systemd did not print ActiveExitTimestampMonotonic)"
    )


def test_a_unit_moving_for_less_than_transition_limit_is_unknown(node: Systemd) -> None:
    # A slow start asked for 10 s ago (InactiveExitTimestamp), after the daemon was stopped an hour
    # ago: the time since it was last asked to start counts, not the time since it last ran.
    moving = block("slurmd.service", "activating", "start", timing=timed(3600, 10))
    node.replies(reply(moving), reply(moving))
    (finding,) = node.run("slurmd")
    assert (finding.status, finding.code) == (Status.UNKNOWN, "SERVICE_IN_TRANSITION")
    assert finding.details["moving_for_s"] == 10
    assert finding.message.endswith("(without a running daemon for 10s of transition_limit 300s)")


@pytest.mark.parametrize(("active", "sub"), [("activating", "start"), ("deactivating", "stop-sigterm")])
def test_a_unit_moving_for_longer_than_transition_limit_has_its_severity(node: Systemd, active: str, sub: str) -> None:
    # TimeoutStartSec=infinity (or TimeoutStopSec=): one attempt that never ends. The old check
    # called this UNKNOWN for ever, and the node was never taken out.
    started = timed(400, 400) if active == "activating" else timed(400, 90000)
    node.replies(*[reply(block("nvidia-fabricmanager.service", active, sub, timing=started))] * 2)
    (finding,) = node.run("nvidia-fabricmanager")
    assert (finding.status, finding.code) == (Status.CRITICAL, "SERVICE_STUCK")
    assert finding.message == (
        f"nvidia-fabricmanager has been {active} for 6m40s (now {sub}), over transition_limit 300s (per systemd)"
    )
    assert finding.details["moving_for_s"] == 400


def test_a_start_that_hangs_and_is_retried_takes_the_node_out(node: Systemd) -> None:
    # The reviewer's case: TimeoutStartSec=90s and Restart=on-failure. Each attempt resets
    # InactiveExitTimestamp (and StateChangeTimestamp), so neither ever ages past one attempt;
    # NRestarts says systemd has retried since the daemon last ran, 400 s ago.
    hung = block("nvidia-fabricmanager.service", "activating", "start", timing=timed(400, 20, restarts=4))
    node.replies(reply(hung), reply(hung))
    (finding,) = node.run("nvidia-fabricmanager", severities={"nvidia-fabricmanager": "WARNING"})
    assert (finding.status, finding.code) == (Status.WARNING, "SERVICE_STUCK")
    assert finding.message == (
        "nvidia-fabricmanager is activating (start) and has not run for 6m40s:"
        " systemd restarted it 4 times without it coming up (per systemd)"
    )
    assert finding.details["restarts"] == 4


def test_a_retried_start_whose_daemon_ran_recently_is_unknown(node: Systemd) -> None:
    # Restart=always and a daemon that exits now and then: it ran until 30 s ago.
    retried = block("slurmd.service", "activating", "start", timing=timed(30, 5, restarts=7))
    node.replies(reply(retried), reply(retried))
    (finding,) = node.run("slurmd")
    assert (finding.status, finding.code) == (Status.UNKNOWN, "SERVICE_IN_TRANSITION")


def test_a_fleet_wide_restart_never_takes_the_node_out(node: Systemd) -> None:
    # Configuration management restarts slurmd and munge everywhere at once. slurmd crashed and was
    # restarted by systemd weeks ago: NRestarts stays 1 until the restart's start flushes it
    # (service_start(), src/core/service.c), so its stop still shows it. The old daemons ran weeks.
    node.replies(
        reply(
            block("slurmd.service", "deactivating", "stop-sigterm", timing=timed(3, 2000000, restarts=1)),
            block("munge.service", "activating", "start", timing=timed(4, 1)),
        ),
        reply(
            block("slurmd.service", "activating", "start-pre", timing=timed(6, 1)),
            block("munge.service", "activating", "start", timing=timed(7, 4)),
        ),
    )
    findings = node.run("slurmd", "munge")
    assert graded(findings) == [
        (Status.UNKNOWN, "SERVICE_IN_TRANSITION", "slurmd"),
        (Status.UNKNOWN, "SERVICE_IN_TRANSITION", "munge"),
    ]


@pytest.mark.parametrize(
    ("timing", "said"),
    [
        ("", "systemd did not print ActiveExitTimestampMonotonic"),
        ("ActiveExitTimestampMonotonic=0\n", "systemd did not print InactiveExitTimestampMonotonic"),
        (
            "ActiveExitTimestampMonotonic=0\nInactiveExitTimestampMonotonic=0\n",
            "systemd gives neither ActiveExitTimestampMonotonic nor InactiveExitTimestampMonotonic",
        ),
        (
            "ActiveExitTimestampMonotonic=12 days\nInactiveExitTimestampMonotonic=0\n",
            "ActiveExitTimestampMonotonic='12 days' is not a decimal count",
        ),
        ("NRestarts=-1\n", "NRestarts='-1' is not a decimal count"),
        (
            f"ActiveExitTimestampMonotonic=1\nInactiveExitTimestampMonotonic={NOW + 1}\n",
            "systemd's timestamp is ahead of this host's CLOCK_MONOTONIC",
        ),
    ],
)
def test_a_moving_unit_whose_time_is_unknown_is_unknown(node: Systemd, timing: str, said: str) -> None:
    moving = block("slurmd.service", "activating", "start", timing=timing)
    node.replies(reply(moving), reply(moving))
    (finding,) = node.run("slurmd")
    assert (finding.status, finding.code) == (Status.UNKNOWN, "SERVICE_IN_TRANSITION")
    assert finding.message.endswith(f"(for how long is not known: {said})")


def test_a_retried_unit_that_never_ran_counts_from_boot() -> None:
    # NRestarts and no ActiveExitTimestamp: every attempt since boot failed. judge is pure: the
    # time of the read is given, 10 minutes after boot.
    timing = {"NRestarts": "2", "ActiveExitTimestampMonotonic": "0", "InactiveExitTimestampMonotonic": "590000000"}
    state = UnitState("dcgm", "nvidia-dcgm.service", "loaded", "activating", "start", timing)
    observed = ServicesObservation(systemd=(state,), reread_after=2.0, read_at=600_000_000)
    (finding,) = judge(observed, JudgeContext("services", ServicesSettings(expect=["dcgm"]), 0.0)).findings
    assert (finding.status, finding.code) == (Status.CRITICAL, "SERVICE_STUCK")
    assert "has not run since boot: systemd restarted it 2 times" in finding.message
    early = ServicesObservation(systemd=(state,), reread_after=2.0, read_at=200_000_000)
    (finding,) = judge(early, JudgeContext("services", ServicesSettings(expect=["dcgm"]), 0.0)).findings
    assert finding.status is Status.UNKNOWN, "200 s after boot is within transition_limit"


def test_transition_limit_must_be_longer_than_transition_wait() -> None:
    with pytest.raises(ValidationError, match=r"transition_limit \(5s\) must be longer than transition_wait \(10s\)"):
        ServicesSettings(transition_wait=10, transition_limit=5)


@pytest.mark.parametrize(
    ("seconds", "said"), [(0, "0s"), (59.9, "59s"), (372, "6m12s"), (7500, "2h5m"), (273600, "3d4h")]
)
def test_span(seconds: float, said: str) -> None:
    assert span(seconds) == said


def test_a_unit_that_stops_while_waited_for_is_down(node: Systemd) -> None:
    node.replies(
        reply(block("slurmd.service", "deactivating", "stop-sigterm")),
        reply(block("slurmd.service", "inactive", "dead")),
    )
    assert graded(node.run("slurmd")) == [(Status.CRITICAL, "SERVICE_INACTIVE", "slurmd")]


def test_without_time_for_a_second_read_a_moving_unit_is_unknown(node: Systemd) -> None:
    # Two reads of timeout/4 and the wait must fit in nine tenths of the timeout: 0.25 + 1 + 0.25 > 0.9.
    node.replies(reply(block("slurmd.service", "activating", "start")))
    findings = node.run("slurmd", timeout=1.0, transition_wait=1.0)
    assert graded(findings) == [(Status.UNKNOWN, "SERVICE_IN_TRANSITION", "slurmd")]
    assert findings[0].message.startswith("slurmd is activating (start): ")
    assert len(node.argv()) == 1


@pytest.mark.parametrize(
    ("load", "active", "sub", "code", "said"),
    [
        ("loaded", "inactive", "dead", "SERVICE_INACTIVE", "slurmd is inactive (dead) (per systemd)"),
        ("loaded", "failed", "failed", "SERVICE_FAILED", "slurmd is failed (failed) (per systemd)"),
        ("loaded", "maintenance", "cleaning", "SERVICE_INACTIVE", "slurmd is maintenance (cleaning) (per systemd)"),
        ("masked", "inactive", "dead", "SERVICE_INACTIVE", "slurmd is inactive (dead) (per systemd)"),
        (
            "not-found",
            "inactive",
            "dead",
            "SERVICE_NOT_FOUND",
            "slurmd is not installed: systemd has no unit slurmd.service (per systemd)",
        ),
    ],
)
def test_a_stopped_unit_has_its_severity(node: Systemd, load: str, active: str, sub: str, code: str, said: str) -> None:
    node.replies(reply(block("slurmd.service", active, sub, load)))
    (finding,) = node.run("slurmd")
    assert (finding.status, finding.code, finding.message) == (Status.CRITICAL, code, said)


def test_an_alias_is_matched_by_its_place_not_its_id(node: Systemd) -> None:
    # openssh-server's ssh.service has Alias=sshd.service: systemd answers with the unit's own Id.
    node.replies(reply(block("ssh.service", "active", "running"), block("munge.service", "inactive", "dead")))
    assert graded(node.run("sshd", "munge")) == [(Status.CRITICAL, "SERVICE_INACTIVE", "munge")]


def test_a_unit_deleted_while_running_still_runs(node: Systemd) -> None:
    node.replies(reply(block("slurmd.service", "active", "running", load="not-found")))
    assert node.run("slurmd") == []


def test_malformed_output_is_unknown_and_names_the_line(node: Systemd) -> None:
    node.replies(reply(block("slurmd.service", "active", "running"), "Id=munge.service\nLoadState loaded\n"))
    (finding,) = node.run("slurmd", "munge")
    assert (finding.status, finding.code, finding.subject) == (Status.UNKNOWN, "SYSTEMCTL_MALFORMED", "systemctl")
    assert f"{node.tool} show:7: expected one of Id, LoadState, ActiveState, SubState, NRestarts," in finding.message


def test_a_failing_systemctl_is_unknown(node: Systemd) -> None:
    node.replies("Failed to connect to bus: No such file or directory\n")
    node.fail(1, 1)
    (finding,) = node.run("slurmd")
    assert (finding.status, finding.code) == (Status.UNKNOWN, "SYSTEMCTL_FAILED")
    assert "exited with status 1" in finding.message


UNITS = ("a.service", "b.service")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (block("a.service", "active", "running"), "fuzz: 1 blocks of properties for 2 units"),
        (
            reply(block("a.service", "active", "running") + "Id=b.service\n", block("b.service", "active", "running")),
            "fuzz:5: Id given twice for a.service",
        ),
        (
            reply(block("a.service", "active", "running"), "Id=b.service\nLoadState=loaded\nSubState=dead\n"),
            "fuzz:6: no ActiveState for b.service",
        ),
        (
            reply(block("a.service", "active", "running"), block("b.service", "sleeping", "dead")),
            "fuzz:6: b.service has ActiveState 'sleeping', none of activating, active, deactivating, failed",
        ),
        (reply(block("a.service", "active", "running"), "Names=b.service\n"), "fuzz:6: expected one of Id"),
    ],
)
def test_parse_show_rejects_what_is_not_one_block_per_unit(text: str, said: str) -> None:
    with pytest.raises(ShowError) as raised:
        parse_show(text, UNITS, "fuzz")
    assert str(raised.value).startswith(said)


def test_parse_show_reads_blocks_in_order() -> None:
    text = reply(block("a.service", "active", "running"), block("b.service", "activating", "auto-restart"))
    a, b = parse_show(text + "\n", UNITS, "fuzz")
    assert (a.unit, a.id, a.active, a.sub) == ("a.service", "a.service", "active", "running")
    assert (b.unit, b.load, b.described) == ("b.service", "loaded", "activating (auto-restart)")


@given(st.text())
def test_parse_show_raises_only_its_error(text: str) -> None:
    raises_only(lambda body, source: parse_show(body, UNITS, source), ShowError, text)


def test_the_baseline_expects_the_units_that_run_reloading_included(node: Systemd) -> None:
    states = {
        "slurmd": ("reloading", "reload"),
        "munge": ("active", "running"),
        "sshd": ("active", "running"),
        "chronyd": ("activating", "auto-restart"),
        "nvidia-persistenced": ("failed", "failed"),
        "nvidia-fabricmanager": ("inactive", "dead"),
        "nvidia-dcgm": ("inactive", "dead"),
    }
    assert tuple(states) == BASELINE_SERVICES
    node.replies(reply(*(block(f"{unit}.service", *state) for unit, state in states.items())))
    settings = ServicesSettings(manager="systemd", systemctl=node.tool)
    assert CHECK.baseline is not None
    found = CHECK.baseline(check_context("services", settings, node.root, procfs=FIXTURES / "procfs/gpu-node"))
    assert found["expect"] == ["slurmd", "munge", "sshd"]
