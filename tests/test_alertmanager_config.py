"""The shipped Alertmanager example (alerts/alertmanager.example.yml): amtool accepts it, it routes by severity, its
inhibitions name only alerts and labels that alerts/rocm-watchdog.rules.yml has, and a real Alertmanager loaded
with it inhibits what its comments say."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from fleet import (
    ALERTMANAGER_CONFIG,
    RULES,
    MissingBinary,
    binary,
    free_ports,
    ready,
    redirect_alertmanager_config,
    start_alertmanager,
    stop,
    wait_until,
)
from webhook import Webhook

MATCHER = re.compile(r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*$')
PLAIN_ALTERNATION = re.compile(r"^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$")

# What the RocmWatchdogDown inhibition is meant to silence, by the label it targets (rules decide the label).
WATCHDOG_LABEL = {
    "RocmGpuMissing": "drift",
    "RocmRenderNodeRenumbered": "drift",
    "RocmDeviceNodePermissionDrift": "drift",
    "RocmRenderGroupGidChanged": "drift",
    "RocmDeviceCondition": "drift",
    "RocmWatchdogSourceStale": "self",
}


def need(*names: str) -> str:
    try:
        return binary(*names)
    except MissingBinary as exc:
        pytest.fail(str(exc))


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([need("amtool"), *args], capture_output=True, text=True, timeout=60)


def example() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    return doc


def rule_labels() -> dict[str, dict[str, str]]:
    """alertname -> the labels the rule sets (the shipped rules file)."""
    doc = yaml.safe_load(RULES.read_text())
    return {
        rule["alert"]: {k: str(v) for k, v in rule.get("labels", {}).items()}
        for group in doc["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }


def parse_matcher(text: str) -> tuple[str, str, str]:
    m = MATCHER.match(text)
    assert m, f"cannot read the matcher {text!r} (expected name, operator, double-quoted value)"
    return m[1], m[2], m[3]


def named_values(op: str, value: str, where: str) -> list[str]:
    """The label values a matcher names: the value itself, or each alternative of a plain ``A|B`` regex."""
    if op in ("=~", "!~"):
        assert PLAIN_ALTERNATION.match(value), f"{where}: regex {value!r} is not a plain A|B list, cannot check it"
        return value.split("|")
    return [value]


def test_amtool_accepts_the_example() -> None:
    proc = amtool("check-config", str(ALERTMANAGER_CONFIG))
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (["alertname=RocmGpuMissing", "severity=critical", "cause=gpu_missing"], "pager"),
        (["alertname=RocmDeviceCondition", "severity=warning", "cause=by_path_missing"], "tickets"),
        (["alertname=SomethingElse"], "tickets"),  # no severity: still reaches a human
        # the health verdict goes to automation only: its root cause already reaches a human
        (
            ["alertname=RocmNodeGpusUnhealthy", "severity=warning", "watchdog=health", "cause=gpu_unhealthy"],
            "remediation",
        ),
    ],
)
def test_routes_by_severity(labels: list[str], receiver: str) -> None:
    proc = amtool("config", "routes", "test", f"--config.file={ALERTMANAGER_CONFIG}", *labels)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == receiver


def test_groups_by_instance_and_cause_and_sends_resolved() -> None:
    doc = example()
    assert doc["route"]["group_by"] == ["instance", "cause"]
    hooks = [hook for receiver in doc["receivers"] for hook in receiver.get("webhook_configs", [])]
    assert hooks and all(hook.get("send_resolved") is True for hook in hooks)


def test_inhibitions_name_only_alerts_and_labels_the_rules_have() -> None:
    rules = rule_labels()
    assert "RocmWatchdogDown" in rules, (
        f"{RULES.name} has no RocmWatchdogDown alert yet: the example's second inhibition needs it "
        "(up == 0 for the exporter's target, with the watchdog and cause labels)"
    )
    set_values: dict[str, set[str]] = {}
    for labels in rules.values():
        for key, value in labels.items():
            set_values.setdefault(key, set()).add(value)
    problems: list[str] = []
    for i, rule in enumerate(example()["inhibit_rules"]):
        for side in ("source_matchers", "target_matchers"):
            for text in rule.get(side, []):
                name, op, value = parse_matcher(text)
                where = f"inhibit_rules[{i}].{side} {text}"
                if name == "alertname":
                    problems += [
                        f"{where}: no alert {v} in {RULES.name}"
                        for v in named_values(op, value, where)
                        if v not in rules
                    ]
                elif name not in set_values:
                    problems.append(f"{where}: no rule in {RULES.name} sets the label {name}")
                else:
                    problems += [
                        f"{where}: no rule sets {name}={v!r} (rules set {sorted(set_values[name])})"
                        for v in named_values(op, value, where)
                        if v not in set_values[name]
                    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("alertname", "watchdog"), sorted(WATCHDOG_LABEL.items()))
def test_alerts_silenced_while_the_exporter_is_down_carry_the_label_the_inhibition_targets(
    alertname: str, watchdog: str
) -> None:
    rules = rule_labels()
    assert alertname in rules, f"{RULES.name} has no {alertname}"
    assert rules[alertname].get("watchdog") == watchdog, f"{alertname} should carry watchdog: {watchdog}"


# --- a real Alertmanager --------------------------------------------------------------------------------


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    need("prometheus-alertmanager", "alertmanager")
    hooks = {name: Webhook(name) for name in ("pager", "tickets", "remediation")}
    config = tmp_path / "alertmanager.yml"
    doc = redirect_alertmanager_config(example(), {name: hook.url for name, hook in hooks.items()})
    config.write_text(yaml.safe_dump(doc))
    (port,) = free_ports(1)
    with (tmp_path / "alertmanager.log").open("wb") as log:
        proc = start_alertmanager(config, port, tmp_path / "am", log)
        url = f"http://127.0.0.1:{port}"
        try:
            assert wait_until(lambda: proc.poll() is not None or ready(f"{url}/-/ready"), 30), "Alertmanager not ready"
            assert proc.poll() is None, (tmp_path / "alertmanager.log").read_text()
            yield url
        finally:
            stop([proc])
            for hook in hooks.values():
                hook.close()


# (labels, inhibited?) -- the node names are instances, as Prometheus sets them
INHIBITION_CASES: list[tuple[dict[str, str], bool]] = [
    # 1. a missing GPU silences that GPU's other alerts on that node only
    ({"alertname": "RocmGpuMissing", "instance": "n1:9862", "pci_bus": "0000:03:00.0", "watchdog": "drift"}, False),
    ({"alertname": "RocmGpuReset", "instance": "n1:9862", "pci_bus": "0000:03:00.0", "watchdog": "kernel"}, True),
    ({"alertname": "RocmGpuReset", "instance": "n1:9862", "pci_bus": "0000:83:00.0", "watchdog": "kernel"}, False),
    ({"alertname": "RocmRenderGroupGidChanged", "instance": "n1:9862", "watchdog": "drift"}, False),
    ({"alertname": "RocmGpuReset", "instance": "n2:9862", "pci_bus": "0000:03:00.0", "watchdog": "kernel"}, False),
    # 2. a dead exporter silences its node's drift and self alerts, not its kernel alerts, not other nodes
    ({"alertname": "RocmWatchdogDown", "instance": "n3:9862", "watchdog": "self"}, False),
    ({"alertname": "RocmDeviceNodePermissionDrift", "instance": "n3:9862", "watchdog": "drift"}, True),
    ({"alertname": "RocmWatchdogSourceStale", "instance": "n3:9862", "watchdog": "self"}, True),
    ({"alertname": "RocmGpuReset", "instance": "n3:9862", "pci_bus": "0000:03:00.0", "watchdog": "kernel"}, False),
    ({"alertname": "RocmDeviceNodePermissionDrift", "instance": "n4:9862", "watchdog": "drift"}, False),
]


def test_inhibitions_in_a_real_alertmanager(alertmanager: str) -> None:
    posted = [{"labels": {**labels, "severity": "critical", "cause": "test"}} for labels, _ in INHIBITION_CASES]
    requests.post(f"{alertmanager}/api/v2/alerts", json=posted, timeout=5).raise_for_status()
    expected = {
        frozenset({**labels, "severity": "critical", "cause": "test"}.items()): inh for labels, inh in INHIBITION_CASES
    }

    def states() -> dict[frozenset[tuple[str, str]], bool]:
        alerts = requests.get(f"{alertmanager}/api/v2/alerts", timeout=5).json()
        return {frozenset(a["labels"].items()): bool(a["status"]["inhibitedBy"]) for a in alerts}

    wait_until(lambda: states() == expected, 20, interval=0.3)
    got = states()
    wrong = [
        f"{dict(labels)['alertname']} {dict(labels)}: {'inhibited' if got.get(labels) else 'not inhibited'}"
        for labels, inhibited in expected.items()
        if got.get(labels) != inhibited
    ]
    assert not wrong, "\n".join(wrong)
