"""The .deb and the .rpm: built here with packaging/build.py, the .deb installed, upgraded,
removed and purged with the real dpkg, the .rpm read with rpm's own query tools and
installed with rpm. Each install happens in a throwaway copy-on-write root of this machine,
so the machine's own /opt, /etc/healthd and /var/lib/healthd are never touched."""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

import pytest
from healthd_testkit.namespace import in_throwaway_root
from healthd_testkit.packages import FIRST, NEXT, Packages, build_module
from healthd_testkit.paths import REPO

pytestmark = [pytest.mark.slow, pytest.mark.root]

CONFIG = """[slurm]
enabled = false
"""


def _lines(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """The script's KEY=VALUE report lines."""
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line and line.isascii())


def test_the_deb_installs_upgrades_and_removes_keeping_config_and_state(
    healthd_packages: Packages, tmp_path: Path
) -> None:
    script = f"""set -e
dpkg -i /pkgs/{healthd_packages.deb.name} >/dev/null
echo INSTALLED=$(dpkg-query -W -f='${{Version}}' healthd)
echo EXAMPLE=$(test -f /etc/healthd/healthd.toml.example && echo yes)
echo VERSION=$(/usr/sbin/healthd --version)
echo ENABLED=$(ls /etc/systemd/system/multi-user.target.wants/ 2>/dev/null | grep -c healthd || true)
printf '%s' '{CONFIG}' > /etc/healthd/healthd.toml
chmod 600 /etc/healthd/healthd.toml
set +e; /usr/sbin/healthd check --once --json >/tmp/pass.json; echo CHECK_RC=$?; set -e
echo STATE=$(test -f /var/lib/healthd/last-pass.json && echo yes)
dpkg -i /pkgs/{healthd_packages.next_deb.name} >/dev/null
echo UPGRADED=$(dpkg-query -W -f='${{Version}}' healthd)
echo NEXT_VERSION=$(/usr/sbin/healthd --version)
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
    (healthd_packages.deb.parent / "config.toml").write_text(CONFIG)
    report = _lines(in_throwaway_root(script, tmp_path, {healthd_packages.deb.parent: "/pkgs"}))
    assert report["INSTALLED"] == FIRST and report["EXAMPLE"] == "yes"
    assert report["VERSION"] == f"healthd {FIRST}", "the package says the version it was built as"
    assert report["ENABLED"] == "0", "the unit is enabled only when the operator asks"
    assert report["CHECK_RC"] in ("0", "1", "2", "3") and report["STATE"] == "yes"
    assert report["UPGRADED"] == NEXT and report["CONFIG_KEPT"] == "yes"
    assert report["NEXT_VERSION"] == f"healthd {NEXT}"
    assert report["REMOVED_VENV"] == "yes" and report["REMOVED_LINK"] == "yes"
    assert report["STATE_AFTER_REMOVE"] == "yes" and report["CONFIG_AFTER_REMOVE"] == "yes"
    assert report["STATE_AFTER_PURGE"] == "no", "a purge deletes the state directory"
    assert report["CONFIG_AFTER_PURGE"] == "yes", "the operator's own config is not the package's to delete"


def test_the_installed_tree_runs_from_opt_healthd_only(healthd_packages: Packages, tmp_path: Path) -> None:
    """No file of the package names the staging directory it was built in: shebangs,
    pyvenv.cfg and the bytecode's file names all say /opt/healthd."""
    subprocess.run(["dpkg-deb", "-x", str(healthd_packages.deb), str(tmp_path / "tree")], check=True)
    stage = str(healthd_packages.deb.parent / "stage").encode()
    files = [p for p in (tmp_path / "tree").rglob("*") if p.is_file() and not p.is_symlink()]
    assert len(files) > 100
    assert [str(p) for p in files if stage in p.read_bytes()] == []
    assert (tmp_path / "tree/opt/healthd/bin/healthd").read_text().startswith("#!/opt/healthd/bin/python")
    contents = subprocess.run(["dpkg-deb", "-c", str(healthd_packages.deb)], capture_output=True, text=True, check=True)
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


