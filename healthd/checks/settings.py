"""``CheckSettings``: the options every check accepts under ``[checks.NAME]`` (a pydantic model),
and ``SettingPath`` and ``AbsolutePath``, the types of every program, device, file or directory a config names.

It is kept apart from ``healthd.checks.plugin`` so that running checks never imports
pydantic: a check names its settings model lazily (``CheckSpec.settings`` may be a
function returning it), and the model is only needed to validate a config
(``healthd.config.cache`` says when that happens).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Mapping

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


class CheckSettings(BaseModel):
    """Options every check accepts under ``[checks.NAME]``; checks subclass it with their own."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # Keys this check no longer has -> where they went ("[checks.OTHER] key"): a config that
    # still sets one where the new check is not loaded (not installed, failed to import)
    # is told where the key went, not only that it is unknown (healthd.config.models).
    moved_out: ClassVar[Mapping[str, str]] = {}

    enabled: bool = Field(default=True, description="false: the check does not run")
    timeout: float = Field(default=10.0, gt=0, le=600, description="seconds before the check is abandoned")


def openable(value: Path) -> Path:
    """``value`` if the kernel could take it as a path; a ``ValueError`` otherwise (pydantic names the key)."""
    # A path is a C string: a NUL would end it early, and Python refuses it in every call with
    # "embedded null byte", which must be the config's error, not a crash of a pass.
    if "\0" in str(value):
        raise ValueError("a path cannot hold a NUL character (\\u0000)")
    return value


def absolute(value: Path) -> Path:
    """``value`` if it is absolute; a ``ValueError`` otherwise (pydantic names the key and the value)."""
    # healthd searches no PATH (its one shell, healthd.slurm.command's, is given absolute paths only),
    # and a HealthCheckProgram runs in a working directory healthd does not choose: a relative
    # path would depend on it.
    if not value.is_absolute():
        raise ValueError("must be an absolute path (healthd searches no PATH)")
    return openable(value)


# Every path a config names is one of these two (a test holds every model to it).
SettingPath = Annotated[Path, AfterValidator(openable)]
AbsolutePath = Annotated[Path, AfterValidator(absolute)]
