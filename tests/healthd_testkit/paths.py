"""Where the repository and its real captures are, for every test wherever it sits under tests/."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"


class Below:
    """A path below the instance's ``root``, as a class attribute: ``state_dir = Below("state")``."""

    def __init__(self, *parts: str) -> None:
        self.parts = parts

    def __get__(self, instance: object, owner: type | None = None) -> Path:
        root: Path = getattr(instance, "root")  # noqa: B009 (any class with a root)
        return root.joinpath(*self.parts)
