"""Dashboards are generated: the committed JSON is what the generator makes, every query is valid PromQL
(checked by promtool) over metrics the exporter exports and filters on the dashboard's variables, values
carry their units, and every dashboard an alert links to exists."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from promtool import promtool

from exporter.metrics import names

PROJECT = Path(__file__).resolve().parents[1]
DASHBOARDS = PROJECT / "dashboards"
UIDS = {"rocm-watchdog-gpus", "rocm-watchdog-devices", "rocm-watchdog-kernel"}
VARIABLES = ["datasource", "job", "cluster", "instance", "pci_bus"]
NODE_MATCHERS = ('job=~"$job"', 'cluster=~"$cluster"', 'instance=~"$instance"')
SPECS = {spec.name: spec for spec in vars(names).values() if isinstance(spec, names.Spec)}
# A metric name and its label matchers, if any; label names never start with rocm_.
SELECTOR = re.compile(r"\b(rocm_[a-z0-9_]+)\b(\{[^}]*\})?")


def generator() -> ModuleType:
    pytest.importorskip("grafana_foundation_sdk", reason="the dashboard generator needs Python >= 3.11")
    spec = importlib.util.spec_from_file_location("generate", DASHBOARDS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def boards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}


def panel_targets() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(where, panel, target) for every query of every panel."""
    for name, board in boards().items():
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                yield f"{name}: {panel['title']} {target['refId']}", panel, target


def annotation_queries() -> Iterator[tuple[str, dict[str, Any]]]:
    for name, board in boards().items():
        for annotation in board["annotations"]["list"]:
            yield f"{name}: annotation {annotation['name']}", annotation


def variable_queries() -> Iterator[tuple[str, str]]:
    for name, board in boards().items():
        for var in board["templating"]["list"]:
            query = var.get("query")
            if isinstance(query, dict):
                yield f"{name}: ${var['name']}", str(query["query"])


def queries() -> list[tuple[str, str]]:
    """Every PromQL expression: panels, annotations, and the series selector of each label_values()."""
    found = [(where, target["expr"]) for where, _, target in panel_targets()]
    found += [(where, annotation["expr"]) for where, annotation in annotation_queries()]
    for where, query in variable_queries():
        match = re.fullmatch(r"label_values\((.*), (\w+)\)", query)
        assert match, f"{where}: {query}"
        found.append((where, match.group(1)))
    return found


def dashboard_queries() -> list[tuple[str, str]]:
    """Panel and annotation expressions: the ones that must filter on the variables."""
    return [(where, target["expr"]) for where, _, target in panel_targets()] + [
        (where, annotation["expr"]) for where, annotation in annotation_queries()
    ]


def unit_of(panel: dict[str, Any], ref: str) -> str:
    """The unit the panel shows the query ``ref`` in: its per-query override, else the panel's."""
    for override in panel["fieldConfig"]["overrides"]:
        if override["matcher"] == {"id": "byFrameRefID", "options": ref}:
            for prop in override["properties"]:
                if prop["id"] == "unit":
                    return str(prop["value"])
    return str(panel["fieldConfig"]["defaults"].get("unit", ""))


def test_committed_json_is_generated() -> None:
    rendered = generator().render()
    assert set(rendered) == {f"{uid}.json" for uid in UIDS}
    assert set(rendered) == set(boards()), "run: python dashboards/generate.py"
    for name, text in rendered.items():
        assert (DASHBOARDS / name).read_text() == text, f"dashboards/{name} is stale: run python dashboards/generate.py"
    assert generator().render() == rendered, "the generator's output must not change from one run to the next"


