"""``LoadedConfig``: a validated config, where it came from, and each check's validated settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from healthd.config.models import Config


@dataclass(frozen=True)
class LoadedConfig:
    """A validated config, where it came from, each check's validated settings, and deprecation notes.

    ``config`` and the settings are the models' values as read-only views
    (``healthd.config.view``) when they came through the cache or were stored in it.
    """

    source: str
    config: Config
    check_settings: Mapping[str, Any]
    deprecated: tuple[str, ...] = ()
    # SHA-256 of the file's exact bytes, when it was read through healthd.config.cache.
    sha256: str = ""
    host: str = ""  # the node the [[hosts]] sections were chosen for (healthd.config.hosts)
    host_sections: tuple[str, ...] = ()  # the [[hosts]] entries merged in for ``host``
