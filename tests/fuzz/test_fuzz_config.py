"""Config loading over arbitrary TOML documents: only ``ConfigError``, and every problem names a real key.

Documents are built as data (nested tables from the real section and key names
mixed with unknown ones, values of every TOML type), written as TOML, and given
to ``parse_config`` with the settings models of every installed check. Each
problem line must start with a key path that exists in the document, or whose
parent exists when the problem is a missing key; syntax errors name the line.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from healthd.checks.plugin import discover, settings_models
from healthd.config.models import ConfigError, LoadedConfig, parse_config

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

MODELS = settings_models(discover())
SECTIONS = ["paths", "node", "slurm", "policy", "runner", "daemon", "metrics"]
KNOWN_KEYS = [
    "sysfs", "procfs", "kmsg", "state_dir", "gpus", "ib_rate_gbps", "ib_ports", "mounts", "services", "path",
    "fstype", "rw", "kernel_modules", "pcie_devices", "enabled", "timeout", "bin_dir", "reason_prefix",
    "max_out_fraction", "unknown_action", "pass_timeout", "interval", "splay", "listen", "textfile", "overrides",
    "min_free_percent", "severity", "severities", "snapshot", "source", "window", "rate_window", "expect",
    "expect_gpus", "expect_ports", "expect_rate_gbps", "expect_rates_gbps", "expect_link_layer",
    "expect_kernel_modules", "expect_devices",
]  # fmt: skip
KEY = st.one_of(st.sampled_from(KNOWN_KEYS), st.from_regex(r"[a-z_]{1,8}", fullmatch=True))
SCALAR = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["/", "/scratch", "scratch", "mlx5_0:1", "CRITICAL", "127.0.0.1:9100", "drain", "kmsg"]),
)
VALUE = st.recursive(
    SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEY, inner, max_size=3),
    max_leaves=6,
)
TABLE = st.dictionaries(KEY, VALUE, max_size=4)
CHECKS = st.dictionaries(
    st.one_of(st.sampled_from(sorted(MODELS)), st.from_regex(r"[a-z]{1,6}", fullmatch=True)), TABLE
)
DOCUMENT = st.fixed_dictionaries(
    {},
    optional={**{name: TABLE for name in SECTIONS}, "checks": CHECKS, "extra": VALUE},
)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        # JSON escapes control characters as TOML does; TOML also forbids a raw DEL.
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"


def to_toml(document: dict[str, Any]) -> str:
    lines = [f"{k} = {_toml_value(v)}" for k, v in document.items() if not isinstance(v, dict)]
    for name, table in document.items():
        if not isinstance(table, dict):
            continue
        if name == "checks":
            lines.append("[checks]")
            for check, options in table.items():
                lines.append(f"[checks.{check}]")
                lines.extend(f"{k} = {_toml_value(v)}" for k, v in options.items())
            continue
        lines.append(f"[{name}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in table.items())
    return "\n".join(lines) + "\n"


_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _exists(document: Any, path: str) -> bool:
    node = document
    for name, index in _STEP.findall(path):
        if name:
            if not isinstance(node, dict) or name not in node:
                return False
            node = node[name]
        else:
            if not isinstance(node, list) or int(index) >= len(node):
                return False
            node = node[int(index)]
    return True


def _check_problem(document: dict[str, Any], problem: str) -> None:
    key, sep, message = problem.partition(": ")
    assert sep, problem
    if key == "(top level)":
        return
    if "Field required" in message:
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        assert not parent or _exists(document, parent), problem
        return
    assert _exists(document, key), f"{problem!r} names a key the document does not have"


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENT)
def test_any_document_loads_or_names_its_keys(document: dict[str, Any]) -> None:
    text = to_toml(document)
    assert tomllib.loads(text) == document  # the generator writes the document it means
    try:
        loaded = parse_config(text, "fuzz.toml", MODELS)
    except ConfigError as exc:
        assert exc.problems
        for problem in exc.problems:
            _check_problem(document, problem)
        assert all(line.startswith("fuzz.toml: ") for line in str(exc).splitlines())
        return
    assert isinstance(loaded, LoadedConfig)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_any_text_loads_or_gives_config_error(text: str) -> None:
    try:
        parse_config(text, "fuzz.toml", MODELS)
    except ConfigError as exc:
        assert str(exc).startswith("fuzz.toml: ")
        if exc.problems[0].startswith("not valid TOML"):
            assert "line" in exc.problems[0] or "end of document" in exc.problems[0]  # syntax errors say where
