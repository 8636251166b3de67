"""The .deb and the .rpm: built here with packaging/build.py, the .deb installed, upgraded,
removed and purged with the real dpkg, the .rpm read with rpm's own query tools and
installed with rpm. Each install happens in a throwaway copy-on-write root of this machine,
so the machine's own /opt, /etc/healthd and /var/lib/healthd are never touched."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from healthd_testkit.namespace import in_throwaway_root
from healthd_testkit.paths import REPO

pytestmark = [pytest.mark.slow, pytest.mark.root]

# A package built from this checkout, then the same tree as the next version: an upgrade.
FIRST, NEXT = "0.1.0", "0.1.1"
CONFIG = """[slurm]
enabled = false
"""


def _build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("healthd_packaging_build", REPO / "packaging" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    for tool in ("dpkg-deb", "rpmbuild", "rpm"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (tests/run.sh installs dpkg-dev and rpm)")
    build = _build_module()
    out = tmp_path_factory.mktemp("packages")
    stage = out / "stage"
    stage.mkdir()
    build.stage_venv(stage, None)
    build.stage_files(stage)
    return {
        "first": build.build_deb(stage, out, FIRST),
        "next": build.build_deb(stage, out, NEXT),
        "rpm": build.build_rpm(stage, out, FIRST),
    }


def _lines(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """The script's KEY=VALUE report lines."""
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line and line.isascii())


def test_the_deb_installs_upgrades_and_removes_keeping_config_and_state(
    packages: dict[str, Path], tmp_path: Path
) -> None:
    script = f"""set -e
dpkg -i /pkgs/{packages["first"].name} >/dev/null
echo INSTALLED=$(dpkg-query -W -f='${{Version}}' healthd)
echo EXAMPLE=$(test -f /etc/healthd/healthd.toml.example && echo yes)
echo VERSION=$(/usr/sbin/healthd --version)
echo ENABLED=$(ls /etc/systemd/system/multi-user.target.wants/ 2>/dev/null | grep -c healthd || true)
printf '%s' '{CONFIG}' > /etc/healthd/healthd.toml
chmod 600 /etc/healthd/healthd.toml
set +e; /usr/sbin/healthd check --once --json >/tmp/pass.json; echo CHECK_RC=$?; set -e
echo STATE=$(test -f /var/lib/healthd/last-pass.json && echo yes)
dpkg -i /pkgs/{packages["next"].name} >/dev/null
echo UPGRADED=$(dpkg-query -W -f='${{Version}}' healthd)
echo CONFIG_KEPT=$(cmp -s /etc/healthd/healthd.toml /pkgs/config.toml && echo yes)
dpkg -r healthd >/dev/null
echo REMOVED_VENV=$(test -e /opt/healthd/bin/healthd && echo no || echo yes)
echo REMOVED_LINK=$(test -e /usr/sbin/healthd && echo no || echo yes)
echo STATE_AFTER_REMOVE=$(test -f /var/lib/healthd/last-pass.json && echo yes)
echo CONFIG_AFTER_REMOVE=$(test -f /etc/healthd/healthd.toml && echo yes)
dpkg -P healthd >/dev/null
echo STATE_AFTER_PURGE=$(test -e /var/lib/healthd && echo yes || echo no)
echo CONFIG_AFTER_PURGE=$(test -f /etc/healthd/healthd.toml && echo yes)
"""
    (packages["first"].parent / "config.toml").write_text(CONFIG)
    report = _lines(in_throwaway_root(script, tmp_path, {packages["first"].parent: "/pkgs"}))
    assert report["INSTALLED"] == FIRST and report["EXAMPLE"] == "yes"
    assert report["VERSION"].startswith("healthd ")
    assert report["ENABLED"] == "0", "the unit is enabled only when the operator asks"
    assert report["CHECK_RC"] in ("0", "1", "2", "3") and report["STATE"] == "yes"
    assert report["UPGRADED"] == NEXT and report["CONFIG_KEPT"] == "yes"
    assert report["REMOVED_VENV"] == "yes" and report["REMOVED_LINK"] == "yes"
    assert report["STATE_AFTER_REMOVE"] == "yes" and report["CONFIG_AFTER_REMOVE"] == "yes"
    assert report["STATE_AFTER_PURGE"] == "no", "a purge deletes the state directory"
    assert report["CONFIG_AFTER_PURGE"] == "yes", "the operator's own config is not the package's to delete"


def test_the_installed_tree_runs_from_opt_healthd_only(packages: dict[str, Path]) -> None:
    """No file of the package names the staging directory it was built in."""
    listing = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(packages["first"])], capture_output=True, check=True)
    assert b"stage" not in b"".join(line for line in listing.stdout.split(b"\n") if line.startswith(b"#!")), (
        "a script's shebang names the staging directory"
    )
    contents = subprocess.run(["dpkg-deb", "-c", str(packages["first"])], capture_output=True, text=True, check=True)
    names = {line.split()[5] for line in contents.stdout.splitlines()}
    for required in (
        "./opt/healthd/bin/healthd",
        "./lib/systemd/system/healthd.service",
        "./etc/healthd/healthd.toml.example",
        "./usr/sbin/healthd-hook",
    ):
        assert required in names
    assert "./etc/healthd/healthd.toml" not in names


def _rpm_query(rpm: Path, *flags: str) -> str:
    return subprocess.run(["rpm", "-qp", *flags, str(rpm)], capture_output=True, text=True, check=True).stdout


def test_the_rpm_declares_its_files_config_and_scripts(packages: dict[str, Path]) -> None:
    rpm = packages["rpm"]
    files = set(_rpm_query(rpm, "-l").split())
    for required in (
        "/opt/healthd/bin/healthd",
        "/usr/lib/systemd/system/healthd.service",
        "/etc/healthd/healthd.toml.example",
        "/usr/sbin/healthd",
    ):
        assert required in files
    assert "/etc/healthd/healthd.toml" not in files
    assert _rpm_query(rpm, "--configfiles").split() == ["/etc/healthd/healthd.toml.example"]
    assert _rpm_query(rpm, "--queryformat", "%{VERSION}") == FIRST
    requires = _rpm_query(rpm, "-R")
    assert "/usr/bin/python3." in requires and "libc" not in requires
    scripts = _rpm_query(rpm, "--scripts")
    assert "disable --now healthd.service" in scripts and "systemctl enable" not in scripts
    assert "rm " not in scripts, "no scriptlet may delete the node's state"


def test_the_rpm_installs_and_erases_keeping_state(packages: dict[str, Path], tmp_path: Path) -> None:
    script = f"""set -e
rpm -i --nodeps /pkgs/{packages["rpm"].name}
echo VERSION=$(/usr/sbin/healthd --version)
mkdir -p /var/lib/healthd && touch /var/lib/healthd/history.sqlite
rpm -e healthd
echo REMOVED=$(test -e /opt/healthd && echo no || echo yes)
echo STATE=$(test -f /var/lib/healthd/history.sqlite && echo yes)
"""
    report = _lines(in_throwaway_root(script, tmp_path, {packages["rpm"].parent: "/pkgs"}))
    assert report["VERSION"].startswith("healthd ")
    assert report["REMOVED"] == "yes" and report["STATE"] == "yes"
