"""``healthd config show``: the effective config of a node, as TOML that validates and reads back to the same."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from healthd_testkit.paths import FIXTURES

from healthd.checks.plugin import discover, settings_models
from healthd.commands.config_cmd import effective_toml
from healthd.config.defaults import toml_module
from healthd.config.loaded import LoadedConfig
from healthd.config.models import parse_config
from healthd.config.provenance import key_lines
from healthd.model import Status

MODELS = settings_models(discover())
CLI = Callable[..., tuple[int, str, str]]

# Every kind of value a setting holds: host sections, a key moved from [node], grades, an infinite
# limit, paths, a list of tables with an identity, a table of tables, keys that need quoting.
MIXED = """
[node]
kernel_modules = ["nvidia"]
[slurm]
enabled = false
reconcile_interval = inf
[metrics]
listen = "127.0.0.1:9101"
[escalation.overrides]
MOUNT_MISSING = 0
[checks.xid]
overrides = { "79" = "WARNING", "13" = "CRITICAL" }
[checks.services]
severities = { "nvidia-persistenced" = "WARNING" }
process_users = ["munge", 107]
[checks.infiniband]
expect_ports = ["mlx5_0:1", "mlx5_8:1"]
expect_rates_gbps = { "mlx5_8:1" = 200 }
[checks.dcgm.expected."2330"]
pcie_bandwidth_gbps_min = 20.5
[checks.mounts]
expect = [{ path = "/scratch", fstype = "lustre" }]
[[hosts]]
match = "gpu*"
[hosts.checks.gpu]
expect_gpus = 8
[hosts.checks.mounts]
expect = [{ path = "/scratch", fstype = "lustre", rw = true }, { path = "/datasets" }]
[hosts.policy]
fail_passes = 2
[[hosts]]
match = "!{gpu[1-4]}"
[hosts.checks.edac]
enabled = false
"""
CONFIGS = {
    "empty": "",
    # Its programs made absolute, as healthd_testkit.paths.fixture_node_config does.
    "h100-node": (FIXTURES / "h100-node.toml").read_text().replace('"fixtures/', f'"{FIXTURES}/'),
    "mixed": MIXED,
}


def _same(first: LoadedConfig, second: LoadedConfig) -> None:
    """The same settings: every table of the config (``checks`` holds raw tables) and every check's."""
    assert first.config.replaced(checks={}) == second.config.replaced(checks={})
    assert dict(first.check_settings) == dict(second.check_settings)


