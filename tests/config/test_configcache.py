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
from healthd.config.models import parse_config
from healthd.config.view import View, as_view
from healthd.store.state import StateDir

# Slow (each pass is a new interpreter): left out of the fast tier, `pytest -m "not slow"`.
pytestmark = pytest.mark.slow

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
    validated = parse_config(config.read_text(), str(config), models)  # pydantic's values, never viewed
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
    validated = parse_config(config.read_text(), str(config), settings_models(discover()))
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

    config = write_config(CONFIG)
    load_checks(config)
    _, specs = load_checks(config)  # from the cache: xid disabled, its module never imported
    (xid,) = [s for s in specs if s.name == "xid"]
    assert isinstance(xid, UnloadedCheck) and xid.module == "healthd_checks.xid.check"
    config.write_text(config.read_text().replace("[checks.xid]\nenabled = false\n", "[checks.xid]\nwindow = 60\n"))
    loaded, specs = load_checks(config, specs=specs)  # a running engine's checks, as on SIGHUP
    (xid,) = [s for s in specs if s.name == "xid"]
    assert isinstance(xid, CheckSpec) and loaded.check_settings["xid"].window == 60
    assert loaded.sha256 and isinstance(loaded.check_settings["xid"], View)
    cached, specs = load_checks(config)  # the reload's validation was cached
    assert cached.check_settings["xid"] == loaded.check_settings["xid"]
    assert isinstance(next(s for s in specs if s.name == "xid"), CheckSpec)


HOSTS = CONFIG + '[[hosts]]\nmatch = "gpu07"\n[hosts.checks.mounts]\nmin_free_percent = 7\n'


def test_a_config_for_another_node_neither_reads_nor_writes_the_cache(write_config: Callable[..., Path]) -> None:
    config = write_config(HOSTS)
    here, _ = load_checks(config)  # this node's validation, cached
    cache = _cache_file(config).read_bytes()
    assert here.check_settings["mounts"].min_free_percent == 1
    there, specs = load_checks(config, host="gpu07")
    assert there.host == "gpu07" and there.host_sections == ("hosts[0] (match 'gpu07')",)
    assert there.check_settings["mounts"].min_free_percent == 7, "gpu07's section, not this node's cached settings"
    assert {s.name for s in specs} == {s.name for s in discover()}
    assert not any(isinstance(s, UnloadedCheck) for s in specs), "validated in full: every check loaded"
    assert _cache_file(config).read_bytes() == cache, "the cache is this node's: another node's settings stay out"
    assert load_checks(config)[0].check_settings["mounts"].min_free_percent == 1


def test_commands_that_only_read_leave_the_state_directory_alone(
    write_config: Callable[..., Path], cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    from healthd_testkit import synth

    config = write_config(HOSTS)
    fleet = synth.plant(synth.FleetSpec(days=2, runs=200, seed=3))
    jobs, events = tmp_path / "jobs.txt", tmp_path / "events.txt"
    jobs.write_text("\n".join(synth.job_lines(fleet)) + "\n")
    events.write_text("\n".join(synth.event_lines(fleet)) + "\n")
    kmsg = tmp_path / "kmsg.txt"
    kmsg.write_text("[  1.0] NVRM: Xid (PCI:0000:1b:00): 79, pid=1, GPU has fallen off the bus.\n")
    for command in (
        ("config", "validate", "-c", str(config)),
        ("config", "validate", "-c", str(config), "--host", "gpu07"),
        ("config", "show", "-c", str(config)),
        ("list-checks", "-c", str(config)),
        ("fleet", "report", "--jobs", str(jobs), "--events", str(events), "--config", str(config)),
        ("scan-log", str(kmsg), "--config", str(config)),
    ):
        code, _, err = cli(*command)
        assert code in (0, 2), (command, err)  # scan-log grades the Xid 79 it read CRITICAL (2)
        assert not _cache_file(config).exists(), command
    load_checks(config)  # what a pass does: validates, and caches
    assert _cache_file(config).exists()


def test_the_config_is_loaded_through_one_function() -> None:
    # healthd.config.cache.load_checks: reading the file, the cache, the validation (docs/configuration.md).
    import ast

    from healthd_testkit.paths import PACKAGE_DIRS, REPO

    import healthd.config.models as models

    assert not hasattr(models, "load_config") and "load_config" not in models.__all__
    validators = {"load_config", "validate_bytes", "parse_config", "load_bytes"}
    found = []
    for package in PACKAGE_DIRS:
        for path in sorted(package.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module == "healthd.config.models":
                    found += [f"{path.relative_to(REPO)}: {a.name}" for a in node.names if a.name in validators]
    assert found == ["healthd/config/cache.py: validate_bytes"]
