"""The ib_bandwidth check through a stand-in ib_write_bw (a real program, server and client) replaying real output."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest
from healthd_testkit.perftest import IbWriteBw
from pydantic import ValidationError

from healthd.checks.plugin import NotApplicable
from healthd.model import Finding, Status
from healthd_checks.ib_bandwidth.check import CHECK
from healthd_checks.ib_bandwidth.settings import IbBandwidthSettings

# Two InfiniBand HCAs and an Ethernet port (RoCE) that Azure's determine_IB_devices leaves out.
HCAS = {"mlx5_0": "InfiniBand", "mlx5_1": "InfiniBand", "mlx5_an0": "Ethernet"}
# write-bw-gbits.txt measured 8-byte writes.
SMALL = {"message_size": 8}


@pytest.fixture
def perftest(tmp_path: Path) -> IbWriteBw:
    return IbWriteBw(tmp_path, HCAS)


def graded(findings: list[Finding]) -> set[tuple[Status, str, str]]:
    return {(f.status, f.code, f.subject) for f in findings}


def test_each_infiniband_hca_writes_to_itself_and_is_noted(perftest: IbWriteBw) -> None:
    perftest.prints("write-bw-gbits.txt")
    findings = perftest.run(min_gbps=0.4, **SMALL)
    assert graded(findings) == {(Status.OK, "IB_BANDWIDTH", "mlx5_0"), (Status.OK, "IB_BANDWIDTH", "mlx5_1")}
    assert findings[0].details == {"gbps": 0.48}
    server = "-d mlx5_0 -p 18515 -s 8 -D 5 -q 1 -x 0 -F --report_gbits --perform_warm_up"
    # A server and its client on the same node (the client again while the server is not listening
    # yet); one HCA after the other.
    assert set(perftest.calls[:2]) == {server, server + " localhost"}
    assert list(dict.fromkeys(call.split()[1] for call in perftest.calls)) == ["mlx5_0", "mlx5_1"]


def test_a_bandwidth_below_the_floor_is_a_warning_per_hca(perftest: IbWriteBw) -> None:
    perftest.prints("write-bw-gbits.txt")
    findings = perftest.run(min_gbps=1.0, hcas=["mlx5_1"], **SMALL)
    assert graded(findings) == {(Status.WARNING, "IB_BANDWIDTH_LOW", "mlx5_1")}
    assert findings[0].details == {"gbps": 0.48, "floor": 1.0}


def test_gpudirect_pairs_the_ith_hca_with_the_ith_gpu(perftest: IbWriteBw) -> None:
    perftest.prints("write-bw-gbits.txt")
    perftest.run(use_cuda=True, **SMALL)
    servers = [call.split() for call in perftest.calls if not call.endswith("localhost")]
    assert [(words[1], words[-1]) for words in servers] == [("mlx5_0", "--use_cuda=0"), ("mlx5_1", "--use_cuda=1")]


def test_a_client_is_started_again_until_its_server_listens(perftest: IbWriteBw) -> None:
    perftest.prints("write-bw-gbits.txt")
    (perftest.root / "delay").write_text("0.8")
    assert graded(perftest.run(hcas=["mlx5_0"], **SMALL)) == {(Status.OK, "IB_BANDWIDTH", "mlx5_0")}
    assert len(perftest.calls) > 2, "the first client found no server listening"


def test_a_device_perftest_cannot_open_is_unknown_with_its_words(perftest: IbWriteBw) -> None:
    perftest.prints("write-bw-gbits.txt")
    perftest.fails("mlx5_0", "no-device.stderr", server_too=True)
    findings = {f.subject: f for f in perftest.run(**SMALL)}
    assert (findings["mlx5_0"].status, findings["mlx5_0"].code) == (Status.UNKNOWN, "IB_BANDWIDTH_FAILED")
    assert "Did not detect devices" in findings["mlx5_0"].message
    assert findings["mlx5_1"].code == "IB_BANDWIDTH", "one HCA's failure leaves the others measured"


@pytest.mark.parametrize(
    ("fixture", "reason"),
    [
        ("send-bw-mbsec.txt", "BW average[MB/sec], not BW average[Gb/sec]"),
        ("write-bw-negative-by-hand.txt", "BW average[Gb/sec]: '-0.48' is not a bandwidth"),
    ],
)
def test_output_that_is_not_a_gbps_measurement_is_unknown(perftest: IbWriteBw, fixture: str, reason: str) -> None:
    perftest.prints(fixture)
    (finding,) = perftest.run(hcas=["mlx5_0"], **SMALL)
    assert (finding.status, finding.code) == (Status.UNKNOWN, "IB_BANDWIDTH_MALFORMED")
    assert reason in finding.message


def test_a_table_without_the_size_asked_for_is_unknown(perftest: IbWriteBw) -> None:
    perftest.prints("write-bw-gbits.txt")
    (finding,) = perftest.run(hcas=["mlx5_0"])
    assert (finding.status, finding.code) == (Status.UNKNOWN, "IB_BANDWIDTH_MALFORMED")
    assert "0 rows for 1048576 bytes" in finding.message


def test_a_hung_client_is_unknown_and_its_server_is_ended(perftest: IbWriteBw) -> None:
    perftest.prints("write-bw-gbits.txt")
    (perftest.root / "sleep").write_text("30")
    (finding,) = perftest.run(hcas=["mlx5_0"], duration=1, run_timeout=1.5, **SMALL)
    assert (finding.status, finding.code) == (Status.UNKNOWN, "IB_BANDWIDTH_TIMEOUT")
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and _runs(pid, str(perftest.tool))]
    assert left == [], "neither the server nor the client outlives the check"


def _runs(pid: str, program: str) -> bool:
    try:
        return program in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def test_more_hcas_than_the_timeout_holds_are_refused_before_any_runs(perftest: IbWriteBw) -> None:
    (finding,) = perftest.run(timeout=50, run_timeout=30)
    assert (finding.status, finding.code) == (Status.UNKNOWN, "IB_BANDWIDTH_BUDGET")
    assert perftest.calls == []


def test_not_applicable_without_an_infiniband_hca_or_the_program(tmp_path: Path) -> None:
    perftest = IbWriteBw(tmp_path, {"mlx5_an0": "Ethernet"})
    with pytest.raises(NotApplicable, match="no device with an InfiniBand port 1"):
        perftest.run()
    perftest.tool.unlink()
    with pytest.raises(NotApplicable, match="no ib_write_bw"):
        perftest.run(hcas=["mlx5_0"])


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"hcas": ["mlx5_0", "mlx5 1"]}, "not an RDMA device name"),
        ({"hcas": ["mlx5_0", "mlx5_0"]}, "named twice"),
        ({"duration": 30, "run_timeout": 30}, "leaves no time past duration"),
        ({"run_timeout": 400}, "does not fit in timeout"),
    ],
)
def test_settings_that_cannot_hold(settings: dict[str, object], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        IbBandwidthSettings(**settings)  # type: ignore[arg-type]


def test_the_check_is_active_and_a_slow_hca_escalates() -> None:
    assert CHECK.active
    assert CHECK.hardware is not None
    assert CHECK.hardware("IB_BANDWIDTH_LOW") and not CHECK.hardware("IB_BANDWIDTH_FAILED")


def test_only_an_active_pass_runs_it_through_the_cli(
    perftest: IbWriteBw, write_config: Callable[[str], Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    perftest.prints("write-bw-gbits.txt")
    body = (
        f'[checks.ib_bandwidth]\nib_write_bw = "{perftest.tool}"\nhcas = ["mlx5_0"]\nmessage_size = 8\n'
        "min_gbps = 1.0\n[checks.nccl]\nenabled = false\n"
    )
    config = str(write_config(body))
    assert cli("check", "--once", "--only", "ib_bandwidth", "--config", config)[0] == 0
    assert perftest.calls == [], "an ordinary pass never runs ib_write_bw"
    code, out, _ = cli("check", "--once", "--active", "--force", "--config", config)
    assert code == 1 and "IB_BANDWIDTH_LOW" in out
