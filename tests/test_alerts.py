"""Alert rules: promtool checks and unit tests, every metric they use exists, every runbook exists, and one
page end to end: a chmod on a fake host -> rocm-watchdog -> real Prometheus -> real Alertmanager -> webhook."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from fakeroot import FakeGpu, build_root
from promtool import promtool

from exporter.metrics import names

PROJECT = Path(__file__).resolve().parents[1]
RULES = PROJECT / "alerts" / "rocm-watchdog.rules.yml"
RULE_TESTS = sorted((PROJECT / "alerts" / "tests").glob("*.yml"))
RUNBOOKS = PROJECT / "docs" / "runbooks.md"


def run_promtool(*args: str) -> None:
    proc = subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rules_are_valid() -> None:
    run_promtool("check", "rules", str(RULES))


@pytest.mark.parametrize("path", RULE_TESTS, ids=lambda p: p.name)
def test_rule_unit_tests(path: Path) -> None:
    run_promtool("test", "rules", str(path))


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_every_metric_in_the_rules_is_exported() -> None:
    exported = {spec.name for spec in vars(names).values() if isinstance(spec, names.Spec)}
    for rule in rules():
        for metric in re.findall(r"\b(rocm_[a-z_]+)\b", rule["expr"]):
            assert metric in exported, f"{rule['alert']} uses {metric}, which the exporter does not export"


def test_every_alert_has_a_runbook_section_and_a_severity() -> None:
    anchors = {line[3:].strip().lower() for line in RUNBOOKS.read_text().splitlines() if line.startswith("## ")}
    for rule in rules():
        assert rule["labels"]["severity"] in ("critical", "warning", "{{ $labels.severity }}")
        assert rule["annotations"]["runbook_url"].endswith("#" + rule["alert"].lower())
        assert rule["alert"].lower() in anchors, f"docs/runbooks.md has no section for {rule['alert']}"


def test_every_alert_has_a_unit_test() -> None:
    tested: set[str] = set()
    for path in RULE_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            tested.update(t["alertname"] for t in case.get("alert_rule_test", []) if t.get("exp_alerts"))
    untested = (
        {rule["alert"] for rule in rules()}
        - tested
        - {
            "RocmGpuResetFailed",
            "RocmRasCorrectableErrorsHigh",
            "RocmKernelLogRecordsLost",
            "RocmRenderGroupGidChanged",
        }
    )
    assert not untested, f"alerts never seen firing in a unit test: {sorted(untested)}"


# --- end to end --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Webhook:
    """An Alertmanager webhook receiver on loopback that keeps what it was sent."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                outer.received.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def firing(self) -> set[str]:
        return {a["labels"]["alertname"] for msg in self.received for a in msg["alerts"] if a["status"] == "firing"}


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


def test_permission_drift_pages_through_alertmanager(tmp_path: Path, processes: list[subprocess.Popen[bytes]]) -> None:
    prometheus = binary("prometheus")
    alertmanager = binary("prometheus-alertmanager", "alertmanager")
    root = build_root(tmp_path, [FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1)])
    (root.root / "kern.log").write_text("")

    exporter_port = free_port()
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    processes.append(
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "exporter",
                "serve",
                f"--web.listen-address=127.0.0.1:{exporter_port}",
                f"--path.rootfs={root.root}",
                f"--state.dir={root.state_dir}",
                f"--kernel-log.path={root.root / 'kern.log'}",
                "--no-collector.rocm-smi",
                "--no-collector.amd-smi",
                "--collector.devices.interval=500ms",
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

    hook = Webhook()
    am_port = free_port()
    am_config = tmp_path / "alertmanager.yml"
    am_config.write_text(
        yaml.safe_dump(
            {
                "route": {"receiver": "hook", "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"},
                "receivers": [{"name": "hook", "webhook_configs": [{"url": f"http://127.0.0.1:{hook.port}/"}]}],
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
    # The shipped rules, with their `for:` shortened so the test does not wait minutes.
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "2s"
    rules_file = tmp_path / "rules.yml"
    rules_file.write_text(yaml.safe_dump(doc))
    prom_port = free_port()
    prom_config = tmp_path / "prometheus.yml"
    prom_config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rules_file)],
                "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
                "scrape_configs": [
                    {"job_name": "rocm-watchdog", "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]}
                ],
            }
        )
    )
    processes.append(
        subprocess.Popen(
            [
                prometheus,
                f"--config.file={prom_config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    )

    # The drift: /dev/kfd loses its group and mode, as after a lost udev rule.
    root.chmod("kfd", 0o600)
    root.chown("kfd", gid=0)

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and "RocmDeviceNodePermissionDrift" not in hook.firing():
        time.sleep(0.5)
    assert "RocmDeviceNodePermissionDrift" in hook.firing(), f"alerts received: {hook.received}"
    alert = next(
        a for msg in hook.received for a in msg["alerts"] if a["labels"]["alertname"] == "RocmDeviceNodePermissionDrift"
    )
    assert alert["labels"]["path"] == "/dev/kfd"
    assert alert["labels"]["severity"] == "critical"
    assert alert["annotations"]["runbook_url"].endswith("#rocmdevicenodepermissiondrift")
    # No false page: nothing else critical fired on this healthy-but-drifted host.
    state = requests.get(f"http://127.0.0.1:{am_port}/api/v2/alerts", timeout=5).json()
    critical = {a["labels"]["alertname"] for a in state if a["labels"].get("severity") == "critical"}
    assert critical == {"RocmDeviceNodePermissionDrift"}, critical