def test_every_query_is_valid_promql_over_exported_metrics(tmp_path: Path) -> None:
    recording: list[dict[str, str]] = []
    for where, expr in queries():
        for metric, _ in SELECTOR.findall(expr):
            assert metric in SPECS, f"{where} uses {metric}, which the exporter does not export"
        # Grafana's variables, as Grafana would substitute them with All selected.
        promql = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m").replace("$__range", "6h")
        for var in VARIABLES[1:]:
            promql = promql.replace(f"${var}", ".*")
        assert "$" not in promql, where
        recording.append({"record": f"check:q{len(recording)}", "expr": promql})
    rules = tmp_path / "queries.yml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "dashboard-queries", "rules": recording}]}))
    proc = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_variables() -> None:
    for name, board in boards().items():
        variables = {var["name"]: var for var in board["templating"]["list"]}
        assert list(variables) == VARIABLES, name
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        for i, var_name in enumerate(VARIABLES[1:], start=1):
            var = variables[var_name]
            assert var["type"] == "query", f"{name}: ${var_name}"
            assert var["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, f"{name}: ${var_name}"
            # All must be ".*": it also matches a series without the label (cluster is often absent), where
            # Grafana's default All (every value found, joined) would drop those series.
            assert var["includeAll"] is True and var["allValue"] == ".*", f"{name}: ${var_name}"
            # Each variable's values are narrowed by the variables before it.
            for earlier in VARIABLES[1:i]:
                assert f'{earlier}=~"${earlier}"' in var["query"]["query"], f"{name}: ${var_name} ignores ${earlier}"


def test_every_query_filters_on_the_variables() -> None:
    for where, expr in dashboard_queries():
        selectors = SELECTOR.findall(expr)
        assert selectors, where
        for metric, matchers in selectors:
            for matcher in NODE_MATCHERS:
                assert matcher in matchers, f"{where}: {metric} lacks {matcher}"
        # A query over per-GPU series follows $pci_bus (the right side of a join may leave it to the left).
        if any("pci_bus" in SPECS[metric].labels for metric, _ in selectors):
            assert 'pci_bus=~"$pci_bus' in expr, f"{where} ignores $pci_bus"
    for where, _, target in panel_targets():
        assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where


def test_kernel_queries_keep_events_of_no_known_gpu() -> None:
    """Kernel-log events no GPU could be attributed to are under pci_bus="unknown": selecting a GPU must not
    hide them."""
    kernel_metrics = {
        name for name, spec in SPECS.items() if name.startswith("rocm_kernel_") and "pci_bus" in spec.labels
    }
    assert {"rocm_kernel_events_total", "rocm_kernel_event_last_timestamp_seconds"} <= kernel_metrics
    seen = set()
    for where, expr in dashboard_queries():
        for metric, matchers in SELECTOR.findall(expr):
            if metric in kernel_metrics:
                seen.add(metric)
                assert 'pci_bus=~"$pci_bus|unknown"' in matchers, f"{where}: {metric} hides pci_bus unknown"
    assert seen == kernel_metrics, "a kernel-log metric with a pci_bus label is on no dashboard"


@pytest.mark.parametrize(
    ("suffix", "unit"),
    [("_timestamp_seconds", "dateTime"), ("_bytes", "bytes"), ("_ratio", "percentunit"), ("_seconds", "s")],
)
def test_units(suffix: str, unit: str) -> None:
    """A query over a timestamp shows a time (milliseconds, for Grafana), bytes show as bytes, a ratio (or
    bytes over bytes) as a percentage, a duration in seconds; the first rule that fits a query applies."""
    rules = ["_timestamp_seconds", "_bytes", "_ratio", "_seconds"]
    checked = 0
    for where, panel, target in panel_targets():
        expr = target["expr"]
        metrics = [m for m, _ in SELECTOR.findall(expr) if not m.endswith("_total")]
        rule = next((r for r in rules if any(m.endswith(r) for m in metrics)), None)
        if rule != suffix:
            continue
        checked += 1
        shown = unit_of(panel, target["refId"])
        if suffix == "_timestamp_seconds":
            assert shown in ("dateTimeAsIso", "dateTimeFromNow"), f"{where} shows a timestamp as {shown}"
            assert expr.endswith(" * 1000"), f"{where}: Grafana's time units take milliseconds"
        elif suffix == "_bytes" and re.search(r"_bytes\{[^}]*\} / rocm_\w+_bytes\{", expr):
            assert shown == "percentunit", f"{where} shows a ratio of bytes as {shown}"
        else:
            assert shown == unit, f"{where} shows {suffix} as {shown}"
    assert checked, f"no query over *{suffix}"


def test_annotations_mark_conditions_and_resets() -> None:
    for name, board in boards().items():
        found = {a["name"]: a for a in board["annotations"]["list"]}
        conditions = found["Device conditions"]
        assert conditions["enable"] and conditions["useValueForTime"], name
        # The value is the time: the since-timestamp, in milliseconds, of root causes only.
        assert conditions["expr"].startswith("rocm_device_condition_since_timestamp_seconds{"), name
        assert 'cause=""' in conditions["expr"] and " * 1000 " in conditions["expr"], name
        assert "{{condition}}" in conditions["titleFormat"], name
        resets = found["GPU resets"]
        assert resets["enable"] and not resets["useValueForTime"], name
        assert re.fullmatch(
            r'increase\(rocm_kernel_events_total\{[^}]*class="gpu_reset_begin"\}\[\$__\w+\]\) > 0', resets["expr"]
        )
        for annotation in found.values():
            assert annotation["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, name


def test_alert_dashboard_links_resolve_and_layout_is_sane() -> None:
    uids = {board["uid"] for board in boards().values()}
    assert uids == UIDS
    rules = yaml.safe_load((PROJECT / "alerts" / "rocm-watchdog.rules.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            url = rule["annotations"].get("dashboard_url")
            if url:
                assert url.removeprefix("/d/") in uids, f"{rule['alert']} links to a missing dashboard {url}"
    for name, board in boards().items():
        assert {link["url"].removeprefix("/d/") for link in board["links"]} == uids - {board["uid"]}, name
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), name
        cells: set[tuple[int, int]] = set()
        for panel in board["panels"]:
            pos = panel["gridPos"]
            assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, f"{name}: {panel['title']}"
            area = {(pos["x"] + dx, pos["y"] + dy) for dx in range(pos["w"]) for dy in range(pos["h"])}
            assert not area & cells, f"{name}: {panel['title']} overlaps another panel"
            cells |= area


# One series per family for the query test below: every label a fixed value, the same in every family, so joins
# on pid, pci_bus or peer_pci_bus match. Gauges are 1, counters climb.
LABEL_VALUES = {"pci_bus": "0000:05:00.0", "peer_pci_bus": "0000:26:00.0", "pid": "4242", "source": "sysfs"}


def one_series_per_family() -> list[dict[str, str]]:
    series = []
    for spec in SPECS.values():
        if spec.kind == "summary":
            continue
        labels = {"job": "rocm-watchdog", "instance": "node-1:9862"}
        labels |= {label: LABEL_VALUES.get(label, f"{label}-1") for label in spec.labels}
        selector = ",".join(f'{k}="{v}"' for k, v in labels.items())
        series.append(
            {"series": f"{spec.name}{{{selector}}}", "values": "0+60x40" if spec.kind == "counter" else "1x40"}
        )
    return series


def test_every_gpu_dashboard_query_returns_data_in_a_real_prometheus(tmp_path: Path) -> None:
    """Each query of the GPU dashboard, run by promtool's PromQL engine over one series of every family the
    exporter declares, gives a result: the names, labels and joins fit what the exporter exports (a query over
    a misspelt label or a join on a label one side lacks would be valid PromQL and always empty)."""
    board = boards()["rocm-watchdog-gpus.json"]
    tests: list[dict[str, object]] = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            promql = target["expr"].replace("$__rate_interval", "5m").replace("$__range", "6h")
            for var in VARIABLES[1:]:
                promql = promql.replace(f"${var}", ".*")
            # absent() of an empty result is 1; of a result, nothing: expect nothing
            tests.append({"expr": f"absent({promql})", "eval_time": "30m", "exp_samples": []})
            if panel["title"] == "VRAM per process and GPU, with its pod":
                # the join gives the process its name and its pod, namespace and container
                joined = 'instance="node-1:9862",job="rocm-watchdog",pci_bus="0000:05:00.0",pid="4242"'
                joined += ',container="container-1",namespace="namespace-1",pod="pod-1",process_name="process_name-1"'
                tests.append(
                    {"expr": promql, "eval_time": "30m", "exp_samples": [{"labels": f"{{{joined}}}", "value": 1}]}
                )
    assert len(tests) > 30
    unit = tmp_path / "queries.test.yml"
    unit.write_text(
        yaml.safe_dump(
            {
                "rule_files": [],
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", "input_series": one_series_per_family(), "promql_expr_test": tests}],
            },
            width=1000,
        )
    )
    proc = subprocess.run([promtool(), "test", "rules", str(unit)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
