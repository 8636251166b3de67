"""``[paths]`` and ``[daemon]`` are a node's own: a ``[[hosts]]`` section that sets them is refused, by name and line.

``healthd status``, the hook and the config cache read the state directory and the
interval from the file's own tables without merging host sections; a section that moved
them would have the node write one directory and report from another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from healthd.config.load import ConfigError, node_settings
from healthd.config.models import parse_config
from healthd.exitcodes import EX_CONFIG

CLI = Callable[..., tuple[int, str, str]]
HEAD = '[slurm]\nenabled = false\n[paths]\nstate_dir = "/srv/st1"\n[daemon]\ninterval = 300\n'


@pytest.mark.parametrize(
    ("section", "where"),
    [
        ('[[hosts]]\nmatch = "*"\n[hosts.paths]\nstate_dir = "/srv/st2"\n', "hosts[0].paths (line 9)"),
        ('[[hosts]]\nmatch = "*"\n[hosts.daemon]\ninterval = 10\n', "hosts[0].daemon (line 9)"),
        (
            '[[hosts]]\nmatch = "gpu*"\n[hosts.policy]\ndry_run = true\n'
            '[[hosts]]\nmatch = "*"\ndaemon = { interval = 10 }\n',
            "hosts[1].daemon (line 13)",
        ),
        ('[[hosts]]\nmatch = "*"\n  paths.state_dir = "/srv/st2"\n', "hosts[0].paths (line 9)"),
    ],
)
def test_a_host_section_that_sets_a_node_local_table_is_refused_by_key_and_line(section: str, where: str) -> None:
    text = HEAD + section
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "/etc/healthd/healthd.toml", {}, host="gpu1")
    table = where.split(".")[1].split(" ")[0]
    assert f"/etc/healthd/healthd.toml: {where}: [{table}] may not be set in a host section" in str(raised.value)
    with pytest.raises(ConfigError) as cheap:  # the cheap readers never take the file's own table for it
        node_settings("/etc/healthd/healthd.toml", text.encode())
    assert f"/etc/healthd/healthd.toml: {where}: [{table}] may not be set in a host section" in str(cheap.value)


def test_a_node_local_table_at_the_top_is_the_cheap_readers_and_the_passes_alike() -> None:
    text = HEAD + '[[hosts]]\nmatch = "*"\n[hosts.policy]\ndry_run = true\n'
    assert parse_config(text, "t.toml", {}, host="n1").config.paths.state_dir == Path("/srv/st1")
    assert node_settings("t.toml", text.encode()).state_dir == Path("/srv/st1")


def test_status_and_check_refuse_such_a_config_alike(tmp_path: Path, cli: CLI) -> None:
    config = tmp_path / "healthd.toml"
    st1, st2 = tmp_path / "st1", tmp_path / "st2"
    config.write_text(
        f'[slurm]\nenabled = false\n[paths]\nstate_dir = "{st1}"\n'
        f'[[hosts]]\nmatch = "*"\n[hosts.paths]\nstate_dir = "{st2}"\n'
    )
    for command in (["check", "--once"], ["status"]):
        code, out, err = cli(*command, "--config", str(config))
        assert code == EX_CONFIG and out == "", command
        assert f"{config}: hosts[0].paths (line 7): [paths] may not be set in a host section" in err, err
    assert not st1.exists() and not st2.exists()


def test_a_host_section_may_not_rename_the_node(tmp_path: Path, cli: CLI) -> None:
    """Sections are chosen by the node's name; status and the hook read the file's own ``[slurm] node_name``."""
    text = HEAD + '[[hosts]]\nmatch = "*"\n[hosts.slurm]\nnode_name = "gpu001"\ntimeout = 4\n'
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "t.toml", {}, host="vm")
    assert "t.toml: hosts[0].slurm.node_name (line 9): may not be set in a host section" in str(raised.value)
    config = tmp_path / "healthd.toml"
    config.write_text(text.replace("/srv/st1", str(tmp_path / "st")))
    for command in (["check", "--once"], ["status"]):
        code, out, err = cli(*command, "--config", str(config))
        assert code == EX_CONFIG and out == "" and "slurm.node_name" in err, command
    # Other [slurm] settings stay a section's to set.
    parse_config(HEAD + '[[hosts]]\nmatch = "*"\n[hosts.slurm]\ntimeout = 4\n', "t.toml", {}, host="vm")
