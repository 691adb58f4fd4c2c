"""Alert rules: generated from the exporter's tables (and current), valid for promtool, severities that agree with
``check`` and ``rocm_device_condition``, every counted kernel-log class covered, every alert seen firing in a
promtool unit test, and end to end through the real programs: a chmod on a fake host -> rocm-watchdog -> real
Prometheus -> real Alertmanager -> webhook, and one kernel-log line per alert in, the alert out."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import requests
import yaml
from fakeroot import FakeGpu, FakeRoot, build_root
from promtool import promtool
from webhook import Webhook

from exporter.metrics import names
from exporter.model.kernel import KERNEL_CLASSES
from exporter.watchdog.conditions import ALERT_GENERIC, KINDS

PROJECT = Path(__file__).resolve().parents[1]
ALERTS = PROJECT / "alerts"
RULES = ALERTS / "rocm-watchdog.rules.yml"
COVERAGE = ALERTS / "rocm-watchdog-coverage.rules.yml"
RUNBOOKS = PROJECT / "docs" / "runbooks.md"
A, B = "0000:03:00.0", "0000:83:00.0"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("alerts_generate", ALERTS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def run_promtool(*args: str) -> str:
    proc = subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def rules(path: Path = RULES) -> list[dict[str, Any]]:
    doc = yaml.safe_load(path.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def rule(name: str) -> dict[str, Any]:
    return next(r for r in rules() if r["alert"] == name)


# --- static checks -------------------------------------------------------------------------------------------


def test_rules_are_valid() -> None:
    run_promtool("check", "rules", str(RULES), str(COVERAGE))


def test_shipped_rules_are_what_the_generator_makes() -> None:
    for name, text in generator().render().items():
        assert (ALERTS / name).read_text() == text, f"alerts/{name} is stale: run `python alerts/generate.py`"


def test_with_no_options_the_generator_rewrites_the_shipped_files_unchanged(tmp_path: Path) -> None:
    assert generator().main(["--output-dir", str(tmp_path)]) == 0
    for name in ("rocm-watchdog.rules.yml", "rocm-watchdog-coverage.rules.yml"):
        assert (tmp_path / name).read_text() == (ALERTS / name).read_text(), name
    assert {r["annotations"].get("dashboard_url", "/d/")[:3] for r in rules()} == {"/d/"}  # today's: relative


@pytest.mark.parametrize(
    ("runbooks", "expected"),
    [
        ("https://wiki.example.net/ops/rocm-watchdog", "https://wiki.example.net/ops/rocm-watchdog#{alert}"),
        ("https://wiki.example.net/ops/{alert}", "https://wiki.example.net/ops/{alert}"),
    ],
)
def test_runbook_and_grafana_base_urls_go_into_every_alert(tmp_path: Path, runbooks: str, expected: str) -> None:
    """A fork or an internal wiki and its own Grafana: every runbook_url on that base, every dashboard_url absolute."""
    grafana = "https://grafana.example.net/"
    assert generator().main(["--runbook-url", runbooks, "--grafana-url", grafana, "--output-dir", str(tmp_path)]) == 0
    written = rules(tmp_path / "rocm-watchdog.rules.yml") + rules(tmp_path / "rocm-watchdog-coverage.rules.yml")
    shipped = rules() + rules(COVERAGE)
    assert [r["alert"] for r in written] == [r["alert"] for r in shipped]
    for r, before in zip(written, shipped, strict=True):
        annotations = r["annotations"]
        assert annotations["runbook_url"] == expected.replace("{alert}", r["alert"].lower()), r["alert"]
        was = before["annotations"].get("dashboard_url")
        assert annotations.get("dashboard_url") == (None if was is None else "https://grafana.example.net" + was)
        assert {k: v for k, v in r.items() if k != "annotations"} == {
            k: v for k, v in before.items() if k != "annotations"
        }
    assert sum("dashboard_url" in r["annotations"] for r in written) >= 10
    run_promtool("check", "rules", str(tmp_path / "rocm-watchdog.rules.yml"))


def test_a_relative_base_url_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        generator().main(["--grafana-url", "grafana.local", "--output-dir", str(tmp_path)])
    assert refused.value.code == 2 and "expected an absolute http(s) URL" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_selector_is_configurable(tmp_path: Path) -> None:
    assert generator().main(["--selector", 'job="gpu-exporter",cluster="c1"', "--output-dir", str(tmp_path)]) == 0
    text = (tmp_path / "rocm-watchdog.rules.yml").read_text()
    assert 'job="rocm-watchdog"' not in text
    assert text.count('job="gpu-exporter",cluster="c1"') >= len(rules())
    run_promtool("check", "rules", str(tmp_path / "rocm-watchdog.rules.yml"))


def test_every_metric_in_the_rules_is_exported() -> None:
    exported = {spec.name for spec in vars(names).values() if isinstance(spec, names.Spec)}
    for r in rules():
        for metric in re.findall(r"\b(rocm_[a-z_]+)\b(?=[{\[\s)]|$)", r["expr"]):
            assert metric in exported, f"{r['alert']} uses {metric}, which the exporter does not export"


def test_every_alert_has_a_runbook_section_and_routing_labels() -> None:
    anchors = {line[3:].strip().lower() for line in RUNBOOKS.read_text().splitlines() if line.startswith("## ")}
    for r in rules() + rules(COVERAGE):
        labels = r["labels"]
        assert labels["severity"] in ("critical", "warning", "{{ $labels.severity }}"), r["alert"]
        assert labels["watchdog"] in ("drift", "kernel", "self", "health") and labels["cause"], r["alert"]
        assert r["annotations"]["runbook_url"].endswith("#" + r["alert"].lower())
        assert r["alert"].lower() in anchors, f"docs/runbooks.md has no section for {r['alert']}"
    for r in rules():
        if r["alert"] != "RocmWatchdogTargetAbsent":  # absent() has no instance to name
            assert "group_left(nodename)" in r["expr"], f"{r['alert']} does not name the host"


def _regex(expr: str, label: str, metric: str) -> set[str]:
    found: set[str] = set()
    for m in re.finditer(metric + r"\{([^}]*)\}", expr):
        for value in re.findall(label + r'=~?"([^"]*)"', m.group(1)):
            found.update(value.split("|"))
    return found


def test_device_alert_severities_agree_with_the_table() -> None:
    """``check``, ``rocm_device_condition{severity}`` and the alert rules all read conditions.KINDS: every
    non-info kind alerts under exactly one rule, with the table's severity; only root causes alert."""
    covered: dict[str, str] = {}
    for r in rules():
        kinds = _regex(r["expr"], "condition", "rocm_device_condition")
        if not kinds:
            continue
        assert 'cause=""' in r["expr"], f"{r['alert']} would page for consequences too"
        for kind in kinds:
            assert kind not in covered, f"{kind} alerts twice ({covered[kind]}, {r['alert']})"
            covered[kind] = r["alert"]
            assert KINDS[kind].alert == r["alert"]
            if r["labels"]["severity"] != "{{ $labels.severity }}":
                assert r["labels"]["severity"] == KINDS[kind].severity, f"{r['alert']} vs the table for {kind}"
    alerting = {k for k, v in KINDS.items() if v.severity != "info"}
    assert set(covered) == alerting
    assert {KINDS[k].alert for k in alerting} - {ALERT_GENERIC} <= {r["alert"] for r in rules()}


