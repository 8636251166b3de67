"""The Ansible role: lint, syntax check, real runs on localhost into a temporary root from a wheel built here."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import ssl
import stat
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest
from healthd_testkit.namespace import in_throwaway_root
from healthd_testkit.packages import FIRST, Packages
from healthd_testkit.paths import REPO

ANSIBLE_DIR = REPO / "deploy" / "ansible"
BIN = Path(sys.executable).parent

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


def _tool(name: str) -> str | None:
    # Prefer the tools installed with the test extras next to this interpreter.
    candidate = BIN / name
    return str(candidate) if candidate.exists() else shutil.which(name)


PLAYBOOK = _tool("ansible-playbook")
LINT = _tool("ansible-lint")

# Slow (real Ansible runs against localhost): left out of the fast tier, `pytest -m "not slow"`.
pytestmark = [pytest.mark.slow, pytest.mark.skipif(PLAYBOOK is None, reason="ansible-playbook is not installed")]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        **extra,
        "ANSIBLE_ROLES_PATH": str(ANSIBLE_DIR / "roles"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_REMOTE_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
        # Local runs only: modules go over stdin instead of a temp file each, much faster.
        "ANSIBLE_PIPELINING": "1",
    }


@pytest.mark.skipif(LINT is None, reason="ansible-lint is not installed")
def test_ansible_lint(tmp_path: Path) -> None:
    assert LINT is not None
    _passes([LINT, "--offline", "--nocolor", "site.yml", "roles/healthd"], tmp_path, timeout=300)


def test_syntax_check(tmp_path: Path) -> None:
    assert PLAYBOOK is not None
    _passes([PLAYBOOK, "--syntax-check", "-i", "inventory/hosts.yml", "site.yml"], tmp_path, timeout=120)


def _passes(command: list[str], tmp_path: Path, *, timeout: int) -> None:
    """Run an Ansible tool in the playbook directory and require it to succeed."""
    done = subprocess.run(
        command, cwd=ANSIBLE_DIR, env=_env(tmp_path), capture_output=True, text=True, check=False, timeout=timeout
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _recap(output: str) -> dict[str, int]:
    match = re.search(r"^localhost\s*:\s*(.*)$", output, re.MULTILINE)
    assert match, output
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", match.group(1))}


def _play(tmp_path: Path, variables: dict[str, Any], **env: str) -> subprocess.CompletedProcess[str]:
    assert PLAYBOOK is not None
    playbook = tmp_path / "play.yml"
    playbook.write_text("- name: Install healthd\n  hosts: all\n  gather_facts: false\n  roles:\n    - role: healthd\n")
    command = [PLAYBOOK, "-i", "localhost,", "-c", "local", str(playbook), "-e", json.dumps(variables)]
    return subprocess.run(command, env=_env(tmp_path, **env), capture_output=True, text=True, check=False, timeout=600)


def _build_wheels(source: Path, out: Path, *, deps: bool = True) -> Path:
    """``pip wheel -w OUT`` as docs/ansible.md tells operators: healthd and every dependency; the healthd wheel."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "-w", str(out), str(source), *([] if deps else ["--no-deps"])],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("healthd-*.whl")
    return wheel


def _copy_source(dest: Path) -> Path:
    # Only what the wheel is built from, so the build leaves nothing in the checkout.
    dest.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("healthd", "checks"):
        shutil.copytree(REPO / name, dest / name, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheelhouse built from this checkout: the healthd wheel and the wheels of its dependencies."""
    build = tmp_path_factory.mktemp("build")
    _build_wheels(_copy_source(build / "src"), build / "wheelhouse")
    return build / "wheelhouse"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


def _self_signed_certificate(cert: Path, key: Path) -> None:
    """A certificate for 127.0.0.1, valid for a day (cryptography comes with ansible-core)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(private, hashes.SHA256())
    )
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


