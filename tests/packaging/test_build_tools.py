"""The tools packaging/build.py runs get none of the host's module paths: a developer's PYTHONPATH does not
reach the staged venv's pip, compileall or the packagers, so it cannot change what is built."""

from __future__ import annotations

from pathlib import Path

import pytest
from healthd_testkit.packages import build_module


def test_a_tool_the_build_runs_does_not_import_from_the_developer_s_pythonpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shadow = tmp_path / "checkout"
    shadow.mkdir()
    (shadow / "shadowed.py").write_text("")
    seen = tmp_path / "seen"
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    build = build_module()
    probe = (
        "import importlib.util, sys; "
        "open(sys.argv[1], 'w').write(str(importlib.util.find_spec('shadowed') is not None) + ' ' + repr(sys.path))"
    )
    build._run(str(build.interpreter()), "-c", probe, str(seen))
    found, path = seen.read_text().split(" ", 1)
    assert found == "False" and str(shadow) not in path, path