def test_every_counted_kernel_class_can_page_or_ticket_with_its_severity() -> None:
    covered: dict[str, set[str]] = {}
    for r in rules():
        for cls in _regex(r["expr"], "class", "rocm_kernel_events_total"):
            covered.setdefault(cls, set()).add(r["labels"]["severity"])
    if "rocm_kernel_pcie_aer_errors_total" in rule("RocmPcieAerCorrectedErrorsHigh")["expr"]:
        covered.setdefault("pcie_aer", set()).add("warning")  # the AER split: corrected tickets...
    assert rule("RocmPcieAerUncorrected")["labels"]["severity"] == "critical"  # ...uncorrected pages
    for cls, severity in KERNEL_CLASSES.items():
        if severity == "info":
            continue
        assert cls in covered, f"kernel-log class {cls} ({severity}) has no alert"
        assert covered[cls] == {severity}, f"{cls} is {severity} in the contract, alerts say {covered[cls]}"


def test_drift_alerts_survive_a_scrape_gap() -> None:
    for r in rules():
        if r["labels"]["watchdog"] == "drift":
            assert r.get("keep_firing_for"), f"{r['alert']} would resolve when the exporter dies"


# --- promtool unit tests, built here from compact cases -------------------------------------------------------

HOST = {"instance": "n1:9862", "job": "rocm-watchdog"}
HOST_INFO = {"series": 'rocm_watchdog_host_info{instance="n1:9862",job="rocm-watchdog",nodename="gpu-node-1"}'}


def series(metric: str, values: str, **labels: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in {**HOST, **labels}.items())
    return {"series": f"{metric}{{{inner}}}", "values": values}


def render(template: str, labels: dict[str, str], value: str) -> str:
    """The few template forms the rules use, as Prometheus renders them."""
    out = re.sub(
        r"\{\{ or \$labels\.(\w+) \$labels\.(\w+) \}\}", lambda m: labels.get(m[1]) or labels.get(m[2], ""), template
    )
    out = out.replace("{{ $value | humanize }}", value)
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m[1], ""), out)


def expect(alert: str, value: str = "", **labels: str) -> dict[str, Any]:
    """The alert as Prometheus should fire it: the series' labels, the host's name and the rule's labels."""
    r = rule(alert)
    merged = {**HOST, "nodename": "gpu-node-1", **labels}
    merged.update({k: render(v, merged, value) for k, v in r["labels"].items()})
    return {
        "exp_labels": merged,
        "exp_annotations": {k: render(v, merged, value) for k, v in r["annotations"].items()},
    }


