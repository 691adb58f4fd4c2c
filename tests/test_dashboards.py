"""Dashboards are generated: the committed JSON is what the generator makes, every query is valid PromQL
(checked by promtool) over metrics the exporter exports, and every dashboard an alert links to exists."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from promtool import promtool

from exporter.metrics import names

PROJECT = Path(__file__).resolve().parents[1]
DASHBOARDS = PROJECT / "dashboards"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate", DASHBOARDS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def boards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}


def queries() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for name, board in boards().items():
        for panel in board["panels"]:
            found.extend((f"{name}: {panel['title']}", t["expr"]) for t in panel.get("targets", []))
        for var in board["templating"]["list"]:
            query = var.get("query")
            if isinstance(query, dict):
                found.append((f"{name}: ${var['name']}", query["query"]))
    return found


def test_committed_json_is_generated() -> None:
    rendered = generator().render()
    assert set(rendered) == set(boards()), "run: python dashboards/generate.py"
    for name, text in rendered.items():
        assert (DASHBOARDS / name).read_text() == text, f"dashboards/{name} is stale: run python dashboards/generate.py"


def test_every_query_is_valid_promql_over_exported_metrics(tmp_path: Path) -> None:
    exported = {spec.name for spec in vars(names).values() if isinstance(spec, names.Spec)}
    exported.add("rocm_watchdog_build_info")
    recording: list[dict[str, str]] = []
    for where, expr in queries():
        match = re.fullmatch(r"label_values\((.*), (\w+)\)", expr)
        promql = match.group(1) if match else expr
        for metric in re.findall(r"\b(rocm_[a-z_]+)\b", promql):
            assert metric in exported, f"{where} uses {metric}, which the exporter does not export"
        # Grafana's variables, as Grafana would substitute them.
        promql = promql.replace("$__rate_interval", "5m").replace("$__range", "6h")
        promql = promql.replace("$instance", ".*").replace("$pci_bus", ".*")
        assert "$" not in promql, where
        recording.append({"record": f"check:q{len(recording)}", "expr": promql})
    rules = tmp_path / "queries.yml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "dashboard-queries", "rules": recording}]}))
    proc = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_alert_dashboard_links_resolve_and_layout_is_sane() -> None:
    uids = {board["uid"] for board in boards().values()}
    rules = yaml.safe_load((PROJECT / "alerts" / "rocm-watchdog.rules.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            url = rule["annotations"].get("dashboard_url")
            if url:
                assert url.removeprefix("/d/") in uids, f"{rule['alert']} links to a missing dashboard {url}"
    for board in boards().values():
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids))
        for panel in board["panels"]:
            pos = panel["gridPos"]
            assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24
