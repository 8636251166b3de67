"""The shipped Prometheus rules and Grafana dashboard (deploy/) against promtool and a real daemon's scrape.

- ``promtool check rules`` and ``promtool test rules`` (deploy/prometheus/healthd.rules.test.yml) pass;
- the dashboard has the structure of Grafana's dashboard model, every query of it parses
  as PromQL (each wrapped in a recording rule for ``promtool check rules``), and it
  provisions from a file;
- every healthd metric the rules and the dashboard name is in the scrape of a real
  ``healthd run``;
- a real Prometheus scraping two real daemons, one of them killed, gives the dashboard's
  "Not reporting" and "Nodes by status" panels the dead node.

No Grafana server installs here (Debian 12 has no package, PyPI none), so the dashboard is
checked against ``DASHBOARD_SCHEMA`` below: a JSON Schema written from Grafana's documented
dashboard model (the "JSON model" page and the dashboard kind's schema, schemaVersion 39),
covering the parts this dashboard uses, with unknown keys refused where that model has none.
When it was written, the dashboard also validated without an error against the dashboard
schema Grafana publishes in grafana-foundation-sdk (jsonschema/dashboard.jsonschema.json),
which is not copied here.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import pytest
import yaml
from healthd_testkit.checks import only_checks
from healthd_testkit.net import free_ports
from healthd_testkit.paths import HEALTHD, REPO
from healthd_testkit.xid import Node as XidNode
from prometheus_client.parser import text_string_to_metric_families

PROMTOOL = shutil.which("promtool")
RULES = REPO / "deploy" / "prometheus" / "healthd.rules.yml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "healthd.rules.test.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "healthd.json"
PROVIDER = REPO / "deploy" / "grafana" / "healthd-provider.yml"

pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) is not installed")

_DATASOURCE_REF = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"type": {"type": "string"}, "uid": {"type": "string"}},
}
_GRID_POS = {
    "type": "object",
    "additionalProperties": False,
    "required": ["h", "w", "x", "y"],
    "properties": {
        "h": {"type": "integer", "minimum": 1},
        "w": {"type": "integer", "minimum": 1, "maximum": 24},
        "x": {"type": "integer", "minimum": 0, "maximum": 23},
        "y": {"type": "integer", "minimum": 0},
    },
}
_TARGET = {
    "type": "object",
    "required": ["refId", "expr"],
    "properties": {
        "refId": {"type": "string", "pattern": "^[A-Z]$"},
        "expr": {"type": "string", "minLength": 1},
        "datasource": _DATASOURCE_REF,
        "legendFormat": {"type": "string"},
        "format": {"enum": ["time_series", "table", "heatmap"]},
        "instant": {"type": "boolean"},
    },
    "additionalProperties": False,
}
_PANEL = {
    "type": "object",
    "additionalProperties": False,
    "required": ["id", "type", "title", "gridPos", "targets", "datasource", "fieldConfig"],
    "properties": {
        "id": {"type": "integer"},
        "type": {"enum": ["stat", "table", "timeseries", "bargauge", "gauge", "piechart", "state-timeline"]},
        "title": {"type": "string", "minLength": 1},
        "description": {"type": "string"},
        "datasource": _DATASOURCE_REF,
        "gridPos": _GRID_POS,
        "targets": {"type": "array", "minItems": 1, "items": _TARGET},
        "options": {"type": "object"},
        "fieldConfig": {
            "type": "object",
            "additionalProperties": False,
            "required": ["defaults", "overrides"],
            "properties": {"defaults": {"type": "object"}, "overrides": {"type": "array"}},
        },
    },
}
_ROW = {
    "type": "object",
    "additionalProperties": False,
    "required": ["id", "type", "title", "collapsed", "gridPos", "panels"],
    "properties": {
        "id": {"type": "integer"},
        "type": {"const": "row"},
        "title": {"type": "string"},
        "collapsed": {"type": "boolean"},
        "gridPos": _GRID_POS,
        "panels": {"type": "array"},
    },
}
_VARIABLE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["type", "name"],
    "properties": {
        "type": {"enum": ["query", "adhoc", "constant", "datasource", "interval", "textbox", "custom"]},
        "name": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
        "label": {"type": "string"},
        "query": {"type": "string"},
        "datasource": _DATASOURCE_REF,
        "current": {"type": "object", "required": ["text", "value"]},
        "options": {"type": "array"},
        "refresh": {"enum": [0, 1, 2]},
        "hide": {"enum": [0, 1, 2]},
        "sort": {"enum": list(range(9))},
        "multi": {"type": "boolean"},
        "includeAll": {"type": "boolean"},
        "allValue": {"type": "string"},
    },
}
DASHBOARD_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "additionalProperties": False,
    # What Grafana needs to load a dashboard from a file: its uid and title identify it there.
    "required": ["uid", "title", "schemaVersion", "panels", "templating", "annotations", "time"],
    "properties": {
        "uid": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"},
        "title": {"type": "string", "minLength": 1},
        "description": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "timezone": {"type": "string"},
        "editable": {"type": "boolean"},
        "graphTooltip": {"enum": [0, 1, 2]},
        "schemaVersion": {"type": "integer", "minimum": 36},
        "version": {"type": "integer"},
        "refresh": {"type": "string"},
        "time": {
            "type": "object",
            "additionalProperties": False,
            "required": ["from", "to"],
            "properties": {"from": {"type": "string"}, "to": {"type": "string"}},
        },
        "timepicker": {"type": "object"},
        "fiscalYearStartMonth": {"type": "integer", "minimum": 0, "maximum": 11},
        "liveNow": {"type": "boolean"},
        "links": {"type": "array"},
        "annotations": {
            "type": "object",
            "properties": {
                "list": {
                    "type": "array",
                    "items": {"type": "object", "required": ["name", "datasource", "enable", "iconColor"]},
                }
            },
        },
        "templating": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"list": {"type": "array", "items": _VARIABLE}},
        },
        "panels": {"type": "array", "items": {"anyOf": [_PANEL, _ROW]}},
    },
}


def _dashboard() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return document


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", ())


def _dashboard_exprs() -> list[str]:
    return [target["expr"] for panel in _panels(_dashboard()) for target in panel.get("targets", ())]


def _rule_exprs() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def _as_promql(expr: str) -> str:
    """A dashboard query as Prometheus gets it: Grafana replaces the variables first (a multi-value regex)."""
    return expr.replace("$job", ".*").replace("$instance", ".*").replace("$__rate_interval", "5m")


def _promtool(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, cwd=cwd, timeout=120, check=False)


def test_promtool_checks_the_shipped_rules() -> None:
    done = _promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_unit_tests_of_the_rules_pass() -> None:
    done = _promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_waits_and_says_which_node_check_and_code() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    alerts = [rule for group in groups for rule in group["rules"] if "alert" in rule]
    names = {rule["alert"] for rule in alerts}
    # The cases: healthd stops reporting (three ways), the breaker, a repair.
    assert {"HealthdTargetDown", "HealthdPassesStale", "HealthdMissingOnNode", "HealthdAbsent"} <= names
    assert {"HealthdCircuitBreakerOpen", "HealthdNodeInRepair", "HealthdFindingCritical"} <= names
    for rule in alerts:
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        # An alert on a counter's increase fires on the evaluation that sees it; the others wait.
        assert "for" in rule or "increase(" in rule["expr"], rule["alert"]
        if "healthd_active_findings" in rule["expr"]:
            text = rule["annotations"]["summary"]
            assert all(f"$labels.{label}" in text for label in ("instance", "check", "code")), rule["alert"]


def test_the_dashboard_has_grafanas_dashboard_structure() -> None:
    dashboard = _dashboard()
    jsonschema.Draft7Validator.check_schema(DASHBOARD_SCHEMA)
    jsonschema.validate(dashboard, DASHBOARD_SCHEMA)
    ids = [panel["id"] for panel in _panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique within a dashboard"
    # Provisioned from a file: no instance-specific numeric id, and the provider file names a folder path.
    assert "id" not in dashboard
    provider = yaml.safe_load(PROVIDER.read_text())
    assert provider["apiVersion"] == 1 and provider["providers"][0]["type"] == "file"
    titles = {panel["title"] for panel in _panels(dashboard)}
    assert {"Nodes by status", "Out by healthd", "Why nodes are out", "Circuit breaker open"} <= titles
    assert {"Pass duration", "Check timeouts per hour", "Checks on $instance"} <= titles


def test_the_schema_refuses_what_grafana_would_not_load() -> None:
    """The schema can fail: a panel without a position, a misspelt key, a bad grid width."""
    dashboard = _dashboard()
    for broken in (
        {**dashboard, "panels": [{k: v for k, v in dashboard["panels"][1].items() if k != "gridPos"}]},
        {**dashboard, "schemaVerison": 39},
        {**dashboard, "panels": [{**dashboard["panels"][1], "gridPos": {"h": 5, "w": 25, "x": 0, "y": 0}}]},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, DASHBOARD_SCHEMA)


def test_every_dashboard_query_parses_as_promql(tmp_path: Path) -> None:
    records = [
        {"record": f"dashboard:query_{i}", "expr": _as_promql(expr)} for i, expr in enumerate(_dashboard_exprs())
    ]
    rules = {"groups": [{"name": "dashboard", "rules": records}]}
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump(rules))
    done = _promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    # promtool can fail here: a query that is not PromQL is refused.
    path.write_text(yaml.safe_dump({"groups": [{"name": "bad", "rules": [{"record": "x:y", "expr": "sum by (a"}]}]}))
    assert _promtool("check", "rules", str(path)).returncode != 0


def _named_metrics(exprs: list[str]) -> set[str]:
    return {name for expr in exprs for name in re.findall(r"\bhealthd_[a-z0-9_]+\b", expr)}


def test_every_metric_the_rules_and_dashboard_name_is_documented() -> None:
    documented = set(re.findall(r"^\| `(healthd_[a-z0-9_]+)` \|", (REPO / "docs" / "metrics.md").read_text(), re.M))
    named = _named_metrics(_rule_exprs() + _dashboard_exprs())
    assert named and not named - documented, sorted(named - documented)


def _scrape_names(body: str) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(body):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
        if family.type == "counter":
            names.add(f"{family.name}_total")
    return names


@pytest.mark.slow  # a real daemon and its first pass: seconds
def test_a_running_daemon_exports_every_metric_the_rules_and_dashboard_name(tmp_path: Path) -> None:
    port = free_ports(1)[0]
    config = tmp_path / "healthd.toml"
    config.write_text(
        f'[paths]\nstate_dir = "{tmp_path / "state"}"\n'
        '[slurm]\nenabled = false\nnode_name = "node-test"\n'
        "[daemon]\ninterval = 1\nsplay = false\n"
        f'[metrics]\nlisten = "127.0.0.1:{port}"\n'
        '[checks.mounts]\nexpect = [{ path = "/no/such/mount" }]\n' + only_checks("mounts", "xid")
    )
    body = _daemons_scrape(config, port, tmp_path / "daemon.log")
    named = _named_metrics(_rule_exprs() + _dashboard_exprs())
    assert {"healthd_pass_state", "healthd_active_findings", "healthd_node_in_repair", "healthd_took_out"} <= named
    missing = named - _scrape_names(body)
    assert not missing, f"named by deploy/ but not exported: {sorted(missing)}"
    # The state set and the finding series carry what the alerts print.
    assert 'healthd_pass_state{status="critical"} 1.0' in body
    assert 'healthd_active_findings{check="mounts",code="MOUNT_MISSING",severity="critical"} 1.0' in body


def _daemons_scrape(config: Path, port: int, log: Path) -> str:
    """The /metrics body of a real ``healthd run`` on ``config`` after its first pass; the daemon stopped after."""
    with log.open("wb") as out:
        daemon = subprocess.Popen([str(HEALTHD), "run", "--config", str(config)], stdout=out, stderr=out)
    try:
        return _scrape_after_a_pass(port, daemon, log)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)


def _scrape_after_a_pass(port: int, daemon: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + 60
    while True:
        assert daemon.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"no pass exported; log:\n{log.read_text()}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
                body: str = reply.read().decode()
        except OSError:
            body = ""
        if "healthd_pass_state" in body:
            return body
        time.sleep(0.1)


def _daemon_config(tmp_path: Path, name: str, port: int) -> Path:
    config = tmp_path / f"{name}.toml"
    config.write_text(
        f'[paths]\nstate_dir = "{tmp_path / name}"\n'
        f'[slurm]\nenabled = false\nnode_name = "{name}"\n'
        "[daemon]\ninterval = 1\nsplay = false\n"
        f'[metrics]\nlisten = "127.0.0.1:{port}"\n' + only_checks("jobs")
    )
    return config


def _query(server: int, expr: str) -> dict[str, float]:
    """An instant query to the real Prometheus: each series' value, by its ``status`` label (or "")."""
    url = f"http://127.0.0.1:{server}/api/v1/query?" + urllib.parse.urlencode({"query": _as_promql(expr)})
    with urllib.request.urlopen(url, timeout=10) as reply:
        document = json.load(reply)
    assert document["status"] == "success", document
    return {series["metric"].get("status", ""): float(series["value"][1]) for series in document["data"]["result"]}