def cases() -> list[dict[str, Any]]:
    cond = "rocm_device_condition"
    events = "rocm_kernel_events_total"
    return [
        {
            "name": "a missing GPU pages once; the renumbering it forces does not page; drift survives a gap",
            "interval": "1m",
            "input_series": [
                HOST_INFO | {"values": "1x4 _x3 1x20"},
                series(cond, "_ 1x3 _x3 1x20", condition="gpu_missing", subject=A, severity="critical", pci_bus=A),
                series(
                    cond,
                    "_ 1x3",
                    condition="render_renumbered",
                    subject=B,
                    severity="critical",
                    pci_bus=B,
                    cause="gpu_missing",
                ),
            ],
            "alert_rule_test": [
                {"eval_time": "1m", "alertname": "RocmGpuMissing", "exp_alerts": []},
                {
                    "eval_time": "2m",
                    "alertname": "RocmGpuMissing",
                    "exp_alerts": [expect("RocmGpuMissing", condition="gpu_missing", subject=A, pci_bus=A)],
                },
                # the exporter is gone for three minutes: the alert keeps firing (keep_firing_for), no resolve
                {
                    "eval_time": "6m",
                    "alertname": "RocmGpuMissing",
                    "exp_alerts": [expect("RocmGpuMissing", condition="gpu_missing", subject=A, pci_bus=A)],
                },
                {"eval_time": "3m", "alertname": "RocmRenderNodeRenumbered", "exp_alerts": []},
            ],
        },
        {
            "name": "renumbering with no cause pages; permission drift carries the path; a gid change pages once",
            "interval": "1m",
            "input_series": [
                HOST_INFO | {"values": "1x10"},
                series(cond, "1x10", condition="render_renumbered", subject=B, severity="critical", pci_bus=B),
                series(cond, "1x10", condition="mode_drift", subject="/dev/kfd", severity="critical"),
                series(cond, "1x10", condition="group_gid_drift", subject="render", severity="critical"),
                series(
                    cond,
                    "1x10",
                    condition="gid_drift",
                    subject="/dev/dri/renderD128",
                    severity="critical",
                    pci_bus=A,
                    cause="group_gid_drift",
                ),
            ],
            "alert_rule_test": [
                {
                    "eval_time": "2m",
                    "alertname": "RocmRenderNodeRenumbered",
                    "exp_alerts": [
                        expect("RocmRenderNodeRenumbered", condition="render_renumbered", subject=B, pci_bus=B)
                    ],
                },
                {
                    "eval_time": "2m",
                    "alertname": "RocmDeviceNodePermissionDrift",
                    "exp_alerts": [
                        expect(
                            "RocmDeviceNodePermissionDrift", condition="mode_drift", subject="/dev/kfd", path="/dev/kfd"
                        )
                    ],
                },
                {
                    "eval_time": "2m",
                    "alertname": "RocmRenderGroupGidChanged",
                    "exp_alerts": [expect("RocmRenderGroupGidChanged", condition="group_gid_drift", subject="render")],
                },
            ],
        },
        {
            "name": "the catch-all condition alert takes the table's severity and skips covered and info kinds",
            "interval": "1m",
            "input_series": [
                HOST_INFO | {"values": "1x10"},
                series(cond, "1x10", condition="kfd_major_changed", subject="/dev/kfd", severity="critical"),
                series(cond, "1x10", condition="world_writable", subject="/dev/kfd", severity="info"),
                series(cond, "1x10", condition="gpu_missing", subject=A, severity="critical", pci_bus=A),
            ],
            "alert_rule_test": [
                {"eval_time": "4m", "alertname": ALERT_GENERIC, "exp_alerts": []},
                {
                    "eval_time": "5m",
                    "alertname": ALERT_GENERIC,
                    "exp_alerts": [
                        expect(ALERT_GENERIC, condition="kfd_major_changed", subject="/dev/kfd", severity="critical")
                    ],
                },
            ],
        },
        {
            "name": "kernel events fire on the first increase from zero, unknown GPU included; AER split",
            "interval": "1m",
            "input_series": [
                HOST_INFO | {"values": "1x20"},
                series(events, "0 0 1x10", pci_bus=A, **{"class": "gpu_reset_begin"}),
                series(events, "0 0 1x10", pci_bus="unknown", **{"class": "vram_lost"}),
                series(events, "0 0 0 1x10", pci_bus=A, **{"class": "mes_error"}),
                series("rocm_kernel_pcie_aer_errors_total", "0 0 1x10", pci_bus=A, aer_severity="uncorrected_nonfatal"),
                series("rocm_kernel_pcie_aer_errors_total", "0 0 5x10", pci_bus=A, aer_severity="corrected"),
                # init failures happen at boot, before the first scrape: the last-event time says so
                series(events, "1x10", pci_bus=B, **{"class": "probe_fail"}),
                series("rocm_kernel_event_last_timestamp_seconds", "60x10", pci_bus=B, **{"class": "probe_fail"}),
            ],
            "alert_rule_test": [
                {"eval_time": "1m", "alertname": "RocmGpuReset", "exp_alerts": []},
                {
                    "eval_time": "2m",
                    "alertname": "RocmGpuReset",
                    "exp_alerts": [expect("RocmGpuReset", pci_bus=A, **{"class": "gpu_reset_begin"})],
                },
                {
                    "eval_time": "3m",
                    "alertname": "RocmVramLost",
                    "exp_alerts": [expect("RocmVramLost", pci_bus="unknown", **{"class": "vram_lost"})],
                },
                {
                    "eval_time": "4m",
                    "alertname": "RocmRingTimeout",
                    "exp_alerts": [expect("RocmRingTimeout", pci_bus=A, **{"class": "mes_error"})],
                },
                {
                    "eval_time": "3m",
                    "alertname": "RocmPcieAerUncorrected",
                    "exp_alerts": [expect("RocmPcieAerUncorrected", pci_bus=A, aer_severity="uncorrected_nonfatal")],
                },
                {"eval_time": "30m", "alertname": "RocmPcieAerCorrectedErrorsHigh", "exp_alerts": []},
                {
                    "eval_time": "5m",
                    "alertname": "RocmGpuInitFailed",
                    "exp_alerts": [expect("RocmGpuInitFailed", pci_bus=B, **{"class": "probe_fail"})],
                },
                {"eval_time": "70m", "alertname": "RocmGpuInitFailed", "exp_alerts": []},
            ],
        },
        {
            "name": "a page-fault storm is a rate",
            "interval": "1m",
            "input_series": [
                HOST_INFO | {"values": "1x30"},
                series(events, "0+120x30", pci_bus=A, **{"class": "vm_fault"}),
                series(events, "0+60x30", pci_bus=A, **{"class": "vm_fault_suppressed"}),
                series(events, "0+1x30", pci_bus=B, **{"class": "vm_fault"}),
            ],
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": "RocmGpuPageFaultStorm", "exp_alerts": []},
                {
                    "eval_time": "16m",
                    "alertname": "RocmGpuPageFaultStorm",
                    "exp_alerts": [expect("RocmGpuPageFaultStorm", value="3", pci_bus=A)],
                },
            ],
        },
        {
            "name": "the watchdog cannot go quiet: down (named from its last host info), stale, blind, no baseline",
            "interval": "1m",
            "input_series": [
                HOST_INFO | {"values": "1x3 stale"},
                series("up", "1x3 0x10"),
                series("rocm_watchdog_source_stale", "0 1x10", source="sysfs"),
                series("rocm_watchdog_source_up", "1 0x10", source="kernel-log"),
                series("rocm_watchdog_source_up", "1x10", source="devices"),
            ],
            "alert_rule_test": [
                {"eval_time": "4m", "alertname": "RocmWatchdogDown", "exp_alerts": []},
                {"eval_time": "6m", "alertname": "RocmWatchdogDown", "exp_alerts": [expect("RocmWatchdogDown")]},
                {
                    "eval_time": "3m",
                    "alertname": "RocmWatchdogSourceStale",
                    "exp_alerts": [],  # stale for 2m < for: 5m
                },
                {"eval_time": "2m", "alertname": "RocmWatchdogKernelLogDown", "exp_alerts": []},
                {"eval_time": "20m", "alertname": "RocmWatchdogKernelLogDown", "exp_alerts": []},  # target down
            ],
        },
        {
            "name": "stale source, kernel log down, baseline missing on a live exporter",
            "interval": "1m",
            "input_series": [
                HOST_INFO | {"values": "1x30"},
                series("rocm_watchdog_source_stale", "0 1x30", source="sysfs"),
                series("rocm_watchdog_source_up", "1 0x30", source="kernel-log"),
                series("rocm_watchdog_source_up", "1x30", source="devices"),
            ],
            "alert_rule_test": [
                {
                    "eval_time": "7m",
                    "alertname": "RocmWatchdogSourceStale",
                    "exp_alerts": [expect("RocmWatchdogSourceStale", source="sysfs")],
                },
                {
                    "eval_time": "7m",
                    "alertname": "RocmWatchdogKernelLogDown",
                    "exp_alerts": [expect("RocmWatchdogKernelLogDown", source="kernel-log")],
                },
                {
                    "eval_time": "16m",
                    "alertname": "RocmWatchdogBaselineMissing",
                    "exp_alerts": [expect("RocmWatchdogBaselineMissing", source="devices")],
                },
            ],
        },
        {
            # What the exporter exports in each case (tests/test_smi_auto.py): neither tool installed is
            # rocm_watchdog_source_absent{source="smi"} and no up series for the tools; a broken rocm-smi is up 0.
            "name": "a node without either smi tool does not page; an installed tool that fails does",
            "interval": "1m",
            "input_series": [
                HOST_INFO | {"values": "1x30"},
                series("rocm_watchdog_source_up", "1x30", source="sysfs"),
                series("rocm_watchdog_source_absent", "1x30", source="smi"),
                series("rocm_watchdog_source_failures_total", "0x30", source="amd-smi"),
                series("rocm_watchdog_source_failures_total", "0x30", source="rocm-smi"),
                {
                    "series": 'rocm_watchdog_host_info{instance="n2:9862",job="rocm-watchdog",nodename="gpu-node-2"}',
                    "values": "1x30",
                },
                {
                    "series": 'rocm_watchdog_source_up{instance="n2:9862",job="rocm-watchdog",source="rocm-smi"}',
                    "values": "0x30",
                },
            ],
            "alert_rule_test": [
                {
                    "eval_time": "20m",
                    "alertname": "RocmWatchdogSourceFailing",
                    "exp_alerts": [
                        expect(
                            "RocmWatchdogSourceFailing", source="rocm-smi", instance="n2:9862", nodename="gpu-node-2"
                        )
                    ],
                },
                {"eval_time": "20m", "alertname": "RocmWatchdogSourceStale", "exp_alerts": []},
            ],
        },
        {
            "name": "a source whose first run has not finished is pending, not failing (issue 26)",
            "interval": "1m",
            "input_series": [
                HOST_INFO | {"values": "1x30"},
                series("rocm_watchdog_source_up", "0x30", source="amd-smi"),
                series("rocm_watchdog_source_pending", "1x30", source="amd-smi"),
                series("rocm_watchdog_source_up", "0x30", source="kernel-log"),
                series("rocm_watchdog_source_pending", "1x30", source="kernel-log"),
                series("rocm_watchdog_source_up", "0x30", source="rocm-smi"),
                series("rocm_watchdog_source_pending", "0x30", source="rocm-smi"),
            ],
            "alert_rule_test": [
                {
                    "eval_time": "20m",
                    "alertname": "RocmWatchdogSourceFailing",
                    "exp_alerts": [expect("RocmWatchdogSourceFailing", source="rocm-smi")],
                },
                {"eval_time": "20m", "alertname": "RocmWatchdogKernelLogDown", "exp_alerts": []},
            ],
        },
        {
            "name": "a state file the exporter may not read",
            "interval": "1m",
            "input_series": [
                HOST_INFO | {"values": "1x30"},
                series("rocm_watchdog_state_file_unreadable", "1x30", file="baseline.json"),
                series("rocm_watchdog_state_file_unreadable", "0x30", file="conditions.json"),
            ],
            "alert_rule_test": [
                {"eval_time": "3m", "alertname": "RocmWatchdogStateFileUnreadable", "exp_alerts": []},
                {
                    "eval_time": "6m",
                    "alertname": "RocmWatchdogStateFileUnreadable",
                    "exp_alerts": [expect("RocmWatchdogStateFileUnreadable", file="baseline.json")],
                },
            ],
        },
        {
            "name": "unhealthy GPUs: the node count pages a ticket after 1m; an unattributed event says so once",
            "interval": "1m",
            "input_series": [
                HOST_INFO | {"values": "1x20"},
                series("rocm_node_gpus_unhealthy", "0 0 2x5 0x10"),
                series("rocm_gpu_health_reason", "_x3 1x5 _x10", pci_bus=A, reason="node_kernel_event"),
                series("rocm_gpu_health_reason", "_x3 1x5 _x10", pci_bus=B, reason="node_kernel_event"),
                series("rocm_gpu_health_reason", "1x20", pci_bus=B, reason="vram_lost"),
            ],
            "alert_rule_test": [
                {"eval_time": "2m", "alertname": "RocmNodeGpusUnhealthy", "exp_alerts": []},  # for: 1m
                {
                    "eval_time": "3m",
                    "alertname": "RocmNodeGpusUnhealthy",
                    "exp_alerts": [expect("RocmNodeGpusUnhealthy", "2")],
                },
                {"eval_time": "10m", "alertname": "RocmNodeGpusUnhealthy", "exp_alerts": []},
                {"eval_time": "2m", "alertname": "RocmNodeKernelEventUnattributed", "exp_alerts": []},
                {
                    "eval_time": "4m",
                    "alertname": "RocmNodeKernelEventUnattributed",
                    "exp_alerts": [expect("RocmNodeKernelEventUnattributed", "1")],
                },
                {"eval_time": "15m", "alertname": "RocmNodeKernelEventUnattributed", "exp_alerts": []},
            ],
        },
        {
            "name": "no target at all",
            "interval": "1m",
            "input_series": [{"series": 'up{job="node"}', "values": "1x30"}],
            "alert_rule_test": [
                {
                    "eval_time": "20m",
                    "alertname": "RocmWatchdogTargetAbsent",
                    "exp_alerts": [
                        {
                            "exp_labels": {"job": "rocm-watchdog", **rule("RocmWatchdogTargetAbsent")["labels"]},
                            "exp_annotations": rule("RocmWatchdogTargetAbsent")["annotations"],
                        }
                    ],
                }
            ],
        },
    ]


