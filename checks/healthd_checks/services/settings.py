"""``[checks.services]``: the ``services`` check's settings model (pydantic: imported only to validate a config)."""

from __future__ import annotations

import re
from typing import Any, Literal, Optional, Union

from pydantic import Field, field_validator, model_validator

from healthd.checks.settings import AbsolutePath, CheckSettings
from healthd.config.models import moved_from_node

Grade = Literal["WARNING", "CRITICAL"]


# useradd(8)/adduser(8) names, plus Samba's trailing "$"; anything else is a typo.
_ACCOUNT = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\$?")


def _account_list(key: str, value: Any) -> Any:
    if not isinstance(value, list):
        raise ValueError(f'{key} must be a list of user names or uids, e.g. ["munge", 450]')
    for account in value:
        # bool is an int to Python; a uid must be a real number.
        number = isinstance(account, int) and not isinstance(account, bool) and account >= 0
        if not number and not (isinstance(account, str) and _ACCOUNT.fullmatch(account)):
            raise ValueError(f"{key}: {account!r} is not a user name or a uid")
    return value


class ServicesSettings(CheckSettings):
    expect: list[str] = Field(
        default_factory=list,
        description="services (systemd units) this node must be running",
        json_schema_extra=moved_from_node("services"),
    )
    expect_kernel_modules: list[str] = Field(
        default_factory=list,
        description="kernel modules this node must have loaded",
        json_schema_extra=moved_from_node("kernel_modules"),
    )
    # NHC's check_ps_service and check_ps_daemon (scripts/lbnl_ps.nhc) look for a process, not
    # a unit: `check_ps_service -d rpc.statd nfslock` asks for rpc.statd, whatever the init system
    # calls the service that starts it.
    expect_processes: list[str] = Field(
        default_factory=list,
        description="processes that must run (process table, whatever the init system), owned by root,"
        " a system account or one in process_users",
    )
    # NHC's check_ps_service -s, -k and -E, and check_ps_blacklist: the process must not run.
    forbid_processes: list[str] = Field(
        default_factory=list,
        description="processes that must not run; only those owned by root or a system account count",
    )
    severity: Grade = Field(default="CRITICAL", description="grade of a service that is not running")
    severities: dict[str, Grade] = Field(default_factory=dict, description="per-service grade, by unit name")
    process_names: dict[str, list[str]] = Field(
        default_factory=dict,
        description="per service: the process names that count as it when systemd is not PID 1 (replace the built-in)",
    )
    process_users: list[Union[int, str]] = Field(
        default_factory=list,
        description="accounts (names or uids) besides root whose processes count as services when systemd is not PID 1",
    )
    # NHC's check_ps_service -u USER (scripts/lbnl_ps.nhc): only a process that user owns counts.
    process_owners: dict[str, list[Union[int, str]]] = Field(
        default_factory=dict,
        description="per process of expect_processes or forbid_processes: the only accounts (names or uids) whose"
        " process counts as it, in place of root, system accounts and process_users (a forbidden one counts"
        " only when a system account owns it)",
    )
    process_exe: dict[str, str] = Field(
        default_factory=dict, description="per service: the executable its process must run (/proc/PID/exe)"
    )
    manager: Literal["auto", "systemd", "process"] = Field(
        default="auto", description="ask systemd, read the process table, or auto: systemd where it is PID 1"
    )
    systemctl: Optional[AbsolutePath] = Field(
        default=None, description="systemctl, by absolute path (unset: the first in /usr/bin, /bin, /usr/sbin, /sbin)"
    )
    transition_wait: float = Field(
        default=2.0,
        ge=0,
        le=60,
        description="seconds before a unit that systemd is starting or stopping is read again (within timeout)",
    )
    # Above systemd's default TimeoutStartSec= and TimeoutStopSec= (DefaultTimeoutStartSec=90s,
    # systemd-system.conf(5)) with room to spare: a restart that systemd itself would let run
    # stays UNKNOWN, a daemon that has not run for longer takes the node out.
    transition_limit: float = Field(
        default=300.0,
        gt=0,
        description="seconds a unit may be starting or stopping without a running daemon before it counts as down",
    )

    @model_validator(mode="after")
    def _limit_after_wait(self) -> ServicesSettings:
        if self.transition_limit <= self.transition_wait:
            raise ValueError(
                f"transition_limit ({self.transition_limit:g}s) must be longer than transition_wait"
                f" ({self.transition_wait:g}s): a unit is read again after the wait before it can be stuck"
            )
        return self

    @field_validator("process_users", mode="before")
    @classmethod
    def _accounts(cls, value: Any) -> Any:
        return _account_list("process_users", value)

    @field_validator("process_owners", mode="before")
    @classmethod
    def _owners(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError('process_owners must be a table of process name = accounts, e.g. { munged = ["munge"] }')
        for name, accounts in value.items():
            if not _account_list(f"process_owners.{name}", accounts):
                raise ValueError(f"process_owners.{name}: name at least one account")
        return value

    @field_validator("expect_processes", "forbid_processes")
    @classmethod
    def _process_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not name or "/" in name or "\0" in name or "\n" in name:
                raise ValueError(f"{name!r} is not a process name (the command name or the executable's file name)")
        return value

    @field_validator("process_exe")
    @classmethod
    def _absolute_exe(cls, value: dict[str, str]) -> dict[str, str]:
        for service, exe in value.items():
            if not exe.startswith("/") or "\0" in exe:
                raise ValueError(f"process_exe.{service}: {exe!r} must be an absolute path, as /proc/PID/exe shows it")
        return value
