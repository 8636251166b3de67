"""Property tests for the parsers that the per-area fuzz tests leave out or only feed plain text.

scontrol output (text and JSON), ``stat --file-system`` output, structured
near-miss mountinfo and /proc/modules lines, sysfs files of arbitrary bytes, and
/dev/kmsg dumps of arbitrary records: each parser returns a value or raises its
documented error, never anything else. Xid events from a /dev/kmsg dump come only from
records of the kernel's facility that begin with a driver prefix.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any, Callable

import pytest
from healthd_testkit.paths import file_holding
from hypothesis import given, settings
from hypothesis import strategies as st

from healthd.model import Finding, Status
from healthd.slurm.adapter import SlurmError, parse_show_node_json, parse_show_node_text
from healthd.slurm.nodestate import NodeInfo
from healthd.slurm.reasons import REASON_MAX, Reasons, sanitize
from healthd_checks.common import sysfs
from healthd_checks.common.mountinfo import MountinfoError, parse_mountinfo
from healthd_checks.kernlog.source import LogUnavailable, read_kmsg
from healthd_checks.mounts.fsprobe import parse_stat_output
from healthd_checks.services.check import ModulesError, parse_modules
from healthd_checks.xid.parse import DRIVER_PREFIXES, scan_lines

WORD = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
TOKEN = st.one_of(
    st.sampled_from(["IDLE", "MIXED+DRAIN", "DOWN*", "+", "", "(null)", "batch,gpu", "root@2024-01-01T00:00:00", "="]),
    WORD,
)
KEYS = ["NodeName", "State", "Partitions", "Reason", "Arch", "CPUTot", "OS", "Weight", "x", ""]

# -- scontrol ---------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(KEYS), TOKEN, st.sampled_from([" ", "  ", "\t", ""])), max_size=8))
def test_scontrol_text_lines_give_nodes_or_slurm_error(pairs: list[tuple[str, str, str]]) -> None:
    line = "".join(f"{key}={value}{space}" for key, value, space in pairs)
    try:
        nodes = parse_show_node_text(line)
    except SlurmError:
        return
    for node in nodes:
        assert isinstance(node, NodeInfo) and node.state and node.state == node.state.upper()


JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | WORD,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(WORD, inner, max_size=3),
    max_leaves=10,
)
NODE = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(WORD, JSON_VALUE),
        "state": st.one_of(st.lists(st.sampled_from(["IDLE", "DRAIN", "", "DOWN"]), max_size=3), JSON_VALUE),
        "reason": JSON_VALUE,
        "reason_set_by_user": JSON_VALUE,
        "partitions": st.one_of(st.lists(WORD, max_size=3), JSON_VALUE),
    },
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.fixed_dictionaries({"nodes": st.lists(NODE, max_size=3)}), JSON_VALUE))
def test_scontrol_json_gives_nodes_or_slurm_error(document: Any) -> None:
    try:
        nodes = parse_show_node_json(json.dumps(document))
    except SlurmError:
        return
    assert all(isinstance(n, NodeInfo) for n in nodes)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_scontrol_json_of_any_text_gives_only_slurm_error(text: str) -> None:
    with contextlib.suppress(SlurmError):
        parse_show_node_json(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.lists(st.tuples(st.text(max_size=30), st.text(max_size=80)), min_size=1, max_size=4))
def test_reasons_built_from_any_text_are_safe_and_short(prefix: str, items: list[tuple[str, str]]) -> None:
    findings = [Finding("c", Status.CRITICAL, code, subject, "m") for code, subject in items]
    reason = Reasons(prefix).reason(findings)
    assert len(reason) <= REASON_MAX or len(sanitize(prefix) or "healthd:") > REASON_MAX // 2
    # Nothing left that could break scontrol's argument parsing or a log line.
    assert re.fullmatch(r"[A-Za-z0-9 _.,:;/@+#%()\-]*", reason), reason


# -- stat --file-system --------------------------------------------------------------------------

NUMBER = st.one_of(st.integers(min_value=-(10**30), max_value=10**30).map(str), st.sampled_from(["", "?", "1e3"]))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(NUMBER, max_size=7).map(" ".join), st.text(max_size=40)))
def test_stat_output_gives_usage_or_value_error(text: str) -> None:
    try:
        usage = parse_stat_output(text)
    except ValueError:
        return
    assert usage.free_fraction >= 0 or usage.free_fraction != usage.free_fraction
    assert usage.total_bytes >= 0 or int(text.split()[2]) < 0


# -- mountinfo and /proc/modules, structured near misses ----------------------------------------

FIELD = st.one_of(st.sampled_from(["-", "/", "/mnt\\040x", "rw,relatime", "ext4", "shared:1", "0:1", "25"]), WORD)


MODULE_FIELD = st.one_of(st.sampled_from(["nvidia", "123", "0", "-", "Live", "0x0", "mlx5_core,"]), WORD)

# name -> (field strategy, fields per line, parser, its documented error, what every parsed item satisfies)
NEAR_MISSES: dict[str, tuple[st.SearchStrategy[str], int, Callable[[str, str], Any], type[Exception], Any]] = {
    "mountinfo": (
        FIELD,
        12,
        lambda text, source: parse_mountinfo(text, source).entries,
        MountinfoError,
        lambda entry: entry.mount_point.startswith("/"),
    ),
    "modules": (MODULE_FIELD, 7, parse_modules, ModulesError, lambda name: bool(name.strip())),
}


@pytest.mark.parametrize("kind", sorted(NEAR_MISSES))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_near_miss_lines_give_entries_or_the_documented_error(kind: str, data: st.DataObject) -> None:
    field, width, parse, error, valid = NEAR_MISSES[kind]
    text = data.draw(st.lists(st.lists(field, max_size=width).map(" ".join), max_size=5).map("\n".join))
    try:
        parsed = parse(text, kind)
    except error as exc:
        assert str(exc).startswith(f"{kind}:")
        return
    assert all(valid(item) for item in parsed)


# -- sysfs files of arbitrary bytes ---------------------------------------------------------------

SYSFS_PARSERS: list[Callable[[str], Any]] = [
    sysfs.parse_numbered_state,
    sysfs.parse_ib_rate,
    sysfs.parse_word,
    sysfs.parse_counter,
    sysfs.parse_width,
    sysfs.parse_pcie_speed,
    sysfs.parse_hex,
    sysfs.parse_aer_counts,
]


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300))
def test_sysfs_files_of_any_bytes_give_values_or_an_error_naming_the_file(data: bytes) -> None:
    with file_holding(data, "value") as path:
        for parse in SYSFS_PARSERS:
            try:
                sysfs.read(path, parse)
            except sysfs.SysfsError as exc:
                assert str(path) in str(exc)


# -- /dev/kmsg dumps ---------------------------------------------------------------------------------

RECORD = st.tuples(
    st.integers(min_value=0, max_value=200),
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from(["-", "c", "+", ""]),
    st.one_of(st.sampled_from(["NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", ""]), WORD),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(RECORD, max_size=12), st.one_of(st.none(), st.integers(min_value=0, max_value=200)))
def test_kmsg_dumps_of_any_records_read_in_sequence_order(records: list[tuple[int, int, str, str]], after: Any) -> None:
    text = "".join(f"6,{seq},{usec},{flags};{message}\n" for seq, usec, flags, message in records)
    with file_holding(text, "kmsg") as path:
        try:
            result = read_kmsg(path, after)
        except LogUnavailable:
            return
    seqs = [int(line.record_id) for line in result.lines]
    assert seqs == sorted(set(seqs))  # never a record twice, never backwards
    assert after is None or all(s > after for s in seqs)
    if seqs:
        assert result.cursor == str(seqs[-1])


XID_MESSAGE = st.one_of(
    st.sampled_from(
        [
            "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
            "nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Fatal, Link 28 LTSSM Fault Up",
            "NVRM: GPU 3b:00.0: GPU has fallen off the bus.",
            "NVRM: The NVIDIA GPU 0000:3b:00.0",
            "NVRM: (PCI ID: 10de:2330) installed in this system has",
            "NVRM: fallen off the bus and is not responding to commands.",
            "NVRM: The NVIDIA GPU 0000:3b:00.0\\x0aNVRM: fallen off the bus and is not responding to commands.",
            "Xid (PCI:0000:f[3739]: segfault at 0 ip 0 error 6 in Xid (PCI:0000:fe:01): 79[1132,55a6a23b2000+1000]",
            "NVRM: Xid (PCI:[3739]: segfault at 0 error 6 in x\\x0aNVRM: Xid (PCI:0000:fe:01): 79, y[1,2+3]",
        ]
    ),
    WORD,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(min_value=0, max_value=2047), XID_MESSAGE), max_size=12))
def test_kmsg_dump_events_come_only_from_the_kernels_driver_records(records: list[tuple[int, str]]) -> None:
    # /dev/kmsg never holds a raw newline inside a message: the kernel writes it as \x0a.
    lines = [
        f"{pri},{seq},{seq * 10},-;{message}".replace("\n", " ") + "\n" for seq, (pri, message) in enumerate(records)
    ]
    for _number, record, _event in scan_lines(lines):
        assert record.facility == 0 and record.message.startswith(DRIVER_PREFIXES)
    with file_holding("".join(lines), "kmsg") as path:
        result = read_kmsg(path, None)
    pris = {str(seq): pri for seq, (pri, _) in enumerate(records)}
    assert all(line.facility == pris[line.record_id] >> 3 for line in result.lines)