def _panel_expr(title: str) -> str:
    (panel,) = [panel for panel in _panels(_dashboard()) if panel["title"] == title]
    return str(panel["targets"][0]["expr"])


def _wait_query(server: int, expr: str, wanted: dict[str, float], prometheus_log: Path) -> None:
    deadline = time.monotonic() + 60
    seen: dict[str, float] = {}
    while time.monotonic() < deadline:
        try:
            seen = _query(server, expr)
        except OSError:
            seen = {}
        if seen == wanted:
            return
        time.sleep(0.5)
    raise AssertionError(f"{expr}: {seen}, not {wanted}; prometheus log:\n{prometheus_log.read_text()[-3000:]}")


@pytest.mark.slow  # a real Prometheus server scraping two real daemons: seconds
def test_a_dead_daemon_shows_on_the_dashboard_as_not_reporting(tmp_path: Path) -> None:
    """Prometheus scraping the daemons directly: a killed one is up == 0, its series go stale at once."""
    server, first, second = free_ports(3)
    scrape = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "healthd", "static_configs": [{"targets": [f"127.0.0.1:{first}", f"127.0.0.1:{second}"]}]}
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(scrape))
    prometheus_log = tmp_path / "prometheus.log"
    daemons = []
    with prometheus_log.open("wb") as out:
        prometheus = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{server}",
            ],
            stdout=out,
            stderr=out,
        )
    try:
        for name, port in (("alive", first), ("killed", second)):
            with (tmp_path / f"{name}.log").open("wb") as out:
                config = _daemon_config(tmp_path, name, port)
                daemons.append(subprocess.Popen([str(HEALTHD), "run", "--config", str(config)], stdout=out, stderr=out))
        not_reporting, by_status = _panel_expr("Not reporting"), _panel_expr("Nodes by status")
        _wait_query(server, by_status, {"ok": 2.0, "warning": 0.0, "critical": 0.0, "unknown": 0.0}, prometheus_log)
        _wait_query(server, not_reporting, {"": 0.0}, prometheus_log)
        daemons[1].kill()
        daemons[1].wait(timeout=30)
        _wait_query(server, not_reporting, {"": 1.0}, prometheus_log)
        wanted = {"ok": 1.0, "warning": 0.0, "critical": 0.0, "unknown": 0.0, "not reporting": 1.0}
        _wait_query(server, by_status, wanted, prometheus_log)
    finally:
        for process in (*daemons, prometheus):
            process.terminate()
            process.wait(timeout=30)
    # One node not reporting is red: the panel's first step above green starts at 1.
    (panel,) = [panel for panel in _panels(_dashboard()) if panel["title"] == "Not reporting"]
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [(step["color"], step["value"]) for step in steps] == [("green", None), ("red", 1)]


