"""Build healthd's .deb and .rpm: a self-contained virtualenv under /opt/healthd.

    python3 packaging/build.py deb|rpm|both [--out DIR] [--version V] [--wheelhouse DIR]

Sites install daemons from their distribution's packages, not from a checkout. Both
packages hold the same tree, staged once:

- /opt/healthd: a virtualenv with healthd and its dependencies (the interpreter is the
  system's python3, so a package fits the distribution release it was built on);
- the systemd unit, not enabled: the operator enables it (`systemctl enable --now healthd`);
- /etc/healthd/healthd.toml.example (a conffile); the operator's healthd.toml is never
  shipped, so an upgrade cannot touch it;
- /usr/share/healthd: the Prometheus rules and the Grafana dashboard, where they exist;
- /usr/sbin/healthd, healthd-hook, healthd-prolog and healthd-epilog, links into the venv.

The venv is built in a staging directory and then made to live at /opt/healthd, as
dh-virtualenv does: script shebangs and pyvenv.cfg are rewritten, and the bytecode is
compiled with /opt/healthd paths (compileall's -s/-p). The tools are the distributions'
own: dpkg-deb (dpkg-deb(1)) and rpmbuild (rpmbuild(8)), nothing downloaded.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PREFIX = "/opt/healthd"
SCRIPTS = ("healthd", "healthd-hook", "healthd-prolog", "healthd-epilog")
# What goes under /usr/share/healthd, when the checkout has it.
SHARED = {
    "prometheus/healthd.rules.yml": REPO / "deploy" / "prometheus" / "healthd.rules.yml",
    "grafana/healthd.json": REPO / "deploy" / "grafana" / "healthd.json",
}
SUMMARY = "Node health checks for GPU clusters run by Slurm: detect, drain, resume"
MAINTAINER = "healthd developers <healthd@localhost>"


def _run(*argv: str, cwd: Path | None = None) -> None:
    subprocess.run(list(argv), check=True, cwd=cwd, stdin=subprocess.DEVNULL)


def _version() -> str:
    for line in (REPO / "healthd" / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise SystemExit("healthd/__init__.py has no __version__")


def interpreter() -> Path:
    """The system interpreter the venv runs on, by its versioned name.

    ``/usr/bin/python3.11`` and not ``/usr/bin/python3``: on RHEL 9 ``python3`` is 3.9 and
    3.11 is a package of its own, so the versioned path is what both families share.
    """
    major, minor = sys.version_info[:2]
    path = Path(f"/usr/bin/python{major}.{minor}")
    if not path.exists():
        raise SystemExit(f"{path} does not exist: run this script with the system's python3")
    return path


def stage_venv(root: Path, wheelhouse: Path | None) -> None:
    """healthd and its dependencies in ROOT/opt/healthd, made to run from /opt/healthd."""
    venv = root / PREFIX.lstrip("/")
    _run(str(interpreter()), "-m", "venv", str(venv))
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    if wheelhouse is not None:
        pip += ["--no-index", "--find-links", str(wheelhouse)]
    _run(*pip, f"{REPO}[journal]" if _has_libsystemd() else str(REPO))
    _relocate(venv)


def _has_libsystemd() -> bool:
    # systemd-python builds from source against libsystemd; without its headers the package
    # still works (healthd speaks journald's protocol itself), so the extra is optional.
    return (
        shutil.which("pkg-config") is not None
        and subprocess.run(["pkg-config", "--exists", "libsystemd"], check=False).returncode == 0
    )


def _relocate(venv: Path) -> None:
    staged = str(venv)
    for script in (venv / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            data = script.read_bytes()
            if data.startswith(b"#!") or script.name.startswith("activate"):
                script.write_bytes(data.replace(staged.encode(), PREFIX.encode()))
    cfg = venv / "pyvenv.cfg"
    cfg.write_text(cfg.read_text().replace(staged, PREFIX))
    for cache in venv.rglob("__pycache__"):
        shutil.rmtree(cache)
    site = Path(sysconfig.get_path("purelib", vars={"base": staged, "platbase": staged}))
    _run(str(venv / "bin" / "python"), "-m", "compileall", "-q", "-s", staged, "-p", PREFIX, str(site))


def stage_files(root: Path) -> None:
    """The unit, the example config, the shared monitoring files and the command links."""
    unit = root / "usr/lib/systemd/system/healthd.service"
    unit.parent.mkdir(parents=True)
    shutil.copy2(REPO / "packaging" / "systemd" / "healthd.service", unit)
    example = root / "etc/healthd/healthd.toml.example"
    example.parent.mkdir(parents=True)
    shutil.copy2(REPO / "packaging" / "healthd.toml.example", example)
    example.chmod(0o644)
    for rel, source in SHARED.items():
        if source.exists():
            dest = root / "usr/share/healthd" / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest)
    sbin = root / "usr/sbin"
    sbin.mkdir(parents=True)
    for name in SCRIPTS:
        # Relative, so the links hold inside any root the tree is unpacked in (rpm warns on absolute ones).
        (sbin / name).symlink_to(f"../..{PREFIX}/bin/{name}")


def build_deb(stage: Path, out: Path, version: str) -> Path:
    root = Path(tempfile.mkdtemp(prefix="deb-", dir=out))
    root.chmod(0o755)  # the archive's "./" entry: mkdtemp's 0700 is not what / should say
    shutil.copytree(stage, root, symlinks=True, dirs_exist_ok=True)
    # Debian 12 keeps units in /lib/systemd/system (its merged /usr makes them the same place).
    (root / "lib/systemd").mkdir(parents=True)
    (root / "usr/lib/systemd/system").rename(root / "lib/systemd/system")
    (root / "usr/lib/systemd").rmdir()
    (root / "usr/lib").rmdir()
    debian = root / "DEBIAN"
    debian.mkdir()
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()
    (debian / "control").write_text(
        f"Package: healthd\nVersion: {version}\nArchitecture: {arch}\nMaintainer: {MAINTAINER}\n"
        f"Depends: {interpreter().name}\nSection: admin\nPriority: optional\n"
        f"Description: {SUMMARY}\n healthd checks GPUs, fabrics, mounts and services every five minutes\n"
        " and takes a sick node out of Slurm; see /usr/share/healthd and docs/.\n"
    )
    (debian / "conffiles").write_text("/etc/healthd/healthd.toml.example\n")
    for name in ("postinst", "prerm", "postrm"):
        script = debian / name
        shutil.copy2(REPO / "packaging" / "deb" / name, script)
        script.chmod(0o755)
    deb = out / f"healthd_{version}_{arch}.deb"
    _run("dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(deb))
    shutil.rmtree(root)
    return deb


def rpm_files(stage: Path) -> list[str]:
    """The %files list: the example config a conffile, the operator's own config never listed."""
    files = [PREFIX, "/usr/lib/systemd/system/healthd.service", "%dir /etc/healthd"]
    files.append("%config(noreplace) /etc/healthd/healthd.toml.example")
    if (stage / "usr/share/healthd").exists():
        files.append("/usr/share/healthd")
    files += [f"/usr/sbin/{name}" for name in SCRIPTS]
    return files


