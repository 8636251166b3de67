"""Xids 144-150 (NVLink5, GB200) graded line by line by NVIDIA's "XID 144-150 Decode" sheet.

The lines are real GB200 driver messages from public sources (fixtures/nvlink5/README.md).
Before this decode every Xid 144-150 was CRITICAL, so a bit-error-rate event drained a node.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from healthd_testkit.paths import FIXTURES
from healthd_testkit.xid import Node, by_code

from healthd.model import Status
from healthd_checks.xid.catalog import Bucket, Sticky, classify
from healthd_checks.xid.nvlink5 import NVLINK5_ROWS, Resolution, decode_nvlink5
from healthd_checks.xid.parse import parse_message

GB200 = FIXTURES / "nvlink5" / "gb200-kmsg.txt"
BER = (
    "NVRM: Xid (PCI:0018:01:00): 149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 "
    "(0x00086226 0x00000001 0x00000000 0x00000000 0x00000000 0x00000000)"
)
RXPIPE = (
    "NVRM: Xid (PCI:0018:01:00): 145, pid=876767, name=ray::WorkerDict, RLW_RXPIPE Nonfatal XC0 i0 Link 13 "
    "(0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)"
)
SRC_TRACK = (
    "NVRM: Xid (PCI:0019:01:00): 145, RLW_SRC_TRACK Nonfatal XC1 i0 Link 12 "
    "(0x040988e2 0x00000008 0x00000000 0x00000000 0x00000000 0x00000000)"
)
REMAP_FATAL = (
    "NVRM: Xid (PCI:0001:00:00): 145, RLW_REMAP Fatal XC1 i0 Link 10 "
    "(0x00000082 0x00000040 0x00000000 0x00000000 0x00000000 0x00000000)"
)
TO_RESET = (
    "NVRM: Xid (PCI:0019:01:00): 154, GPU recovery action changed from 0x4 (Drain and Reset) "
    "to 0x1 (GPU Reset Required)"
)
TO_NONE = "NVRM: Xid (PCI:0019:01:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)"


def entry_of(message: str) -> Any:
    event = parse_message(message)
    assert event is not None
    return classify(event)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("message", "unit", "encoding", "resolution", "grade"),
    [
        (BER, "NETIR_BER_EVENT", "V1", Resolution.IGNORE, Status.OK),
        (RXPIPE, "RLW_RXPIPE", "V1", Resolution.IGNORE, Status.OK),
        (SRC_TRACK, "RLW_SRC_TRACK", "V1", Resolution.XID_154_EVAL, Status.OK),
        (REMAP_FATAL, "RLW_REMAP", "V1", Resolution.RESET_GPU, Status.CRITICAL),
        # NETIR_LINK_EVT, link-down reason (IntrInfo[25:20]) 0b100001: a peer device's link went down.
        (
            "NVRM: Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 0x0 0x0)",
            "NETIR_LINK_EVT",
            "V1",
            Resolution.RESET_GPU,
            Status.CRITICAL,
        ),
        # The R575+ encoding (V2: the unit in IntrInfo[6:0]) and the sheet's "V1/V2" unit name.
        (
            "NVRM: Xid (PCI:0000:04:00): 145, RLW_REMAP Fatal XC0 i0 Link 00 (0x00000004 0x00000040 0x0 0x0)",
            "RLW_REMAP",
            "V2",
            Resolution.RESET_GPU,
            Status.CRITICAL,
        ),
        (
            "NVRM: Xid (PCI:0000:04:00): 149, NETIR/NETIR_INT Fatal XC0 i0 Link 00 (0x00000018 0x00000000 0x0 0x0)",
            "NETIR/NETIR_INT",
            "V2",
            Resolution.RESET_GPU,
            Status.CRITICAL,
        ),
        # RLW_RXPIPE status 0x1 is "Non-fatal*": IntrInfo bit 10 (V1) promotes it to RESET_GPU.
        (
            "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000001 0x0 0x0)",
            "RLW_RXPIPE",
            "V1",
            Resolution.IGNORE,
            Status.OK,
        ),
        (
            "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a4c2 0x00000001 0x0 0x0)",
            "RLW_RXPIPE",
            "V1",
            Resolution.RESET_GPU,
            Status.CRITICAL,
        ),
    ],
)
def test_real_lines_take_the_sheets_row(
    message: str, unit: str, encoding: str, resolution: Resolution, grade: Status
) -> None:
    entry = entry_of(message)
    assert entry.nvlink5 is not None and entry.nvlink5.row is not None
    assert (entry.nvlink5.unit, entry.nvlink5.encoding) == (unit, encoding)
    assert entry.nvlink5.row.resolution is resolution
    assert entry.grade is grade
    assert (entry.sticky is Sticky.UNTIL_RESET) == (grade is Status.CRITICAL)


def test_ignore_and_eval_rows_say_why_in_the_summary() -> None:
    assert entry_of(BER).summary == "NVLink5 NETIR_BER_EVENT Nonfatal, status 0x1: IGNORE (NVIDIA's Xid 144-150 decode)"
    assert entry_of(BER).bucket is Bucket.INFORMATIONAL
    assert entry_of(SRC_TRACK).summary.endswith("no Xid 154 after it (yet): RESTART_APP")


@pytest.mark.parametrize(
    ("message", "grade", "says"),
    [
        # RLW_SRC_TRACK lists no status 0x40; the driver calls it Nonfatal.
        (
            "NVRM: Xid (PCI:0019:01:00): 145, RLW_SRC_TRACK Nonfatal XC1 i0 Link 12 (0x040988e2 0x00000040 0x0 0x0)",
            Status.WARNING,
            "RLW_SRC_TRACK Nonfatal, status 0x40: not in NVIDIA's Xid 144-150 decode, so healthd's default: WARNING",
        ),
        (
            "NVRM: Xid (PCI:0019:01:00): 145, RLW_SRC_TRACK Fatal XC1 i0 Link 12 (0x040988e2 0x00000040 0x0 0x0)",
            Status.CRITICAL,
            "not in NVIDIA's Xid 144-150 decode, so healthd's default: CRITICAL until reset",
        ),
        # The unit's name and its IntrInfo bits disagree (a BER event's name on an RLW IntrInfo).
        (
            "NVRM: Xid (PCI:0018:01:00): 149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 (0x0409a0c2 0x00000001 0x0 0x0)",
            Status.WARNING,
            "not in NVIDIA's Xid 144-150 decode",
        ),
        # Not in the driver's form at all: the whole Xid's WORKFLOW_NVLINK5_ERR grade stays.
        (
            "NVRM: Xid (PCI:0018:01:00): 149, something new",
            Status.CRITICAL,
            "NVLink5 error in a form healthd cannot decode; default for it: CRITICAL",
        ),
    ],
)
def test_a_combination_the_sheet_lacks_gets_the_documented_default(message: str, grade: Status, says: str) -> None:
    entry = entry_of(message)
    assert entry.grade is grade
    assert says in entry.summary


def test_the_table_is_the_sheets_transcription() -> None:
    assert len(NVLINK5_ROWS) == 99
    for row in NVLINK5_ROWS:
        # V1 IntrInfo carries the Xid in bits 4:0 (144 -> 1 ... 149 -> 6; 150's patterns are all zero).
        assert int(row.v1, 2) & 0x1F == (row.xid - 143 if row.xid < 150 else 0), row
        # Fatal rows (whatever the sheet's asterisks) need a GPU reset, save NETIR_LINK_DOWN reason 0b101000.
        if row.severity.startswith("Fatal") and row.reason != 0b101000:
            assert row.resolution is Resolution.RESET_GPU, row
    keys = [(r.xid, r.unit, r.v1, r.reason, r.statuses) for r in NVLINK5_ROWS]
    assert len(keys) == len(set(keys)), "a row twice"


def _fit(a: str, b: str) -> bool:
    """Whether some IntrInfo value has both bit patterns (they agree on the bits both compare)."""
    width = min(len(a), len(b))
    return int(a, 2) % (1 << width) == int(b, 2) % (1 << width)


def test_no_line_fits_two_rows_that_resolve_differently() -> None:
    """Both encodings are tried on every line (which one the driver used is not in it): that must be unambiguous."""
    for index, one in enumerate(NVLINK5_ROWS):
        for other in NVLINK5_ROWS[index + 1 :]:
            same_line = one.xid == other.xid and one.names & other.names and one.reason == other.reason
            statuses = not one.statuses or not other.statuses or set(one.statuses) & set(other.statuses)
            if same_line and statuses and one.resolution is not other.resolution:
                pairs = [(a, b) for a in (one.v1, one.v2) for b in (other.v1, other.v2)]
                assert not any(_fit(a, b) for a, b in pairs), (one, other)


def test_the_decode_refuses_what_is_not_the_drivers_form() -> None:
    assert decode_nvlink5(149, "pid=1, name=x, NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 (0x1 0x1)") is None
    assert decode_nvlink5(149, "NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 (0x00086226)") is None
    line = decode_nvlink5(149, "NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x0 0x0 0x0 0x0)")
    assert line is not None and line.link == -1 and line.row is not None and line.row.unit == "NETIR/NETIR_INT"
    padded = decode_nvlink5(149, "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000)")
    assert padded is not None and padded.row is not None and padded.row.investigate == "INVESTIGATE_PEER_DEVICE"


# -- the check: folding, and the Xid 154 that follows --------------------------------------------


def test_check_grades_the_gb200_log_as_the_catalog_says(node: Node) -> None:
    node.append(GB200.read_text())
    found = by_code(node.run())
    assert found["XID_149@0018:01:00"].status is Status.OK, "a BER event takes no node out"
    assert found["XID_145@0018:01:00"].status is Status.OK, "RLW_RXPIPE status 0x8 is IGNORE"
    assert found["XID_145@0001:00:00"].status is Status.CRITICAL, "a fatal RLW_REMAP needs a reset"
    linked = found["XID_145@0019:01:00"]
    assert linked.status is Status.CRITICAL and linked.details["recovery_action"] == "GPU_RESET"
    assert linked.details["remedy"] == "reset"
    assert "XID_154_EVAL, the Xid 154 after it says recovery action: GPU reset" in linked.message
    alone = found["XID_145@0008:01:00"]
    assert alone.status is Status.OK and "no Xid 154 after it (yet): RESTART_APP" in alone.message
    assert found["XID_149@0009:01:00"].status is Status.CRITICAL
    details = found["XID_149@0018:01:00"].details
    assert (details["nvlink"], details["nvlink5_unit"], details["nvlink5_status"]) == (
        3,
        "NETIR_BER_EVENT",
        "0x00000001",
    )
    assert details["nvlink5_resolution"] == "IGNORE" and details["action"] == "WORKFLOW_NVLINK5_ERR"


def test_the_154_may_come_in_a_later_pass_and_back_to_none_clears(node: Node) -> None:
    node.log(SRC_TRACK)
    assert by_code(node.run())["XID_145@0019:01:00"].status is Status.OK
    node.log(TO_RESET)
    assert by_code(node.run())["XID_145@0019:01:00"].status is Status.CRITICAL
    node.log(SRC_TRACK)  # a milder line of the same event does not undo what the 154 said
    assert by_code(node.run())["XID_145@0019:01:00"].status is Status.CRITICAL
    node.log(TO_NONE)
    cleared = by_code(node.run())["XID_145@0019:01:00"]
    assert cleared.status is Status.OK and "cleared by recovery action None" in cleared.message


def test_a_154_after_another_xid_or_on_another_gpu_is_not_the_one_that_follows(node: Node) -> None:
    node.log(SRC_TRACK, "NVRM: Xid (PCI:0019:01:00): 13, pid=5, name=x, Graphics Exception", TO_RESET)
    assert by_code(node.run())["XID_145@0019:01:00"].status is Status.OK
    node.log(SRC_TRACK.replace("0019:01:00", "0008:01:00"), TO_RESET)
    assert by_code(node.run())["XID_145@0008:01:00"].status is Status.OK


def test_an_override_of_the_xid_stands(node: Node) -> None:
    node.log(BER, SRC_TRACK, TO_RESET)
    found = by_code(node.run(overrides={"149": Status.WARNING, "145": Status.WARNING}))
    assert found["XID_149@0018:01:00"].status is Status.WARNING
    assert found["XID_145@0019:01:00"].status is Status.WARNING


# -- the real CLI -------------------------------------------------------------------------------


def test_scan_log_json_on_the_gb200_log(cli_json: Any) -> None:
    code, document = cli_json("scan-log", "--json", str(GB200))
    rows = [(e["line"], e["code"], e["gpu"], e["grade"], e.get("nvlink5_resolution")) for e in document["events"]]
    assert code == 2 and rows == [
        (1, "XID_149", "0018:01:00", "OK", "IGNORE"),
        (2, "XID_145", "0018:01:00", "OK", "IGNORE"),
        (3, "XID_145", "0019:01:00", "CRITICAL", "XID_154_EVAL"),
        (4, "XID_154", "0019:01:00", "CRITICAL", None),
        (5, "XID_145", "0008:01:00", "OK", "XID_154_EVAL"),
        (6, "XID_145", "0001:00:00", "CRITICAL", "RESET_GPU"),
        (7, "XID_149", "0009:01:00", "CRITICAL", "RESET_GPU"),
        (8, "XID_154", "0009:01:00", "CRITICAL", None),
    ]
    assert document["events"][2]["sticky"] == "until_reset"
    assert document["events"][4]["summary"].endswith("no Xid 154 after it (yet): RESTART_APP")


def test_scan_log_from_stdin_grades_by_the_154_too(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from healthd.cli.main import main

    monkeypatch.setattr("sys.stdin", io.StringIO(f"{SRC_TRACK}\n{TO_RESET}\n{SRC_TRACK}\n"))
    assert main(["scan-log", "--json", "-"]) == 2
    grades = [(e["code"], e["grade"]) for e in json.loads(capsys.readouterr().out)["events"]]
    # The last line waits for a 154 that never comes: the catalog's RESTART_APP.
    assert grades == [("XID_145", "CRITICAL"), ("XID_154", "CRITICAL"), ("XID_145", "OK")]


def test_a_gpu_falling_off_the_bus_ends_the_wait(node: Node) -> None:
    node.log(SRC_TRACK, "NVRM: GPU 0019:01:00.0: GPU has fallen off the bus.", TO_RESET)
    assert by_code(node.run())["XID_145@0019:01:00"].status is Status.OK


def test_scan_log_of_only_the_non_fatal_lines_exits_ok(cli_json: Any, tmp_path: Path) -> None:
    log = tmp_path / "ber.txt"
    log.write_text("".join(line + "\n" for line in GB200.read_text().splitlines()[:2]))
    code, document = cli_json("scan-log", "--json", str(log))
    assert code == 0 and [e["grade"] for e in document["events"]] == ["OK", "OK"]


def test_check_once_json_only_xid_on_the_gb200_log(cli_json: Any, tmp_path: Path) -> None:
    node = Node(tmp_path / "node")
    shutil.copy(GB200, node.kmsg)
    config = tmp_path / "healthd.toml"
    config.write_text(
        f'[paths]\nstate_dir = "{tmp_path / "state"}"\nkmsg = "{node.kmsg}"\nprocfs = "{node.root / "proc"}"\n'
        f'sysfs = "{node.root / "sys"}"\n[slurm]\nenabled = false\n[checks.xid]\nsource = "kmsg"\n'
    )
    code, document = cli_json("check", "--once", "--json", "--only", "xid", "--dry-run", "--config", str(config))
    found = {f"{f['code']}@{f['subject']}": f for f in document["checks"][0]["findings"]}
    assert code == 2
    assert found["XID_149@0018:01:00"]["status"] == "OK"
    assert found["XID_145@0018:01:00"]["status"] == "OK"
    assert found["XID_145@0019:01:00"]["status"] == "CRITICAL"
    assert found["XID_145@0008:01:00"]["status"] == "OK"
    assert found["XID_145@0001:00:00"]["status"] == "CRITICAL"
    # Only the BER and RXPIPE GPU's lines: nothing to take out.
    node.kmsg.write_text("".join(line + "\n" for line in GB200.read_text().splitlines()[:2]))
    shutil.rmtree(tmp_path / "state")
    code, document = cli_json("check", "--once", "--json", "--only", "xid", "--dry-run", "--config", str(config))
    assert code == 0 and {f["status"] for f in document["checks"][0]["findings"]} == {"OK"}
    assert json.dumps(document).count("NETIR_BER_EVENT") >= 1
