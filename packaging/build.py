"""Build healthd's .deb and .rpm: a self-contained virtualenv under /opt/healthd.

    python3 packaging/build.py deb|rpm|both [--out DIR] [--version V] [--wheelhouse DIR]

Sites install daemons from their distribution's packages, not from a checkout. Both
packages hold the same tree, staged once:

- /opt/healthd: a virtualenv with healthd and its dependencies (the interpreter is the
  system's python3, so a package fits the distribution release it was built on);
- the systemd unit, not enabled: the operator enables it (`systemctl enable --now healthd`);
- /etc/healthd/healthd.toml.example (a conffile); the operator's healthd.toml is never
  shipped, so an upgrade cannot touch it;
- /usr/share/healthd: the Prometheus rules, the Grafana dashboard and its provisioning file;
- /usr/sbin/healthd, healthd-hook, healthd-prolog and healthd-epilog, links into the venv;
- a manual page for each (their ``--help``, rendered), and /usr/share/doc/healthd: the README,
  docs/, the changelog and a machine-readable copyright file naming every bundled wheel's
  licence.

A package says the version it was built as (``--version``): ``healthd --version`` and the
venv's metadata are stamped with it. The build is the same on every host: the journald
extra is built, or the build stops, unless ``--without-journal`` says otherwise. What lintian
and rpmlint still say of a self-contained venv under /opt is overridden, each tag with its
reason (``packaging/deb/lintian-overrides``, ``packaging/rpm/rpmlint.toml``).

The venv is built in a staging directory and then made to live at /opt/healthd, as
dh-virtualenv does: script shebangs and pyvenv.cfg are rewritten (and the RECORD hashes of
what was rewritten), and the bytecode is compiled with /opt/healthd paths (compileall's
-s/-p). The packaging tools are the distributions' own: dpkg-deb (dpkg-deb(1)) and rpmbuild
(rpmbuild(8)). The dependencies are what pip finds: from the package index it is configured
with (PyPI by default), or, with ``--wheelhouse DIR``, from those wheels alone and nothing
downloaded.

The same commit builds byte-identical packages, as reproducible-builds.org defines it:
every time in them is ``SOURCE_DATE_EPOCH`` (the last commit's time unless set), which
dpkg-deb and rpmbuild clamp file times to; healthd's wheel is built from a clean copy of the
source (no ``build/`` left over from an earlier build) and every dependency is installed from a
wheel, none from pip's cache; nothing names the staging directory;
bytecode is compiled with ``PYTHONHASHSEED=0`` (set constants are marshalled in hash order)
against sources whose times are that same epoch; and the shared objects' GNU build-id, a hash
that covered the compiler's temporary paths in the debug information stripped from them, is
set again from the stripped bytes. Two builds with the same dependency versions from the same index or wheelhouse
give the same files (``tests/packaging/test_reproducible.py``).
"""

from __future__ import annotations

import argparse
import email.utils
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PREFIX = "/opt/healthd"
SCRIPTS = ("healthd", "healthd-hook", "healthd-prolog", "healthd-epilog")
# What goes under /usr/share/healthd.
SHARED = {
    "prometheus/healthd.rules.yml": REPO / "deploy" / "prometheus" / "healthd.rules.yml",
    "grafana/healthd.json": REPO / "deploy" / "grafana" / "healthd.json",
    "grafana/healthd-provider.yml": REPO / "deploy" / "grafana" / "healthd-provider.yml",
}
SUMMARY = "Node health checks for GPU clusters run by Slurm: detect, drain, resume"
DESCRIPTION = (
    "healthd checks GPUs, fabrics, mounts and services every five minutes\n"
    "and takes a sick node out of Slurm. The unit is installed but not enabled:\n"
    "write /etc/healthd/healthd.toml, then run systemctl enable --now healthd."
)
# A site that rebuilds the packages names itself (--maintainer).
MAINTAINER = "healthd maintainers <healthd-maintainers@example.org>"
DOC = "usr/share/doc/healthd"


def _run(*argv: str, cwd: Path | None = None) -> None:
    subprocess.run(list(argv), check=True, cwd=cwd, stdin=subprocess.DEVNULL, env=_build_env())


# Where a Python finds its modules: a developer's PYTHONPATH (a checkout first on it, say) would let
# pip in the staged venv count a package as installed that the venv lacks, and the bytecode and the
# help pages come from code that is not the package's, so two machines would build different packages.
_HOST_PATHS = ("PYTHONPATH", "PYTHONHOME")


