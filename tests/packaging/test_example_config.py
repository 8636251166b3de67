"""The shipped example config agrees with the docs: it validates as shipped and with every suggestion taken."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "packaging" / "healthd.toml.example"
# A suggestion in the example: a commented-out `key = value` line, with or without a comment after it.
_SUGGESTION = re.compile(r"^# ?(?P<line>\[[^\]]+\]|[a-z_]+ = .+?)(?:\s+#.*)?$")


def _validate(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "healthd.toml"
    config.write_text(text, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "healthd", "config", "validate", "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )


def _taken(text: str) -> str:
    """The example with every suggestion uncommented."""
    lines = []
    for line in text.split("\n"):
        match = _SUGGESTION.match(line)
        lines.append(match["line"] if match else line)
    return "\n".join(lines)


def test_the_example_validates_as_shipped(tmp_path: Path) -> None:
    done = _validate(EXAMPLE.read_text(encoding="utf-8"), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_suggestion_in_the_example_validates(tmp_path: Path) -> None:
    text = _taken(EXAMPLE.read_text(encoding="utf-8"))
    assert "\nlisten = " in text and "\n[checks.gpu]\n" in text  # the suggestions were found
    done = _validate(text, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_example_names_the_documented_port() -> None:
    documented = re.search(r"healthd's port is \*\*(\d+)\*\*", (REPO / "docs" / "metrics.md").read_text())
    assert documented
    ports = re.findall(r'listen = "[^"]*:(\d+)"', EXAMPLE.read_text(encoding="utf-8"))
    assert ports == [documented[1]]
