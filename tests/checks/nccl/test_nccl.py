"""The nccl check through a stand-in all_reduce_perf (a real program) replaying real nccl-tests output."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from healthd_testkit.allreduce import NCCL, AllReducePerf
from pydantic import ValidationError

from healthd.checks.plugin import NotApplicable
from healthd.model import Finding, Status
from healthd_checks.nccl.check import CHECK
from healthd_checks.nccl.settings import NcclSettings

PASS = (NCCL / "h100-2x8-pass.txt").read_text()


@pytest.fixture
def perf(tmp_path: Path) -> AllReducePerf:
    return AllReducePerf(tmp_path)


def graded(findings: list[Finding]) -> set[tuple[Status, str, str]]:
    return {(f.status, f.code, f.subject) for f in findings}


def test_a_run_above_the_floor_is_an_ok_note_with_the_bandwidth(perf: AllReducePerf) -> None:
    perf.prints("h100-2x8-pass.txt")
    (finding,) = perf.run(min_busbw_gbps=60)
    assert (finding.status, finding.code, finding.subject) == (Status.OK, "NCCL_BUSBW", "all_reduce")
    assert finding.details == {"gbps": 70.742, "runs": 1}
    # Every GPU sysfs lists, one process (-g), the sizes and iterations of the settings, results checked.
    assert perf.argv == ["-b 8G -e 8G -f 2 -g 8 -n 20 -c 1"]
    assert perf.env == [""], "no NCCL_ variable of healthd's own on the ordinary run"


def test_a_bandwidth_below_the_floor_in_every_run_is_a_warning(perf: AllReducePerf) -> None:
    perf.prints("h100-2x8-pass.txt")
    (finding,) = perf.run(min_busbw_gbps=400, retries=2)
    assert (finding.status, finding.code) == (Status.WARNING, "NCCL_BANDWIDTH_LOW")
    assert finding.details == {"gbps": 70.742, "floor": 400.0, "runs": 3}
    assert len(perf.argv) == 3, "a low bandwidth is run again, as Azure's REPEATS"


def test_a_rerun_that_reaches_the_floor_passes(perf: AllReducePerf) -> None:
    perf.prints("rtx5090-alltoall-unchecked.txt", run="run1")  # Avg bus bandwidth : 0
    perf.prints("h100-2x8-pass.txt")
    assert graded(perf.run(min_busbw_gbps=60, retries=1)) == {(Status.OK, "NCCL_BUSBW", "all_reduce")}
    assert len(perf.argv) == 2


def test_elements_summed_wrong_are_critical_at_once(perf: AllReducePerf) -> None:
    perf.prints("h100-wrong-by-hand.txt", rc=1)  # nccl-tests exits non-zero after wrong results
    (finding,) = perf.run(min_busbw_gbps=60, retries=2)
    assert (finding.status, finding.code) == (Status.CRITICAL, "NCCL_WRONG_RESULTS")
    assert finding.details == {"wrong": 15}
    assert "[536870912, 1073741824]" in finding.message
    assert len(perf.argv) == 1, "corrupt sums are not run again"


def test_an_unchecked_in_place_run_is_data_not_garble(perf: AllReducePerf) -> None:
    perf.prints("rtx5090-alltoall-unchecked.txt")
    (finding,) = perf.run()
    assert (finding.status, finding.code, finding.details["gbps"]) == (Status.OK, "NCCL_BUSBW", 0.0)


def test_launcher_and_nccl_lines_between_the_rows_are_not_rows(perf: AllReducePerf) -> None:
    noise = (
        "8 more processes have sent help message help-mtl-ofi.txt / OFI call fail\n"
        "gpu17:1234:1300 [3] NCCL INFO comm 0x7f5780001ca0 rank 3 nranks 8 cudaDev 3 - Init COMPLETE\n"
    )
    perf.prints_text(PASS.replace("     1048576 ", noise + "     1048576 ", 1))
    assert graded(perf.run(min_busbw_gbps=60)) == {(Status.OK, "NCCL_BUSBW", "all_reduce")}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (("# Avg bus bandwidth    : 70.742", "# Avg bus bandwidth    : fast"), "'fast' is not a number"),
        (("# Avg bus bandwidth    : 70.742", "# Avg bus bandwidth    : -1"), "'-1' is not a bandwidth"),
        (("# Avg bus bandwidth    : 70.742 \n", ""), "0 '# Avg bus bandwidth' lines"),
        (("# Out of bounds values : 0 OK", "# Out of bounds values : many OK"), "'many' is not a count"),
        (("0   3828.0  140.25  262.97      0", "0   3828.0  140.25  262.97     -1"), "#wrong '-1' is not a count"),
        (("#       size         count", "#       bytes        count"), "no column line"),
        ((PASS, PASS + PASS), "a second column line"),
    ],
)
def test_garbled_or_missing_output_is_unknown_with_the_reason(
    perf: AllReducePerf, change: tuple[str, str], reason: str
) -> None:
    old, new = change
    assert old in PASS
    perf.prints_text(PASS.replace(old, new))
    (finding,) = perf.run(min_busbw_gbps=60)
    assert (finding.status, finding.code) == (Status.UNKNOWN, "NCCL_MALFORMED")
    assert reason in finding.message


def test_a_run_cut_short_is_unknown_never_ok(perf: AllReducePerf) -> None:
    perf.prints("h100-cut-by-hand.txt")
    (finding,) = perf.run()
    assert (finding.status, finding.code) == (Status.UNKNOWN, "NCCL_MALFORMED")
    perf.prints_text("NCCL failure common.cu:1000 'unhandled cuda error'\n", rc=1)
    (finding,) = perf.run()
    assert (finding.status, finding.code) == (Status.UNKNOWN, "NCCL_FAILED")
    assert "unhandled cuda error" in finding.message


def test_the_ib_loopback_run_goes_through_the_hcas_and_has_its_own_floor(perf: AllReducePerf, tmp_path: Path) -> None:
    perf.prints("h100-2x8-pass.txt")
    topo = tmp_path / "ndv5-topo.xml"
    findings = perf.run(min_busbw_gbps=60, ib_loopback_min_busbw_gbps=80, topo_file=topo, gpus=4)
    assert graded(findings) == {
        (Status.OK, "NCCL_BUSBW", "all_reduce"),
        (Status.WARNING, "NCCL_IB_LOOPBACK_BANDWIDTH_LOW", "ib_loopback"),
    }
    assert perf.argv == ["-b 8G -e 8G -f 2 -g 4 -n 20 -c 1"] * 2
    assert perf.env == [
        f"NCCL_TOPO_FILE={topo}",
        f"NCCL_NET_GDR_LEVEL=5 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_TOPO_FILE={topo}",
    ]


def test_a_hung_run_is_unknown(perf: AllReducePerf) -> None:
    perf.prints("h100-2x8-pass.txt")
    (perf.root / "sleep").write_text("30")
    (finding,) = perf.run(run_timeout=0.5)
    assert (finding.status, finding.code) == (Status.UNKNOWN, "NCCL_TIMEOUT")


def test_not_applicable_without_the_program_or_a_gpu(tmp_path: Path) -> None:
    perf = AllReducePerf(tmp_path, gpus=0)
    perf.prints("h100-2x8-pass.txt")
    with pytest.raises(NotApplicable, match="no NVIDIA GPU"):
        perf.run()
    perf.tool.unlink()
    with pytest.raises(NotApplicable, match="no all_reduce_perf"):
        perf.run(gpus=8)


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"size_min": "8T"}, "not a size nccl-tests reads"),
        ({"size_min": "16G", "size_max": "8G"}, "larger than size_max"),
        ({"retries": 2, "run_timeout": 120}, "3 runs of run_timeout = 120s"),
        ({"ib_loopback_min_busbw_gbps": 18, "run_timeout": 200}, "2 runs of run_timeout = 200s"),
    ],
)
def test_settings_that_cannot_hold(settings: dict[str, object], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        NcclSettings(**settings)  # type: ignore[arg-type]


def test_the_check_is_active_and_its_slow_or_wrong_gpus_escalate() -> None:
    assert CHECK.active
    assert CHECK.hardware is not None
    assert CHECK.hardware("NCCL_WRONG_RESULTS") and CHECK.hardware("NCCL_IB_LOOPBACK_BANDWIDTH_LOW")
    assert not CHECK.hardware("NCCL_FAILED")


def test_only_an_active_pass_runs_it_through_the_cli(
    perf: AllReducePerf, write_config: Callable[[str], Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    perf.prints("h100-wrong-by-hand.txt", rc=1)
    body = f'[checks.nccl]\nall_reduce_perf = "{perf.tool}"\ngpus = 8\n[checks.ib_bandwidth]\nenabled = false\n'
    config = str(write_config(body))
    assert cli("check", "--once", "--only", "nccl", "--config", config)[0] == 0
    assert perf.argv == [], "an ordinary pass never runs all_reduce_perf"
    code, out, _ = cli("check", "--once", "--active", "--force", "--config", config)
    assert code == 2 and "NCCL_WRONG_RESULTS" in out
    assert len(perf.argv) == 1


def test_a_run_that_exits_non_zero_with_right_sums_is_unknown_however_fast(perf: AllReducePerf) -> None:
    """Only wrong results explain a non-zero exit with a table; any other failed run measured nothing to grade OK."""
    perf.prints("h100-2x8-pass.txt", rc=1)
    (finding,) = perf.run(min_busbw_gbps=60)
    assert (finding.status, finding.code) == (Status.UNKNOWN, "NCCL_FAILED")