def _build_env() -> dict[str, str]:
    """The environment of every tool the build runs: the build's one time, fixed hashing, no host module paths.

    ``PYTHONHASHSEED`` fixed gives the same bytecode; ``_HOST_PATHS`` are left out.
    """
    kept = {key: value for key, value in os.environ.items() if key not in _HOST_PATHS}
    return {**kept, "SOURCE_DATE_EPOCH": str(source_date()), "PYTHONHASHSEED": "0"}


def _version() -> str:
    for line in (REPO / "healthd" / "__init__.py").read_text().split("\n"):
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


def stage_venv(root: Path, wheelhouse: Path | None, journal: bool = True) -> None:
    """healthd and its dependencies in ROOT/opt/healthd, made to run from /opt/healthd."""
    if journal and not _has_libsystemd():
        # Built without it the package would differ by build host; say so instead.
        raise SystemExit(
            "the journald extra needs libsystemd's headers (libsystemd-dev, pkg-config): "
            "install them, or build --without-journal"
        )
    venv = root / PREFIX.lstrip("/")
    _run(str(interpreter()), "-m", "venv", str(venv))
    # No wheel cache: a wheel built from source is built here, by this build, every time; and
    # built as a wheel (PEP 517), never by `setup.py install`, whose egg-info layout a cached
    # wheel would replace: the tree would depend on the build host's cache.
    python = str(venv / "bin" / "python")
    # With a wheelhouse, setuptools for building healthd's wheel comes from it too.
    index = ["--no-index", "--find-links", str(wheelhouse)] if wheelhouse is not None else []
    with tempfile.TemporaryDirectory(prefix="wheel-") as tmp:
        wheel = healthd_wheel(Path(tmp), python, index)
        pip = [python, "-m", "pip", "install", "-q", "--no-cache-dir", "--use-pep517", *index]
        _run(*pip, f"{wheel}[journal]" if journal else str(wheel))
    _forget_source(venv)
    _strip(venv)
    _quiet_shebangs(venv)
    _relocate(venv)


# What a checkout may hold besides the source: earlier builds, caches, the packages themselves.
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)


def healthd_wheel(tmp: Path, python: str, index: list[str]) -> Path:
    """healthd's own wheel, built in ``tmp`` by ``python``'s pip from a clean copy of the checkout.

    setuptools builds in the source tree and keeps ``build/lib`` between builds, so a module
    deleted since an earlier build would still be packaged: the copy has no ``build/``.
    """
    source = tmp / "src"
    shutil.copytree(REPO, source, ignore=_NOT_SOURCE, symlinks=True)
    out = tmp / "wheel"
    _run(python, "-m", "pip", "wheel", "-q", "--no-cache-dir", "--no-deps", *index, "-w", str(out), str(source))
    return next(out.glob("healthd-*.whl"))


def _forget_source(venv: Path) -> None:
    """Drop the ``direct_url.json`` pip writes for a wheel installed by path: it names a temporary directory."""
    for found in site_packages(venv).glob("healthd-*.dist-info/direct_url.json"):
        found.unlink()
        _rehash(venv, [found])


def site_packages(venv: Path) -> Path:
    """The venv's site-packages (a venv's own layout, not the distribution's dist-packages scheme)."""
    return next(venv.glob("lib/python3*/site-packages"))


def _strip(venv: Path) -> None:
    """Strip the wheels' shared objects as dh_strip would: symbols and notes no one loads.

    The GNU build-id the linker wrote hashes the object before stripping, debug information
    and the compiler's temporary directory included, so a wheel compiled here (systemd-python)
    would differ by build: it is set again from the stripped object's own bytes, as
    ``debugedit --build-id`` does. (Removing the note instead makes objcopy drop the
    GNU_RELRO program header: the object would lose its read-only relocations.)
    """
    libraries = sorted(venv.rglob("*.so"))
    for library in libraries:
        _run("strip", "--strip-unneeded", "--remove-section=.comment", "--remove-section=.note", str(library))
        _restamp_build_id(library)
    _rehash(venv, libraries)


