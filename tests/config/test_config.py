from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from healthd_testkit.paths import HEALTHD as INSTALLED
from healthd_testkit.paths import run_healthd
from pydantic import BaseModel

from healthd.checks.plugin import discover, settings_models
from healthd.checks.settings import CheckSettings
from healthd.config.cache import load_checks
from healthd.config.models import Config, ConfigError, parse_config
from healthd.config.sections import ConfigTable
from healthd_checks.mounts.settings import MountSpec

MODELS = settings_models(discover())
HEALTHD = str(INSTALLED)


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "test.toml", MODELS)
    return info.value.problems


def test_empty_config_gives_defaults() -> None:
    loaded = parse_config("", "test.toml", MODELS)
    assert loaded.config.paths.sysfs == Path("/sys")
    assert loaded.config.daemon.interval == 300
    assert loaded.check_settings["mounts"].enabled


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param(
            "[slurm]\nnodename = 8\n",
            "slurm.nodename: unknown key; did you mean node_name?",
            id="typo-in-a-section-key",
        ),
        pytest.param("[metric]\nlisten = ':1'\n", "metric: unknown key; did you mean metrics?", id="unknown-section"),
        pytest.param("[gpus]\ncount = 8\n", "gpus: unknown key", id="unknown-section-like-none"),
        pytest.param(
            "[checks.mounts]\nmin_free_pct = 3\n",
            "checks.mounts.min_free_pct: unknown key; did you mean min_free_percent?",
            id="unknown-check-option",
        ),
    ],
)
def test_an_unknown_key_is_named(text: str, problem: str) -> None:
    assert problems(text) == [problem]


@pytest.mark.parametrize(
    ("text", "start"),
    [
        pytest.param(
            "[checks.mounts]\ntimeout = -1\n",
            "checks.mounts.timeout: Input should be greater than 0",
            id="negative-timeout-in-a-check-table",
        ),
        pytest.param(
            '[checks.mounts]\nexpect = [{ path = "/a" }, { path = "relative" }]\n',
            "checks.mounts.expect[1].path: mount path must be absolute",
            id="list-items-are-indexed",
        ),
        pytest.param(
            '[checks.infiniband]\nexpect_ports = ["mlx5_0"]\n',
            "checks.infiniband.expect_ports: IB port 'mlx5_0' must look like DEVICE:PORT",
            id="bad-ib-port-name",
        ),
        pytest.param(
            "[checks.infiniband]\nexpect_rates_gbps = { mlx5_8 = 200 }\n",
            "checks.infiniband.expect_rates_gbps: IB port 'mlx5_8' must look like DEVICE:PORT",
            id="bad-ib-port-name-of-a-rate",
        ),
        pytest.param(
            '[checks.infiniband]\nexpect_rates_gbps = { "mlx5_8:1" = 0 }\n',
            "checks.infiniband.expect_rates_gbps.mlx5_8:1: Input should be greater than 0",
            id="ib-port-rate-not-positive",
        ),
        pytest.param(
            '[checks.infiniband]\nexpect_rates_gbps = { "mlx5_8:1" = true }\n',
            "checks.infiniband.expect_rates_gbps.mlx5_8:1: Input should be a valid integer",
            id="ib-port-rate-not-a-number",
        ),
        pytest.param(
            '[checks.infiniband]\nexpect_ports = ["mlx5_0:1"]\nexpect_rates_gbps = { "mlx5_8:1" = 200 }\n',
            "checks.infiniband: expect_rates_gbps names mlx5_8:1, not in expect_ports",
            id="ib-port-rate-of-an-unjudged-port",
        ),
    ],
)
def test_a_bad_value_is_named_with_its_key(text: str, start: str) -> None:
    (problem,) = problems(text)
    assert problem.startswith(start)


def test_wrong_type_names_key_and_value() -> None:
    (problem,) = problems('[checks.gpu]\nexpect_gpus = "eight"\n')
    assert problem.startswith("checks.gpu.expect_gpus: ") and "'eight'" in problem


def test_unknown_check_lists_the_known_ones() -> None:
    (problem,) = problems("[checks.gpus]\nenabled = false\n")
    assert problem.startswith("checks.gpus: unknown check; did you mean gpu? (known: ") and "mounts" in problem