def build_rpm(stage: Path, out: Path, version: str) -> Path:
    top = Path(tempfile.mkdtemp(prefix="rpm-", dir=out))
    spec = (REPO / "packaging" / "rpm" / "healthd.spec").read_text()
    spec = spec.replace("@VERSION@", version).replace("@SUMMARY@", SUMMARY).replace("@STAGE@", str(stage))
    spec = spec.replace("@PYTHON@", str(interpreter())).replace("@FILES@", "\n".join(rpm_files(stage)))
    (top / "healthd.spec").write_text(spec)
    _run("rpmbuild", "-bb", "--quiet", "--define", f"_topdir {top}", str(top / "healthd.spec"))
    built = next((top / "RPMS").rglob("healthd-*.rpm"))
    rpm = out / built.name
    shutil.move(str(built), rpm)
    shutil.rmtree(top)
    return rpm


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build healthd's .deb and .rpm.")
    parser.add_argument("kind", choices=("deb", "rpm", "both"))
    parser.add_argument("--out", type=Path, default=REPO / "dist")
    parser.add_argument("--version", default=_version())
    parser.add_argument("--wheelhouse", type=Path, help="install from these wheels only (no index)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out.resolve()
    with tempfile.TemporaryDirectory(prefix="stage-", dir=out) as tmp:
        stage = Path(tmp)
        stage_venv(stage, args.wheelhouse)
        stage_files(stage)
        if args.kind in ("deb", "both"):
            print(build_deb(stage, out, args.version))
        if args.kind in ("rpm", "both"):
            print(build_rpm(stage, out, args.version))
    return 0


if __name__ == "__main__":
    sys.exit(main())