def _driver_information(procfs: Path, bdf: str, uuid: str) -> None:
    """The NVIDIA driver's /proc/driver/nvidia/gpus/<bdf>/information, as driver 550 writes it."""
    directory = procfs / "driver" / "nvidia" / "gpus" / bdf
    directory.mkdir(parents=True)
    (directory / "information").write_text(
        "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 151\n"
        f"GPU UUID: \t {uuid}\nVideo BIOS: \t 96.00.74.00.0d\nBus Type: \t PCIe\n"
        f"DMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t {bdf}\nDevice Minor: \t 7\n"
    )


@pytest.mark.slow  # a real daemon and its first pass: seconds
def test_xid_series_carry_the_gpu_as_dcgm_exporter_names_it(tmp_path: Path) -> None:
    """gpu = NVML index (PCI order), UUID from the driver's procfs, pci_bus_id as NVML writes it."""
    node = XidNode(tmp_path / "node")
    for bdf in ("0000:3b:00.0", "0000:5e:00.0"):
        node.gpu(bdf)
    uuid = "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"
    _driver_information(node.root / "proc", "0000:5e:00.0", uuid)
    node.log(
        "NVRM: Xid (PCI:0000:5e:00): 63, pid=1, name=python, Row Remapper: New row marked for remapping",
        "NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=python, Graphics SM Warp Exception",
        "NVRM: Xid (PCI:0000:99:00): 63, pid=1, name=python, Row Remapper: New row marked for remapping",
    )
    port = free_ports(1)[0]
    config = tmp_path / "healthd.toml"
    config.write_text(
        f'[paths]\nstate_dir = "{tmp_path / "state"}"\nkmsg = "{node.kmsg}"\n'
        f'sysfs = "{node.root / "sys"}"\nprocfs = "{node.root / "proc"}"\n'
        '[slurm]\nenabled = false\nnode_name = "node-test"\n'
        "[daemon]\ninterval = 1\nsplay = false\n"
        f'[metrics]\nlisten = "127.0.0.1:{port}"\n[checks.xid]\nsource = "kmsg"\n' + only_checks("xid")
    )
    body = _daemons_scrape(config, port, tmp_path / "daemon.log")
    series = {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if sample.name == "healthd_xid_events_total"
    }
    assert series == {
        (("UUID", uuid), ("gpu", "1"), ("pci_bus_id", "00000000:5E:00.0"), ("xid", "63")): 1.0,
        # No driver information for this GPU: its index is known, its UUID is not.
        (("UUID", "unknown"), ("gpu", "0"), ("pci_bus_id", "00000000:3B:00.0"), ("xid", "13")): 1.0,
        # A GPU not among this boot's NVIDIA GPUs in sysfs: no index either.
        (("UUID", "unknown"), ("gpu", "unknown"), ("pci_bus_id", "00000000:99:00.0"), ("xid", "63")): 1.0,
    }, body
