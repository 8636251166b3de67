"""``healthd status``: reads the recorded pass, says how old it is, exits with its status."""

from __future__ import annotations

import ast
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from healthd_testkit.paths import REPO

from healthd.cli.main import main


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, tz=dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _setup(tmp_path: Path, status: str = "CRITICAL", age: float = 5.0, interval: int = 300) -> Path:
    state = tmp_path / "state"
    state.mkdir()
    document: dict[str, Any] = {
        "schema_version": 1,
        "node": "gpu0001",
        "started_at": _iso(time.time() - age),
        "duration_seconds": 0.5,
        "status": status,
        "exit_code": {"OK": 0, "WARNING": 1, "CRITICAL": 2, "UNKNOWN": 3}[status],
        "checks": [
            {"name": "mounts", "status": "OK", "findings": []},
            {
                "name": "xid",
                "status": status,
                "findings": [{"status": status, "code": "XID_79", "subject": "gpu3", "message": "fallen off the bus"}],
            },
        ],
    }
    (state / "last-pass.json").write_text(json.dumps(document))
    config = tmp_path / "healthd.toml"
    config.write_text(f'[paths]\nstate_dir = "{state}"\n[slurm]\nenabled = false\n[daemon]\ninterval = {interval}\n')
    return config


def test_fresh_record_exits_with_its_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _setup(tmp_path, "CRITICAL", age=10)
    assert main(["status", "--config", str(config)]) == 2
    out = capsys.readouterr().out
    assert out.startswith("gpu0001: CRITICAL (last pass ")
    assert "XID_79 gpu3: fallen off the bus" in out


def test_json_output_carries_age_and_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _setup(tmp_path, "WARNING", age=20)
    assert main(["status", "--json", "--config", str(config)]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["exit_code"] == 1 and document["stale"] is False
    assert 15 < document["age_seconds"] < 60
    assert document["last_pass"]["node"] == "gpu0001"


def test_record_older_than_two_intervals_is_unknown_and_says_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _setup(tmp_path, "OK", age=700, interval=300)
    assert main(["status", "--config", str(config)]) == 3
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("gpu0001: OK (last pass 70") and lines[0].endswith(": STALE, older than 600s")
    assert lines[-1].startswith("healthd: UNKNOWN: stale: the last pass is 70")
    assert lines[-1].endswith(
        "s old, more than two intervals (600s, [daemon].interval = 300s); is `healthd run` running?"
    )


def test_fresh_record_is_not_called_stale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _setup(tmp_path, "OK", age=500, interval=300)
    assert main(["status", "--config", str(config)]) == 0
    assert "stale" not in capsys.readouterr().out.lower()


def test_missing_record_is_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "healthd.toml"
    config.write_text(f'[paths]\nstate_dir = "{tmp_path}/nothing"\n[slurm]\nenabled = false\n')
    assert main(["status", "--config", str(config)]) == 3
    assert "no pass recorded yet" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{truncated", "not a valid pass document"),
        ('{"status": "GREAT"}', "no known 'status'"),
        # Any JSON type may stand where the status should be; none may crash the command.
        ('{"status": ["OK"]}', "no known 'status'"),
        ('{"status": {"OK": 0}}', "no known 'status'"),
        ('["OK"]', "no known 'status'"),
    ],
)
def test_garbage_record_is_unknown_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    config = _setup(tmp_path)
    (tmp_path / "state" / "last-pass.json").write_text(text)
    assert main(["status", "--config", str(config)]) == 3
    err = capsys.readouterr().err
    assert expected in err and "last-pass.json" in err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[daemon\n", "not valid TOML"),
        ("[daemon]\ninterval = 'soon'\n", "daemon.interval"),
        ("[paths]\nstate_dir = 7\n", "paths.state_dir"),
        ('[paths]\nstate_dir = "/tmp/st\\u0000x"\n', "paths.state_dir"),  # a NUL: no path holds one
    ],
)
def test_bad_config_names_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    config = tmp_path / "healthd.toml"
    config.write_text(text)
    assert main(["status", "--config", str(config)]) == 78
    err = capsys.readouterr().err
    assert expected in err and str(config) in err


def test_config_writable_by_others_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "healthd.toml"
    config.write_text(f'[paths]\nstate_dir = "{tmp_path}/state"\n[slurm]\nenabled = false\n')
    config.chmod(0o666)
    assert main(["status", "--config", str(config)]) == 78
    assert "refusing to load a config that others could have written" in capsys.readouterr().err


