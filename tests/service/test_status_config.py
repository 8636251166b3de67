"""``healthd status`` warns, on stderr and without changing its exit code, of a config on disk that the last full
validation refused or that no validation has seen since it changed; it never validates (no pydantic)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from healthd_testkit.checks import only_checks

CLI = Callable[..., tuple[int, str, str]]
BODY = '[slurm]\nnode_name = "n1"\n[checks.mounts]\n' + 'expect = [{ path = "/definitely-not-mounted" }]\n'


def test_status_warns_of_a_config_the_daemon_would_refuse_and_keeps_its_exit_code(
    write_config: Callable[..., Path], cli: CLI
) -> None:
    good = BODY + only_checks("mounts")
    path = write_config(good)
    config = str(path)
    assert cli("check", "--once", "-c", config)[0] == 2
    assert cli("status", "-c", config)[::2] == (2, ""), "a validated config: nothing to say"
    # A key only the full validation knows is wrong: status reads [paths], [daemon] and [slurm] alone.
    path.write_text(path.read_text().replace("[checks.mounts]\n", "[checks.mounts]\nbogus_key = 1\n", 1))
    code, _, err = cli("status", "-c", config)
    assert code == 2
    assert err == (
        f"healthd: warning: {config} has changed since healthd last validated a config;"
        " `healthd config validate` says whether it would be refused\n"
    )
    assert cli("check", "--once", "-c", config)[0] == 78
    code, _, err = cli("status", "-c", config)
    assert code == 2
    refused = "would be refused by `healthd run`: checks.mounts.bogus_key: unknown key"
    assert err == f"healthd: warning: {config} {refused}\n"
    write_config(good)  # the bytes validated before: the config cache knows them
    assert cli("status", "-c", config)[::2] == (2, "")


def test_status_says_nothing_of_a_config_no_validation_has_seen(write_config: Callable[..., Path], cli: CLI) -> None:
    # Nothing to compare with: a state directory no full validation has used (a record written by other means).
    path = write_config(BODY + only_checks("mounts"))
    assert cli("check", "--once", "-c", str(path))[0] == 2
    state = path.parent / "state"
    for name in ("config-verdict.json", "config-cache.json"):
        (state / name).unlink(missing_ok=True)
    path.write_text(path.read_text().replace("[checks.mounts]\n", "[checks.mounts]\nbogus_key = 1\n", 1))
    assert cli("status", "-c", str(path))[::2] == (2, "")
