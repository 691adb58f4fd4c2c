"""End to end: ``rocm-watchdog serve`` as a real process over a fake root, stub tools printing real captures,
scraped over HTTP on loopback, compared with a golden exposition and checked by promtool."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from fakeroot import FakeGpu, FakeOther, FakeRoot, build_root
from paths import FIXTURES
from promtool import check_metrics, compare_golden
from stubs import Stub, rocm_smi_stub

MI100 = FIXTURES / "smi" / "rocm-smi" / "telegraf-mi100_rocm571.json"
# The MI100 capture's GPUs, so sysfs and rocm-smi join by PCI address (first two of its six).
MI100_BDFS = ("0000:1e:00.0", "0000:22:00.0")

KERNEL_LOG = """\
[  104.528300] amdgpu 0000:1e:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=1234, emitted seq=1236
[  104.528304] amdgpu 0000:1e:00.0: amdgpu: GPU reset begin!
[  105.100000] amdgpu 0000:1e:00.0: amdgpu: GPU reset succeeded, trying to resume
"""


@dataclass
class Daemon:
    proc: subprocess.Popen[str]
    port: int
    root: FakeRoot
    stub: Stub

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def scrape(self) -> str:
        response = requests.get(f"{self.url}/metrics", timeout=5)
        response.raise_for_status()
        return response.text

    def wait_for(self, needle: str, limit_seconds: float = 60) -> str:
        """Scrape until ``needle`` appears (bounded), return that scrape."""
        deadline = time.monotonic() + limit_seconds
        text = ""
        while time.monotonic() < deadline:
            text = self.scrape()
            if needle in text:
                return text
            time.sleep(0.1)
        raise AssertionError(f"{needle!r} never appeared; last scrape:\n{text}")


def start_daemon(root: FakeRoot, tools: Path, *extra: str) -> subprocess.Popen[str]:
    argv = [
        sys.executable, "-m", "exporter", "serve",
        "--web.listen-address", "127.0.0.1:0",
        "--path.rootfs", str(root.root),
        "--state.dir", str(root.state_dir),
        "--kernel-log.path", str(root.root / "kern.log"),
        "--rocm-smi.path", str(tools / "rocm-smi"),
        "--amd-smi.path", str(tools / "amd-smi"),
        "--smi.timeout", "1s",
        "--log.format", "json",
        *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def bound_port(proc: subprocess.Popen[str]) -> int:
    assert proc.stderr is not None
    for _ in range(200):  # bounded: the "serving" line comes first
        line = proc.stderr.readline()
        if not line:
            break
        event = json.loads(line)
        if event.get("event") == "serving":
            return int(event["port"])
    raise AssertionError(f"daemon did not start (exit {proc.poll()})")


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    root = build_root(
        tmp_path,
        [
            FakeGpu(MI100_BDFS[0], card=1, render=128, kfd_node=1, gpu_id=11111),
            FakeGpu(MI100_BDFS[1], card=2, render=129, kfd_node=2, gpu_id=22222, unique_id=0x1234),
        ],
        others=[FakeOther.bmc("0000:63:00.0", card=0)],
    )
    (root.root / "kern.log").write_text(KERNEL_LOG)
    tools = tmp_path / "bin"
    stub = rocm_smi_stub(tools, MI100)
    proc = start_daemon(
        root, tools,
        "--smi.backend", "rocm-smi",
        "--collector.rocm-smi.interval", "1s",
        "--collector.sysfs.interval", "1s",
        "--collector.devices.interval", "1s",
        "--collector.processes.interval", "1s",
    )  # fmt: skip
    try:
        yield Daemon(proc, bound_port(proc), root, stub)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()


READY = (
    'rocm_watchdog_source_up{source="rocm-smi"} 1.0',
    'rocm_watchdog_source_up{source="processes"} 1.0',
    'rocm_watchdog_source_up{source="devices"} 1.0',
    'rocm_watchdog_source_up{source="kernel-log"} 1.0',
    # the health verdict is unknown until every source it reads has run once
    'rocm_watchdog_source_up{source="sysfs"} 1.0',
    # the processes source has run after a rocm-smi run: the capture's one KFD process is listed
    "rocm_processes 1.0",
)


def wait_ready(d: Daemon) -> str:
    for needle in READY:
        d.wait_for(needle)
    return d.wait_for('rocm_kernel_events_total{class="gpu_reset_begin",pci_bus="0000:1e:00.0"} 1.0')


def test_serve_matches_golden_and_promtool(daemon: Daemon, update_golden: bool) -> None:
    text = wait_ready(daemon)
    check_metrics(text)
    compare_golden("e2e.prom", text, update_golden)
    # the verdict file node-problem-detector's plugin reads says what /metrics says (a bounded wait: it is written
    # by its own thread when a source records)
    verdict = daemon.root.state_dir / "gpu-health"
    deadline = time.monotonic() + 30
    while not (verdict.exists() and "\nnode unhealthy\n" in verdict.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "\ngpu 0000:1e:00.0 unhealthy ring_timeout\n" in verdict.read_text()
    landing = requests.get(daemon.url + "/", timeout=5)
    assert landing.status_code == 200 and "/metrics" in landing.text
    assert requests.get(daemon.url + "/healthz", timeout=5).text == "ok\n"
    assert requests.get(daemon.url + "/nope", timeout=5).status_code == 404


@pytest.mark.parametrize(
    ("action", "error_in_log"),
    [
        ({"sleep": 30}, "timed out"),
        ({"stdout": "\x00\x7f garbage \n{not json"}, "unparsable"),
        ({"exit": 2, "stderr": "ERROR: Driver not initialized (amdgpu not found in modules)\n"}, "rocm-smi"),
        (None, "could not be started"),
    ],
    ids=["hang", "garbage", "exit-nonzero", "missing"],
)
def test_a_failing_tool_never_blocks_the_scrape(
    daemon: Daemon, action: dict[str, object] | None, error_in_log: str
) -> None:
    wait_ready(daemon)
    good = daemon.scrape()
    assert 'rocm_gpu_vram_total_bytes{pci_bus="0000:3f:00.0"}' in good
    if action is None:
        daemon.stub.remove()
    else:
        daemon.stub.set("", **action)
    # The failure shows in the health metrics while the last good data is still served.
    text = daemon.wait_for('rocm_watchdog_source_up{source="rocm-smi"} 0.0')
    assert 'rocm_watchdog_source_failures_total{source="rocm-smi"}' in text
    assert "rocm_processes 1.0" in text  # the MI100 capture's one KFD process, from the last good run
    assert daemon.proc.poll() is None
    # Each scrape answers from memory: while the stub sleeps 30 s, a 5 s request timeout is never hit.
    for _ in range(3):
        daemon.scrape()
    # Past max age (3 intervals + timeout) the tool's values are withdrawn, not served as fresh.
    stale = daemon.wait_for('rocm_watchdog_source_stale{source="rocm-smi"} 1.0', limit_seconds=60)
    assert 'rocm_gpu_vram_total_bytes{pci_bus="0000:3f:00.0"}' not in stale  # a GPU only rocm-smi reported
    # sysfs still knows its GPUs.
    assert 'rocm_gpu_vram_total_bytes{pci_bus="0000:22:00.0"}' in stale


def test_once_writes_textfile_atomically(tmp_path: Path) -> None:
    root = build_root(tmp_path, [FakeGpu(MI100_BDFS[0], card=1, render=128, kfd_node=1)])
    (root.root / "kern.log").write_text(KERNEL_LOG)
    tools = tmp_path / "bin"
    rocm_smi_stub(tools, MI100)
    out = tmp_path / "textfile" / "rocm.prom"
    out.parent.mkdir()
    argv = [
        sys.executable, "-m", "exporter", "once", "--output", str(out),
        "--path.rootfs", str(root.root), "--state.dir", str(root.state_dir),
        "--kernel-log.path", str(root.root / "kern.log"),
        "--rocm-smi.path", str(tools / "rocm-smi"), "--amd-smi.path", str(tools / "amd-smi"),
        "--smi.backend", "rocm-smi",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "rocm_gpu_info{" in text and 'pci_bus="0000:1e:00.0"' in text
    assert list(out.parent.iterdir()) == [out]  # no temp file left behind
    check_metrics(text)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_real_prometheus_scrapes_the_exporter(daemon: Daemon, tmp_path: Path) -> None:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.fail("prometheus is not installed (Debian package 'prometheus'; scripts/test installs it)")
    wait_ready(daemon)
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        f"scrape_configs:\n  - job_name: rocm\n    static_configs:\n      - targets: ['127.0.0.1:{daemon.port}']\n"
    )
    proc = subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        api = f"http://127.0.0.1:{port}/api/v1/query"
        deadline = time.monotonic() + 60
        result: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            try:
                body = requests.get(api, params={"query": 'rocm_gpus{job="rocm"}'}, timeout=5).json()
                result = body["data"]["result"]
            except (requests.RequestException, KeyError, ValueError):
                result = []
            if result:
                break
            time.sleep(0.5)
        assert result and result[0]["value"][1] == "6"  # type: ignore[index]
        up = requests.get(api, params={"query": 'up{job="rocm"}'}, timeout=5).json()["data"]["result"]
        assert up[0]["value"][1] == "1"
        resets = requests.get(
            api, params={"query": 'rocm_kernel_events_total{class="gpu_reset_begin",pci_bus="0000:1e:00.0"}'}, timeout=5
        ).json()["data"]["result"]
        assert resets[0]["value"][1] == "1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_sigterm_does_not_wait_for_a_hung_tool(tmp_path: Path) -> None:
    root = build_root(tmp_path, [FakeGpu(MI100_BDFS[0], card=1, render=128, kfd_node=1)])
    (root.root / "kern.log").write_text("")
    tools = tmp_path / "bin"
    stub = rocm_smi_stub(tools, MI100)
    stub.set("--showmeminfo", sleep=300)  # the query hangs; its timeout is 120 s
    proc = start_daemon(root, tools, "--smi.backend", "rocm-smi", "--smi.timeout", "120s")
    try:
        bound_port(proc)
        deadline = time.monotonic() + 60
        while not any(c.startswith("--showmeminfo") for c in stub.calls()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert any(c.startswith("--showmeminfo") for c in stub.calls()), "the query never started"
        proc.terminate()
        # The hung tool is killed with its process group: the daemon exits long before the 120 s timeout
        # (a Kubernetes pod gets 30 s between SIGTERM and SIGKILL).
        assert proc.wait(timeout=25) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
