"""The ``acks`` state file: the acknowledgements (healthd.plan.acks) a node keeps between passes."""

from __future__ import annotations

from typing import Iterable

from healthd.plan.acks import Ack, FindingRef
from healthd.store.state import StateFile

STATE_NAME = "acks"


class AckStore:
    """The ``acks`` state file."""

    def __init__(self, state: StateFile) -> None:
        self.state = state

    def load(self) -> tuple[tuple[Ack, ...], tuple[str, ...]]:
        """The stored acks, and the problems found: an unreadable or malformed file or entry is reported and ignored."""
        document, read = self.state.read()
        items = document.get("acks", [])
        if not isinstance(items, list):
            return (), (*read, f"{self.state.path}: acks is {type(items).__name__}, not a list: ignored")
        acks = []
        problems = list(read)
        for index, item in enumerate(items):
            try:
                if not isinstance(item, dict):
                    raise TypeError(f"{type(item).__name__}, not an object")
                acks.append(Ack(FindingRef.from_dict(item), float(item.get("at", 0.0)), str(item.get("by", ""))))
            except (ValueError, TypeError) as exc:
                problems.append(f"{self.state.path}: acks[{index}] ignored: {exc}")
        return tuple(acks), tuple(problems)

    def save(self, acks: Iterable[Ack]) -> None:
        self.state.save({"acks": [{**a.ref.to_dict(), "at": a.at, "by": a.by} for a in acks]})