def _restamp_build_id(library: Path) -> None:
    """The object's build-id note set to the SHA-1 of the object with that note zeroed."""
    import hashlib

    data = bytearray(library.read_bytes())
    span = _build_id_span(data)
    if span is None:
        return
    start, end = span
    data[start:end] = bytes(end - start)
    digest = hashlib.sha1(data).digest()  # noqa: S324 (an identifier, as ld's --build-id=sha1, not a signature)
    data[start:end] = (digest * (1 + (end - start) // len(digest)))[: end - start]
    library.write_bytes(bytes(data))


def _build_id_span(data: bytearray) -> tuple[int, int] | None:
    """Where the descriptor of an ELF64 object's ``.note.gnu.build-id`` lies (elf(5)), or None."""
    import struct

    if data[:4] != b"\x7fELF" or data[4] != 2:  # ELFCLASS64: the wheels' platforms
        return None
    order = "<" if data[5] == 1 else ">"
    (table,) = struct.unpack_from(order + "Q", data, 0x28)  # e_shoff
    size, count, names = struct.unpack_from(order + "HHH", data, 0x3A)  # e_shentsize, e_shnum, e_shstrndx

    def section(index: int) -> tuple[int, int]:
        name, _, _, _, offset, _ = struct.unpack_from(order + "IIQQQQ", data, table + index * size)
        return name, offset

    strings = section(names)[1]
    for index in range(count):
        name, offset = section(index)
        start = strings + name
        if data[start : data.index(b"\0", start)] == b".note.gnu.build-id":
            namesz, descsz, _ = struct.unpack_from(order + "III", data, offset)  # a note's header
            desc = offset + 12 + ((namesz + 3) & ~3)
            return desc, desc + descsz
    return None


def _rehash(venv: Path, changed: list[Path]) -> None:
    """Each installed RECORD (PEP 376/627) made true again for ``changed``: files rewritten, or removed.

    A stale hash would make RECORD depend on the staging directory (the shebangs pip wrote) and
    mislead ``pip`` and any checker that compares the files with it.
    """
    import base64
    import csv
    import hashlib
    import io

    paths = {path.resolve() for path in changed}
    for record in sorted(site_packages(venv).glob("*.dist-info/RECORD")):
        base = record.parents[1]
        rows = []
        for row in csv.reader(io.StringIO(record.read_text())):
            target = (base / row[0]).resolve() if row else None
            if target in paths and not target.exists():
                continue
            if target in paths:
                data = target.read_bytes()
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                row = [row[0], f"sha256={digest}", str(len(data))]
            rows.append(row)
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(rows)
        record.write_text(out.getvalue())


def _quiet_shebangs(venv: Path) -> None:
    """Library modules that start with ``#!`` but are never run as programs keep their lines, without the ``#!``.

    Both linters flag such a file (lintian script-not-executable, rpmlint non-executable-script);
    "#!" becomes "# ", so line numbers in tracebacks stay the same.
    """
    quieted = []
    for module in sorted(site_packages(venv).rglob("*.py")):
        if module.stat().st_mode & 0o111:
            continue
        data = module.read_bytes()
        if data.startswith(b"#!"):
            module.write_bytes(b"# " + data[2:])
            quieted.append(module)
    _rehash(venv, quieted)


def _has_libsystemd() -> bool:
    # systemd-python builds from source against libsystemd; without its headers the package
    # still works (healthd speaks journald's protocol itself), so the extra is optional.
    return (
        shutil.which("pkg-config") is not None
        and subprocess.run(["pkg-config", "--exists", "libsystemd"], check=False).returncode == 0
    )


def _relocate(venv: Path) -> None:
    staged = str(venv)
    rewritten = []
    for script in sorted((venv / "bin").iterdir()):
        if script.is_file() and not script.is_symlink():
            data = script.read_bytes()
            if data.startswith(b"#!") or script.name.startswith("activate"):
                script.write_bytes(data.replace(staged.encode(), PREFIX.encode()))
                rewritten.append(script)
    _rehash(venv, rewritten)
    cfg = venv / "pyvenv.cfg"
    cfg.write_text(cfg.read_text().replace(staged, PREFIX))
    for cache in venv.rglob("__pycache__"):
        shutil.rmtree(cache)
    _compile(venv, site_packages(venv))


def _compile(venv: Path, target: Path) -> None:
    """Bytecode for ``target`` as it will run from /opt/healthd, the same bytes every build.

    A .pyc records its source's mtime: the sources are set to the build's time first, the
    time dpkg and rpm give them on install, so the bytecode is valid on the node as built.
    Timestamp bytecode, named: py_compile's default under SOURCE_DATE_EPOCH is checked-hash
    bytecode, which hashes each module's source on every import (PEP 552).
    """
    when = source_date()
    for path in [venv, *venv.rglob("*")]:
        os.utime(path, (when, when), follow_symlinks=False)
    flags = ("-q", "-f", "--invalidation-mode", "timestamp")
    _run(str(venv / "bin" / "python"), "-m", "compileall", *flags, "-s", str(venv), "-p", PREFIX, str(target))


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
        dest = root / "usr/share/healthd" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest)
    sbin = root / "usr/sbin"
    sbin.mkdir(parents=True)
    for name in SCRIPTS:
        # Relative here, so the links hold inside any root the tree is unpacked in (rpm warns on
        # absolute ones); the .deb makes them absolute, as Debian policy 10.5 asks across top-level dirs.
        (sbin / name).symlink_to(f"../..{PREFIX}/bin/{name}")
    stage_docs(root)
    stage_manuals(root)


def _gzip(data: bytes, dest: Path) -> None:
    """``data`` gzipped to ``dest`` at -9 with no name or time in the header (gzip -9n): the same bytes every build."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as out:
        out.write(data)


def stage_docs(root: Path) -> None:
    """The README and docs/ under /usr/share/doc/healthd, and the copyright file."""
    doc = root / DOC
    doc.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO / "README.md", doc / "README.md")
    shutil.copytree(REPO / "docs", doc / "docs", dirs_exist_ok=True)
    _gzip((REPO / "CHANGELOG.md").read_bytes(), doc / "CHANGELOG.md.gz")
    (doc / "copyright").write_text(copyright_file(root / PREFIX.lstrip("/")))


def _bundled(venv: Path) -> list[dict[str, str]]:
    """Each distribution in the venv: its name, version and licence, as its own metadata says."""
    probe = (
        "import importlib.metadata as m, json\n"
        "print(json.dumps(sorted(({'name': d.metadata['Name'], 'version': d.version,"
        " 'license': d.metadata.get('License-Expression') or d.metadata.get('License') or ''}"
        " for d in m.distributions()), key=lambda d: d['name'].lower())))"
    )
    done = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", probe], capture_output=True, text=True, check=True)
    found: list[dict[str, str]] = json.loads(done.stdout)
    return found


def copyright_file(venv: Path) -> str:
    """A machine-readable debian/copyright (DEP-5): healthd's licence, then each bundled wheel's."""
    parts = [
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/",
        "Upstream-Name: healthd",
        "",
        "Files: *",
        f"Copyright: {time.gmtime(source_date()).tm_year} the healthd developers",
        "License: Apache-2.0",
        " On Debian systems the full text of the Apache License 2.0 is in",
        " /usr/share/common-licenses/Apache-2.0.",
    ]
    site = str(site_packages(venv).relative_to(venv.parents[1]))
    for dist in _bundled(venv):
        if dist["name"].lower() == "healthd":
            continue
        licence = " ".join(dist["license"].split()) or "see its dist-info directory"
        parts += [
            "",
            f"Files: {site}/{dist['name'].lower().replace('-', '_')}*",
            f"Copyright: the authors of {dist['name']} {dist['version']}",
            f"License: {licence[:120]}",
            f" {dist['name']} is bundled as its wheel; its licence text is in its",
            f" {site}/*.dist-info directory.",
        ]
    return "\n".join(parts) + "\n"


def _roff(text: str) -> str:
    """Plain text for a man page: backslashes and minus signs escaped, no line read as a request."""
    lines = []
    for line in text.replace("\\", "\\e").replace("-", "\\-").split("\n"):
        lines.append("\\&" + line if line.startswith((".", "'")) else line)
    return "\n".join(lines)


def manual(name: str, summary: str, usage: str) -> str:
    """A section-8 manual page holding a command's ``--help``."""
    return (
        f'.TH {name.upper()} 8 "" "healthd" "System Administration"\n'
        f".SH NAME\n{_roff(name)} \\- {_roff(summary)}\n"
        f".SH DESCRIPTION\n.nf\n{_roff(usage.rstrip())}\n.fi\n"
        ".SH SEE ALSO\n/usr/share/doc/healthd/README.md, /usr/share/doc/healthd/docs/commands.md\n"
    )


# Each program's summary line, and the healthd command whose --help its page shows.
MANUALS = {
    "healthd": ("node health checks for GPU clusters run by Slurm", ()),
    "healthd-hook": ("Slurm's HealthCheckProgram: one pass, or the daemon's fresh one", ()),
    "healthd-prolog": ("Slurm's Prolog: the checks a job needs before it starts", ("prolog",)),
    "healthd-epilog": ("Slurm's Epilog: record the job's Xid events", ("epilog",)),
}


def stage_manuals(root: Path) -> None:
    """A manual page per program, from its ``--help`` as the staged venv prints it."""
    venv = root / PREFIX.lstrip("/")
    for name, (summary, command) in MANUALS.items():
        program = ["healthd-hook"] if name == "healthd-hook" else ["healthd", *command]
        usage = _help(venv, program)
        if name == "healthd":
            usage += "".join(f"\n\n{_help(venv, ['healthd', sub])}" for sub in _commands(venv))
        _gzip(manual(name, summary, usage).encode(), root / f"usr/share/man/man8/{name}.8.gz")


def _help(venv: Path, program: list[str]) -> str:
    # The staged scripts name /opt/healthd in their shebang: run their code with the staged interpreter.
    argv = [str(venv / "bin" / "python"), "-I", str(venv / "bin" / program[0]), *program[1:], "--help"]
    env = {"COLUMNS": "80", "PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
    return subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout


def _commands(venv: Path) -> list[str]:
    probe = "from healthd.commands import COMMANDS; print(' '.join(COMMANDS))"
    done = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", probe], capture_output=True, text=True, check=True)
    return done.stdout.split()


def stamp_version(root: Path, version: str) -> None:
    """The version the package is built as, in ``healthd.__version__`` and the venv's metadata of healthd."""
    venv = root / PREFIX.lstrip("/")
    site = site_packages(venv)
    init = site / "healthd" / "__init__.py"
    init.write_text(re.sub(r"(?m)^__version__ = .*$", f'__version__ = "{version}"', init.read_text()))
    metadata = list(site.glob("healthd-*.dist-info/METADATA"))
    for found in metadata:
        found.write_text(re.sub(r"(?m)^Version: .*$", f"Version: {version}", found.read_text(), count=1))
    _rehash(venv, [init, *metadata])
    _compile(venv, init)


def _package_root(stage: Path, out: Path, prefix: str, version: str) -> Path:
    """A copy of the staged tree for one package, stamped with its version; its top directory 0755."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=out))
    shutil.copytree(stage, root, symlinks=True, dirs_exist_ok=True)
    # After the copy: copytree gives the top directory the stage's mode (mkdtemp's 0700), and it
    # is the archive's "./" entry, what / would be set to.
    root.chmod(0o755)
    stamp_version(root, version)
    return root


def source_date() -> int:
    """The time every generated date says: SOURCE_DATE_EPOCH, else the last commit's, for reproducible builds."""
    if os.environ.get("SOURCE_DATE_EPOCH", "").isdigit():
        return int(os.environ["SOURCE_DATE_EPOCH"])
    done = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%ct"], capture_output=True, text=True)
    return int(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip().isdigit() else 0


def debian_changelog(version: str, maintainer: str) -> str:
    """The native package's changelog (deb-changelog(5)): one entry pointing at the project's own."""
    when = email.utils.formatdate(source_date(), usegmt=False, localtime=False).replace("-0000", "+0000")
    return (
        f"healthd ({version}) unstable; urgency=medium\n\n"
        "  * Built from the healthd source; what changed is in\n"
        "    /usr/share/doc/healthd/CHANGELOG.md.gz.\n\n"
        f" -- {maintainer}  {when}\n"
    )


def build_deb(stage: Path, out: Path, version: str, maintainer: str = MAINTAINER) -> Path:
    root = _package_root(stage, out, "deb-", version)
    # Debian 12 keeps units in /lib/systemd/system (its merged /usr makes them the same place).
    (root / "lib/systemd").mkdir(parents=True)
    (root / "usr/lib/systemd/system").rename(root / "lib/systemd/system")
    (root / "usr/lib/systemd").rmdir()
    (root / "usr/lib").rmdir()
    for name in SCRIPTS:
        link = root / "usr/sbin" / name
        link.unlink()
        link.symlink_to(f"{PREFIX}/bin/{name}")  # Debian policy 10.5: absolute between top-level directories
    _gzip(debian_changelog(version, maintainer).encode(), root / DOC / "changelog.gz")
    overrides = root / "usr/share/lintian/overrides/healthd"
    overrides.parent.mkdir(parents=True)
    shutil.copy2(REPO / "packaging" / "deb" / "lintian-overrides", overrides)
    overrides.chmod(0o644)
    _deb_control(root, version, maintainer)
    deb = out / f"healthd_{version}_{_arch()}.deb"
    _run("dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(deb))
    shutil.rmtree(root)
    return deb


def _arch() -> str:
    return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()


def _deb_control(root: Path, version: str, maintainer: str) -> None:
    debian = root / "DEBIAN"
    debian.mkdir()
    long = "".join(f" {line}\n" for line in DESCRIPTION.split("\n"))
    # libc6: the bundled wheels' C extensions (psutil, pydantic-core, systemd-python) link against it.
    (debian / "control").write_text(
        f"Package: healthd\nVersion: {version}\nArchitecture: {_arch()}\nMaintainer: {maintainer}\n"
        f"Depends: {interpreter().name}, libc6\nSection: admin\nPriority: optional\n"
        f"Description: {SUMMARY}\n{long}"
    )
    (debian / "conffiles").write_text("/etc/healthd/healthd.toml.example\n")
    for name in ("postinst", "prerm", "postrm"):
        script = debian / name
        shutil.copy2(REPO / "packaging" / "deb" / name, script)
        script.chmod(0o755)


def rpm_files(stage: Path) -> list[str]:
    """The %files list: the example config a conffile, the operator's own config never listed."""
    files = [PREFIX, "/usr/lib/systemd/system/healthd.service", "%dir /etc/healthd"]
    files.append("%config(noreplace) /etc/healthd/healthd.toml.example")
    files += ["/usr/share/healthd", f"/{DOC}"]
    files += [f"/usr/share/man/man8/{name}.8.gz" for name in MANUALS]
    files += [f"/usr/sbin/{name}" for name in SCRIPTS]
    return files


def build_rpm(stage: Path, out: Path, version: str, maintainer: str = MAINTAINER) -> Path:
    root = _package_root(stage, out, "rpmroot-", version)
    top = Path(tempfile.mkdtemp(prefix="rpm-", dir=out))
    when = time.strftime("%a %b %d %Y", time.gmtime(source_date()))
    values = {
        "@VERSION@": version,
        "@SUMMARY@": SUMMARY,
        "@DESCRIPTION@": DESCRIPTION,
        "@STAGE@": str(root),
        "@PYTHON@": str(interpreter()),
        "@FILES@": "\n".join(rpm_files(root)),
        "@PACKAGER@": maintainer,
        "@DATE@": when,
    }
    spec = (REPO / "packaging" / "rpm" / "healthd.spec").read_text()
    for key, value in values.items():
        spec = spec.replace(key, value)
    (top / "healthd.spec").write_text(spec)
    _run("rpmbuild", "-bb", "--quiet", "--define", f"_topdir {top}", str(top / "healthd.spec"))
    built = next((top / "RPMS").rglob("healthd-*.rpm"))
    rpm = out / built.name
    shutil.move(str(built), rpm)
    shutil.rmtree(top)
    shutil.rmtree(root)
    return rpm


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build healthd's .deb and .rpm.")
    parser.add_argument("kind", choices=("deb", "rpm", "both"))
    parser.add_argument("--out", type=Path, default=REPO / "dist")
    parser.add_argument("--version", default=_version())
    parser.add_argument("--wheelhouse", type=Path, help="install from these wheels only (no index)")
    parser.add_argument("--maintainer", default=MAINTAINER, help=f"the packages' maintainer (default: {MAINTAINER})")
    parser.add_argument("--without-journal", action="store_true", help="leave out systemd-python (the journald extra)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out.resolve()
    with tempfile.TemporaryDirectory(prefix="stage-", dir=out) as tmp:
        stage = Path(tmp)
        stage_venv(stage, args.wheelhouse, journal=not args.without_journal)
        stage_files(stage)
        if args.kind in ("deb", "both"):
            print(build_deb(stage, out, args.version, args.maintainer))
        if args.kind in ("rpm", "both"):
            print(build_rpm(stage, out, args.version, args.maintainer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
