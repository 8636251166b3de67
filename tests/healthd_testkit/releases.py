"""The Slurm releases the tests run against: this machine's own, and newer ones in Debian roots run through chroot.

Debian 12 packages Slurm 22.05; Debian's ``trixie`` carries 24.11 and ``sid`` 26.05, and
their packages run on a Debian 12 kernel. For each newer release the tests build a root
with ``mmdebstrap`` from the Debian mirror this machine's apt already uses, holding that
release's slurmctld, slurmd, slurmdbd, client commands, munge, MariaDB and Python. The
daemons run with ``chroot ROOT ...`` and share this machine's loopback; healthd is
installed in the root (its own virtual environment, from a copy of this checkout), so
that HealthCheckProgram, Prolog and Epilog run the release's scontrol.

A root is built once and cached under ``CACHE`` (``HEALTHD_TEST_CACHE`` overrides it),
named by release and a key over everything the build depends on (suite, mirror, package
list, options): a run on the same machine reuses it, a changed package list builds a new
one. Builds take a lock, so parallel sessions build each root once. Delete the directory
to rebuild (a suite moves on: sid's Slurm is checked against the release's name).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Iterator, NamedTuple, Optional

import pytest

from healthd_testkit.paths import REPO

CACHE = Path(os.environ.get("HEALTHD_TEST_CACHE", "/var/cache/healthd-tests"))
# Debian's own mirror: used only when this machine's apt names none (see debian_mirror()).
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# What each root holds (FIELD-NOTES-style list: the daemons, the clients, accounting and
# the tools the cluster's scripts call: procps for pgrep-like reads, util-linux for unshare).
PACKAGES = (
    "slurm-wlm",
    "slurmctld",
    "slurmd",
    "slurm-client",
    "slurmdbd",
    "slurm-wlm-mysql-plugin",
    "munge",
    "mariadb-server",
    "mariadb-client",
    "python3",
    "python3-venv",
    "python3-pip",
    "procps",
    "iproute2",
    "ca-certificates",
    "util-linux",
)
# sid's InRelease may be past its Valid-Until on a mirror; the archive's signature is still checked.
APT_OPTIONS = ('Acquire::Check-Valid-Until "false"',)
# healthd's virtual environment inside a root, one per test session (sessions may run side by side).
VENV_PARENT = Path("/opt/healthd-test")


class Release(NamedTuple):
    """One Slurm release of the matrix: ``id`` names the tests (``slurm-24.11``); ``suite`` None is this machine's."""

    id: str
    suite: Optional[str]

    @property
    def version(self) -> str:
        return self.id.split("-", 1)[1]


HOST = Release("slurm-22.05", None)
RELEASES = (HOST, Release("slurm-24.11", "trixie"), Release("slurm-26.05", "sid"))


def release_ids() -> list[str]:
    return [release.id for release in RELEASES]


# A test of the real cluster, once per release: ``test_x[slurm-24.11]`` names the release that failed.
every_release = pytest.mark.parametrize("slurm_release", release_ids(), indirect=True)


def by_id(release_id: str) -> Release:
    return next(release for release in RELEASES if release.id == release_id)


def debian_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian archive URI this machine's apt uses (one-line or deb822 sources), else Debian's own."""
    files = [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*.list"))]
    files += sorted((sources / "sources.list.d").glob("*.sources"))
    for path in files:
        with contextlib.suppress(OSError):
            text = path.read_text()
            for uri in re.findall(r"^(?:deb\s+(?:\[[^\]]*\]\s+)?|URIs:\s*)(\S+)", text, re.MULTILINE):
                # The main archive, not its security or third-party neighbours.
                if uri.rstrip("/").endswith("/debian"):
                    return uri.rstrip("/")
    return DEFAULT_MIRROR


def root_key(release: Release, mirror: str) -> str:
    text = "\n".join([str(release.suite), mirror, *PACKAGES, *APT_OPTIONS])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def root_dir(release: Release, mirror: Optional[str] = None) -> Path:
    return CACHE / "roots" / f"{release.id}-{root_key(release, mirror or debian_mirror())}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def build_root(release: Release, log: Optional[Path] = None) -> Path:
    """The release's root, built with mmdebstrap on first use (minutes) and reused afterwards."""
    if release.suite is None:
        raise ValueError(f"{release.id} is this machine's own Slurm: it has no root")
    mirror = debian_mirror()
    root = root_dir(release, mirror)
    with _locked(root.with_name(root.name + ".lock")):
        if (root / ".complete").exists():
            return root
        partial = root.with_name(root.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        argv = ["mmdebstrap", "--variant=apt", f"--include={','.join(PACKAGES)}"]
        argv += [f"--aptopt={option}" for option in APT_OPTIONS]
        argv += [release.suite, str(partial), mirror]
        with open(log or os.devnull, "ab") as out:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, timeout=1800, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"mmdebstrap {release.suite} failed (exit {done.returncode}); see {log}")
        shutil.rmtree(root, ignore_errors=True)
        partial.rename(root)
        (root / ".complete").write_text(f"{release.id} {mirror}\n")
    return root