@pytest.mark.parametrize("host", ["gpu1", "gpu7", "login1"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_shown_config_reads_back_to_the_same_settings_on_any_node(name: str, host: str) -> None:
    loaded = parse_config(CONFIGS[name], "healthd.toml", MODELS, host)
    shown = effective_toml(loaded)
    for reader in (host, "elsewhere"):  # no host section is left in it to choose by name
        _same(loaded, parse_config(shown, "shown.toml", MODELS, reader))
    assert "[[hosts]]" not in shown and "[node]" not in shown


def test_the_shown_config_is_the_nodes_own() -> None:
    tomllib = toml_module()
    gpu = tomllib.loads(effective_toml(parse_config(MIXED, "healthd.toml", MODELS, "gpu1")))
    other = tomllib.loads(effective_toml(parse_config(MIXED, "healthd.toml", MODELS, "gpu7")))
    assert gpu["checks"]["gpu"]["expect_gpus"] == 8 and gpu["policy"]["fail_passes"] == 2
    assert gpu["checks"]["edac"]["enabled"] is True
    assert gpu["checks"]["mounts"]["expect"] == [
        {"path": "/scratch", "fstype": "lustre", "rw": True},
        {"path": "/datasets"},
    ], "the section's item replaced the file's item about the same mount"
    assert other["checks"]["edac"]["enabled"] is False, "gpu7 is outside gpu[1-4]"
    assert gpu["checks"]["xid"]["overrides"]["79"] == Status.WARNING.name
    assert gpu["slurm"]["reconcile_interval"] == float("inf")
    # Defaults are filled in: a table the file never wrote, with its every key.
    assert gpu["daemon"] == {"interval": 300.0, "splay": True}


def test_config_show_prints_toml_that_config_validate_accepts(
    write_config: Callable[..., Path], cli: CLI, tmp_path: Path
) -> None:
    config = write_config(MIXED)
    code, out, err = cli("config", "show", "-c", str(config), "--host", "gpu2")
    assert code == 0, err
    assert out.startswith(f"# The effective config of node gpu2, from {config}: host sections applied (hosts[0]")
    shown = tmp_path / "shown.toml"
    shown.write_text(out)
    shown.chmod(0o600)
    code, out, err = cli("config", "validate", "-c", str(shown), "--host", "gpu2")
    assert code == 0 and out == f"{shown}: valid; for node gpu2 the host sections that apply: none\n", err


def test_config_show_of_a_bad_config_names_the_key_and_prints_nothing(
    write_config: Callable[..., Path], cli: CLI
) -> None:
    config = write_config("[checks.mounts]\nmin_fre_percent = 3\n")
    code, out, err = cli("config", "show", "-c", str(config))
    assert (code, out) == (78, "")
    assert "checks.mounts.min_fre_percent: unknown key; did you mean min_free_percent?" in err


# A default, values the file sets (a dotted key, a multi-line array), a host section's values, a [node] key.
ANNOTATED = """
[node]
kernel_modules = ["nvidia"]
[slurm]
enabled = false
timeout = 7.5
[policy]
fail_passes = 3
clean_passes = 2
[checks]
gpu.timeout = 90
[checks.infiniband]
expect_ports = [
    "mlx5_0:1",
    "mlx5_8:1",
]
[[hosts]]
match = "gpu*"
[hosts.policy]
fail_passes = 2
[hosts.checks.gpu]
expect_gpus = 8
"""


def _notes(shown: str) -> dict[tuple[str, ...], str]:
    """Each ``key = value`` line's note, by table and key: its trailing comment, or the comment above it."""
    notes: dict[tuple[str, ...], str] = {}
    table: tuple[str, ...] = ()
    above: list[str] = []
    for line in shown.split("\n"):
        if line.startswith("["):
            table, above = tuple(line.strip("[]").split(".")), []
        elif line.startswith("# "):
            above.append(line[2:])
        elif " = " in line and not line.startswith(" "):
            name, _, rest = line.partition(" = ")
            notes[(*table, name)] = rest.partition("  # ")[2] or " ".join(above)
            above = []
    return notes


def _line(config: Path, text: str) -> int:
    return config.read_text().split("\n").index(text) + 1


def test_config_show_says_where_each_value_came_from_and_its_default(
    write_config: Callable[..., Path], cli: CLI
) -> None:
    config = write_config(ANNOTATED)
    code, out, err = cli("config", "show", "-c", str(config), "--host", "gpu2")
    assert code == 0, err
    notes = _notes(out)
    assert notes[("paths", "sysfs")] == "default"
    assert notes[("slurm", "timeout")] == f"set in {config}:{_line(config, 'timeout = 7.5')}; default 5.0"
    assert notes[("policy", "clean_passes")] == f"set in {config}:{_line(config, 'clean_passes = 2')}; default 1"
    assert notes[("checks", "gpu", "timeout")] == f"set in {config}:{_line(config, 'gpu.timeout = 90')}; default 10.0"
    assert (
        notes[("checks", "infiniband", "expect_ports")]
        == f"set in {config}:{_line(config, 'expect_ports = [')}; default unset"
    )
    assert notes[("policy", "fail_passes")] == 'from [[hosts]] match "gpu*"; default 1'
    assert notes[("checks", "gpu", "expect_gpus")] == 'from [[hosts]] match "gpu*"; default unset'
    assert notes[("checks", "services", "expect_kernel_modules")] == "moved from [node] kernel_modules; default []"
    code, out, err = cli("config", "show", "-c", str(config), "--host", "login1")
    assert _notes(out)[("policy", "fail_passes")] == f"set in {config}:{_line(config, 'fail_passes = 3')}; default 1"


@pytest.mark.parametrize("flag", [(), ("--annotate",), ("--plain",)])
def test_the_annotated_config_validates_and_reads_back_to_the_same_settings(
    write_config: Callable[..., Path], cli: CLI, tmp_path: Path, flag: tuple[str, ...]
) -> None:
    config = write_config(ANNOTATED)
    code, out, err = cli("config", "show", "-c", str(config), "--host", "gpu2", *flag)
    assert code == 0, err
    _same(parse_config(config.read_text(), "healthd.toml", MODELS, "gpu2"), parse_config(out, "shown", MODELS, "x"))
    assert max(len(line) for line in out.split("\n")[4:]) <= 120, "a person reads it: lines fit"
    shown = tmp_path / "shown.toml"
    shown.write_text(out)
    shown.chmod(0o600)
    assert cli("config", "validate", "-c", str(shown))[0] == 0
    values = [line for line in out.split("\n") if " = " in line and not line.startswith(" ")]
    commented = [line for line in values if "  # " in line]
    if flag == ("--plain",):
        assert not commented
    else:
        assert len(commented) >= len(values) - 3, "every value has its note, a long line's above it"
    if flag == ("--annotate",):
        assert "# seconds one scontrol or sinfo call may take\ntimeout = 7.5  # set in" in out


def test_key_lines_finds_each_key_the_file_sets_and_never_guesses() -> None:
    text = (
        'a.b = 1\n[t]\nx = """\ny = 2\n"""\n"q k" = 3\n[[hosts]]\nmatch = "n*"\n[hosts.t]\nz = 1\n'
        "[[arr]]\nw = 1\n[t2]\nm = [\n  1,\n]\n[ t3 . 'u' ]\nv.w = { p = 1 }\n"
    )
    assert key_lines(text) == {
        ("a", "b"): 1,
        ("t",): 2,
        ("t", "x"): 3,
        ("t", "q k"): 6,
        ("arr",): 11,
        ("t2",): 13,
        ("t2", "m"): 14,
        ("t3", "u"): 17,
        ("t3", "u", "v", "w"): 18,
    }
    assert key_lines("[t]\nx = 1\n[t]\nx = 2\n")[("t", "x")] == 0, "a key found twice gets no line"


def test_a_config_replaced_between_the_load_and_the_notes_is_refused(write_config: Callable[..., Path]) -> None:
    from healthd.commands.config_cmd import show_notes
    from healthd.config.cache import load_checks
    from healthd.config.load import ConfigError

    config = write_config(ANNOTATED)
    loaded, checks = load_checks(config, host="gpu2", use_cache=False, store=False)
    config.write_text("\n" + config.read_text())  # every line one further down: the notes would name wrong lines
    with pytest.raises(ConfigError, match="changed while healthd config show read it"):
        show_notes(config, loaded, settings_models(checks))