@pytest.mark.parametrize(
    "body",
    [
        b'[paths]\nstate_dir = "/tmp/st\xff"\n',  # not UTF-8
        b"[daemon\n",  # not TOML
        b'[[hosts]]\nmatch = "*"\n[hosts.paths]\nstate_dir = "/srv/st"\n',  # a node's own table in a host section
    ],
)
def test_status_and_check_name_the_same_problem_in_the_same_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: bytes
) -> None:
    # One reader of the file (healthd.config.load) for the cheap commands and the full validation alike.
    config = tmp_path / "healthd.toml"
    config.write_bytes(body)
    assert main(["status", "--config", str(config)]) == 78
    status = [line for line in capsys.readouterr().err.splitlines() if line.startswith(f"{config}: ")]
    assert main(["check", "--once", "--dry-run", "--config", str(config)]) == 78
    check = [line for line in capsys.readouterr().err.splitlines() if line.startswith(f"{config}: ")]
    assert status and status == check


# Prints which of the modules (or packages) named in argv[2] a status run imported.
_STATUS_IMPORTS = (
    "import sys; from healthd.cli.main import main; code = main(['status', '--config', sys.argv[1]]);"
    "heavy = sys.argv[2].split();"
    "print('HEAVY', sorted(m for m in sys.modules if m in heavy or m.split('.')[0] in heavy)); sys.exit(code)"
)


def _status_imports(config: Path, heavy: str, *, bare: bool = False) -> str:
    """``bare``: without ``site`` (``-S``), whose editable-install finder imports modules of its own at start;
    ``healthd`` is then found in the checkout (the status path imports nothing else outside the standard library).
    """
    command = [sys.executable, *(["-S"] if bare else []), "-c", _STATUS_IMPORTS, str(config), heavy]
    env = {**os.environ, "PYTHONPATH": str(REPO)} if bare else None
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_status_loads_neither_pydantic_nor_plugins(tmp_path: Path) -> None:
    # Nor, spelled out as a monitoring agent runs it, the argument parser; nor threads; nor, with no ack given,
    # the reader of acks.
    config = _setup(tmp_path, "OK")
    heavy = (
        "pydantic healthd_checks prometheus_client healthd.checks.plugin healthd.cycle.engine healthd.config.models"
        " argparse threading healthd.plan.ackview"
    )
    assert "HEAVY []" in _status_imports(config, heavy)


# The standard library's modules a status run needs besides those: one_line's character classes (healthd.text),
# and CPython's built-in SHA-256 (no OpenSSL: healthd.config.load.sha256_hex), which compares the config with what
# the last validation saw (healthd.commands.status.config_warning). Not socket: the host name comes from os.uname.
_STATUS_OWN = {"unicodedata", "_sha2", "_sha256"}


def _bare_modules(code: str, *args: str) -> set[str]:
    """The modules outside healthd that ``code`` leaves imported, run without ``site`` (``-S``), whose
    editable-install finder imports modules of its own at start (``healthd`` is found in the checkout)."""
    listing = "; print(sorted(m for m in sys.modules if m.split('.')[0] != 'healthd'))"
    command = [sys.executable, "-S", "-c", f"import sys; {code}{listing}", *args]
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    assert done.stdout, done.stderr
    return set(ast.literal_eval(done.stdout.splitlines()[-1]))


def test_status_imports_no_more_than_reading_toml_and_json_needs(tmp_path: Path) -> None:
    # Status reads the config with the standard library's TOML reader (typing, datetime and contextlib come with
    # it: about 5 ms, docs/configuration.md says why that is kept); beyond it, json and pathlib, only the few
    # modules named above: no importlib, no logging, no dataclasses, nothing a pass needs.
    config = _setup(tmp_path, "OK")
    floor = _bare_modules("import json, pathlib, time; from healthd.config.defaults import toml_module; toml_module()")
    status = _bare_modules("from healthd.cli.main import main; main(['status', '--config', sys.argv[1]])", str(config))
    assert status - floor - _STATUS_OWN == set()
    assert "importlib" not in status


# --- from real passes: `healthd check --once` writes the record that `healthd status` reads ---------------


MACHINE_BOUND = ("gpu", "xid", "nvlink", "kernel", "edac", "disks", "host", "ipmi")


