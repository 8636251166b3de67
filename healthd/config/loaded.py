"""``LoadedConfig``: a validated config, where it came from, and each check's validated settings."""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from healthd.config.sections import Config


class LoadedConfig(NamedTuple):
    """A validated config, where it came from, each check's validated settings, and deprecation notes.

    ``config`` is a ``Config`` (``healthd.config.sections``) whether it was validated now or read
    from the cache; each check's settings are its model's values, as a read-only view
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
