"""Scrape latency: rocm-watchdog against node_exporter's drm collector, same fake 8-GPU host, one run.

Run from the repository root: ``PYTHONPATH=. .venv/bin/python benchmarks/scrape.py [--requests N]``.
Needs ``node_exporter`` (Debian package prometheus-node-exporter) for the anchor column; without it the
anchor is reported as missing.

The host is the 8x MI210 KFD capture laid out as a realistic fake root (tests/fakeroot.py) with a BMC on
card0. rocm-watchdog runs every collector, with a stub rocm-smi that prints the real MI100 capture after
sleeping 2 s (a slow tool, as on ROCm 6.0 first calls), then a stub that hangs past the timeout. node_exporter
runs ``--collector.disable-defaults --collector.drm`` on the same sysfs: it collects at scrape time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from fakeroot import FakeOther, build_root, capture_gpus  # noqa: E402
from paths import FIXTURES  # noqa: E402
from stubs import rocm_smi_stub  # noqa: E402

MI100 = FIXTURES / "smi" / "rocm-smi" / "telegraf-mi100_rocm571.json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, needle: str = "", limit: float = 30) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            r = requests.get(url, timeout=2)
            if r.ok and needle in r.text:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} never answered with {needle!r}")


def measure(url: str, n: int) -> tuple[list[float], int]:
    session = requests.Session()
    times = []
    size = 0
    for _ in range(n):
        start = time.perf_counter()
        r = session.get(url, timeout=30)
        times.append(time.perf_counter() - start)
        size = len(r.content)
    return sorted(times), size


def report(label: str, times: list[float], size: int) -> str:
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    return (
        f"| {label} | {statistics.median(times) * 1e3:.2f} | {p99 * 1e3:.2f} | {max(times) * 1e3:.2f} | "
        f"{size / 1024:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    n = max(10, min(args.requests, 5000))
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cpus, {n} scrapes each\n")
    print("| target | median ms | p99 ms | max ms | body KiB |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        root = build_root(tmp_path, capture_gpus("mi210-8gpu-xgmi-pcie"), others=[FakeOther.bmc()], cpu_nodes=2)
        (root.root / "kern.log").write_text("")
        stub = rocm_smi_stub(tmp_path / "bin", MI100)
        stub.set("", stdout_file=MI100, sleep=2)
        port = free_port()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        ours = subprocess.Popen(
            [sys.executable, "-m", "exporter", "serve", f"--web.listen-address=127.0.0.1:{port}",
             f"--path.rootfs={root.root}", f"--state.dir={root.state_dir}",
             f"--kernel-log.path={root.root / 'kern.log'}", f"--rocm-smi.path={stub.path}",
             "--smi.backend=rocm-smi", "--smi.timeout=5s", "--collector.rocm-smi.interval=3s",
             "--log.level=error"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            wait_http(url, 'rocm_watchdog_source_up{source="rocm-smi"} 1.0')
            print(report("rocm-watchdog, rocm-smi taking 2 s per run", *measure(url, n)))
            stub.set("", sleep=60)  # hangs until killed at the 5 s timeout
            wait_http(url, 'rocm_watchdog_source_up{source="rocm-smi"} 0.0', limit=30)
            print(report("rocm-watchdog, rocm-smi hanging", *measure(url, n)))
        finally:
            ours.terminate()
            ours.wait(timeout=30)

        anchor = shutil.which("node_exporter") or shutil.which("prometheus-node-exporter")
        if anchor is None:
            print("| node_exporter drm (anchor) | not installed | | | |")
            return
        port = free_port()
        theirs = subprocess.Popen(
            [anchor, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults", "--collector.drm",
             f"--path.sysfs={root.sys}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            wait_http(url, "node_scrape_collector_success")
            text = requests.get(url, timeout=5).text
            drm_ok = 'node_scrape_collector_success{collector="drm"} 1' in text
            cards = text.count("node_drm_card_info{")
            print(report(f"node_exporter drm (anchor; success={drm_ok}, cards seen={cards})", *measure(url, n)))
        finally:
            theirs.terminate()
            theirs.wait(timeout=30)
    print(json.dumps({"note": "rocm-watchdog serves every source from memory; node_exporter reads sysfs per scrape"}))


if __name__ == "__main__":
    main()