def _real_config(tmp_path: Path, slurm: str) -> Path:
    """mounts finds one mount missing; the checks that read NVML, the shared kernel log, the process table,
    the clock or the BMC are off (those differ between machines); services, infiniband and pcie have nothing
    to examine under an empty sysfs, so they do not apply."""
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    config = tmp_path / "healthd.toml"
    config.write_text(
        f'[paths]\nstate_dir = "{tmp_path / "state"}"\nsysfs = "{sysfs}"\n'
        f'[slurm]\nnode_name = "n1"\nact_splay = 0\n{slurm}\n'
        '[checks.mounts]\nexpect = [{ path = "/definitely-not-mounted" }]\n'
        + "".join(f"[checks.{name}]\nenabled = false\n" for name in MACHINE_BOUND)
    )
    return config


def _status(config: Path, capsys: pytest.CaptureFixture[str], *check: str) -> tuple[int, list[str]]:
    main(["check", "--once", *check, "--config", str(config)])
    capsys.readouterr()
    code = main(["status", "--config", str(config)])
    return code, capsys.readouterr().out.splitlines()


WOULD = "take the node out now (CRITICAL from mounts; reason 'healthd: MOUNT_MISSING /definitely-not-mounted')"


def test_checks_that_did_not_apply_are_not_shown_as_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = _status(_real_config(tmp_path, "enabled = false"), capsys)
    assert code == 2
    rows = {line.split()[0]: line.split(None, 1)[1] for line in lines if line.startswith("  ") and line[2] != " "}
    assert rows == {
        **{name: "disabled" for name in MACHINE_BOUND},
        "files": "n/a",
        "infiniband": "n/a",
        "jobs": "OK",
        "mounts": "CRITICAL",
        "pcie": "n/a",
        "services": "n/a",
    }
    assert lines[-1] == f"action: not sent, [slurm] enabled = false: would {WOULD}"


def test_status_shows_a_dry_run_with_slurm_unreachable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], controllerless_slurm_conf: Path
) -> None:
    config = _real_config(tmp_path, f'conf = "{controllerless_slurm_conf}"')
    code, lines = _status(config, capsys, "--dry-run")
    assert code == 2
    assert lines[-1] == f"Slurm not reachable (sinfo: Unable to process configuration file); dry run: would {WOULD}"


def test_status_of_a_document_from_an_older_healthd_shows_its_slurm_errors_as_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], controllerless_slurm_conf: Path
) -> None:
    """A saved pass without ``action.slurm_errors`` (written before that key) gets no phrase: its errors are lines."""
    config = _real_config(tmp_path, f'conf = "{controllerless_slurm_conf}"')
    _, lines = _status(config, capsys, "--dry-run")
    assert lines[-1].startswith("Slurm not reachable (sinfo: Unable to process configuration file); dry run: ")
    saved = tmp_path / "state" / "last-pass.json"
    document = json.loads(saved.read_text())
    [entry] = document["action"].pop("slurm_errors")
    assert entry["kind"] == "unreachable" and entry["error"] == 0
    saved.write_text(json.dumps(document))
    assert main(["status", "--config", str(config)]) == 2
    older = capsys.readouterr().out.splitlines()
    error = document["action"]["errors"][0]
    assert error.startswith("`sinfo -h --all ") and "fatal: Unable to process configuration file" in error
    assert older[-2:] == [f"dry run: would {WOULD}; nothing was changed in Slurm", f"action error: {error}"]


def test_status_shows_a_pending_take_out_and_who_retries_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], controllerless_slurm_conf: Path
) -> None:
    """A one-shot pass (``check --once``) has no daemon's retry clock: the next pass, of any kind, retries."""
    config = _real_config(tmp_path, f'conf = "{controllerless_slurm_conf}"')
    code, lines = _status(config, capsys)
    assert code == 2
    cause = "Slurm not reachable (sinfo: Unable to process configuration file)"
    assert lines[-1] == f"action: PENDING: {WOULD}: {cause}; the next pass retries it (daemon, hook or healthd check)"


def test_a_real_record_goes_stale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["check", "--once", "--config", str(_real_config(tmp_path, "enabled = false"))])
    capsys.readouterr()
    # status reads only state_dir and interval: a second config with a 0.1 s interval ages the record at once.
    hasty = tmp_path / "hasty.toml"
    hasty.write_text(
        f'[paths]\nstate_dir = "{tmp_path / "state"}"\n[daemon]\ninterval = 0.1\n[slurm]\nnode_name = "n1"\n'
    )
    time.sleep(0.3)
    assert main(["status", "--config", str(hasty)]) == 3
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("n1: CRITICAL (last pass ") and lines[0].endswith(": STALE, older than 0.2s")
    assert lines[-1].startswith("healthd: UNKNOWN: stale: the last pass is ")
