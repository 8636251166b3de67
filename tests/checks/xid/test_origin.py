"""Who wrote a line: forged Xids from the kernel's segfault report and from /dev/kmsg writes are never findings.

Fixtures (fixtures/kernlog/*-hostile.*) are records captured on a Debian 12 machine:
two tasks that crashed on purpose, named ``Xid (PCI:0000:f`` and ``NVRM: Xid (PCI:``
and faulting in files named like Xid lines (the kernel logs both names with facility
0), and records that a process wrote to /dev/kmsg (the kernel gave them facility 1),
as /dev/kmsg, ``dmesg``, ``dmesg -r``, ``dmesg -x`` and ``journalctl -o json`` show them.
The Xid numbers of the captures were changed to 79 after capture, to match the attack
reported (a GPU off the bus, sticky until reboot).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest
from healthd_testkit.xid import BOOT_A, FIXTURES, X79, Node, by_code, reader_entry

from healthd.model import Status
from healthd_checks.kernlog.source import Origin, ReadResult, journal_available, journal_line, origin_of

HOSTILE_KMSG = (FIXTURES / "kmsg-hostile.txt").read_text()
JOURNAL = [json.loads(line) for line in (FIXTURES / "journal-hostile.jsonl").read_text().splitlines()]


def xid_findings(findings: list[Any]) -> dict[str, Any]:
    return {key: f for key, f in by_code(findings).items() if key.startswith(("XID_", "SXID_"))}


def test_the_hostile_records_are_what_the_kernel_wrote(node: Node) -> None:
    """The fixture is the attack: facility-0 records that hold whole Xid lines, and userspace writes."""
    from healthd_checks.kernlog.source import read_kmsg

    node.append(HOSTILE_KMSG)
    lines = read_kmsg(node.kmsg, None).lines
    kernel = [line for line in lines if line.facility == 0 and "segfault" in line.message]
    assert len(kernel) == 2 and all("Xid (PCI:0000:fe:01): 79" in line.message for line in kernel)
    assert "\nNVRM: Xid (PCI:0000:fe:01): 79, y[" in kernel[1].message  # the file name's newline, unescaped
    assert [line.facility for line in lines if line.message.startswith(("NVRM: ", "nvidia-"))] == [0, 1, 1, 1, 1]


def test_kmsg_source_reports_no_forged_xid(node: Node) -> None:
    node.append(HOSTILE_KMSG)
    assert xid_findings(node.run()) == {}
    node.log(X79, level=3)  # the driver's own line after them still counts
    (finding,) = node.run()
    assert (finding.code, finding.status, finding.details["count"]) == ("XID_79", Status.CRITICAL, 1)
    assert "userspace_records" not in finding.details


def test_the_switch_counts_userspace_records_but_never_the_segfault_report(node: Node) -> None:
    node.append(HOSTILE_KMSG)
    found = by_code(node.run(accept_userspace_kmsg=True))
    note = found.pop("KERNEL_LOG_USERSPACE_ACCEPTED@accept_userspace_kmsg")
    assert found.pop(f"KERNEL_LOG_TRUNCATED@{node.kmsg}").status is Status.OK  # the ring buffer starts at 347
    assert note.status is Status.OK and note.details["setting"] == "accept_userspace_kmsg"
    assert sorted(found) == ["SXID_20034@nvswitch0", "XID_79@0000:3b:00", "XID_79@0000:5e:00", "XID_79@0000:86:00"]
    assert all(f.details["userspace_records"] == 1 for f in found.values())
    assert "0000:fe:01" not in json.dumps([f.details for f in found.values()])


def test_without_the_switch_a_userspace_record_is_nothing_and_says_nothing(node: Node) -> None:
    node.log(X79, facility=1)
    node.log("nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Fatal, Link 28", facility=3)
    assert node.run() == []
    node.log(X79, facility=1)
    found = by_code(node.run(accept_userspace_kmsg=True))  # records already read stay read
    assert found["XID_79@0000:3b:00"].details["count"] == 1


# -- the journal ---------------------------------------------------------------------------------------


def test_the_journal_is_read_where_systemd_python_says_systemd_booted_the_machine() -> None:
    # healthd asks sd_booted(3)'s question itself (no systemd.daemon import on a machine without
    # systemd); systemd-python, installed with the tests, must give the same answer here.
    from systemd import daemon

    assert journal_available() is bool(daemon.booted())
    if not daemon.booted():  # a container: not even the journal module is imported to find that out
        asked = "from healthd_checks.kernlog import source; source.journal_available()"
        script = f"import sys; {asked}; print(*sys.modules)"
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
        assert not {"systemd", "systemd.daemon", "socket"} & set(done.stdout.split())


def test_journal_entries_become_the_lines_kmsg_gives() -> None:
    lines = [journal_line(reader_entry(raw)) for raw in JOURNAL]
    segfault, comm, xid, sxid, syslog = lines
    assert syslog is None  # logger(1) to journald's socket: not a kernel-log record at all
    assert segfault is not None and comm is not None and xid is not None and sxid is not None
    assert (segfault.facility, comm.facility, xid.facility, sxid.facility) == (0, 0, 1, 1)
    assert segfault.message.startswith("Xid (PCI:0000:f[19034]: segfault")
    assert comm.message.startswith("NVRM: Xid (PCI:[19075]: segfault") and "\nNVRM: Xid" in comm.message
    # journald split the driver prefix off into SYSLOG_IDENTIFIER; it is put back, as /dev/kmsg shows it.
    assert xid.message == "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=capture, GPU has fallen off the bus."
    assert sxid.message.startswith("nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Fatal")
    assert xid.usec == 616685238 and xid.record_id.startswith("j")


def test_journal_facility_comes_from_syslog_facility_not_the_identifier() -> None:
    forged = {**JOURNAL[2], "SYSLOG_IDENTIFIER": "kernel", "MESSAGE": "NVRM: Xid (PCI:0000:3b:00): 79, x"}
    line = journal_line(reader_entry(forged))
    assert line is not None and origin_of(line.facility) is Origin.USERSPACE
    bare = {k: v for k, v in JOURNAL[0].items() if k != "SYSLOG_FACILITY"}
    kernel = journal_line(reader_entry(bare))
    assert kernel is not None and kernel.facility == 0  # journald's "kernel" identifier, when nothing else is said
    assert journal_line(reader_entry({**JOURNAL[2], "_TRANSPORT": "stdout"})) is None


def journal_run(node: Node, monkeypatch: pytest.MonkeyPatch, entries: list[dict[str, str]], **options: Any) -> Any:
    """A pass of the check reading ``entries`` as the journal (journald does not run here)."""
    lines = tuple(line for raw in entries if (line := journal_line(reader_entry(raw))) is not None)

    def read_journal(directory: Optional[Path], boot_id: str, after: Optional[str]) -> ReadResult:
        assert boot_id == BOOT_A
        return ReadResult(lines, entries[-1]["__CURSOR"] if entries else after)

    monkeypatch.setattr("healthd_checks.kernlog.read.read_journal", read_journal)
    return node.run(source="journal", **options)


def test_journal_source_reports_no_forged_xid(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    assert journal_run(node, monkeypatch, JOURNAL) == []
    shutil.rmtree(node.root / "state")
    found = xid_findings(journal_run(node, monkeypatch, JOURNAL, accept_userspace_kmsg=True))
    # With the switch, the two /dev/kmsg writes count; the segfault reports and the syslog message never do.
    assert sorted(found) == ["SXID_20034@nvswitch0", "XID_79@0000:3b:00"]
    shutil.rmtree(node.root / "state")
    driver = {**JOURNAL[0], "MESSAGE": "NVRM: Xid (PCI:0000:5e:00): 48, pid=7, name=x, DBE"}
    found = xid_findings(journal_run(node, monkeypatch, [*JOURNAL, driver]))
    assert [(k, f.status) for k, f in found.items()] == [("XID_48@0000:5e:00", Status.CRITICAL)]


# -- the switch is seen ----------------------------------------------------------------------------------


def test_list_checks_shows_the_switch_and_its_value(cli: Any, tmp_path: Path) -> None:
    config = tmp_path / "healthd.toml"
    config.write_text(f'[paths]\nstate_dir = "{tmp_path / "state"}"\n')
    code, out, _ = cli("list-checks", "--json", "--config", str(config))
    rows = {row["name"]: row for row in json.loads(out)}
    assert code == 0 and rows["xid"]["trust_switches"] == {"accept_userspace_kmsg": False}
    assert rows["mounts"]["trust_switches"] == {}
    assert "accept_userspace_kmsg = false" in cli("list-checks", "--config", str(config))[1]
    config.write_text("[checks.xid]\naccept_userspace_kmsg = true\n")
    rows = {row["name"]: row for row in json.loads(cli("list-checks", "--json", "--config", str(config))[1])}
    assert rows["xid"]["trust_switches"] == {"accept_userspace_kmsg": True}
    assert "accept_userspace_kmsg = ON" in cli("list-checks", "--config", str(config))[1]
    config.write_text("[checks.xid]\naccept_userspace_kmsg = 1.5\n")
    code, out, err = cli("list-checks", "--json", "--config", str(config))
    assert code == 0 and {row["trust_switches"] for row in json.loads(out)} == {None}
    assert "checks.xid.accept_userspace_kmsg" in err


def test_check_json_carries_the_switch_note(cli_json: Any, tmp_path: Path) -> None:
    node = Node(tmp_path / "node")
    node.log(X79, facility=1)
    config = tmp_path / "healthd.toml"
    paths = f'[paths]\nstate_dir = "{tmp_path / "state"}"\nkmsg = "{node.kmsg}"\nprocfs = "{node.root / "proc"}"\n'
    paths += f'sysfs = "{node.root / "sys"}"\n[slurm]\nenabled = false\n[checks.xid]\nsource = "kmsg"\n'
    config.write_text(paths)
    code, document = cli_json("check", "--once", "--json", "--only", "xid", "--dry-run", "--config", str(config))
    (xid,) = document["checks"]
    assert code == 0 and xid["findings"] == []
    config.write_text(paths + "accept_userspace_kmsg = true\n")
    (tmp_path / "state").rename(tmp_path / "old-state")
    code, document = cli_json("check", "--once", "--json", "--only", "xid", "--dry-run", "--config", str(config))
    found = {f["code"]: f for f in document["checks"][0]["findings"]}
    assert code == 2 and found["XID_79"]["details"]["userspace_records"] == 1
    assert found["KERNEL_LOG_USERSPACE_ACCEPTED"]["status"] == "OK"


def test_a_damaged_userspace_count_in_the_state_drops_the_group(node: Node) -> None:
    node.log(X79, facility=1)
    node.run(accept_userspace_kmsg=True)
    state = node.root / "state" / "check-xid.json"
    document = json.loads(state.read_text())
    (group,) = document["groups"].values()
    assert group["userspace"] == 1
    group["userspace"] = "many"
    state.write_text(json.dumps(document))
    node.log(X79, facility=1)
    found = xid_findings(node.run(accept_userspace_kmsg=True))
    assert found["XID_79@0000:3b:00"].details["count"] == 1  # started over from the next line, no crash
