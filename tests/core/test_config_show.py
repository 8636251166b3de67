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