def test_the_rpm_declares_its_files_config_and_scripts(healthd_packages: Packages) -> None:
    rpm = healthd_packages.rpm
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
    # Build-id links of the bundled wheels' objects would conflict with any other package vendoring them.
    assert not [name for name in files if name.startswith("/usr/lib/.build-id")]
    assert "rm " not in scripts, "no scriptlet may delete the node's state"


def test_the_rpm_installs_and_erases_keeping_state(healthd_packages: Packages, tmp_path: Path) -> None:
    script = f"""set -e
rpm -i --nodeps /pkgs/{healthd_packages.rpm.name}
echo VERSION=$(/usr/sbin/healthd --version)
mkdir -p /var/lib/healthd && touch /var/lib/healthd/history.sqlite
rpm -e healthd
echo REMOVED=$(test -e /opt/healthd && echo no || echo yes)
echo STATE=$(test -f /var/lib/healthd/history.sqlite && echo yes)
"""
    report = _lines(in_throwaway_root(script, tmp_path, {healthd_packages.rpm.parent: "/pkgs"}))
    assert report["VERSION"] == f"healthd {FIRST}"
    assert report["REMOVED"] == "yes" and report["STATE"] == "yes"


def test_the_deb_lints_clean(healthd_packages: Packages) -> None:
    """lintian finds nothing: the tags a venv under /opt always raises are overridden, each with its reason."""
    done = subprocess.run(
        ["lintian", "--tag-display-limit", "0", str(healthd_packages.deb)], capture_output=True, text=True
    )
    tags = [line for line in done.stdout.split("\n") if line[:2] in ("E:", "W:")]
    assert done.returncode == 0 and tags == [], done.stdout + done.stderr


def test_the_rpm_lints_clean(healthd_packages: Packages) -> None:
    config = REPO / "packaging" / "rpm" / "rpmlint.toml"
    done = subprocess.run(["rpmlint", "-c", str(config), str(healthd_packages.rpm)], capture_output=True, text=True)
    assert done.returncode == 0 and "0 errors, 0 warnings" in done.stdout, done.stdout + done.stderr


def test_the_deb_carries_manuals_docs_and_copyright(healthd_packages: Packages, tmp_path: Path) -> None:
    contents = subprocess.run(["dpkg-deb", "-c", str(healthd_packages.deb)], capture_output=True, text=True, check=True)
    first = contents.stdout.split("\n")[0].split()
    assert first[0] == "drwxr-xr-x" and first[5] == "./", "the archive's root entry is what / would be set to"
    tree = tmp_path / "tree"
    subprocess.run(["dpkg-deb", "-x", str(healthd_packages.deb), str(tree)], check=True)
    for name in ("healthd", "healthd-hook", "healthd-prolog", "healthd-epilog"):
        page = gzip.decompress((tree / f"usr/share/man/man8/{name}.8.gz").read_bytes()).decode()
        assert page.startswith(f".TH {name.upper()} 8") and "usage:" in page
        assert (tree / "usr/sbin" / name).readlink() == Path(f"/opt/healthd/bin/{name}")
    assert "healthd check" in gzip.decompress((tree / "usr/share/man/man8/healthd.8.gz").read_bytes()).decode()
    doc = tree / "usr/share/doc/healthd"
    copyright_text = (doc / "copyright").read_text()
    assert copyright_text.startswith("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/")
    assert "psutil" in copyright_text and "pydantic" in copyright_text
    assert (doc / "README.md").is_file() and (doc / "docs/configuration.md").is_file()
    assert f"healthd ({FIRST})" in gzip.decompress((doc / "changelog.gz").read_bytes()).decode()
    assert (tree / "usr/share/healthd/grafana/healthd-provider.yml").is_file()


def test_a_build_without_libsystemd_stops_instead_of_leaving_the_journal_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same commit builds the same package anywhere: no extra silently dropped on a host without the headers."""
    build = build_module()
    monkeypatch.setattr(build, "_has_libsystemd", lambda: False)
    with pytest.raises(SystemExit, match="--without-journal"):
        build.stage_venv(Path("/nonexistent"), None)
