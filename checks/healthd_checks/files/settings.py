"""``[checks.files]``: the ``files`` check's settings model (pydantic: imported only to validate a config)."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from healthd.checks.settings import CheckSettings
from healthd.config.hosts import HostMatchError, matcher
from healthd.config.models import identified_by

Grade = Literal["WARNING", "CRITICAL"]
FileType = Literal["file", "directory", "symlink", "block", "char", "fifo", "socket"]


def _octal(value: Optional[str]) -> Optional[str]:
    if value is not None and not (value.isascii() and value.isdigit() and set(value) <= set("01234567")):
        raise ValueError(f"{value!r}: permission bits are an octal number such as 0644")
    if value is not None and int(value, 8) > 0o7777:
        raise ValueError(f"{value!r}: permission bits go up to 07777")
    return value


class FileExpectation(BaseModel):
    """One file and what it must be: NHC's check_file_test, check_file_stat and check_file_contents in one table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(min_length=1, description="absolute path of the file")
    exists: Union[bool, Literal["optional"]] = Field(
        default=True,
        description='false: the path must not exist (-! -e); "optional": the rest is judged only where it exists',
    )
    type: Optional[FileType] = Field(default=None, description="what the path must be (-f -d -L -b -c -p -S)")
    readable: Optional[bool] = Field(default=None, description="healthd may read it (-r)")
    writable: Optional[bool] = Field(default=None, description="healthd may write it (-w)")
    executable: Optional[bool] = Field(default=None, description="healthd may execute or search it (-x)")
    nonempty: Optional[bool] = Field(default=None, description="its size is above zero (-s)")
    setuid: Optional[bool] = Field(default=None, description="its set-user-ID bit is set (-u)")
    setgid: Optional[bool] = Field(default=None, description="its set-group-ID bit is set (-g)")
    sticky: Optional[bool] = Field(default=None, description="its sticky bit is set (-k)")
    owner: Optional[str] = Field(default=None, description="owning user, a name or a number (-U, -u)")
    group: Optional[str] = Field(default=None, description="owning group, a name or a number (-G, -g)")
    mode: Optional[str] = Field(default=None, description="exact permission bits, octal (-m)")
    mode_includes: Optional[str] = Field(default=None, description="permission bits it must have at least (-M)")
    max_age_s: Optional[float] = Field(default=None, ge=0, description="modified at most this long ago (-n)")
    min_age_s: Optional[float] = Field(default=None, ge=0, description="modified at least this long ago (-o)")
    follow: bool = Field(
        default=True,
        description="false: owner, group, mode and age are a symbolic link's own (NHC's check_file_stat)",
    )
    lines: list[str] = Field(
        default_factory=list,
        description="NHC match strings each of which some line must match; a leading ! : no line may match it",
    )
    any_owner: bool = Field(
        default=False,
        description="true: a file anyone owns may satisfy it; false: only root or `owner` (else UNKNOWN)",
    )
    severity: Grade = Field(default="CRITICAL", description="grade of a file that is not as expected")

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or "\0" in value:
            raise ValueError("must be an absolute path without NUL characters")
        return value

    @field_validator("mode", "mode_includes")
    @classmethod
    def _mode(cls, value: Optional[str]) -> Optional[str]:
        return _octal(value)

    @field_validator("lines")
    @classmethod
    def _matches(cls, value: list[str]) -> list[str]:
        for match in value:
            try:
                matcher(match)
            except HostMatchError as exc:
                raise ValueError(str(exc)) from None
        return value


class FilesSettings(CheckSettings):
    """``[checks.files]``."""

    expect_files: list[FileExpectation] = Field(
        default_factory=list,
        description="files and what each must be",
        json_schema_extra=identified_by("path"),
    )
    read_timeout: float = Field(
        default=5.0, gt=0, le=300, description="seconds the probe of all files may take; a file not answered is UNKNOWN"
    )
    max_read_bytes: int = Field(
        default=1048576,
        gt=0,
        description="bytes read of a file for `lines`; an answer that may lie past them is UNKNOWN",
    )