def test_toml_syntax_error_names_the_line() -> None:
    (problem,) = problems("[checks.gpu]\nexpect_gpus = = 8\n")
    assert "not valid TOML" in problem and "line 2" in problem


def test_error_text_names_the_file() -> None:
    with pytest.raises(ConfigError, match=r"^test.toml: checks.gpu.frobnicate: unknown key$"):
        parse_config("[checks.gpu]\nfrobnicate = 8\n", "test.toml", MODELS)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param(
            "[checks.mounts]\nmin_fre_percent = 3\n",
            "checks.mounts.min_fre_percent: unknown key; did you mean min_free_percent?",
            id="check-table",
        ),
        pytest.param('[paths]\nsysfss = "/sys"\n', "paths.sysfss: unknown key; did you mean sysfs?", id="table"),
        pytest.param("[polcy]\ndry_run = true\n", "polcy: unknown key; did you mean policy?", id="top-level"),
        pytest.param('[[host]]\nmatch = "*"\n', "host: unknown key; did you mean hosts?", id="hosts-itself"),
        pytest.param(
            '[checks.mounts]\nexpect = [{ path = "/x", fstyp = "nfs" }]\n',
            "checks.mounts.expect[0].fstyp: unknown key; did you mean fstype?",
            id="list-item",
        ),
        pytest.param(
            "[checks.infiniband.per_hour]\nsymbol_eror = 3\n",
            "checks.infiniband.per_hour.symbol_eror: unknown key; did you mean symbol_error?",
            id="nested-table",
        ),
        pytest.param(
            '[checks.dcgm.expected."NVIDIA H100"]\npcie_bandwidth_gbps_mn = 3\n',
            "checks.dcgm.expected.NVIDIA H100.pcie_bandwidth_gbps_mn: unknown key;"
            " did you mean pcie_bandwidth_gbps_min?",
            id="table-of-tables",
        ),
        pytest.param(
            '[node]\nib_ports = ["mlx5_0:1"]\nib_rat_gbps = 400\n',
            "node.ib_rat_gbps: unknown key; did you mean ib_rate_gbps?",
            id="deprecated-node",
        ),
        pytest.param(
            '[[hosts]]\nmatch = "*"\n[hosts.checks.gpu]\nexpect_gpuz = 8\n',
            "hosts[0] (match '*'): checks.gpu.expect_gpuz: unknown key; did you mean expect_gpus?",
            id="host-section-check-table",
        ),
        pytest.param(
            '[[hosts]]\nmatch = "*"\n[hosts.slrm]\nenabled = false\n',
            "hosts[0] (match '*'): slrm: unknown key; did you mean slurm?",
            id="host-section-table",
        ),
        pytest.param(
            '[[hosts]]\nmach = "*"\n[hosts.slurm]\nenabled = false\n',
            "hosts[0].mach: unknown key; did you mean match?",
            id="host-section-match",
        ),
        pytest.param(
            "[checks.mountz]\nenabled = false\n",
            "checks.mountz: unknown check; did you mean mounts? (known: ",
            id="check",
        ),
    ],
)
def test_a_misspelt_key_is_named_with_the_key_it_meant(text: str, problem: str) -> None:
    assert any(p.startswith(problem) for p in problems(text)), problems(text)


def test_a_key_like_no_other_gets_no_guess() -> None:
    assert problems("[checks.mounts]\nzzzz = 3\n") == ["checks.mounts.zzzz: unknown key"]


