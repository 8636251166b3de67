"""Configs that leave out every installed check but the ones a test is about, so a pass never judges this machine."""

from __future__ import annotations

from healthd.plugin import discover


def only_checks(*kept: str) -> str:
    """``[checks.NAME] enabled = false`` for every installed check not in ``kept`` (a new check cannot slip in)."""
    return "".join(f"[checks.{spec.name}]\nenabled = false\n" for spec in discover() if spec.name not in kept)
