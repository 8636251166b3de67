from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from healthd.config import ConfigError, MountSpec, parse_config
from healthd.engine import settings_models
from healthd.plugin import discover

MODELS = settings_models(discover())


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "test.toml", MODELS)
    return info.value.problems


def test_empty_config_gives_defaults() -> None:
    loaded = parse_config("", "test.toml", MODELS)
    assert loaded.config.paths.sysfs == Path("/sys")
    assert loaded.config.daemon.interval == 300
    assert loaded.check_settings["mounts"].enabled


def test_typo_in_a_section_key_is_named() -> None:
    assert problems("[node]\ngpu = 8\n") == ["node.gpu: unknown key"]


def test_unknown_section_is_named() -> None:
    assert problems("[nodes]\ngpus = 8\n") == ["nodes: unknown key"]


def test_wrong_type_names_key_and_value() -> None:
    (problem,) = problems('[node]\ngpus = "eight"\n')
    assert problem.startswith("node.gpus: ") and "'eight'" in problem


def test_negative_timeout_in_a_check_table_is_named() -> None:
    (problem,) = problems("[checks.mounts]\ntimeout = -1\n")
    assert problem.startswith("checks.mounts.timeout: Input should be greater than 0")


def test_unknown_option_of_a_check_is_named() -> None:
    assert problems("[checks.mounts]\nmin_free_pct = 3\n") == ["checks.mounts.min_free_pct: unknown key"]


def test_unknown_check_lists_the_known_ones() -> None:
    (problem,) = problems("[checks.gpus]\nenabled = false\n")
    assert problem.startswith("checks.gpus: unknown check (known: ") and "mounts" in problem


def test_list_items_are_indexed() -> None:
    (problem,) = problems('[node]\nmounts = [{ path = "/a" }, { path = "relative" }]\n')
    assert problem.startswith("node.mounts[1].path: mount path must be absolute")


def test_bad_ib_port_name() -> None:
    (problem,) = problems('[node]\nib_ports = ["mlx5_0"]\n')
    assert problem.startswith("node.ib_ports: IB port 'mlx5_0' must look like DEVICE:PORT")


def test_toml_syntax_error_names_the_line() -> None:
    (problem,) = problems("[node]\ngpus = = 8\n")
    assert "not valid TOML" in problem and "line 2" in problem


def test_error_text_names_the_file() -> None:
    with pytest.raises(ConfigError, match=r"^test.toml: node.gpu: unknown key$"):
        parse_config("[node]\ngpu = 8\n", "test.toml", MODELS)


def test_mount_path_trailing_slash_is_normalised() -> None:
    assert MountSpec(path="/scratch/").path == "/scratch"


def test_cli_exits_78_naming_the_key(
    write_config: Callable[[str], Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    path = write_config("[node]\nservices = 3\nmountz = []\n")
    for args in (["config", "validate"], ["check", "--once"], ["check", "--once", "--json"]):
        code, out, err = cli(*args, "--config", str(path))
        assert code == 78
        assert out == ""
        assert f"{path}: node.mountz: unknown key" in err
        assert f"{path}: node.services: Input should be a valid list" in err


def test_cli_validate_accepts_a_good_file(
    write_config: Callable[[str], Path], cli: Callable[..., tuple[int, str, str]]
) -> None:
    path = write_config('[node]\ngpus = 8\nmounts = [{ path = "/scratch", fstype = "lustre", rw = true }]\n')
    code, out, _ = cli("config", "validate", "--config", str(path))
    assert code == 0 and out.strip() == f"{path}: valid"


def test_missing_config_file_is_a_config_error(tmp_path: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    code, _, err = cli("check", "--once", "--config", str(tmp_path / "nope.toml"))
    assert code == 78 and "nope.toml: cannot read: No such file or directory" in err


def test_every_problem_is_reported_in_one_round() -> None:
    assert problems("[node]\ngpu = 8\n[checks.mounts]\nmin_free_pct = 3\n") == [
        "node.gpu: unknown key",
        "checks.mounts.min_free_pct: unknown key",
    ]