@contextlib.contextmanager
def _https_server(directory: Path, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """Serves ``directory`` over HTTPS on 127.0.0.1; yields the base URL and the certificate to trust."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    _self_signed_certificate(cert, key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(directory)))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", cert
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_role_accepts_the_daemon_and_the_hook_together(tmp_path: Path) -> None:
    # Both switches on: the role goes past its switch checks to the next thing it needs (the wheel).
    done = _play(tmp_path, {"healthd_root": str(tmp_path / "root"), "healthd_slurm_health_check": True})
    assert done.returncode != 0
    assert "healthd_wheel must be set" in done.stdout, done.stdout[-3000:]
    assert "use one or the other" not in done.stdout


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({}, "healthd_wheel must be set"),
        ({"healthd_wheel": "dist/healthd-0.1.0-py3-none-any.whl"}, "healthd_wheel must be set"),
        ({"healthd_wheel": "WHEEL"}, "healthd_wheel_sha256 must be set"),
        ({"healthd_wheel": "WHEEL", "healthd_wheel_sha256": "sha256sum output"}, "healthd_wheel_sha256 must be set"),
        ({"healthd_package": "healthd==0.1.0"}, "healthd_package is no longer used"),
    ],
)
def test_role_installs_nothing_without_a_wheel_and_its_sha256(
    tmp_path: Path, wheelhouse: Path, variables: dict[str, str], message: str
) -> None:
    wheel = str(next(wheelhouse.glob("healthd-*.whl")))
    root = tmp_path / "root"
    given = {k: wheel if v == "WHEEL" else v for k, v in variables.items()}
    done = _play(tmp_path, {"healthd_root": str(root), "healthd_manage_service": False, **given})
    assert done.returncode != 0
    assert message in done.stdout, done.stdout[-3000:]
    assert not root.exists()  # refused before installing anything


def test_role_installs_a_verified_wheel_into_a_temporary_root_idempotently(tmp_path: Path, wheelhouse: Path) -> None:
    wheel = next(wheelhouse.glob("healthd-*.whl"))
    root = tmp_path / "root"
    (root / "etc" / "slurm").mkdir(parents=True)
    slurm_conf_text = "ClusterName=test\nhealthcheckinterval = 30\n"
    (root / "etc" / "slurm" / "slurm.conf").write_text(slurm_conf_text)
    state_dir = tmp_path / "state"
    textfile = tmp_path / "textfile" / "healthd.prom"
    variables: dict[str, Any] = {
        "healthd_root": str(root),
        "healthd_wheel": str(wheel),
        "healthd_wheel_sha256": _sha256(wheel).upper(),  # either case, as sha256sum users may paste it
        # Dependencies from the wheelhouse only (--no-index): nothing comes from a package index.
        "healthd_wheelhouse": str(wheelhouse),
        "healthd_manage_service": False,
        "healthd_daemon": False,
        "healthd_state_dir": str(state_dir),
        "healthd_slurm_enabled": False,
        "healthd_slurm_health_check": True,
        "healthd_slurm_node_name": "node-test",
        "healthd_slurm_conf_path": "/etc/slurm/slurm.conf",
        "healthd_node_gpus": 0,
        "healthd_node_mounts": [{"path": "/", "rw": True}],
        "healthd_node_services": [],
        "healthd_metrics_textfile": str(textfile),
        "healthd_policy": {"unknown_action": "drain", "unknown_passes": 2},
        "healthd_runner": {"pass_timeout": 30},
        # Dict-valued options: nested tables, and keys that are not bare TOML keys.
        "healthd_checks": {
            "mounts": {"timeout": 5},
            "xid": {"overrides": {"63": "CRITICAL", "SXID_20034": "WARNING"}},
            "services": {"severities": {"munge": "WARNING"}, "process_names": {"munge": ["munged", "munge d"]}},
        },
        "healthd_extra_config": {"slurm": {"timeout": 10}, "metrics": {"listen": "127.0.0.1:9101"}},
    }

    first = _play(tmp_path, variables)
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
    assert _recap(first.stdout)["failed"] == 0
    assert _recap(first.stdout)["changed"] > 0

    second = _play(tmp_path, variables)
    assert second.returncode == 0, second.stdout[-6000:] + second.stderr[-3000:]
    assert _recap(second.stdout)["changed"] == 0, second.stdout[-6000:]
    # The first run needed the package manager for python3-venv; with the virtualenv in place
    # a run that changes nothing skips it (the slowest step of such a run, docs/ansible.md).
    apt_step = r"TASK \[healthd : Install what creating the virtualenv needs\] \*+\n"
    assert re.search(apt_step + "ok", first.stdout), first.stdout[-6000:]
    assert re.search(apt_step + "skipping", second.stdout), second.stdout[-6000:]
    # The wheelhouse is copied once: a run that changes nothing compares it in one find, copying no wheel.
    copy_step = r"TASK \[healthd : Copy the wheels the node lacks or holds different\] \*+\n"
    assert re.search(copy_step + "changed", first.stdout), first.stdout[-6000:]
    assert re.search(copy_step + "skipping", second.stdout), second.stdout[-6000:]

    venv = root / "opt" / "healthd"
    config = root / "etc" / "healthd" / "healthd.toml"
    # The node's expectations join the tables of the checks that judge them; unset ones are left out.
    checks = variables["healthd_checks"]
    assert tomllib.loads(config.read_text()) == {
        "paths": {"state_dir": str(state_dir)},
        "slurm": {"enabled": False, "conf": "/etc/slurm/slurm.conf", "node_name": "node-test", "timeout": 10},
        # A first deployment is a dry run unless healthd_dry_run says otherwise.
        "policy": {"dry_run": True, "unknown_action": "drain", "unknown_passes": 2},
        "runner": {"pass_timeout": 30},
        "daemon": {"interval": 300, "splay": True},
        "metrics": {"textfile": str(textfile), "listen": "127.0.0.1:9101"},
        "checks": {
            "gpu": {"expect_gpus": 0},
            "mounts": {"expect": [{"path": "/", "rw": True}], **checks["mounts"]},
            "services": {"expect": [], **checks["services"]},
            "xid": checks["xid"],
        },
    }
    # The file that was validated is a root-owned candidate next to the config, never a
    # temp copy of the login user's (which healthd's trust check refuses under become),
    # and it is gone afterwards: the role leaves no file behind.
    assert sorted(p.name for p in config.parent.iterdir()) == ["healthd.toml"]
    assert (config.stat().st_uid, stat.S_IMODE(config.stat().st_mode)) == (0, 0o644)
    tasks = (ANSIBLE_DIR / "roles" / "healthd" / "tasks" / "config.yml").read_text().splitlines()
    assert not [line for line in tasks if line.strip().startswith("validate:")]
    # The verified wheel is kept for root alone; the installed healthd came from it.
    staged = root / "var" / "cache" / "healthd" / wheel.name
    assert _sha256(staged) == _sha256(wheel)
    assert stat.S_IMODE(staged.parent.stat().st_mode) == 0o700
    assert sorted(p.name for p in (staged.parent / "wheelhouse").iterdir()) == sorted(
        p.name for p in wheelhouse.iterdir()
    )
    assert (venv / "healthd-wheel.sha256").read_text() == _sha256(wheel) + "\n"
    unit = root / "etc" / "systemd" / "system" / "healthd.service"
    assert unit.read_text() == (REPO / "packaging" / "systemd" / "healthd.service").read_text()
    dropin = (unit.parent / "healthd.service.d" / "10-virtualenv.conf").read_text()
    assert "ExecStart=/opt/healthd/bin/healthd run\n" in dropin
    assert "ExecStart=/opt/healthd/bin/healthd run" in unit.read_text().splitlines()  # the same without the drop-in
    paths = (unit.parent / "healthd.service.d" / "20-paths.conf").read_text().splitlines()
    assert f"ReadWritePaths=-{state_dir}" in paths and f"ReadWritePaths=-{textfile.parent}" in paths
    assert os.readlink(root / "usr" / "local" / "sbin" / "healthd") == "/opt/healthd/bin/healthd"
    # The node role never edits slurm.conf: that is the controller's (the healthd_slurm role).
    assert (root / "etc" / "slurm" / "slurm.conf").read_text() == slurm_conf_text
    hook = venv / "bin" / "healthd-hook"
    assert hook.stat().st_mode & 0o111
    # A console script: its own interpreter by absolute path, no shell and no PATH needed.
    assert hook.read_text().splitlines()[0].startswith(f"#!{venv}/bin/python")

    def check_once() -> dict[str, Any]:
        done = subprocess.run(
            [str(venv / "bin" / "healthd"), "check", "--once", "--json", "--config", str(config)],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert done.returncode in (0, 1, 2, 3), done.stderr
        document: dict[str, Any] = json.loads(done.stdout)
        assert document["exit_code"] == done.returncode
        return document

    def installed_init() -> Path:
        (path,) = (venv / "lib").glob("python3*/site-packages/healthd/__init__.py")
        return path

    document = check_once()
    mounts = next(c for c in document["checks"] if c["name"] == "mounts")
    assert mounts["status"] == "OK", mounts
    assert document["action"]["dry_run"] is True

    # Typos in values are not coerced ("eight" -> 0, "ture" -> false): the play fails
    # naming each key, and the configuration in place stays the valid one.
    before = config.read_text()
    typo = _play(tmp_path, {**variables, "healthd_interval": "eight", "healthd_dry_run": "ture"})
    assert typo.returncode != 0
    assert "daemon.interval" in typo.stdout and "policy.dry_run" in typo.stdout, typo.stdout[-4000:]
    assert config.read_text() == before

    # A wheel that is not the one the sha256 names is never installed.
    wrong = _play(tmp_path, {**variables, "healthd_wheel_sha256": "0" * 64})
    assert wrong.returncode != 0
    assert "healthd_wheel_sha256 does not match healthd_wheel" in wrong.stdout, wrong.stdout[-4000:]
    assert (venv / "healthd-wheel.sha256").read_text() == _sha256(wheel) + "\n"

    # A wheel rebuilt with the same version, from an https URL: the wrong sha256 stops it,
    # the right one installs it over the old healthd (pip alone would keep the old one).
    source = _copy_source(tmp_path / "rebuilt-src")
    with (source / "healthd" / "__init__.py").open("a") as handle:
        handle.write("# rebuilt\n")
    rebuilt = _build_wheels(source, tmp_path / "rebuilt", deps=False)
    assert rebuilt.name == wheel.name and _sha256(rebuilt) != _sha256(wheel)
    with _https_server(rebuilt.parent, tmp_path) as (url, cert):
        by_url = {**variables, "healthd_wheel": f"{url}/{rebuilt.name}"}
        refused = _play(tmp_path, {**by_url, "healthd_wheel_sha256": "1" * 64}, SSL_CERT_FILE=str(cert))
        assert refused.returncode != 0
        assert "healthd_wheel_sha256" in refused.stdout and "nothing was installed" in refused.stdout, refused.stdout
        assert "did not match" in refused.stdout, refused.stdout[-4000:]  # get_url's own reason is kept
        assert (
            "# rebuilt" not in (venv / "lib").glob("python3*/site-packages/healthd/__init__.py").__next__().read_text()
        )
        # A wheel of the node's wheelhouse that is no longer the controller's is copied again.
        dependency = next(p for p in wheelhouse.iterdir() if not p.name.startswith("healthd-"))
        (staged.parent / "wheelhouse" / dependency.name).write_bytes(b"not the wheel")
        upgraded = _play(tmp_path, {**by_url, "healthd_wheel_sha256": _sha256(rebuilt)}, SSL_CERT_FILE=str(cert))
    assert upgraded.returncode == 0, upgraded.stdout[-6000:] + upgraded.stderr[-3000:]
    assert _sha256(staged.parent / "wheelhouse" / dependency.name) == _sha256(dependency)
    assert _recap(upgraded.stdout)["changed"] > 0
    assert installed_init().read_text().endswith("# rebuilt\n")
    assert (venv / "healthd-wheel.sha256").read_text() == _sha256(rebuilt) + "\n"
    assert check_once()["action"]["dry_run"] is True


def _paths_dropin(tmp_path: Path, variables: dict[str, Any]) -> list[str]:
    """The ReadWritePaths= lines of 20-paths.conf, rendered by Ansible itself from the role's template."""
    given = {"healthd_state_dir": "/var/lib/healthd", "healthd_metrics_textfile": None, "healthd_extra_config": {}}
    (tmp_path / "vars.json").write_text(json.dumps({**given, **variables}))
    out = tmp_path / "20-paths.conf"
    template = ANSIBLE_DIR / "roles" / "healthd" / "templates" / "paths.conf.j2"
    ansible = str(Path(PLAYBOOK or "ansible-playbook").with_name("ansible"))
    command = [ansible, "-c", "local", "-i", "localhost,", "localhost", "-m", "ansible.builtin.template"]
    command += ["-a", f"src={template} dest={out}", "-e", f"@{tmp_path / 'vars.json'}"]
    _passes(command, tmp_path, timeout=120)
    return [line for line in out.read_text().splitlines() if not line.startswith("#")]


@pytest.mark.parametrize(
    ("variables", "lines"),
    [
        ({}, []),
        (
            {"healthd_state_dir": "/srv/healthd", "healthd_metrics_textfile": "/var/lib/prom/healthd.prom"},
            ["ReadWritePaths=-/srv/healthd", "ReadWritePaths=-/var/lib/prom"],
        ),
        # Set through healthd_extra_config, merged last into the config: the drop-in follows it.
        (
            {
                "healthd_state_dir": "/srv/healthd",
                "healthd_extra_config": {
                    "paths": {"state_dir": "/srv/other"},
                    "metrics": {"textfile": "/var/lib/prom/healthd.prom"},
                    "hosts": [{"match": "gpu*", "metrics": {"textfile": "/raid/prom/healthd.prom"}}, {"match": "cpu*"}],
                },
            },
            ["ReadWritePaths=-/srv/other", "ReadWritePaths=-/var/lib/prom", "ReadWritePaths=-/raid/prom"],
        ),
        ({"healthd_extra_config": {"paths": {"state_dir": None}}}, []),  # null: healthd's default, already writable
    ],
    ids=["defaults", "variables", "extra-config", "extra-null"],
)
def test_the_unit_may_write_where_the_rendered_config_says(
    tmp_path: Path, variables: dict[str, Any], lines: list[str]
) -> None:
    assert _paths_dropin(tmp_path, variables) == ["[Service]", *lines]


# -- the package install, the RHEL family, the controller's slurm.conf ------------------------------


def test_role_installs_the_deb_with_apt_in_a_throwaway_root(healthd_packages: Packages, tmp_path: Path) -> None:
    """healthd_install_from: package on a Debian node: the real apt installs the .deb (in a copy-on-write
    root of this machine), the config is validated by the package's healthd, and a second run changes nothing."""
    deb = healthd_packages.deb
    work = tmp_path / "work"
    work.mkdir()
    variables = {
        "healthd_install_from": "package",
        "healthd_package_file": f"/pkgs/{deb.name}",
        "healthd_package_sha256": _sha256(deb),
        "healthd_manage_service": False,
        "healthd_slurm_enabled": False,
        "healthd_node_mounts": [{"path": "/", "rw": True}],
    }
    (work / "play.yml").write_text("- name: Install healthd\n  hosts: all\n  roles:\n    - role: healthd\n")
    (work / "vars.json").write_text(json.dumps(variables))
    play = (
        "ANSIBLE_ROLES_PATH=/ansible/roles ANSIBLE_LOCAL_TEMP=/tmp/a ANSIBLE_REMOTE_TEMP=/tmp/a ANSIBLE_NOCOLOR=1 "
        "ansible-playbook -i localhost, -c local -e ansible_python_interpreter=/usr/bin/python3 "
        "-e @/play/vars.json /play/play.yml"
    )
    script = f"""set -e
{play} > /play/first.log 2>&1 || {{ cat /play/first.log; exit 1; }}
{play} > /play/second.log 2>&1 || {{ cat /play/second.log; exit 1; }}
echo INSTALLED=$(dpkg-query -W -f='${{Version}}' healthd)
echo VERSION=$(/usr/sbin/healthd --version)
echo CONFIG=$(ls /etc/healthd | tr '\\n' ' ')
echo UNITS=$(ls /etc/systemd/system/healthd.service.d | tr '\\n' ' ')
echo OWN_UNIT=$(test -e /etc/systemd/system/healthd.service && echo yes || echo no)
"""
    done = in_throwaway_root(
        script, tmp_path / "root", {deb.parent: "/pkgs", ANSIBLE_DIR: "/ansible", work: "/play"}, timeout=600
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    report = dict(line.split("=", 1) for line in done.stdout.splitlines() if line[:1].isupper() and "=" in line)
    assert report["INSTALLED"] == FIRST and report["VERSION"].startswith("healthd ")
    # The example comes with the package; the rendered config is the role's; no candidate is left.
    assert report["CONFIG"].split() == ["healthd.toml", "healthd.toml.example"]
    # The package's own unit serves; the role adds only its drop-ins.
    assert report["OWN_UNIT"] == "no" and "20-paths.conf" in report["UNITS"]
    first, second = (work / "first.log").read_text(), (work / "second.log").read_text()
    assert "Install the .deb" in first and "Install the .rpm" in first
    assert _recap(second)["changed"] == 0, second[-4000:]


def test_role_runs_in_check_mode_with_rhel_facts(tmp_path: Path, wheelhouse: Path) -> None:
    """A RHEL-family node in check mode: the family's choices (no python3-venv, dnf for a package) are
    taken and the run goes through. What this machine cannot do is run dnf itself: the .rpm's install
    task is only shown to be the one chosen (docs/ansible.md, "RHEL family")."""
    wheel = next(wheelhouse.glob("healthd-*.whl"))
    root = tmp_path / "root"
    facts = {"ansible_os_family": "RedHat", "ansible_pkg_mgr": "dnf", "ansible_distribution": "Rocky"}
    variables = {
        **facts,
        "healthd_root": str(root),
        "healthd_wheel": str(wheel),
        "healthd_wheel_sha256": _sha256(wheel),
        "healthd_wheelhouse": str(wheelhouse),
        "healthd_manage_service": False,
        "healthd_slurm_enabled": False,
    }
    assert PLAYBOOK is not None
    playbook = tmp_path / "play.yml"
    playbook.write_text("- name: Install healthd\n  hosts: all\n  gather_facts: false\n  roles:\n    - role: healthd\n")
    command = [PLAYBOOK, "--check", "-i", "localhost,", "-c", "local", str(playbook), "-e", json.dumps(variables)]
    done = subprocess.run(command, env=_env(tmp_path), capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert _recap(done.stdout)["failed"] == 0
    # RHEL's python3 has venv: nothing to install first, and nothing of apt's runs.
    assert re.search(r"TASK \[healthd : Install what creating the virtualenv needs\] \*+\nskipping", done.stdout)
    assert not (root / "opt").exists(), "check mode installs nothing"
    rpm_plan = subprocess.run(
        [PLAYBOOK, "--list-tasks", "-i", "localhost,", str(playbook), "-e", json.dumps(variables)],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        check=True,
    )
    assert "Install the .rpm" in rpm_plan.stdout


@pytest.fixture
def own_cluster(tmp_path: Path, host_guard: Any) -> Iterator[Any]:
    """A throwaway Slurm cluster of this test's own: its slurm.conf is rewritten and reconfigured."""
    from healthd_testkit import cluster as cluster_module

    why = cluster_module.missing_prerequisite()
    if why:
        pytest.skip(why)
    (tmp_path / "slurm").mkdir()
    cluster = cluster_module.Cluster(root=tmp_path / "slurm", healthd_bin=BIN / "healthd")
    with cluster_module.running(cluster, host_guard.allow_slurm_conf):
        yield cluster


def _controller_play(tmp_path: Path, conf: Path, variables: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    assert PLAYBOOK is not None
    playbook = tmp_path / "controller.yml"
    play = "- name: Let Slurm run healthd\n  hosts: all\n  gather_facts: false\n  roles:\n    - role: healthd_slurm\n"
    playbook.write_text(play)
    given = {"healthd_slurm_conf": str(conf), **variables}
    command = [PLAYBOOK, "-i", "localhost,", "-c", "local", str(playbook), "-e", json.dumps(given)]
    return subprocess.run(command, env=_env(tmp_path), capture_output=True, text=True, check=False, timeout=600)


def _config(cluster: Any, key: str) -> str:
    shown = subprocess.run(["scontrol", "show", "config"], env=cluster.env, capture_output=True, text=True, check=True)
    match = re.search(rf"^{key}\s*=\s*(.*)$", shown.stdout, re.MULTILINE)
    assert match, shown.stdout
    return match.group(1).strip()


def test_controller_role_sets_the_lines_once_and_slurmctld_takes_them(tmp_path: Path, own_cluster: Any) -> None:
    conf = own_cluster.conf
    site_prolog = _config(own_cluster, "Prolog")
    before = conf.read_text()
    # The site already runs a Prolog of its own: the role names it and changes nothing.
    refused = _controller_play(tmp_path, conf, {"healthd_slurm_health_check": True, "healthd_slurm_prolog": True})
    assert refused.returncode != 0
    assert f"already runs Prolog={site_prolog}" in refused.stdout, refused.stdout[-4000:]
    assert conf.read_text() == before

    variables = {"healthd_slurm_health_check": True, "healthd_slurm_scontrol": shutil.which("scontrol")}
    first = _controller_play(tmp_path, conf, variables)
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
    assert "RUNNING HANDLER [healthd_slurm : Reconfigure Slurm]" in first.stdout
    # slurmctld itself now reports healthd's hook: the reconfigure reached it.
    assert _config(own_cluster, "HealthCheckProgram") == "/opt/healthd/bin/healthd-hook"
    assert _config(own_cluster, "HealthCheckInterval") == "300 sec"
    assert set(_config(own_cluster, "HealthCheckNodeState").split(",")) == {"ANY", "CYCLE"}
    assert _config(own_cluster, "Prolog") == site_prolog
    second = _controller_play(tmp_path, conf, variables)
    assert second.returncode == 0 and _recap(second.stdout)["changed"] == 0, second.stdout[-4000:]
    assert "RUNNING HANDLER" not in second.stdout


def test_controller_role_runs_the_prolog_at_allocation_keeping_the_site_s_flags(
    tmp_path: Path, own_cluster: Any
) -> None:
    conf = own_cluster.conf
    site_prolog = _config(own_cluster, "Prolog")
    conf.write_text(conf.read_text() + "prologflags = Serial\n")
    # healthd's prolog program is the one slurm.conf runs already: the role may set its lines.
    variables = {
        "healthd_slurm_prolog": True,
        "healthd_slurm_prolog_program": site_prolog,
        "healthd_slurm_scontrol": shutil.which("scontrol"),
    }
    first = _controller_play(tmp_path, conf, variables)
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
    # slurmctld runs the prolog on every node of a job at allocation, and still serially.
    assert set(_config(own_cluster, "PrologFlags").split(",")) == {"Alloc", "Serial"}
    assert [line for line in conf.read_text().split("\n") if line.lower().startswith("prologflags")] == [
        "PrologFlags=Serial,Alloc"
    ]
    second = _controller_play(tmp_path, conf, variables)
    assert second.returncode == 0 and _recap(second.stdout)["changed"] == 0, second.stdout[-4000:]