def test_rule_unit_tests(tmp_path: Path) -> None:
    doc = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": cases()}
    path = tmp_path / "rules.test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    run_promtool("test", "rules", str(path))


def test_coverage_rules_find_a_gpu_node_without_exporter(tmp_path: Path) -> None:
    coverage = rules(COVERAGE)
    kube = next(r for r in coverage if r["labels"]["coverage"] == "kube-state-metrics")
    nodex = next(r for r in coverage if r["labels"]["coverage"] == "node-exporter")
    doc = {
        "rule_files": [str(COVERAGE)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": 'kube_node_status_capacity{node="gpu-1",resource="amd_com_gpu"}', "values": "8x30"},
                    {"series": 'kube_node_status_capacity{node="gpu-2",resource="amd_com_gpu"}', "values": "8x30"},
                    {"series": 'kube_node_status_capacity{node="cpu-1",resource="cpu"}', "values": "64x30"},
                    {"series": 'rocm_watchdog_host_info{job="rocm-watchdog",nodename="gpu-1"}', "values": "1x30"},
                    {"series": 'node_uname_info{instance="a:9100",job="node",nodename="gpu-3"}', "values": "1x30"},
                    {"series": 'node_uname_info{instance="b:9100",job="node",nodename="cpu-9"}', "values": "1x30"},
                    {
                        "series": 'node_drm_card_info{instance="a:9100",job="node",card="card1",driver="amdgpu"}',
                        "values": "1x30",
                    },
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "20m",
                        "alertname": "RocmWatchdogMissingOnGpuNode",
                        "exp_alerts": [
                            {
                                "exp_labels": {"node": "gpu-2", **kube["labels"]},
                                "exp_annotations": {
                                    k: v.replace("{{ $labels.node }}", "gpu-2") for k, v in kube["annotations"].items()
                                },
                            },
                            {
                                "exp_labels": {"nodename": "gpu-3", **nodex["labels"]},
                                "exp_annotations": {
                                    k: v.replace("{{ $labels.nodename }}", "gpu-3")
                                    for k, v in nodex["annotations"].items()
                                },
                            },
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "coverage.test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    run_promtool("test", "rules", str(path))


def test_every_alert_has_a_unit_test() -> None:
    tested = {t["alertname"] for case in cases() for t in case["alert_rule_test"] if t["exp_alerts"]}
    # end to end only (test_kernel_lines_fire_their_alerts), or simple copies of a tested shape
    elsewhere = {
        "RocmGpuResetFailed",
        "RocmRasUncorrectableError",
        "RocmRasCorrectableErrorsHigh",
        "RocmRingTimeoutSoft",
        "RocmSmuError",
        "RocmKfdEvictionFailed",
        "RocmFirmwareLoadFailed",
        "RocmFenceFallback",
        "RocmIllegalInstruction",
        "RocmDisplayTimeout",
        "RocmPcieAerCorrectedErrorsHigh",
        "RocmKernelLogRecordsLost",
        "RocmWatchdogStateFileCorrupt",
        "RocmWatchdogStateNotSaved",
    }
    assert {r["alert"] for r in rules()} - tested - elsewhere == set()
    assert not elsewhere & tested


# --- end to end ----------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def binary(*candidates: str) -> str:
    for name in candidates:
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(f"{candidates[0]} is not installed (scripts/test installs the Debian packages)")


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in reversed(started):
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def shortened_rules(tmp_path: Path) -> Path:
    """The shipped rules with `for:` and `keep_firing_for:` shortened, so a test does not wait minutes."""
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        group["interval"] = "1s"
        for r in group["rules"]:
            if "for" in r:
                r["for"] = "2s"
            if "keep_firing_for" in r:
                r["keep_firing_for"] = "5s"
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def start_exporter(root: FakeRoot, kernel_log: Path, processes: list[subprocess.Popen[bytes]]) -> int:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "NODE_NAME": "gpu-node-7"}
    processes.append(
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "exporter",
                "serve",
                f"--web.listen-address=127.0.0.1:{port}",
                f"--path.rootfs={root.root}",
                f"--state.dir={root.state_dir}",
                f"--kernel-log.path={kernel_log}",
                "--no-collector.rocm-smi",
                "--no-collector.amd-smi",
                "--collector.devices.interval=500ms",
                "--collector.sysfs.interval=1s",
                "--log.level=error",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    )
    baseline = root.state_dir / "baseline.json"
    deadline = time.monotonic() + 60
    while not baseline.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert baseline.exists(), "the exporter never wrote its first baseline"
    return port


def start_prometheus(
    tmp_path: Path, exporter_port: int, processes: list[subprocess.Popen[bytes]], am_port: int | None = None
) -> str:
    port = free_port()
    config: dict[str, Any] = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(shortened_rules(tmp_path))],
        "scrape_configs": [
            {"job_name": "rocm-watchdog", "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]}
        ],
    }
    if am_port is not None:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]}
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    processes.append(
        subprocess.Popen(
            [
                binary("prometheus"),
                f"--config.file={path}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    )
    return f"http://127.0.0.1:{port}"


def query(prom: str, promql: str) -> list[dict[str, Any]]:
    try:
        body = requests.get(f"{prom}/api/v1/query", params={"query": promql}, timeout=5).json()
    except (requests.RequestException, ValueError):
        return []
    return list(body.get("data", {}).get("result", []))


def wait_scraped(prom: str, times: int = 2) -> None:
    """Until Prometheus holds ``times`` scrapes of the exporter: counters are then known at 0."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = query(prom, 'count_over_time(rocm_watchdog_host_info{job="rocm-watchdog"}[1m])')
        if got and float(got[0]["value"][1]) >= times:
            return
        time.sleep(0.25)
    pytest.fail("Prometheus never scraped the exporter")


def firing(prom: str) -> list[dict[str, str]]:
    try:
        alerts = requests.get(f"{prom}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    except (requests.RequestException, ValueError, KeyError):
        return []
    return [a["labels"] for a in alerts if a["state"] == "firing"]


def test_permission_drift_pages_through_alertmanager(tmp_path: Path, processes: list[subprocess.Popen[bytes]]) -> None:
    alertmanager = binary("prometheus-alertmanager", "alertmanager")
    root = build_root(tmp_path, [FakeGpu(A, card=1, render=128, kfd_node=1)])
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text("")
    exporter_port = start_exporter(root, kernel_log, processes)

    hook = Webhook()
    am_port = free_port()
    am_config = tmp_path / "alertmanager.yml"
    am_config.write_text(
        yaml.safe_dump(
            {
                "route": {"receiver": "hook", "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"},
                "receivers": [{"name": "hook", "webhook_configs": [{"url": hook.url}]}],
            }
        )
    )
    processes.append(
        subprocess.Popen(
            [
                alertmanager,
                f"--config.file={am_config}",
                f"--storage.path={tmp_path / 'am'}",
                f"--web.listen-address=127.0.0.1:{am_port}",
                "--cluster.listen-address=",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    )
    start_prometheus(tmp_path, exporter_port, processes, am_port)
    try:
        # The drift: /dev/kfd loses its group and mode, as after a lost udev rule.
        root.chmod("kfd", 0o600)
        root.chown("kfd", gid=0)

        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and "RocmDeviceNodePermissionDrift" not in hook.firing():
            time.sleep(0.5)
        assert "RocmDeviceNodePermissionDrift" in hook.firing(), f"alerts received: {hook.received}"
        drift = [dict(k) for k in hook.distinct("firing") if dict(k)["alertname"] == "RocmDeviceNodePermissionDrift"]
        assert {a["condition"] for a in drift} <= {"mode_drift", "gid_drift"}
        for labels in drift:
            assert labels["path"] == "/dev/kfd" and labels["nodename"] == "gpu-node-7"
            assert labels["severity"] == "critical" and labels["watchdog"] == "drift"
        # No false page: nothing else critical fired on this healthy-but-drifted host.
        state = requests.get(f"http://127.0.0.1:{am_port}/api/v2/alerts", timeout=5).json()
        critical = {a["labels"]["alertname"] for a in state if a["labels"].get("severity") == "critical"}
        assert critical == {"RocmDeviceNodePermissionDrift"}, critical
    finally:
        hook.close()


# One kernel-log line per alert (dmesg format, the first GPU named or, for VRAM lost, no device at all).
KERNEL_LINES: dict[str, list[str]] = {
    "RocmGpuReset": [f"amdgpu {A}: amdgpu: GPU reset begin!"],
    "RocmGpuResetFailed": [f"amdgpu {A}: amdgpu: GPU reset(3) failed"],
    "RocmVramLost": ["[drm] VRAM is lost due to GPU reset!"],
    "RocmRingTimeout": [f"amdgpu {A}: amdgpu: ring gfx_0.0.0 timeout, signaled seq=10, emitted seq=12"],
    "RocmRasUncorrectableError": [f"amdgpu {A}: amdgpu: 2 uncorrectable hardware errors detected in umc block"],
    "RocmGpuInitFailed": [f"amdgpu {B}: Fatal error during GPU init"],
    "RocmRingTimeoutSoft": [f"amdgpu {A}: amdgpu: ring gfx_0.0.0 timeout, but soft recovered"],
    "RocmSmuError": [f"amdgpu {A}: amdgpu: SMU is in hanged state, failed to send smu message!"],
    "RocmKfdEvictionFailed": ["amdgpu: Failed to evict process queues"],
    "RocmFirmwareLoadFailed": [f"amdgpu {B}: Direct firmware load for amdgpu/gc_11_0_0_mes.bin failed with error -2"],
    "RocmFenceFallback": [f"amdgpu {A}: Fence fallback timer expired on ring gfx_0.0.0"],
    "RocmIllegalInstruction": [
        f"amdgpu {A}: [drm:gfx_v11_0_bad_op_irq [amdgpu]] *ERROR* Illegal opcode in command stream"
    ],
    "RocmDisplayTimeout": [f"amdgpu {A}: [drm] *ERROR* [CRTC:72:crtc-0] flip_done timed out"],
    "RocmPcieAerUncorrected": [f"pcieport 0000:00:01.1: AER: Uncorrected (Non-Fatal) error received: {A}"],
    "RocmPcieAerCorrectedErrorsHigh": [f"pcieport 0000:00:01.1: AER: Corrected error received: {A}"] * 11,
    "RocmRasCorrectableErrorsHigh": [f"amdgpu {A}: amdgpu: 4 correctable hardware errors detected in gfx block"] * 11,
    "RocmGpuPageFaultStorm": ["gmc_v11_0_process_interrupt: 5000 callbacks suppressed"],
}


def test_kernel_lines_fire_their_alerts(tmp_path: Path, processes: list[subprocess.Popen[bytes]]) -> None:
    """Through the exporter's real output: counters exported at 0 (the unknown GPU too) and scraped before the
    first event, then one line in per alert, and each alert fires with the GPU the line names."""
    root = build_root(
        tmp_path, [FakeGpu(A, card=1, render=128, kfd_node=1), FakeGpu(B, card=2, render=129, kfd_node=2)]
    )
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text("[    1.000000] Linux version 6.8.0 (fake)\n")
    prom = start_prometheus(tmp_path, start_exporter(root, kernel_log, processes), processes)
    wait_scraped(prom)
    lines = [line for batch in KERNEL_LINES.values() for line in batch]
    with kernel_log.open("a") as f:
        for i, line in enumerate(lines):
            f.write(f"[{100 + i * 0.001:12.6f}] {line}\n")

    expected = set(KERNEL_LINES) - {"RocmKfdEvictionFailed"}
    deadline = time.monotonic() + 90
    got: list[dict[str, str]] = []
    while time.monotonic() < deadline:
        got = firing(prom)
        if expected | {"RocmKfdEvictionFailed"} <= {a["alertname"] for a in got}:
            break
        time.sleep(0.5)
    fired = {a["alertname"]: a for a in got}
    assert set(KERNEL_LINES) <= set(fired), f"never fired: {sorted(set(KERNEL_LINES) - set(fired))}"
    assert fired["RocmVramLost"]["pci_bus"] == "unknown"  # two GPUs, the line names none
    assert fired["RocmGpuInitFailed"]["pci_bus"] == B
    assert fired["RocmPcieAerUncorrected"]["pci_bus"] == A
    for name in expected - {"RocmVramLost", "RocmGpuInitFailed", "RocmFirmwareLoadFailed", "RocmGpuPageFaultStorm"}:
        assert fired[name]["pci_bus"] == A, (name, fired[name])
    for a in got:
        assert a["nodename"] == "gpu-node-7" and a["severity"] in ("critical", "warning")
    # the exporter's own health stayed quiet
    assert not [a for a in got if a["watchdog"] == "self"], got


def test_three_changes_on_an_8_gpu_host_give_three_alerts(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """The issue's measurement (34 alerts, 12 critical, before causes were grouped): a render gid change, a GPU
    removed (the others renumbered) and /dev/kfd made 0666 on one 8-GPU host give one alert per cause."""
    from test_causes import BDFS, eight_gpus, remove_first_gpu

    root = eight_gpus(tmp_path)
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text("")
    prom = start_prometheus(tmp_path, start_exporter(root, kernel_log, processes), processes)
    wait_scraped(prom)
    root.set_gid("render", 110)
    root.chmod("kfd", 0o666)
    remove_first_gpu(root)

    expected = {
        ("RocmRenderGroupGidChanged", "render"),
        ("RocmGpuMissing", BDFS[0]),
        ("RocmDeviceNodePermissionDrift", "/dev/kfd"),
    }
    got: set[tuple[str, str]] = set()
    health: set[tuple[str, str]] = set()
    deadline = time.monotonic() + 60

    def pages() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
        # the health verdict's alert is for automation (the example routes it to a remediation webhook), not a page
        alerts = firing(prom)
        people = {(a["alertname"], a.get("subject", "")) for a in alerts if a["watchdog"] != "health"}
        return people, {(a["alertname"], a.get("nodename", "")) for a in alerts if a["watchdog"] == "health"}

    while time.monotonic() < deadline:
        got, health = pages()
        if expected <= got:
            time.sleep(3)  # anything else would fire within a few more evaluations
            got, health = pages()
            break
        time.sleep(0.5)
    assert got == expected, got
    assert health <= {("RocmNodeGpusUnhealthy", "gpu-node-7")}, health  # at most one, for the node
