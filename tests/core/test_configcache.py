"""The validated-config cache: a config whose bytes did not change is not validated again, and nothing else is trusted.

Each pass runs in its own process, as ``healthd check --once`` does, and reports
which modules it imported, so the tests see what a cold start really pays for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.checks import only_checks

from healthd.checks.plugin import UnloadedCheck, discover, settings_models
from healthd.config.cache import CACHE, load_checks
from healthd.config.models import load_config
from healthd.config.view import View, as_view
from healthd.store.state import StateDir

# Runs one dry pass with Slurm off and prints the exit code and the heavy modules it imported.
_PASS = """
import json, sys
from healthd.cli.main import main
code = main(["check", "--once", "--json", "--dry-run", "--config", sys.argv[1]])
heavy = sorted(m for m in ("pydantic", "pynvml", "healthd.config.models", "healthd_checks.gpu.check",
                           "healthd_checks.xid.check") if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}), file=sys.stderr)
"""

# gpu and xid disabled (their modules must not be imported), and every check that would
# judge this machine (its clock, its hung tasks) with them.
CONFIG = """
[checks.mounts]
min_free_percent = 1
min_free_inodes_percent = 1
[checks.services]
expect_kernel_modules = []
""" + only_checks("mounts", "services", "infiniband", "pcie")


def _pass(config: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", _PASS, str(config)], capture_output=True, text=True, timeout=60, check=False
    )
    report: dict[str, Any] = json.loads(proc.stderr.strip().splitlines()[-1])
    report["stderr"] = proc.stderr
    report["document"] = json.loads(proc.stdout) if proc.stdout.strip() else None
    return report


def _cache_file(config: Path) -> Path:
    return config.parent / "state" / f"{CACHE}.json"


def test_unchanged_valid_config_imports_neither_pydantic_nor_disabled_checks(write_config: Callable[..., Path]) -> None:
    config = write_config(CONFIG)
    first = _pass(config)
    assert first["code"] == 0 and "pydantic" in first["heavy"]  # validated in full, then cached
    assert _cache_file(config).exists()
    second = _pass(config)
    assert second["code"] == 0
    assert second["heavy"] == []  # no pydantic, no config models, no disabled check, no NVML
    states = [(c["name"], c["state"]) for c in second["document"]["checks"]]
    assert states == [(c["name"], c["state"]) for c in first["document"]["checks"]]
    assert dict(states)["gpu"] == "disabled" and dict(states)["xid"] == "disabled" and dict(states)["mounts"] == "ran"


def test_changed_config_is_validated_again_and_its_new_values_used(write_config: Callable[..., Path]) -> None:
    config = write_config(CONFIG)
    assert _pass(config)["code"] == 0
    config.write_text(config.read_text().replace("[checks.xid]\nenabled = false\n", ""))
    again = _pass(config)
    assert "pydantic" in again["heavy"]
    states = {c["name"]: c["state"] for c in again["document"]["checks"]}
    assert states["xid"] != "disabled"
    assert _pass(config)["heavy"] == ["healthd_checks.xid.check"]  # cached again: the enabled xid check only


def test_bad_config_after_a_cached_one_names_every_bad_key(write_config: Callable[..., Path]) -> None:
    config = write_config(CONFIG)
    assert _pass(config)["code"] == 0
    bad = config.read_text().replace("min_free_percent = 1", "min_free_percent = 500\nbogus = 1")
    config.write_text(bad + "\n[runner]\npass_timeout = -1\n")
    report = _pass(config)
    assert report["code"] == 78 and report["document"] is None
    for key in ("checks.mounts.min_free_percent", "checks.mounts.bogus: unknown key", "runner.pass_timeout"):
        assert key in report["stderr"]


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(lambda text: text.replace('"min_free_percent":1', '"min_free_percent":99'), id="edited-value"),
        pytest.param(lambda text: text[: len(text) // 2], id="truncated"),
        pytest.param(lambda text: text.replace('"format":1', '"format":2'), id="other-format"),
        pytest.param(lambda text: "[]", id="not-an-object"),
    ],
)
def test_a_spoiled_cache_is_never_used(write_config: Callable[..., Path], spoil: Callable[[str], str]) -> None:
    config = write_config(CONFIG)
    assert _pass(config)["code"] == 0
    cache = _cache_file(config)
    spoiled = spoil(cache.read_text())
    assert spoiled != cache.read_text()
    cache.write_text(spoiled)
    report = _pass(config)
    assert report["code"] == 0 and "pydantic" in report["heavy"]  # validated in full again
    mounts = next(c for c in report["document"]["checks"] if c["name"] == "mounts")
    assert all(f["code"] != "MOUNT_SPACE_LOW" for f in mounts["findings"])  # the file's 1 %, never the cache's 99 %
    assert "STATE_PROBLEM" not in json.dumps(report["document"])  # a bad cache is not a fault of the node
    assert _pass(config)["heavy"] == []  # and it was replaced by a good one


def test_cached_settings_equal_the_validated_ones(write_config: Callable[..., Path]) -> None:
    config = write_config(CONFIG)
    models = settings_models(discover())
    validated = load_config(config, models)
    first, _ = load_checks(config)  # validates and caches
    cached, specs = load_checks(config)  # from the cache
    assert StateDir(config.parent / "state").file(CACHE).load()
    assert cached.config == first.config == as_view(validated.config)
    assert cached.config.paths == validated.config.paths  # a view equals the model it stands for
    assert cached.config.paths.state_dir == validated.config.paths.state_dir  # a Path, as validated
    assert isinstance(cached.config.paths.state_dir, Path)
    for name, settings in validated.check_settings.items():
        assert cached.check_settings[name] == as_view(settings)
    kept = {"mounts", "services", "infiniband", "pcie"}
    assert {s.name for s in specs if isinstance(s, UnloadedCheck)} == {s.name for s in discover()} - kept


def test_the_config_is_a_config_on_every_path(write_config: Callable[..., Path]) -> None:
    # LoadedConfig.config is typed Config: validated now, stored in the cache or read back from it.
    from healthd.config.sections import Config, Paths

    config = write_config(CONFIG)
    validated = load_config(config, settings_models(discover()))
    first, _ = load_checks(config)
    cached, _ = load_checks(config)
    scanned, _ = load_checks(config, use_cache=False, store=False, load=False)
    for loaded in (validated, first, cached, scanned):
        assert type(loaded.config) is Config and type(loaded.config.paths) is Paths
    assert cached.config == validated.config
    with pytest.raises(AttributeError, match="read-only"):
        cached.config.paths.state_dir = Path("/elsewhere")


def test_a_view_keeps_types_and_refuses_writes() -> None:
    from healthd.model import Status
    from healthd_checks.xid.settings import XidSettings

    view = as_view(XidSettings.model_validate({"overrides": {"63": "CRITICAL"}, "journal_directory": "/j"}))
    assert isinstance(view, View)
    assert view.overrides == {"63": Status.CRITICAL} and isinstance(view.overrides["63"], Status)
    assert view.journal_directory == Path("/j")
    with pytest.raises(AttributeError):
        view.window = 1.0
    with pytest.raises(AttributeError, match="no setting"):
        _ = view.no_such_setting


def test_reload_loads_a_check_the_old_config_disabled(write_config: Callable[..., Path]) -> None:
    from healthd.checks.plugin import CheckSpec
    from healthd.config.cache import reload_checks

    config = write_config(CONFIG)
    load_checks(config)
    _, specs = load_checks(config)  # from the cache: xid disabled, its module never imported
    (xid,) = [s for s in specs if s.name == "xid"]
    assert isinstance(xid, UnloadedCheck) and xid.module == "healthd_checks.xid.check"
    config.write_text(config.read_text().replace("[checks.xid]\nenabled = false\n", "[checks.xid]\nwindow = 60\n"))
    loaded, specs = reload_checks(config, specs)
    (xid,) = [s for s in specs if s.name == "xid"]
    assert isinstance(xid, CheckSpec) and loaded.check_settings["xid"].window == 60
    assert loaded.sha256 and isinstance(loaded.check_settings["xid"], View)
    cached, specs = load_checks(config)  # the reload's validation was cached
    assert cached.check_settings["xid"] == loaded.check_settings["xid"]
    assert isinstance(next(s for s in specs if s.name == "xid"), CheckSpec)