def slurm_version(root: Path) -> str:
    """``24.11`` from the root's ``slurmd -V`` (``slurm 24.11.5``)."""
    out = subprocess.run(["chroot", str(root), "slurmd", "-V"], capture_output=True, text=True, timeout=30, check=True)
    return ".".join(out.stdout.split()[-1].split(".")[:2])


def mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo", "rb") as handle:
        points = [line.split(b" ")[4] for line in handle.read().split(b"\n") if line]
    return os.fsencode(str(path)) in points


@contextlib.contextmanager
def mount_in(root: Path, *argv: str, target: Path) -> Iterator[None]:
    """``mount ARGV ROOT/TARGET`` for the block (stacked over any other session's), unmounted after.

    The directories made for it are removed again, so that the cached root keeps no trace of a run.
    """
    inside = root / str(target).lstrip("/")
    made = [d for d in (inside, *inside.parents) if d.is_relative_to(root) and not d.exists()]
    inside.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", *argv, str(inside)], check=True, capture_output=True, timeout=30)
    try:
        yield
    finally:
        subprocess.run(["umount", str(inside)], check=False, capture_output=True, timeout=30)
        for directory in made:
            with contextlib.suppress(OSError):
                directory.rmdir()


def install_healthd(root: Path, log: Path) -> Path:
    """healthd installed from a copy of this checkout into a fresh venv inside ``root``; its console script."""
    venv = VENV_PARENT / uuid.uuid4().hex[:12]
    healthd_bin = venv / "bin" / "healthd"
    try:
        source = _copy_source(root, venv.with_name(venv.name + "-src"))
        env = _pip_env(root, venv)
        with open(log, "ab") as out:
            for argv in (["python3", "-m", "venv", str(venv)], [f"{venv}/bin/pip", "install", "-q", str(source)]):
                subprocess.run(["chroot", str(root), *argv], stdout=out, stderr=out, env=env, timeout=600, check=True)
    except BaseException:
        remove_healthd(root, healthd_bin)
        raise
    return healthd_bin


def _copy_source(root: Path, source: Path) -> Path:
    """This checkout's package sources, copied to ``source`` inside ``root`` (no venv, no VCS, no caches)."""
    copy = root / str(source).lstrip("/")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", ".*_cache")
    for part in ("healthd", "checks"):
        shutil.copytree(REPO / part, copy / part, ignore=ignore)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy2(REPO / name, copy / name)
    return source


def _pip_env(root: Path, venv: Path) -> dict[str, str]:
    """pip inside the root reaches the package index as this machine's pip does: its resolver and trusted CAs.

    A site whose TLS goes through an inspecting proxy trusts the proxy's CA in this
    machine's bundle (``PIP_CERT`` or Debian's ca-certificates.crt), not in the root's.
    """
    shutil.copy2("/etc/resolv.conf", root / "etc" / "resolv.conf")
    bundle = Path(os.environ.get("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt"))
    env = {**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}
    env.pop("PIP_FIND_LINKS", None)
    if bundle.is_file():
        inside = venv.with_name(venv.name + "-ca.crt")
        shutil.copy2(bundle, root / str(inside).lstrip("/"))
        # pip's --cert, and OpenSSL's default file for pip's truststore and its build subprocesses.
        env.update(PIP_CERT=str(inside), SSL_CERT_FILE=str(inside), REQUESTS_CA_BUNDLE=str(inside))
        env.pop("SSL_CERT_DIR", None)
    return env


def remove_healthd(root: Path, healthd_bin: Path) -> None:
    venv = healthd_bin.parents[1]
    for path in (venv, venv.with_name(venv.name + "-src")):
        shutil.rmtree(root / str(path).lstrip("/"), ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        (root / str(venv.with_name(venv.name + "-ca.crt")).lstrip("/")).unlink()


def main() -> None:
    """``python -m healthd_testkit.releases`` (from tests/): build every release's root now, side by side.

    tests/run.sh starts it while it lints, so that a cold cache costs one build's time.
    """
    newer = [release for release in RELEASES if release.suite is not None]
    with concurrent.futures.ThreadPoolExecutor(len(newer)) as pool:
        for root in pool.map(lambda release: build_root(release, CACHE / f"{release.id}.log"), newer):
            print(root, flush=True)


if __name__ == "__main__":
    main()
