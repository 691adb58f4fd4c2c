"""Direct push to Alertmanager (--alertmanager.url): the pure planner over fixed conditions, then end to end: a chmod
on a fake host -> ``rocm-watchdog serve`` -> a real Alertmanager (beside a URL that never answers) -> a webhook; the
fix resolves it, and so does SIGTERM. ``once`` and ``check`` never push."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from fakeroot import FakeGpu, build_root
from msgspec.structs import replace
from prometheus_client import generate_latest
from promtool import check_metrics
from structlog.testing import capture_logs
from webhook import Webhook

from exporter.cli import ConfigError, build_config, build_parser
from exporter.config import Config
from exporter.metrics.collector import make_registry
from exporter.model.devices import Condition, DevicesSnapshot, DeviceWatchState
from exporter.model.gpu import SysfsSnapshot
from exporter.sinks.alertmanager import (
    ENDS_AT_RESENDS,
    Alert,
    AlertmanagerPusher,
    describe_error,
    generator_url,
    next_due,
    plan,
    resolve_all,
)
from exporter.sinks.status import PushStatus, endpoint_label
from exporter.store import SnapshotStore
from exporter.watchdog.conditions import KINDS

PROJECT = Path(__file__).resolve().parents[1]
NOW = 1_800_000_000.0
RESEND = 60.0
CONFIG = Config(nodename="gpu-node-7", alertmanager_urls=("http://127.0.0.1:9093",))


def cond(kind: str, subject: str, **kw: Any) -> Condition:
    fields: dict[str, Any] = {"active": True, "since": NOW - 30, "severity": KINDS[kind].severity, **kw}
    return Condition(kind, subject, **fields)


def state(*conditions: Condition) -> DeviceWatchState:
    return DeviceWatchState(SysfsSnapshot(), DevicesSnapshot(), None, conditions, NOW)


KFD_MODE = cond(
    "mode_drift",
    "/dev/kfd",
    message="/dev/kfd: mode 0660 in the baseline, now 0600",
    details=(("baseline", "0660"), ("now", "0600")),
)
GPU_GONE = cond("gpu_missing", "0000:03:00.0", pci_bus="0000:03:00.0", message="GPU 0000:03:00.0 is gone")


def only(alerts: tuple[Alert, ...]) -> Alert:
    assert len(alerts) == 1, alerts
    return alerts[0]


# --- the planner (pure) ------------------------------------------------------------------------------------------


def test_an_alert_carries_the_rules_labels_and_annotations() -> None:
    alerts, sent = plan(state(KFD_MODE), {}, NOW, CONFIG, "http://gpu-node-7:9862/metrics")
    alert = only(alerts)
    assert dict(alert.labels) == {
        "alertname": "RocmDeviceNodePermissionDrift",
        "severity": "critical",
        "watchdog": "drift",
        "cause": "mode_drift",
        "condition": "mode_drift",
        "subject": "/dev/kfd",
        "path": "/dev/kfd",
        "nodename": "gpu-node-7",
        "instance": "gpu-node-7",
    }
    notes = dict(alert.annotations)
    assert notes["summary"] == "/dev/kfd: mode 0660 in the baseline, now 0600"
    assert "udevadm trigger" in notes["fix"]
    assert notes["runbook_url"] == (
        "https://github.com/rocm-watchdog/rocm-watchdog/blob/main/docs/runbooks.md#rocmdevicenodepermissiondrift"
    )
    assert "gpu-node-7" in notes["description"]
    body = alert.to_json()
    assert (body["startsAt"], body["endsAt"]) == ("2027-01-15T07:59:30.000Z", "2027-01-15T08:03:00.000Z")
    assert alert.starts_at == NOW - 30
    assert alert.ends_at == NOW + ENDS_AT_RESENDS * RESEND  # ahead: two lost pushes in a row do not resolve it
    assert body["generatorURL"] == "http://gpu-node-7:9862/metrics"
    assert set(sent) == {alert.labels}


def test_gpu_alerts_carry_pci_bus_and_the_generic_alert_its_severity() -> None:
    by_path = cond("by_path_missing", "/dev/dri/by-path/pci-0000:03:00.0-render", pci_bus="0000:03:00.0")
    alerts, _ = plan(state(GPU_GONE, by_path), {}, NOW, CONFIG)
    labels = {a.label("alertname"): dict(a.labels) for a in alerts}
    assert labels["RocmGpuMissing"]["pci_bus"] == "0000:03:00.0"
    assert labels["RocmGpuMissing"]["severity"] == "critical"
    assert "path" not in labels["RocmGpuMissing"]
    generic = labels["RocmDeviceCondition"]
    assert (generic["severity"], generic["condition"], generic["cause"]) == (
        "warning",
        "by_path_missing",
        "by_path_missing",
    )
    assert "path" not in generic  # the generic rule mixes subjects: it keeps them in `subject` only


def test_consequences_info_kinds_and_inactive_conditions_never_alert() -> None:
    consequence = cond(
        "render_renumbered", "0000:04:00.0", pci_bus="0000:04:00.0", cause=("gpu_missing", "0000:03:00.0")
    )
    info = cond("world_writable", "/dev/dri/renderD128")
    cleared = replace(KFD_MODE, active=False)
    alerts, sent = plan(state(GPU_GONE, consequence, info, cleared), {}, NOW, CONFIG)
    assert [a.label("alertname") for a in alerts] == ["RocmGpuMissing"]
    assert len(sent) == 1


def test_extra_labels_are_added_and_may_replace_all_but_alertname() -> None:
    config = replace(
        CONFIG,
        alertmanager_labels=(("cluster", "mi300-a"), ("instance", "10.0.0.7:9862"), ("alertname", "Other")),
    )
    labels = dict(only(plan(state(KFD_MODE), {}, NOW, config)[0]).labels)
    assert labels["cluster"] == "mi300-a"
    assert labels["instance"] == "10.0.0.7:9862"
    assert labels["alertname"] == "RocmDeviceNodePermissionDrift"


def test_resent_every_interval_quiet_in_between_and_again_when_it_changes() -> None:
    _, sent = plan(state(KFD_MODE), {}, NOW, CONFIG)
    assert next_due(sent, RESEND) == NOW + RESEND
    quiet, sent_quiet = plan(state(KFD_MODE), sent, NOW + 10, CONFIG)
    assert quiet == () and sent_quiet == sent
    again, sent_again = plan(state(KFD_MODE), sent, NOW + RESEND, CONFIG)
    assert only(again).ends_at == NOW + RESEND + ENDS_AT_RESENDS * RESEND
    assert only(again).starts_at == KFD_MODE.since  # the same alert, not a new one
    assert next_due(sent_again, RESEND) == NOW + 2 * RESEND
    worse = replace(KFD_MODE, message="/dev/kfd: mode 0660 in the baseline, now 0666")
    assert only(plan(state(worse), sent, NOW + 10, CONFIG)[0]).annotations != only(again).annotations


def test_a_cleared_condition_is_posted_once_resolved() -> None:
    _, sent = plan(state(KFD_MODE, GPU_GONE), {}, NOW, CONFIG)
    alerts, after = plan(state(GPU_GONE, replace(KFD_MODE, active=False)), sent, NOW + 5, CONFIG)
    resolved = only(alerts)
    assert resolved.label("alertname") == "RocmDeviceNodePermissionDrift"
    assert resolved.ends_at == NOW + 5 and resolved.starts_at == KFD_MODE.since
    assert [dict(k)["alertname"] for k in after] == ["RocmGpuMissing"]
    # It is gone for good: the next plan does not resolve it again.
    assert plan(state(GPU_GONE), after, NOW + 6, CONFIG)[0] == ()
    # A condition that becomes a consequence of another stops alerting on its own too.
    folded = replace(KFD_MODE, cause=("group_gid_drift", "render"))
    assert only(plan(state(GPU_GONE, folded), sent, NOW + 5, CONFIG)[0]).ends_at == NOW + 5


def test_without_fresh_devices_data_nothing_is_posted_or_resolved() -> None:
    _, sent = plan(state(KFD_MODE), {}, NOW, CONFIG)
    assert plan(None, sent, NOW + 500, CONFIG) == ((), sent)


def test_stop_resolves_everything_held() -> None:
    _, sent = plan(state(KFD_MODE, GPU_GONE), {}, NOW, CONFIG)
    resolved = resolve_all(sent, NOW + 1)
    assert {a.label("alertname") for a in resolved} == {"RocmGpuMissing", "RocmDeviceNodePermissionDrift"}
    assert all(a.ends_at == NOW + 1 for a in resolved)


def test_alertmanager_label_never_shows_credentials_or_paths() -> None:
    assert endpoint_label("https://user:secret@am.example.com/prefix/") == "https://am.example.com:443"
    assert endpoint_label("http://127.0.0.1:9093") == "http://127.0.0.1:9093"
    assert endpoint_label("http://[::1]:9093/x?token=1") == "http://[::1]:9093"
    assert generator_url(":9862", 9862, "gpu-node-7", tls=True) == "https://gpu-node-7:9862/metrics"
    assert generator_url("127.0.0.1:0", 40001, "gpu-node-7", tls=False) == "http://127.0.0.1:40001/metrics"


def test_a_refused_connection_is_one_stable_error() -> None:
    port = free_port()  # nothing listens there
    errors = set()
    for _ in range(2):
        with pytest.raises(requests.RequestException) as err:
            requests.post(f"http://127.0.0.1:{port}/api/v2/alerts", json=[], timeout=2)
        errors.add(describe_error(err.value, 2))
    assert errors == {"connection failed: Connection refused"}


def test_push_health_is_exported_only_when_pushing() -> None:
    store = SnapshotStore()
    assert "alertmanager" not in generate_latest(make_registry(store, CONFIG, clock=lambda: NOW)).decode()
    status = PushStatus(("https://user:secret@am.example.com/prefix", "http://127.0.0.1:9093"))
    status.record_failure("https://am.example.com:443", "no answer within 10s")
    status.record_success("http://127.0.0.1:9093", NOW)
    status.set_firing(2)
    registry = make_registry(store, CONFIG, clock=lambda: NOW, push=status)
    text = generate_latest(registry).decode()
    check_metrics(text)
    assert "secret" not in text and "prefix" not in text
    value = registry.get_sample_value
    labels = {"alertmanager": "https://am.example.com:443"}
    assert value("rocm_watchdog_alertmanager_pushes_total", {**labels, "result": "failure"}) == 1
    assert value("rocm_watchdog_alertmanager_pushes_total", {**labels, "result": "success"}) == 0
    assert value("rocm_watchdog_alertmanager_last_success_timestamp_seconds", labels) is None
    assert (
        value("rocm_watchdog_alertmanager_last_success_timestamp_seconds", {"alertmanager": "http://127.0.0.1:9093"})
        == NOW
    )
    assert value("rocm_watchdog_alertmanager_alerts_firing") == 2


def test_a_failing_alertmanager_is_retried_logged_once_and_its_recovery_too() -> None:
    """Against a loopback server that answers 503 three times, then accepts: the pusher's own threads, a real store."""
    posts: list[list[dict[str, Any]]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            posts.append(body)
            self.send_response(503 if len(posts) <= 3 else 200)
            self.end_headers()
            self.wfile.write(b"not ready" if len(posts) <= 3 else b"")

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    config = replace(CONFIG, alertmanager_urls=(url,), alertmanager_resend_seconds=0.3, alertmanager_timeout_seconds=2)
    store = SnapshotStore()
    store.register("devices", 0.5, 1e9)
    status = PushStatus(config.alertmanager_urls)
    pusher = AlertmanagerPusher(store, config, status)
    try:
        with capture_logs() as logs:
            pusher.start()
            store.record_success("devices", state(replace(KFD_MODE, since=time.time())), 0.01, time.time())
            wait_until("accepted after the retries", lambda: status.view().targets[0].successes, 10)
            pusher.stop()
    finally:
        server.shutdown()
        server.server_close()
    target = status.view().targets[0]
    assert target.failures == 3 and target.last_error is None
    # Retries repeat the same failure at debug level only.
    events = [(e["event"], e.get("error")) for e in logs if e["log_level"] != "debug"]
    assert events == [
        ("alertmanager_push_started", None),
        ("alertmanager_push_failed", "HTTP 503: not ready"),
        ("alertmanager_push_recovered", None),
        ("alertmanager_push_stopped", None),
    ], events
    # The last POST is the stop's: the alert resolved (endsAt no later than now).
    last = posts[-1][0]
    assert last["labels"]["alertname"] == "RocmDeviceNodePermissionDrift"
    assert datetime.fromisoformat(last["endsAt"].replace("Z", "+00:00")).timestamp() <= time.time()


def test_errors_never_carry_credentials() -> None:
    try:
        requests.post("http://user:secret@127.0.0.1:notaport/api/v2/alerts", json=[], timeout=1)
    except (requests.RequestException, ValueError) as exc:
        assert "secret" not in describe_error(exc, 1)
    else:
        pytest.fail("an invalid URL was accepted")


def config_of(*argv: str) -> Config:
    return build_config(build_parser().parse_args(["serve", *argv]))


def test_push_flags_are_checked() -> None:
    config = config_of(
        "--alertmanager.url=http://a:9093/,https://b", "--alertmanager.url=http://c:9093", "--alertmanager.label=c=x"
    )
    assert config.alertmanager_urls == ("http://a:9093", "https://b", "http://c:9093")
    with pytest.raises(ConfigError) as err:
        config_of("--alertmanager.url=http://a:99999", "--no-collector.devices")
    assert any("port" in p for p in err.value.problems)
    with pytest.raises(ConfigError) as err:
        config_of("--alertmanager.url=http://a:9093", "--no-collector.devices")
    assert any("--no-collector.devices" in p for p in err.value.problems)


# --- end to end ----------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(what: str, check: Callable[[], Any], limit_seconds: float, every: float = 0.1) -> Any:
    """Poll ``check`` until it returns something truthy; bounded in time and in count."""
    deadline = time.monotonic() + limit_seconds
    for _ in range(int(limit_seconds / every) + 1):
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            break
        time.sleep(every)
    raise AssertionError(f"{what}: not within {limit_seconds:g}s")


@pytest.fixture
def blackhole() -> Iterator[int]:
    """A loopback port that accepts connections and never answers: a hung Alertmanager."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield int(s.getsockname()[1])


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[tuple[int, Webhook]]:
    hook = Webhook("pager")
    port = free_port()
    config = tmp_path / "alertmanager.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "route": {"receiver": "pager", "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"},
                "receivers": [{"name": "pager", "webhook_configs": [{"url": hook.url, "send_resolved": True}]}],
            }
        )
    )
    proc = subprocess.Popen(
        [
            "prometheus-alertmanager",
            f"--config.file={config}",
            f"--storage.path={tmp_path / 'am'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def ready() -> bool:
        try:
            return requests.get(f"http://127.0.0.1:{port}/-/ready", timeout=1).ok
        except requests.RequestException:
            return False

    try:
        wait_until("alertmanager ready", ready, 20)
        yield port, hook
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        hook.close()


def am_alerts(port: int) -> list[dict[str, Any]]:
    alerts: list[dict[str, Any]] = requests.get(f"http://127.0.0.1:{port}/api/v2/alerts", timeout=5).json()
    return [a for a in alerts if a["labels"].get("nodename") == "gpu-node-7"]


def hook_alerts(hook: Webhook, status: str) -> list[dict[str, Any]]:
    return [
        a
        for a in hook.alerts()
        if a["status"] == status and a["labels"].get("alertname") == "RocmDeviceNodePermissionDrift"
    ]


def exporter_argv(command: str, root_dir: Path, state_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "exporter", command,
        f"--path.rootfs={root_dir}",
        f"--state.dir={state_dir}",
        f"--kernel-log.path={root_dir / 'kern.log'}",  # never the machine's /dev/kmsg
        "--no-collector.rocm-smi",
        "--no-collector.amd-smi",
        "--host.name=gpu-node-7",
        *extra,
    ]  # fmt: skip


ENV = {**os.environ, "PYTHONPATH": str(PROJECT), "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}


def test_drift_pages_through_a_pushed_alert_and_resolves_on_fix_and_on_sigterm(
    tmp_path: Path, alertmanager: tuple[int, Webhook], blackhole: int
) -> None:
    am_port, hook = alertmanager
    root = build_root(tmp_path, [FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1)])
    (root.root / "kern.log").write_text("")
    port = free_port()
    dead = f"http://127.0.0.1:{blackhole}"
    log_file = tmp_path / "exporter.log"
    with log_file.open("w") as log_out:
        proc = subprocess.Popen(
            exporter_argv(
                "serve",
                root.root,
                root.state_dir,
                f"--web.listen-address=127.0.0.1:{port}",
                "--collector.devices.interval=500ms",
                # the hung one first: it must not hold the real one back; credentials never reach a log or label
                f"--alertmanager.url={dead},http://pager:secret@127.0.0.1:{am_port}",
                "--alertmanager.label=cluster=test",
                "--alertmanager.timeout=2s",
                "--log.format=json",
            ),
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=log_out,
        )
    try:

        def scrape() -> str:
            try:
                return requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            except requests.RequestException:
                return ""

        wait_until("first baseline", (root.state_dir / "baseline.json").exists, 30)
        wait_until("devices source up", lambda: 'rocm_watchdog_source_up{source="devices"} 1.0' in scrape(), 10)
        assert am_alerts(am_port) == []

        # The drift: /dev/kfd loses its group's access, as after a lost udev rule.
        root.chmod("kfd", 0o600)
        drifted = time.monotonic()
        alert = wait_until("pushed alert in Alertmanager", lambda: am_alerts(am_port), 10)[0]
        assert time.monotonic() - drifted < 5, "a pushed alert should arrive within seconds"
        labels = alert["labels"]
        assert labels == {
            "alertname": "RocmDeviceNodePermissionDrift",
            "severity": "critical",
            "watchdog": "drift",
            "cause": "mode_drift",
            "condition": "mode_drift",
            "subject": "/dev/kfd",
            "path": "/dev/kfd",
            "nodename": "gpu-node-7",
            "instance": "gpu-node-7",
            "cluster": "test",
        }
        assert alert["annotations"]["runbook_url"].endswith("#rocmdevicenodepermissiondrift")
        assert "udevadm" in alert["annotations"]["fix"]
        ends_at = datetime.fromisoformat(alert["endsAt"].replace("Z", "+00:00")).timestamp()
        assert ends_at > time.time() + 2 * RESEND, "endsAt is three resend intervals ahead"
        assert alert["generatorURL"] == f"http://127.0.0.1:{port}/metrics"
        wait_until("webhook notified firing", lambda: hook_alerts(hook, "firing"), 10)

        # The hung Alertmanager times out and counts as a failure; the real one's pushes succeed.
        text = wait_until(
            "a failed push to the hung Alertmanager",
            lambda: (t := scrape()) and f'alertmanager="{dead}",result="failure"}} 0.0' not in t and t,
            10,
        )
        assert f'rocm_watchdog_alertmanager_pushes_total{{alertmanager="{dead}",result="failure"}}' in text
        assert (
            f'rocm_watchdog_alertmanager_pushes_total{{alertmanager="http://127.0.0.1:{am_port}",result="failure"}} 0.0'
            in text
        )
        assert "rocm_watchdog_alertmanager_alerts_firing 1.0" in text
        assert "secret" not in text

        # The fix resolves it.
        root.chmod("kfd", 0o660)
        wait_until("webhook notified resolved", lambda: hook_alerts(hook, "resolved"), 10)
        wait_until("alert gone from Alertmanager", lambda: not am_alerts(am_port), 5)

        # Drift again, then a clean stop resolves it too.
        fired_before = len(hook_alerts(hook, "firing"))
        root.chmod("kfd", 0o600)
        wait_until("pushed again", lambda: am_alerts(am_port), 10)
        # Alertmanager swallows a firing and resolved pair that falls within one group interval: page first.
        wait_until("webhook notified firing again", lambda: len(hook_alerts(hook, "firing")) > fired_before, 10)
        resolved_before = len(hook_alerts(hook, "resolved"))
        proc.send_signal(signal.SIGTERM)
        stopping = time.monotonic()
        assert proc.wait(timeout=15) == 0
        assert time.monotonic() - stopping < 8, "stop is bounded by --alertmanager.timeout"
        wait_until("alert resolved by the stop", lambda: not am_alerts(am_port), 5)
        wait_until("webhook notified resolved again", lambda: len(hook_alerts(hook, "resolved")) > resolved_before, 10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    events = [json.loads(line) for line in log_file.read_text().splitlines() if line.startswith("{")]
    failed = [e for e in events if e["event"] == "alertmanager_push_failed"]
    # One line for the outage, however many retries; the stop's last try at the hung one says it did not land.
    assert [(e["alertmanager"], e["error"]) for e in failed] == [(dead, "no answer within 2s")], failed
    assert [e["alertmanager"] for e in events if e["event"] == "alertmanager_stop_push_failed"] == [dead]
    assert "secret" not in log_file.read_text()
    assert any(e["event"] == "alertmanager_push_stopped" and e["resolved"] == 1 for e in events)


def test_once_and_check_never_push(tmp_path: Path) -> None:
    hook = Webhook("am")
    try:
        root = build_root(tmp_path, [FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1)])
        (root.root / "kern.log").write_text("")
        # --alertmanager.url is serve's: on once's or check's command line it is refused (exit 2); from a config
        # file shared with serve it is ignored (tests/test_cli_strict.py).
        shared = tmp_path / "rocm-watchdog.yml"
        shared.write_text(f"alertmanager.url: http://127.0.0.1:{hook.port}\nhost.name: gpu-node-7\n")
        refused = subprocess.run(
            exporter_argv("once", root.root, root.state_dir, f"--alertmanager.url=http://127.0.0.1:{hook.port}"),
            env=ENV, capture_output=True, timeout=60,
        )  # fmt: skip
        assert refused.returncode == 2 and b"--alertmanager.url: not a flag of once" in refused.stderr
        once_argv = exporter_argv("once", root.root, root.state_dir, f"--config.file={shared}")
        first = subprocess.run(once_argv, env=ENV, capture_output=True, timeout=60)
        assert first.returncode == 0, first.stderr
        root.chmod("kfd", 0o600)
        once = subprocess.run(once_argv, env=ENV, capture_output=True, timeout=60)
        assert once.returncode == 0, once.stderr
        assert b'rocm_device_condition{cause="",condition="mode_drift"' in once.stdout
        check_argv = [
            sys.executable, "-m", "exporter", "check", f"--path.rootfs={root.root}", f"--state.dir={root.state_dir}",
            f"--config.file={shared}",
        ]  # fmt: skip
        check = subprocess.run(check_argv, env=ENV, capture_output=True, timeout=60)
        assert check.returncode == 1, check.stdout
        assert hook.received == []
    finally:
        hook.close()