def test_config_validate_suggests_the_key_in_every_place_it_reads_from(
    write_config: Callable[[str], Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    path = write_config(
        '[checks.mounts]\nmin_fre_percent = 3\n[[hosts]]\nmatch = "gpu*"\n[hosts.checks.mounts]\nprobe_timeut = 1\n'
    )
    code, out, err = cli("config", "validate", "-c", str(path), "--host", "cpu1")
    assert (code, out) == (78, "")
    assert f"{path}: checks.mounts.min_fre_percent: unknown key; did you mean min_free_percent?\n" in err
    # A section that does not apply to the node is validated too, with its own suggestion.
    assert (
        f"{path}: hosts[0] (match 'gpu*'): checks.mounts.probe_timeut: unknown key; did you mean probe_timeout?" in err
    )


def test_mount_path_trailing_slash_is_normalised() -> None:
    assert MountSpec(path="/scratch/").path == "/scratch"


def test_cli_exits_78_naming_the_key(
    write_config: Callable[[str], Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    path = write_config("[checks.services]\nexpect = 3\nmountz = []\n")
    for args in (["config", "validate"], ["check", "--once"], ["check", "--once", "--json"]):
        code, out, err = cli(*args, "--config", str(path))
        assert code == 78
        assert out == ""
        assert f"{path}: checks.services.mountz: unknown key" in err
        assert f"{path}: checks.services.expect: Input should be a valid list" in err


def test_cli_validate_accepts_a_good_file(
    write_config: Callable[[str], Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    path = write_config(
        "[checks.gpu]\nexpect_gpus = 8\n"
        '[checks.mounts]\nexpect = [{ path = "/scratch", fstype = "lustre", rw = true }]\n'
    )
    code, out, err = cli("config", "validate", "--config", str(path), "--host", "gpu1")
    assert code == 0 and out.strip() == f"{path}: valid; for node gpu1 the host sections that apply: none"
    assert err == ""


def test_host_sections_apply_by_node_name_and_are_all_validated(
    write_config: Callable[[str], Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    body = (
        "[checks.gpu]\nexpect_gpus = 8\n"
        '[[hosts]]\nmatch = "login*"\n[hosts.checks.gpu]\nenabled = false\n'
        '[[hosts]]\nmatch = "{gpu[01-16]}"\n[hosts.checks.gpu]\nexpect_gpus = 4\n'
    )
    path = write_config(body)
    code, out, _ = cli("config", "validate", "--config", str(path), "--host", "gpu07")
    assert code == 0 and out.strip().endswith(
        "for node gpu07 the host sections that apply: hosts[1] (match '{gpu[01-16]}')"
    )
    assert load_checks(path, host="gpu07")[0].check_settings["gpu"].expect_gpus == 4
    assert load_checks(path, host="gpu17")[0].check_settings["gpu"].expect_gpus == 8
    assert load_checks(path, host="login2")[0].check_settings["gpu"].enabled is False

    # A bad key in a section for other nodes fails everywhere, named with its section.
    path.write_text(path.read_text() + '[[hosts]]\nmatch = "cpu*"\n[hosts.checks.gpu]\nexpect_gpu = 2\n')
    code, _, err = cli("config", "validate", "--config", str(path), "--host", "gpu07")
    assert code == 78
    assert "hosts[2] (match 'cpu*'): checks.gpu.expect_gpu: unknown key" in err


def test_missing_config_file_is_a_config_error(tmp_path: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    code, _, err = cli("check", "--once", "--config", str(tmp_path / "nope.toml"))
    assert code == 78 and "nope.toml: cannot read: No such file or directory" in err


def test_every_problem_is_reported_in_one_round() -> None:
    assert problems("[slurm]\nnodename = 8\n[checks.mounts]\nmin_free_pct = 3\n") == [
        "slurm.nodename: unknown key; did you mean node_name?",
        "checks.mounts.min_free_pct: unknown key; did you mean min_free_percent?",
    ]


# --- [node]: the expectations that moved to the checks' own tables -------------------------------------------

# Every key [node] had, and where it lives now: the same value there means the same.
MOVED = [
    ("gpus = 8", "gpu", "expect_gpus", 8),
    ('ib_ports = ["mlx5_0:1"]', "infiniband", "expect_ports", ["mlx5_0:1"]),
    ("ib_rate_gbps = 400", "infiniband", "expect_rate_gbps", 400),
    ('ib_link_layer = "Ethernet"', "infiniband", "expect_link_layer", "Ethernet"),
    ('services = ["munge"]', "services", "expect", ["munge"]),
    ('kernel_modules = ["nvidia"]', "services", "expect_kernel_modules", ["nvidia"]),
    ('pcie_devices = ["0000:3a:00.0"]', "pcie", "expect_devices", ["0000:3a:00.0"]),
]


@pytest.mark.parametrize(("line", "check", "setting", "value"), MOVED)
def test_a_node_key_still_means_what_it_meant_and_says_where_it_moved(
    line: str, check: str, setting: str, value: object
) -> None:
    old = parse_config(f"[node]\n{line}\n", "test.toml", MODELS)
    key = line.split(" = ")[0]
    new = parse_config(f"[checks.{check}]\n{setting} = {line.split(' = ', 1)[1]}\n", "test.toml", MODELS)
    assert getattr(old.check_settings[check], setting) == value
    assert old.check_settings == new.check_settings and new.deprecated == ()
    note = f"[node] {key} is deprecated: write it as [checks.{check}] {setting} (it means the same)"
    assert old.deprecated == (note,)


def test_node_mounts_become_the_mounts_checks_expectations() -> None:
    loaded = parse_config('[node]\nmounts = [{ path = "/scratch/", rw = true }]\n', "test.toml", MODELS)
    assert loaded.check_settings["mounts"].expect == [MountSpec(path="/scratch", rw=True)]
    assert loaded.deprecated == ("[node] mounts is deprecated: write it as [checks.mounts] expect (it means the same)",)


def test_errors_in_a_node_key_name_the_key_as_written() -> None:
    assert problems("[node]\ngpu = 8\n") == ["node.gpu: unknown key; did you mean gpus?"]
    (problem,) = problems('[node]\ngpus = "eight"\n')
    assert problem.startswith("node.gpus: ") and "'eight'" in problem
    (problem,) = problems('[node]\nmounts = [{ path = "/a" }, { path = "relative" }]\n')
    assert problem.startswith("node.mounts[1].path: mount path must be absolute")
    (problem,) = problems('[node]\nib_ports = ["mlx5_0"]\n')
    assert problem.startswith("node.ib_ports: IB port 'mlx5_0' must look like DEVICE:PORT")


def test_a_key_set_in_both_places_is_refused_not_guessed() -> None:
    text = "[node]\ngpus = 8\n[checks.gpu]\nexpect_gpus = 4\n"
    assert problems(text) == [
        "node.gpus: also set as checks.gpu.expect_gpus; keep only [checks.gpu] expect_gpus ([node] is deprecated)"
    ]


def test_a_setting_moved_between_checks_keeps_its_meaning_and_says_where_it_went() -> None:
    # [checks.gpu] nvlinks_expected became [checks.nvlink] expect_active_links with NVLINK_DOWN.
    old = parse_config("[checks.gpu]\nexpect_gpus = 8\nnvlinks_expected = 18\n", "test.toml", MODELS)
    new = parse_config("[checks.gpu]\nexpect_gpus = 8\n[checks.nvlink]\nexpect_active_links = 18\n", "t", MODELS)
    assert old.check_settings == new.check_settings and old.check_settings["nvlink"].expect_active_links == 18
    assert old.deprecated == (
        "[checks.gpu] nvlinks_expected is deprecated: write it as [checks.nvlink] expect_active_links "
        "(it means the same)",
    )
    section = parse_config('[[hosts]]\nmatch = "*"\n[hosts.checks.gpu]\nnvlinks_expected = 12\n', "t", MODELS)
    assert section.check_settings["nvlink"].expect_active_links == 12
    (problem,) = problems("[checks.gpu]\nnvlinks_expected = 99\n")
    assert problem.startswith("checks.gpu.nvlinks_expected: ") and "36" in problem
    assert problems("[checks.gpu]\nnvlinks_expected = 18\n[checks.nvlink]\nexpect_active_links = 12\n") == [
        "checks.gpu.nvlinks_expected: also set as checks.nvlink.expect_active_links; keep only [checks.nvlink] "
        "expect_active_links ([checks.gpu] nvlinks_expected is deprecated)"
    ]


def test_a_setting_moved_to_a_check_the_config_disables_is_an_error_naming_both_keys() -> None:
    # Read into a disabled check, [checks.gpu] nvlinks_expected would end link-down detection unsaid.
    with pytest.raises(ConfigError) as info:
        parse_config("[checks.gpu]\nnvlinks_expected = 18\n[checks.nvlink]\nenabled = false\n", "old.toml", MODELS)
    assert str(info.value) == (
        "old.toml: checks.gpu.nvlinks_expected: moved to checks.nvlink.expect_active_links, but"
        " checks.nvlink.enabled is false, so nothing would use it: enable [checks.nvlink] or remove"
        " [checks.gpu] nvlinks_expected"
    )
    # A section that disables it on some nodes is named as the place.
    section = (
        '[checks.gpu]\nnvlinks_expected = 18\n[[hosts]]\nmatch = "pcie*"\n[hosts.checks.nvlink]\nenabled = false\n'
    )
    (problem,) = problems(section)
    assert problem.startswith("hosts[0] (match 'pcie*'): checks.gpu.nvlinks_expected: moved to ")
    # A [node] key went to the check that used it before: disabling that check is not a loss.
    assert parse_config("[node]\ngpus = 8\n[checks.gpu]\nenabled = false\n", "t", MODELS).deprecated


def test_a_moved_key_whose_new_check_is_not_loaded_says_where_it_went() -> None:
    without_nvlink = {**MODELS, "nvlink": CheckSettings}  # what a check that failed to load validates with
    with pytest.raises(ConfigError) as info:
        parse_config("[checks.gpu]\nnvlinks_expected = 18\n", "t", without_nvlink)
    assert info.value.problems == [
        "checks.gpu.nvlinks_expected: unknown key: it moved to [checks.nvlink] expect_active_links,"
        " whose check is not loaded"
    ]


def test_a_conflict_between_the_tables_and_a_host_section_is_named_where_each_key_is() -> None:
    text = (
        '[checks.gpu]\nnvlinks_expected = 18\n[[hosts]]\nmatch = "*"\n[hosts.checks.nvlink]\nexpect_active_links = 12\n'
    )
    assert problems(text) == [
        "hosts[0] (match '*'): checks.nvlink.expect_active_links: also set as checks.gpu.nvlinks_expected outside"
        " [[hosts]]; keep only [checks.nvlink] expect_active_links ([checks.gpu] nvlinks_expected is deprecated)"
    ]
    # A problem outside [[hosts]] is named once, where it is, not under each section.
    assert problems('[checks.gpu]\nbogus = 1\n[[hosts]]\nmatch = "a*"\n[[hosts]]\nmatch = "b*"\n') == [
        "checks.gpu.bogus: unknown key"
    ]


def test_node_that_is_not_a_table_is_named() -> None:
    (problem,) = problems("node = 3\n")
    assert problem.startswith("node: must be a table (got 3)")


def test_an_old_config_still_runs_and_warns_on_stderr(write_config: Callable[[str], Path]) -> None:
    path = write_config(
        '[node]\nmounts = [{ path = "/definitely-not-mounted" }]\n[checks.mounts]\ninclude_root = false\n'
    )
    done = run_healthd("check", "--once", "--json", "--only", "mounts", "--dry-run", "--config", str(path), timeout=120)
    assert done.returncode == 2
    (mounts,) = json.loads(done.stdout)["checks"]
    assert [f["code"] for f in mounts["findings"]] == ["MOUNT_MISSING"]
    assert f"{path}: [node] mounts is deprecated: write it as [checks.mounts] expect (it means the same)" in done.stderr


def test_the_config_digest_is_sha256() -> None:
    import hashlib

    from healthd.config.load import sha256_hex

    for data in (b"", b"[paths]\nstate_dir = '/x'\n", bytes(range(256)) * 100):
        assert sha256_hex(data) == hashlib.sha256(data).hexdigest()


MOUNT_ROOT_XFS = '[checks.mounts]\nexpect = [{ path = "/", fstype = "xfs" }, { path = "/home" }]\n'


def test_a_host_section_corrects_a_mount_expectation_instead_of_adding_a_contradiction() -> None:
    text = (
        MOUNT_ROOT_XFS
        + '[[hosts]]\nmatch = "gpu*"\n[hosts.checks.mounts]\nexpect = [{ path = "/", fstype = "ext4" }]\n'
    )
    expect = parse_config(text, "test.toml", MODELS, "gpu1").check_settings["mounts"].expect
    assert expect == [MountSpec(path="/", fstype="ext4"), MountSpec(path="/home")]
    assert parse_config(text, "test.toml", MODELS, "cpu1").check_settings["mounts"].expect[0].fstype == "xfs"
    # The same through [node], the old place of [checks.mounts] expect.
    old = text.replace("[hosts.checks.mounts]\nexpect", "[hosts.node]\nmounts")
    assert parse_config(old.replace("[checks.mounts]\nexpect", "[node]\nmounts"), "t", MODELS, "gpu1").check_settings[
        "mounts"
    ].expect == [MountSpec(path="/", fstype="ext4"), MountSpec(path="/home")]


def test_two_expectations_of_one_mount_path_are_refused_wherever_they_meet() -> None:
    assert problems('[checks.mounts]\nexpect = [{ path = "/data" }, { path = "/data/", rw = true }]\n') == [
        "checks.mounts.expect: /data is expected more than once: give each mount path one entry"
        " (got [{'path': '/data'}, {'path': '/data/', 'rw': True}])"
    ]
    # A host section written with a trailing slash names the same mount as the file's, in another spelling.
    text = MOUNT_ROOT_XFS + '[[hosts]]\nmatch = "zz*"\n[hosts.checks.mounts]\nexpect = [{ path = "/home/" }]\n'
    assert [p.split(":")[0] for p in problems(text)] == ["hosts[0] (match 'zz*')"]
    assert "checks.mounts.expect: /home is expected more than once" in problems(text)[0]


def test_check_once_judges_the_mount_as_the_host_section_expects_it(
    write_config: Callable[[str], Path],
    cli: Callable[..., tuple[int, str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from healthd.text import read_kernel_text
    from healthd_checks.common.mountinfo import find_mount, parse_mountinfo

    root = find_mount(parse_mountinfo(read_kernel_text("/proc/1/mountinfo"), "/proc/1/mountinfo").entries, "/")
    assert root is not None
    body = (
        '[checks.mounts]\nexpect = [{ path = "/", fstype = "no-such-fs" }]\nprobe_usage = false\n'
        f'[[hosts]]\nmatch = "gpu*"\n[hosts.checks.mounts]\nexpect = [{{ path = "/", fstype = "{root.fstype}" }}]\n'
    )
    path = write_config(body)
    monkeypatch.setenv("SLURMD_NODENAME", "cpu1")
    code, out, _ = cli("check", "--once", "--only", "mounts", "--config", str(path))
    assert code == 2 and "MOUNT_WRONG_TYPE" in out
    # One config for two nodes in one test: the state directory is a node's own (healthd.store.statenode).
    (path.parent / "state" / "node.json").unlink()
    monkeypatch.setenv("SLURMD_NODENAME", "gpu1")
    code, out, err = cli("check", "--once", "--only", "mounts", "--config", str(path))
    assert code == 0, out + err


def _types(annotation: Any) -> Iterator[Any]:
    """Every type an annotation names (inside Optional, Annotated, unions)."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        yield from _types(args[0])
    elif args:
        for arg in args:
            yield from _types(arg)
    else:
        yield annotation


def _annotations(model: type) -> dict[str, Any]:
    """A check's model's fields (pydantic) or a config table's (``ConfigTable``) -> their annotations."""
    if issubclass(model, ConfigTable):
        hints = typing.get_type_hints(model, include_extras=True)
        return {name: hints[name] for name in model().values()}
    assert issubclass(model, BaseModel)
    return {name: info.annotation for name, info in model.model_fields.items()}


def _path_settings(model: type, place: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    for name, annotation in _annotations(model).items():
        types = list(_types(annotation))
        if Path in types:
            yield (*place, name)
        for inner in types:
            if isinstance(inner, type) and issubclass(inner, (BaseModel, ConfigTable)):
                yield from _path_settings(inner, (*place, name))


PATH_SETTINGS = sorted(
    [*_path_settings(Config, ()), *(p for name, m in MODELS.items() for p in _path_settings(m, ("checks", name)))]
)


@pytest.mark.parametrize("place", PATH_SETTINGS, ids=".".join)
def test_no_path_setting_takes_a_nul_character(place: tuple[str, ...]) -> None:
    # A NUL would crash every later use of the path ("embedded null byte"): the config is refused, naming the key.
    text = f'[{".".join(place[:-1])}]\n{place[-1]} = "/var/x\\u0000y"\n'
    assert problems(text) == [f"{'.'.join(place)}: a path cannot hold a NUL character (\\u0000) (got '/var/x\\x00y')"]


def test_every_kind_of_path_setting_is_held_to_the_nul_rule() -> None:
    assert {
        ("paths", "state_dir"),
        ("metrics", "textfile"),
        ("slurm", "conf"),
        ("checks", "xid", "journal_directory"),
    } <= set(PATH_SETTINGS)
