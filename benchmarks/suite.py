"""The performance suite: every figure the performance issue asks for, in one run, beside node_exporter.

Run from the repository root (needs Debian's ``wrk`` and ``prometheus-node-exporter``; without node_exporter
its columns read "not installed")::

    PYTHONPATH=. .venv/bin/python benchmarks/suite.py [--json FILE] [--only scrape,idle,...]
    PYTHONPATH=. .venv/bin/python benchmarks/suite.py --duration 1 --repeats 1 --idle-seconds 40 \\
        --lines 50000 --samples 5 --startup-runs 5                               # a smoke run, about 4 minutes

The full default run takes about 20 minutes (scrape 7, idle 10, the rest 2-3).

Sections (``--only``, comma-separated; default all, in this order):

scrape
    ``rocm-watchdog serve`` (every default source on: sysfs, devices, a followed kernel-log file, processes,
    and both rocm-smi and amd-smi as stub tools printing real captures) against node_exporter's drm collector
    (``--collector.disable-defaults --collector.drm``) on the same fake sysfs, 8 GPUs (8x MI210) and 64
    (8x MI300X in CPX mode: 8 GPUs and 55 partitions that register a card; "64" is the issue's name for it).
    Ours is loaded once every source has run twice (its steady-state body). ``wrk -t1`` with 1, 8 and 100
    keep-alive connections, plain and gzip, ``--duration`` s each, ``--repeats`` times (medians; errors summed:
    socket errors and non-2xx, node_exporter's 503s past its 40 concurrent requests included). Bodies beside.
idle
    At the default intervals, both exporters on both hosts at once for ``--idle-seconds``, each scraped every
    15 s (text format, ``Accept-Encoding: gzip``, as Prometheus scrapes). After 30 s of warm-up, the process's own
    CPU (utime+stime) per hour over the rest of the run, its children's (the smi tools: reported, not counted),
    VmRSS at the end and VmHWM.
latency
    A kernel-log record appended to the followed file (then written to a FIFO in kmsg format, as kmsg-relay
    writes it) until ``rocm_kernel_events_total`` counts it on /metrics, polled every 2 ms; ``--samples``
    samples 0.5 s apart.
throughput
    benchmarks/kernel_log.py's followed-file end-to-end figure (lines/s) for the honest noise log of
    benchmarks/kernel_noise.py (``--lines`` lines: 94 % non-GPU lines, 5 % drm/amdgpu/kfd lines matching no rule,
    1 % amdgpu rule lines) and an amdgpu-only log of 30 % of that, median of ``--repeats``.
startup
    ``rocm-watchdog check`` and ``rocm-watchdog once`` on the 8-GPU host (``once`` with the stub tools, without
    any tool, and with rocm-smi alone as a ``/bin/sh`` stub printing its JSON with the 8 GPUs' full topology),
    ``--startup-runs`` runs each, beside ``python -c pass``; the package compiled first (``compileall``) and
    PYTHONDONTWRITEBYTECODE dropped, as an installed package starts.
series
    Samples per metric family on /metrics of both hosts once every source has run twice, per physical GPU, per
    partition and host-level (no ``pci_bus`` of the host), sorted by size on the 64-GPU host.

The stub tools print the real captures in tests' shared fixtures (rocm-smi: the MI100 telegraf capture; amd-smi:
the CHANGELOG list, topology and process captures, plus the tests' synthetic ``metric --mem-usage``), with their
PCI addresses rewritten to the fake host's GPUs, in order: a tool reports the host it runs on, not phantom GPUs.
Every process the suite starts runs in its own session and is stopped (SIGTERM, then SIGKILL to its group) when
its section ends; everything it writes is in one temp dir, removed at the end. Only loopback is used.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import dataclasses
import errno
import http.client
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the fake-root builder and the stub tools
sys.path.insert(0, str(ROOT / "benchmarks"))  # http_servers (wrk, ports), kernel_log (generate, follow)

from fakeroot import (  # noqa: E402
    FakeGpu,
    FakeOther,
    FakeRoot,
    build_root,
    capture_for_host,
    capture_gpus,
    gpu_metrics_file,
    mi300x_gpu,
    mi300x_metrics_fields,
    radeon_metrics_fields,
)
from http_servers import _ms, free_port, rss_mib  # noqa: E402
from paths import DATA, FIXTURES  # noqa: E402
from stubs import amd_smi_stub, rocm_smi_stub, shell_stub  # noqa: E402

SECTIONS = ("scrape", "idle", "latency", "throughput", "startup", "series")
HOSTS = {"8 GPUs": "mi210-8gpu-xgmi-pcie", "64 GPUs": "mi300x-cpx-8gpu"}
SOURCES = ("sysfs", "devices", "kernel-log", "processes", "rocm-smi", "amd-smi")
SMI = FIXTURES / "smi"
ROCM_SMI_CAPTURE = SMI / "rocm-smi" / "telegraf-mi100_rocm571.json"
# rocm-smi --json of the collector's whole query with the full topology of 8 GPUs (synthetic, generate.py): what
# the start-up section's /bin/sh stub prints
ROCM_SMI_TOPOLOGY_CAPTURE = DATA / "rocm-smi" / "json_oneline_mi300x-8gpu_topology.txt"
AMD_SMI_CAPTURES = {
    "list": SMI / "amd-smi" / "amdsmi-changelog-rocm630_list_text_2gpu-uuid-redacted.txt",
    "topology": SMI / "amd-smi" / "amdsmi-changelog-rocm611_topology-a-t_json_2gpu-pcie.json",
    "process": SMI / "amd-smi" / "amdsmi-changelog-rocm620_process_text_sudo.txt",
    "metric": DATA / "amd-smi" / "metric-mem-usage_json_value-unit_2gpu.json",  # synthetic, as the tests use
    # a table, as amd-smi prints (it printed "[]", which the exporter takes for a failed run and runs again)
    "static": DATA / "amd-smi" / "static_json_gpu-data-wrapper_amdsmi26.json",  # synthetic, as the tests use
}
PROMETHEUS_TEXT = "text/plain;version=0.0.4"
CONNECTIONS = (1, 8, 100)
ENCODINGS = ("plain", "gzip")
IDLE_WARMUP_S = 30.0
IDLE_SCRAPE_EVERY_S = 15.0
LATENCY_POLL_S = 0.002
LATENCY_SPACING_S = 0.5
LATENCY_SAMPLE_LIMIT_S = 20.0  # past the kernel-log source's 15 s heartbeat: a record missed until then still counts
TICK = os.sysconf("SC_CLK_TCK")
NOT_INSTALLED = "not installed"

# The issue's targets, printed beside the figures.
IDLE_TARGETS = {"8 GPUs": (4.0, 40.0), "64 GPUs": (10.0, 60.0)}  # CPU s/h (<=), RSS MiB (<)
LATENCY_TARGET_MS = 100.0
THROUGHPUT_TARGETS = {"honest noise": 1_000_000, "amdgpu only": 200_000}
STARTUP_TARGETS_MS = {"check": 100.0, "once": 200.0}


# --- small helpers ----------------------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile; nan for no values."""
    ordered = sorted(v for v in values if not math.isnan(v))
    if not ordered:
        return float("nan")
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def median(values: Sequence[float]) -> float:
    clean = [v for v in values if not math.isnan(v)]
    return statistics.median(clean) if clean else float("nan")


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:,.{digits}f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def first_line(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc})"
    return ((done.stdout or done.stderr).strip().splitlines() or ["?"])[0].strip()


def child_env() -> dict[str, str]:
    """The environment of every process started: the checkout importable, bytecode written and used (an installed
    package has its .pyc files; the sandbox's PYTHONDONTWRITEBYTECODE=1 would recompile on every start)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    return env


def fetch(port: int, gzip: bool = False, timeout: float = 10) -> tuple[int, bytes, str]:
    """GET /metrics as Prometheus asks for the text format: status, body as sent, Content-Encoding."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Accept": PROMETHEUS_TEXT}
        if gzip:
            headers["Accept-Encoding"] = "gzip"
        conn.request("GET", "/metrics", headers=headers)
        response = conn.getresponse()
        return response.status, response.read(), response.getheader("Content-Encoding") or ""
    finally:
        conn.close()


def node_exporter_path() -> str | None:
    return shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")


# --- the fake hosts ---------------------------------------------------------------------------------------


@dataclass
class Host:
    label: str
    root: FakeRoot
    tools: Path
    kernel_log: Path
    bdfs: list[str]  # physical GPUs
    partitions: int
    runs: int = 0  # state dirs handed out

    def fresh_state_dir(self) -> Path:
        """A state dir of its own per process started: each start is a first start, as on a fresh node."""
        self.runs += 1
        path = self.root.root / "var" / "lib" / f"rocm-watchdog-{self.runs}"
        path.mkdir(mode=0o700, parents=True)
        return path


def with_telemetry(gpus: list[FakeGpu]) -> list[FakeGpu]:
    """The GPUs with the telemetry files an Instinct card has (issue 10): pp_dpm tables, power caps, memory busy,
    GTT and visible VRAM, PCIe replays, bad pages (mi300x_gpu's set), and a gpu_metrics table: v1.8 with one XCP
    per partition for a partitioned MI300X, v1.3 (what SMU 13 fills on MI200 and Radeon) otherwise."""
    model = mi300x_gpu()
    out = []
    for i, gpu in enumerate(gpus):
        xcps = 1 + len(gpu.partitions)
        table = (
            gpu_metrics_file("gpu_metrics_v1_8", mi300x_metrics_fields(i, xcps))
            if gpu.partitions
            else gpu_metrics_file("gpu_metrics_v1_3", radeon_metrics_fields())
        )
        out.append(dataclasses.replace(gpu, files=model.files, hwmon_files=model.hwmon_files, gpu_metrics=table))
    return out


def rocm_smi_with_topology(capture: Path, buses: list[str], dest: Path) -> Path:
    """``capture`` (a ``rocm-smi --json`` output) as a node with a GPU per address of ``buses`` prints it: a card
    each (the capture's first card's fields, its own ``PCI Bus``), and the full topology, every unordered pair's
    weight, hops and link type between DRM devices, as ``rocm-smi --showtopo --json`` gives them. A CPX MI300X
    node lists each partition as a GPU at its own PCI function: 64 cards and 2,016 pairs. The GPUs are one XGMI
    hive (weight 15, one hop)."""
    doc = json.loads(capture.read_text())
    template = doc["card0"]
    out: dict[str, dict[str, str]] = {}
    for i, bus in enumerate(buses):
        out[f"card{i}"] = {**template, "PCI Bus": bus.upper()}
    system = {k: v for k, v in doc.get("system", {}).items() if not k.startswith("(Topology)")}
    for a in range(len(buses)):
        for b in range(a + 1, len(buses)):
            system[f"(Topology) Weight between DRM devices {a} and {b}"] = "15"
            system[f"(Topology) Hops between DRM devices {a} and {b}"] = "1"
            system[f"(Topology) Link type between DRM devices {a} and {b}"] = "XGMI"
    out["system"] = system
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out))
    return dest


def build_host(base: Path, label: str) -> Host:
    gpus = with_telemetry(capture_gpus(HOSTS[label]))
    root = build_root(base, gpus, others=[FakeOther.bmc()], cpu_nodes=2, name=label.replace(" ", "-"))
    kernel_log = root.root / "var" / "log" / "kern.log"
    kernel_log.parent.mkdir(parents=True, exist_ok=True)
    kernel_log.write_text("")
    bdfs = [gpu.bdf for gpu in gpus]
    tools = root.root / "opt" / "rocm" / "bin"
    captures = root.root / "captures"
    # every GPU and partition the node lists, each at its PCI function, with the full topology between them
    buses = [f"{gpu.bdf[:-1]}{part}" for gpu in gpus for part in range(1 + len(gpu.partitions))]
    rocm_smi_stub(tools, rocm_smi_with_topology(ROCM_SMI_CAPTURE, buses, captures / ROCM_SMI_CAPTURE.name))
    outputs = {cmd: capture_for_host(path, bdfs, captures / path.name) for cmd, path in AMD_SMI_CAPTURES.items()}
    amd_smi_stub(tools, outputs)
    partitions = sum(1 for gpu in gpus for part in gpu.partitions if part.render is not None)  # registered ones
    return Host(label, root, tools, kernel_log, bdfs, partitions)


# --- processes --------------------------------------------------------------------------------------------


@dataclass
class Server:
    label: str
    proc: subprocess.Popen[bytes]
    port: int
    stderr_path: Path

    def stderr_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.stderr_path.read_text(errors="replace")[-2000:]
        return ""


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, 10 s, SIGKILL; then SIGKILL to what is left of its session (a tool run it had started)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the group id is its pid


@contextlib.contextmanager
def spawn(label: str, argv: list[str], port: int, logs: Path) -> Iterator[Server]:
    logs.mkdir(parents=True, exist_ok=True)
    stderr_path = logs / f"{label.replace(' ', '_')}-{port}.stderr"
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(
            argv, env=child_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
            start_new_session=True,
        )  # fmt: skip
    try:
        yield Server(label, proc, port, stderr_path)
    finally:
        stop(proc)


def ours_argv(host: Host, port: int, kernel_log: Path | None = None, backend: str = "both") -> list[str]:
    """``serve`` on the host; ``backend``: ``--smi.backend`` (both tools by default, every source's output in the
    scrape; ``auto``, the default of the exporter, runs amd-smi alone when both are installed)."""
    return [
        sys.executable, "-m", "exporter", "serve", f"--web.listen-address=127.0.0.1:{port}",
        f"--path.rootfs={host.root.root}", f"--state.dir={host.fresh_state_dir()}",
        f"--kernel-log.path={kernel_log or host.kernel_log}", f"--rocm-smi.path={host.tools / 'rocm-smi'}",
        f"--amd-smi.path={host.tools / 'amd-smi'}", f"--smi.backend={backend}", "--log.level=error",
    ]  # fmt: skip


def node_exporter_argv(exe: str, host: Host, port: int) -> list[str]:
    return [exe, "--collector.disable-defaults", "--collector.drm", f"--path.sysfs={host.root.sys}",
            f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip


@contextlib.contextmanager
def start_ours(
    host: Host, logs: Path, kernel_log: Path | None = None, backend: str = "both", label: str = "rocm-watchdog"
) -> Iterator[Server]:
    port = free_port()
    with spawn(f"{label} {host.label}", ours_argv(host, port, kernel_log, backend), port, logs) as server:
        yield server


@contextlib.contextmanager
def start_node_exporter(host: Host, logs: Path) -> Iterator[Server | None]:
    exe = node_exporter_path()
    if exe is None:
        yield None
        return
    port = free_port()
    with spawn(f"node_exporter {host.label}", node_exporter_argv(exe, host, port), port, logs) as server:
        yield server


def wait_ready(server: Server, needles: Sequence[str], limit: float = 60) -> str:
    """Scrape until every needle is in the body (bounded by ``limit`` s); the body."""
    deadline = time.monotonic() + limit
    missing: list[str] = list(needles)
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.label} exited with {server.proc.returncode}: {server.stderr_tail()}")
        with contextlib.suppress(OSError, http.client.HTTPException):
            status, body, _ = fetch(server.port, timeout=5)
            text = body.decode(errors="replace")
            missing = [n for n in needles if n not in text]
            if status == 200 and not missing:
                return text
        time.sleep(0.2)
    raise RuntimeError(f"{server.label} not ready after {limit:g} s, missing {missing}: {server.stderr_tail()}")


def wait_ours(server: Server, skip: Sequence[str] = ()) -> str:
    """Until every source but ``skip`` is up (``--smi.backend=auto`` runs amd-smi alone: skip rocm-smi)."""
    return wait_ready(server, [f'rocm_watchdog_source_up{{source="{s}"}} 1.0' for s in SOURCES if s not in skip])


_LAST_SUCCESS = re.compile(r'^rocm_watchdog_source_last_success_timestamp_seconds\{source="([^"]+)"\} (\S+)$', re.M)


def wait_steady(server: Server, limit: float = 60) -> str:
    """Ready, then until every source has run a second time (about 30 s at the default intervals): a second run
    sees what the others found on their first (processes merges the smi tools' process lists), so the body is
    the one a long-running exporter serves."""
    first = dict(_LAST_SUCCESS.findall(wait_ours(server)))
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        time.sleep(1)
        with contextlib.suppress(OSError, http.client.HTTPException):
            text = fetch(server.port, timeout=5)[1].decode(errors="replace")
            now = dict(_LAST_SUCCESS.findall(text))
            if all(now.get(source, "") not in ("", first.get(source)) for source in SOURCES):
                return text
    raise RuntimeError(f"{server.label}: not every source ran twice in {limit:g} s: {server.stderr_tail()}")


def wait_node_exporter(server: Server) -> str:
    return wait_ready(server, ['node_scrape_collector_success{collector="drm"} 1'])


# --- header -----------------------------------------------------------------------------------------------


def machine_header() -> dict[str, str]:
    cpu = "?"
    with contextlib.suppress(OSError):
        cpu = next(
            (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
             if line.startswith("model name")), "?",
        )  # fmt: skip
    memory = "?"
    with contextlib.suppress(OSError, StopIteration, ValueError):
        meminfo = Path("/proc/meminfo").read_text().splitlines()
        kib = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal"))
        memory = f"{kib / 2**20:.1f} GiB"
    revision = first_line(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True,
                           check=False, timeout=30).stdout.strip()  # fmt: skip
    exe = node_exporter_path()
    wrk = shutil.which("wrk")
    return {
        "machine": platform.platform(),
        "cpu": cpu,
        "nproc": f"{os.cpu_count()} ({len(os.sched_getaffinity(0))} usable)",
        "memory": memory,
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "python": f"{platform.python_version()} ({sys.executable})",
        "node_exporter": first_line([exe, "--version"]) if exe else NOT_INSTALLED,
        "wrk": first_line([wrk, "-v"]) if wrk else NOT_INSTALLED,
        "git": revision + ("+dirty" if dirty else ""),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


# --- 1. scrape latency under load -------------------------------------------------------------------------


@dataclass
class WrkRun:
    p50_ms: float
    p99_ms: float
    max_ms: float
    requests: int
    errors: int


def run_wrk(port: int, connections: int, seconds: int, gzip: bool) -> WrkRun:
    """One ``wrk -t1`` run, keep-alive (as Prometheus scrapes); errors: socket errors plus non-2xx answers."""
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", "--latency"]
    if gzip:
        argv += ["-H", "Accept-Encoding: gzip"]
    argv.append(f"http://127.0.0.1:{port}/metrics")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=True).stdout
    run = WrkRun(float("nan"), float("nan"), float("nan"), 0, 0)
    for line in out.splitlines():
        parts = line.split()
        if parts[:1] == ["50%"] and len(parts) >= 2:
            run.p50_ms = _ms(parts[1])
        elif parts[:1] == ["99%"] and len(parts) >= 2:
            run.p99_ms = _ms(parts[1])
        elif parts[:1] == ["Latency"] and len(parts) >= 4:
            run.max_ms = _ms(parts[3])
        elif "requests in" in line:
            run.requests = int(parts[0])
        elif line.strip().startswith("Socket errors"):
            run.errors += sum(int(n) for n in re.findall(r"\d+", line))
        elif line.strip().startswith("Non-2xx"):
            run.errors += int(parts[-1])
    return run


@dataclass
class ScrapeResult:
    host: str
    target: str
    scrapers: int
    encoding: str
    p50_ms: float
    p99_ms: float
    max_ms: float
    errors: int
    requests_per_s: float
    runs: list[WrkRun] = field(default_factory=list)


@dataclass
class BodyResult:
    host: str
    target: str
    plain_bytes: int
    gzip_bytes: int
    samples: int
    gpus_seen: int  # rocm_gpu_info / node_drm_card_info samples
    rss_mib_after_load: float


def load_target(host: Host, server: Server, args: argparse.Namespace) -> tuple[list[ScrapeResult], BodyResult]:
    target = server.label.split()[0]
    sizes: dict[str, int] = {}
    samples = gpus = 0
    for encoding in ENCODINGS:
        status, body, content_encoding = fetch(server.port, gzip=encoding == "gzip")
        if status != 200 or (encoding == "gzip") != (content_encoding == "gzip"):
            raise RuntimeError(f"{server.label}: {encoding} scrape gave {status} {content_encoding!r}")
        sizes[encoding] = len(body)
        if encoding == "plain":
            lines = body.decode(errors="replace").splitlines()
            samples = sum(1 for line in lines if line and not line.startswith("#"))
            gpus = sum(1 for line in lines if line.startswith(("rocm_gpu_info{", "node_drm_card_info{")))
    run_wrk(server.port, 8, 1, False)  # warm-up
    results = []
    for encoding in ENCODINGS:
        for connections in CONNECTIONS:
            runs = [run_wrk(server.port, connections, args.duration, encoding == "gzip") for _ in range(args.repeats)]
            result = ScrapeResult(
                host.label, target, connections, encoding,
                median([r.p50_ms for r in runs]), median([r.p99_ms for r in runs]), median([r.max_ms for r in runs]),
                sum(r.errors for r in runs), median([r.requests / args.duration for r in runs]), runs,
            )  # fmt: skip
            print(f"  {target:13} {host.label:7} c={connections:<3} {encoding:5} p50 {fmt(result.p50_ms)} ms, "
                  f"p99 {fmt(result.p99_ms)} ms, errors {result.errors}", flush=True)  # fmt: skip
            results.append(result)
    summary = BodyResult(host.label, target, sizes["plain"], sizes["gzip"], samples, gpus, rss_mib(server.proc.pid))
    return results, summary


def section_scrape(hosts: dict[str, Host], args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    results: list[ScrapeResult] = []
    bodies: list[BodyResult] = []
    for host in hosts.values():
        with start_ours(host, logs) as server:
            wait_steady(server)
            mine, body = load_target(host, server, args)
            results += mine
            bodies.append(body)
        with start_node_exporter(host, logs) as anchor:
            if anchor is not None:
                wait_node_exporter(anchor)
                mine, body = load_target(host, anchor, args)
                results += mine
                bodies.append(body)
    return {"results": results, "bodies": bodies}


def report_scrape(data: dict[str, Any]) -> str:
    results: list[ScrapeResult] = data["results"]
    bodies: list[BodyResult] = data["bodies"]
    by_key = {(r.host, r.target, r.scrapers, r.encoding): r for r in results}
    rows = []
    for (host, target, scrapers, encoding), ours in by_key.items():
        if target != "rocm-watchdog":
            continue
        theirs = by_key.get((host, "node_exporter", scrapers, encoding))
        if theirs is None:
            anchor = [NOT_INSTALLED, "", "", ""]
            ratios = ["", ""]
        else:
            anchor = [fmt(theirs.p50_ms), fmt(theirs.p99_ms), fmt(theirs.max_ms, 1), str(theirs.errors)]
            ratios = [fmt(ours.p50_ms / theirs.p50_ms), fmt(ours.p99_ms / theirs.p99_ms)]
        rows.append([host, str(scrapers), encoding, fmt(ours.p50_ms), fmt(ours.p99_ms), fmt(ours.max_ms, 1),
                     str(ours.errors), *anchor, *ratios])  # fmt: skip
    out = [
        "Latency in ms, wrk -t1 keep-alive; medians of the repeats, errors summed over them (socket errors and "
        "non-2xx). Both answer 503 past 40 requests at once (`--web.max-requests`, 40 in both by default): those "
        "count as errors, and their quick answers are in the latencies. Ratio: ours / node_exporter.\n",
        table(["host", "scrapers", "encoding", "ours p50", "ours p99", "ours max", "ours errors", "node_exporter p50",
               "node_exporter p99", "node_exporter max", "node_exporter errors", "ratio p50", "ratio p99"], rows),
    ]  # fmt: skip
    body_rows = []
    for host in dict.fromkeys(b.host for b in bodies):
        ours_body = next((b for b in bodies if b.host == host and b.target == "rocm-watchdog"), None)
        theirs_body = next((b for b in bodies if b.host == host and b.target == "node_exporter"), None)
        for b, name in ((ours_body, "rocm-watchdog"), (theirs_body, "node_exporter")):
            if b is None:
                body_rows.append([host, name, NOT_INSTALLED, "", "", "", ""])
            else:
                body_rows.append([host, name, fmt(b.plain_bytes / 1024, 1), fmt(b.gzip_bytes / 1024, 1),
                                  str(b.samples), str(b.gpus_seen), fmt(b.rss_mib_after_load, 1)])  # fmt: skip
    out += [
        "\nBodies (GPUs seen: `rocm_gpu_info` samples, GPUs and partitions; `node_drm_card_info` samples):\n",
        table(["host", "target", "plain KiB", "gzip KiB", "samples", "GPUs seen",
               "RSS after the load MiB (with children)"], body_rows),
    ]  # fmt: skip
    return "\n".join(out)


# --- 2. idle cost at the default intervals ----------------------------------------------------------------


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(utime+stime, cutime+cstime) of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime) / TICK, (cutime + cstime) / TICK


def memory_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process, MiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values.get("VmRSS", float("nan")), values.get("VmHWM", float("nan"))


class Scraper(threading.Thread):
    """Scrapes one target every ``every`` s from ``offset`` on, as Prometheus does (text, gzip), until stopped."""

    def __init__(self, port: int, every: float, offset: float, limit: int) -> None:
        super().__init__(daemon=True)
        self.port, self.every, self.offset, self.limit = port, every, offset, limit
        self.stopped = threading.Event()
        self.durations_ms: list[float] = []
        self.failures = 0

    def run(self) -> None:
        next_at = time.monotonic() + self.offset
        for _ in range(self.limit):
            if self.stopped.wait(max(0.0, next_at - time.monotonic())):
                return
            start = time.perf_counter()
            try:
                status, _, _ = fetch(self.port, gzip=True)
                if status != 200:
                    raise OSError(f"HTTP {status}")
                self.durations_ms.append((time.perf_counter() - start) * 1e3)
            except (OSError, http.client.HTTPException):
                self.failures += 1
            next_at += self.every


@dataclass
class IdleResult:
    host: str
    target: str
    window_s: float
    cpu_s_per_h: float
    children_cpu_s_per_h: float
    rss_mib: float
    hwm_mib: float
    scrapes: int
    scrape_failures: int
    scrape_median_ms: float


def section_idle(hosts: dict[str, Host], args: argparse.Namespace, logs: Path) -> list[IdleResult]:
    window = args.idle_seconds - IDLE_WARMUP_S
    with contextlib.ExitStack() as stack:
        servers: list[tuple[Host, Server]] = []
        for host in hosts.values():
            # the target: the exporter's defaults (--smi.backend=auto: amd-smi alone, as on a host with both tools)
            servers.append((host, stack.enter_context(start_ours(host, logs, backend="auto"))))
            # beside it, for the record: both tools every interval, as the scrape section runs it
            label = "rocm-watchdog (--smi.backend=both)"
            servers.append((host, stack.enter_context(start_ours(host, logs, backend="both", label=label))))
            anchor = stack.enter_context(start_node_exporter(host, logs))
            if anchor is not None:
                servers.append((host, anchor))
        for _, server in servers:
            if not server.label.startswith("rocm-watchdog"):
                wait_node_exporter(server)
            else:  # the defaults' row runs amd-smi alone
                wait_ours(server, skip=() if "--smi.backend=both" in server.label else ("rocm-smi",))
        limit = int(args.idle_seconds / IDLE_SCRAPE_EVERY_S) + 2
        scrapers = [
            Scraper(server.port, IDLE_SCRAPE_EVERY_S, i * IDLE_SCRAPE_EVERY_S / len(servers), limit)
            for i, (_, server) in enumerate(servers)
        ]
        for scraper in scrapers:
            scraper.start()
        try:
            print(f"  {len(servers)} targets up; {IDLE_WARMUP_S:g} s warm-up, then {window:g} s measured", flush=True)
            time.sleep(IDLE_WARMUP_S)
            before = [cpu_seconds(server.proc.pid) for _, server in servers]
            start = time.monotonic()
            time.sleep(window)
            elapsed = time.monotonic() - start
            after = [cpu_seconds(server.proc.pid) for _, server in servers]
            memory = [memory_mib(server.proc.pid) for _, server in servers]
        finally:
            for scraper in scrapers:
                scraper.stopped.set()
            for scraper in scrapers:
                scraper.join(15)
        results = []
        for (host, server), scraper, b, a, (rss, hwm) in zip(servers, scrapers, before, after, memory, strict=True):
            results.append(IdleResult(
                host.label, server.label.removesuffix(f" {host.label}"), elapsed, (a[0] - b[0]) / elapsed * 3600,
                (a[1] - b[1]) / elapsed * 3600, rss, hwm, len(scraper.durations_ms), scraper.failures,
                median(scraper.durations_ms),
            ))  # fmt: skip
    return results


def idle_row(r: IdleResult) -> list[str]:
    target = met = ""
    if r.target == "rocm-watchdog":
        cpu_target, rss_target = IDLE_TARGETS[r.host]
        target = f"<= {cpu_target:g} s/h, < {rss_target:g} MiB"
        met = ", ".join([
            f"CPU {'yes' if r.cpu_s_per_h <= cpu_target else 'NO'}",
            f"RSS {'yes' if r.rss_mib < rss_target else 'NO'} (HWM {'yes' if r.hwm_mib < rss_target else 'NO'})",
        ])  # fmt: skip
    return [r.host, r.target, fmt(r.cpu_s_per_h), fmt(r.children_cpu_s_per_h), fmt(r.rss_mib, 1), fmt(r.hwm_mib, 1),
            f"{r.scrapes} ({r.scrape_failures} failed)", fmt(r.scrape_median_ms), target, met]  # fmt: skip


def report_idle(results: list[IdleResult]) -> str:
    rows = []
    for host in dict.fromkeys(r.host for r in results):
        mine = [r for r in results if r.host == host]
        rows += [idle_row(r) for r in mine]
        if not any(r.target == "node_exporter" for r in mine):
            rows.append([host, "node_exporter", NOT_INSTALLED, *[""] * 7])
    window = results[0].window_s if results else float("nan")
    return "\n".join([
        f"All at once, default intervals, scraped every {IDLE_SCRAPE_EVERY_S:g} s (text, gzip); CPU over "
        f"{fmt(window, 0)} s after a {IDLE_WARMUP_S:g} s warm-up, extrapolated to an hour. `rocm-watchdog` runs "
        "with its defaults (`--smi.backend=auto`: amd-smi alone where both tools are installed); the row below it "
        "runs both tools every interval, as the scrape section does, for the record (no target).\n",
        table(["host", "target", "CPU s/h", "children CPU s/h (not counted)", "VmRSS MiB", "VmHWM MiB",
               "scrapes", "scrape median ms", "target", "met"], rows),
    ])  # fmt: skip


# --- 3. kernel-log record to counter ----------------------------------------------------------------------


@dataclass
class LatencyResult:
    path: str
    samples_ms: list[float]
    missed: int
    p50_ms: float
    p90_ms: float
    max_ms: float


def counter_pattern(bdf: str) -> re.Pattern[bytes]:
    labels = rf'(?=[^}}]*\bclass="gpu_reset_begin")(?=[^}}]*\bpci_bus="{re.escape(bdf)}")'
    return re.compile(rb"^rocm_kernel_events_total\{" + labels.encode() + rb"[^}]*\} (\S+)$", re.M)


def counter_value(conn: http.client.HTTPConnection, pattern: re.Pattern[bytes]) -> float:
    conn.request("GET", "/metrics", headers={"Accept": PROMETHEUS_TEXT})
    body = conn.getresponse().read()
    match = pattern.search(body)
    return float(match.group(1)) if match else float("nan")


def open_fifo_writer(path: Path, server: Server, limit: float = 30) -> int:
    """O_WRONLY on the FIFO once the exporter has it open for reading (ENXIO before)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.label} exited: {server.stderr_tail()}")
        time.sleep(0.02)
    raise RuntimeError(f"{server.label} never opened {path}")


def measure_latency(server: Server, bdf: str, write: Callable[[int], None], samples: int) -> tuple[list[float], int]:
    pattern = counter_pattern(bdf)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    times: list[float] = []
    missed = 0
    try:
        for i in range(samples):
            time.sleep(LATENCY_SPACING_S)
            before = counter_value(conn, pattern)
            start = time.perf_counter()
            write(i)
            while time.perf_counter() - start < LATENCY_SAMPLE_LIMIT_S:
                if counter_value(conn, pattern) > before:
                    times.append((time.perf_counter() - start) * 1e3)
                    break
                time.sleep(LATENCY_POLL_S)
            else:
                missed += 1
                if missed >= 3:
                    break
    finally:
        conn.close()
    return times, missed


def section_latency(hosts: dict[str, Host], args: argparse.Namespace, logs: Path) -> list[LatencyResult]:
    host = hosts["8 GPUs"]
    bdf = host.bdfs[0]
    message = f"amdgpu {bdf}: amdgpu: GPU reset begin!"
    results = []

    followed = host.root.root / "var" / "log" / "kern-latency.log"
    followed.write_text("")
    with start_ours(host, logs, kernel_log=followed) as server:
        wait_ours(server)
        fd = os.open(followed, os.O_WRONLY | os.O_APPEND)
        try:

            def append_line(i: int) -> None:  # a dmesg line, as a journal or syslog file has it
                os.write(fd, f"[{100 + i:12.6f}] {message}\n".encode())

            times, missed = measure_latency(server, bdf, append_line, args.samples)
        finally:
            os.close(fd)
    results.append(LatencyResult("followed file", times, missed, pct(times, 50), pct(times, 90), max(times, default=0)))

    fifo = host.root.root / "run" / "rocm-watchdog" / "kmsg.fifo"
    fifo.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(fifo, 0o644)
    with start_ours(host, logs, kernel_log=fifo) as server:
        fd = open_fifo_writer(fifo, server)
        try:
            wait_ours(server)

            def write_kmsg(i: int) -> None:  # a /dev/kmsg record as kmsg-relay passes it on: one write
                seq = i + 1
                record = f"6,{seq},{(100 + i) * 1_000_000},-;{message}\n SUBSYSTEM=pci\n DEVICE=+pci:{bdf}\n"
                os.write(fd, record.encode())

            times, missed = measure_latency(server, bdf, write_kmsg, args.samples)
        finally:
            os.close(fd)
    results.append(LatencyResult("FIFO, kmsg records (kmsg-relay)", times, missed, pct(times, 50), pct(times, 90),
                                 max(times, default=0)))  # fmt: skip
    return results


def report_latency(results: list[LatencyResult]) -> str:
    rows = [
        [r.path, f"{len(r.samples_ms)} (+{r.missed} missed)", fmt(r.p50_ms, 1), fmt(r.p90_ms, 1), fmt(r.max_ms, 1),
         f"< {LATENCY_TARGET_MS:g} ms: {'yes' if r.max_ms < LATENCY_TARGET_MS and not r.missed else 'NO'}"]
        for r in results
    ]  # fmt: skip
    return "\n".join([
        f"`GPU reset begin!` written, /metrics polled every {LATENCY_POLL_S * 1e3:g} ms until "
        f"`rocm_kernel_events_total{{class=\"gpu_reset_begin\"}}` moves; samples {LATENCY_SPACING_S:g} s apart, "
        f"a sample missed after {LATENCY_SAMPLE_LIMIT_S:g} s.\n",
        table(["kernel log", "samples", "p50 ms", "p90 ms", "max ms", "target (max)"], rows),
    ])  # fmt: skip


# --- 4. kernel-log throughput -----------------------------------------------------------------------------


@dataclass
class ThroughputResult:
    log: str
    lines: int
    megabytes: float
    lines_per_s: float
    lines_per_cpu_s: float
    runs_lines_per_s: list[float]
    target: int


def section_throughput(args: argparse.Namespace) -> list[ThroughputResult]:
    import kernel_log  # benchmarks/kernel_log.py

    results = []
    logs = (("honest noise", lambda: kernel_log.noise(args.lines)),
            ("amdgpu only", lambda: kernel_log.amdgpu_only(args.lines * 3 // 10)))  # fmt: skip
    for name, make in logs:
        data = make().encode()
        runs = [kernel_log.follow(data) for _ in range(args.repeats)]
        walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
        result = ThroughputResult(name, data.count(b"\n"), len(data) / 1e6, median(walls), median(cpus), walls,
                                  THROUGHPUT_TARGETS[name])  # fmt: skip
        print(f"  {name}: {fmt(result.lines_per_s, 0)} lines/s", flush=True)
        results.append(result)
    return results


def report_throughput(results: list[ThroughputResult]) -> str:
    rows = [
        [r.log, f"{r.lines:,}", fmt(r.megabytes, 1), fmt(r.lines_per_s, 0),
         f"{fmt(min(r.runs_lines_per_s), 0)}..{fmt(max(r.runs_lines_per_s), 0)}", fmt(r.lines_per_cpu_s, 0),
         f"{r.target:,} ({'met' if r.lines_per_s >= r.target else 'not met'})"]
        for r in results
    ]  # fmt: skip
    return "\n".join([
        "A followed file: appended, collected until every line is counted (benchmarks/kernel_log.py `follow`), "
        "median of the repeats.\n",
        table(["followed file", "lines", "MB", "lines/s", "runs", "lines per CPU s", "target lines/s"], rows),
    ])  # fmt: skip


# --- 5. start-up time -------------------------------------------------------------------------------------


@dataclass
class StartupResult:
    command: str
    runs_ms: list[float]
    median_ms: float
    p90_ms: float
    exit_codes: list[int]
    target_ms: float | None
    tool_runs_per_start: float
    failure: str  # stderr of a failed run, if any
    installed: str  # where rocm-watchdog came from (installed_program)


def tool_calls(host: Host, tools: Path | None = None) -> int:
    """Runs of the stub tools so far (each stub logs its arguments, one line a run), in ``host.tools`` or
    ``tools``."""
    return sum(len(path.read_text().splitlines()) for path in (tools or host.tools).glob(".*.calls"))


def timed_runs(argv: list[str], runs: int) -> tuple[list[float], list[int], str]:
    """Wall times (ms) and exit codes of ``runs`` runs after one unmeasured (page cache, a first baseline
    written); the stderr of the last run that failed (exit code 2 or more: check exits 1 for problems found)."""
    failure = ""
    times, codes = [], []
    for i in range(runs + 1):
        start = time.perf_counter()
        done = subprocess.run(argv, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60,
                              check=False)  # fmt: skip
        elapsed = (time.perf_counter() - start) * 1e3
        if done.returncode >= 2 or done.returncode < 0:
            failure = done.stderr.decode(errors="replace")[-1000:]
        if i:
            times.append(elapsed)
            codes.append(done.returncode)
    return times, codes, failure


def installed_program(base: Path) -> tuple[str, list[str], str]:
    """(python, rocm-watchdog) as users get them: ``pip install`` of the checkout (what scripts/install and the image
    do) into a venv of its own; the development venv's editable install instead adds a path finder to every start
    (about 11 ms). Falls back to this interpreter's entry point, and says so, when the install fails."""
    venv = base / "installed-venv"
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(ROOT)], check=True, capture_output=True,
                       timeout=900)  # fmt: skip
        return str(venv / "bin" / "python"), [str(venv / "bin" / "rocm-watchdog")], "`pip install` of the checkout"
    except (OSError, subprocess.SubprocessError) as exc:
        entry = Path(sys.executable).parent / "rocm-watchdog"
        program = [str(entry)] if entry.exists() else [sys.executable, "-m", "exporter"]
        return sys.executable, program, f"the development venv (installing failed: {exc})"


def section_startup(hosts: dict[str, Host], args: argparse.Namespace) -> list[StartupResult]:
    host = hosts["8 GPUs"]
    python, program, how = installed_program(host.root.root.parent)
    print(f"  rocm-watchdog from {how}", flush=True)
    host_flags = [f"--path.rootfs={host.root.root}", f"--state.dir={host.fresh_state_dir()}", "--log.level=error"]
    sources = [f"--kernel-log.path={host.kernel_log}", f"--rocm-smi.path={host.tools / 'rocm-smi'}",
               f"--amd-smi.path={host.tools / 'amd-smi'}", "--smi.backend=both"]  # fmt: skip
    no_tools = ["--no-collector.rocm-smi", "--no-collector.amd-smi"]
    # rocm-smi as a /bin/sh script printing its JSON with the topology of the host's 8 GPUs; amd-smi not installed
    sh_tools = host.root.root / "opt" / "rocm-sh" / "bin"
    captures = host.root.root / "captures"
    topology = capture_for_host(ROCM_SMI_TOPOLOGY_CAPTURE, host.bdfs, captures / ROCM_SMI_TOPOLOGY_CAPTURE.name)
    sh_rocm_smi = shell_stub(sh_tools, "rocm-smi", DATA / "stubs" / "rocm-smi-help.txt", topology)
    sh_sources = [f"--kernel-log.path={host.kernel_log}", f"--rocm-smi.path={sh_rocm_smi}", "--smi.backend=rocm-smi",
                  "--no-collector.amd-smi"]  # fmt: skip
    commands = [
        ("python -c pass", [python, "-c", "pass"], None),
        ("rocm-watchdog check", [*program, "check", *host_flags], STARTUP_TARGETS_MS["check"]),
        ("rocm-watchdog once (stub smi tools)", [*program, "once", *host_flags, *sources], STARTUP_TARGETS_MS["once"]),
        ("rocm-watchdog once (no smi tool)", [*program, "once", *host_flags, *sources, *no_tools],
         STARTUP_TARGETS_MS["once"]),
        ("rocm-watchdog once (rocm-smi /bin/sh stub, 8-GPU topology)", [*program, "once", *host_flags, *sh_sources],
         STARTUP_TARGETS_MS["once"]),
    ]  # fmt: skip
    results = []
    for name, argv, target in commands:
        calls = tool_calls(host) + tool_calls(host, sh_tools)
        times, codes, failure = timed_runs(argv, args.startup_runs)
        tools = (tool_calls(host) + tool_calls(host, sh_tools) - calls) / (args.startup_runs + 1)
        results.append(StartupResult(name, times, median(times), pct(times, 90), codes, target, tools, failure, how))
        print(f"  {name}: median {fmt(median(times), 1)} ms", flush=True)
    return results


def report_startup(results: list[StartupResult]) -> str:
    rows = []
    for r in results:
        target = "" if r.target_ms is None else f"< {r.target_ms:g} ms: {'yes' if r.median_ms < r.target_ms else 'NO'}"
        codes = ",".join(str(c) for c in sorted(set(r.exit_codes)))
        rows.append([r.command, str(len(r.runs_ms)), fmt(r.median_ms, 1), fmt(r.p90_ms, 1), codes,
                     fmt(r.tool_runs_per_start, 0), target])  # fmt: skip
    out = [
        "Wall time of a whole process on the 8-GPU host, rocm-watchdog (and the `python -c pass` beside it) from "
        f"{results[0].installed if results else '?'}, package compiled (as installed), PYTHONDONTWRITEBYTECODE "
        "unset; one unmeasured run first. The stub tools are Python scripts: each run of one costs about a "
        "`python -c pass`. The exporter's own start-up is the row without a tool.\n",
        table(["command", "runs", "median ms", "p90 ms", "exit codes", "stub tool runs per start",
               "target (median)"], rows),
    ]  # fmt: skip
    for r in results:
        if r.failure:
            out.append(f"\n**{r.command} failed**, its times are no start-up time:\n\n```\n{r.failure.strip()}\n```")
    return "\n".join(out)


# --- 6. series per GPU ------------------------------------------------------------------------------------


@dataclass
class FamilyCount:
    family: str
    type: str
    on_gpus: int = 0  # samples whose pci_bus is a physical GPU
    on_partitions: int = 0  # ... a partition
    other: int = 0  # host-level, or pci_bus of no GPU of the host ("unknown")

    @property
    def total(self) -> int:
        return self.on_gpus + self.on_partitions + self.other


@dataclass
class SeriesResult:
    host: str
    physical: int
    partitions: int
    families: dict[str, FamilyCount]
    body_bytes: int


_PCI_BUS = re.compile(r'[{,]pci_bus="([^"]*)"')


def count_families(host: str, text: str) -> SeriesResult:
    info = {m.group(1) for m in re.finditer(r'^rocm_gpu_info\{[^}]*\bpci_bus="([^"]*)"', text, re.M)}
    physical = {bdf for bdf in info if bdf.endswith(".0")}
    partitions = info - physical
    families: dict[str, FamilyCount] = {}
    current: FamilyCount | None = None
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            current = families.setdefault(name, FamilyCount(name, kind))
            continue
        if not line or line.startswith("#"):
            continue
        name = re.split(r"[{ ]", line, maxsplit=1)[0]
        family = current if current and name.startswith(current.family) else None
        if family is None:
            family = families.setdefault(name, FamilyCount(name, "untyped"))
        match = _PCI_BUS.search(line)
        bdf = match.group(1) if match else None
        if bdf in physical:
            family.on_gpus += 1
        elif bdf in partitions:
            family.on_partitions += 1
        else:
            family.other += 1
    return SeriesResult(host, len(physical), len(partitions), families, len(text.encode()))


def section_series(hosts: dict[str, Host], logs: Path) -> list[SeriesResult]:
    results = []
    for host in hosts.values():
        with start_ours(host, logs) as server:
            text = wait_steady(server)
        result = count_families(host.label, text)
        if (result.physical, result.partitions) != (len(host.bdfs), host.partitions):
            print(f"  note: {host.label}: rocm_gpu_info has {result.physical} GPUs and {result.partitions} partitions, "
                  f"the host {len(host.bdfs)} and {host.partitions}", flush=True)  # fmt: skip
        results.append(result)
    return results


def report_series(results: list[SeriesResult]) -> str:
    def per(n: int, d: int) -> str:
        return fmt(n / d, 1) if d else "-"

    names = {name: f.type for r in results for name, f in r.families.items()}
    big = results[-1]
    order = sorted(names, key=lambda n: (-(big.families[n].total if n in big.families else 0), n))
    headers = ["family", "type"]
    for r in results:
        headers += [f"{r.host}: per GPU", "per partition", "host-level", "total"]
    rows = []
    for name in order:
        row = [f"`{name}`", names[name]]
        for r in results:
            f = r.families.get(name, FamilyCount(name, names[name]))
            row += [per(f.on_gpus, r.physical), per(f.on_partitions, r.partitions), str(f.other), str(f.total)]
        rows.append(row)
    totals = ["**all**", ""]
    for r in results:
        fs = r.families.values()
        totals += [per(sum(f.on_gpus for f in fs), r.physical), per(sum(f.on_partitions for f in fs), r.partitions),
                   str(sum(f.other for f in fs)), f"**{sum(f.total for f in fs)}**"]  # fmt: skip
    rows.append(totals)
    empty = [name for name in order if all(r.families.get(name, FamilyCount(name, "")).total == 0 for r in results)]
    rows = [row for row, name in zip(rows, [*order, ""], strict=True) if name not in empty]
    hosts = "; ".join(
        f"{r.host}: {r.physical} GPUs + {r.partitions} partitions (rocm_gpu_info), {r.body_bytes / 1024:.0f} KiB"
        for r in results
    )
    return "\n".join([
        f"Samples per family on /metrics (text) once every source has run twice. {hosts}. A sample is a GPU's or a "
        "partition's by its `pci_bus` label; the rest (host-level, `pci_bus=\"unknown\"`) is `host-level`.\n",
        table(headers, rows),
        f"\nFamilies without a sample on either host ({len(empty)}): {', '.join(empty) or 'none'}.",
    ])  # fmt: skip


# --- main -------------------------------------------------------------------------------------------------


def to_json(value: Any) -> Any:
    """Dataclasses, lists and dicts as JSON values; nan as null."""
    if is_dataclass(value) and not isinstance(value, type):
        data = {f.name: getattr(value, f.name) for f in fields(value)}
        if isinstance(value, FamilyCount):
            data["total"] = value.total
        return to_json(data)
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {', '.join(SECTIONS)}")
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run [5]")
    parser.add_argument("--repeats", type=int, default=3, help="wrk runs per cell and throughput runs [3]")
    parser.add_argument("--idle-seconds", type=float, default=600, help="idle run, 30 s warm-up included [600]")
    parser.add_argument("--lines", type=int, default=1_000_000, help="noise-log lines; amdgpu-only: 30 %% [1000000]")
    parser.add_argument("--samples", type=int, default=20, help="kernel-log latency samples per path [20]")
    parser.add_argument("--startup-runs", type=int, default=20, help="runs per start-up command [20]")
    parser.add_argument("--json", type=Path, help="write the raw figures here")
    args = parser.parse_args()
    args.sections = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(args.sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    # Bounds: every loop is bounded in count and time.
    args.duration = max(1, min(args.duration, 60))
    args.repeats = max(1, min(args.repeats, 9))
    args.idle_seconds = max(IDLE_WARMUP_S + 10, min(args.idle_seconds, 3600))
    args.lines = max(10_000, min(args.lines, 5_000_000))
    args.samples = max(1, min(args.samples, 200))
    args.startup_runs = max(1, min(args.startup_runs, 200))
    return args


def main() -> None:
    args = parse_args()

    def terminate(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds through every finally: the processes are stopped

    signal.signal(signal.SIGTERM, terminate)
    if "scrape" in args.sections and shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install wrk): needed by the scrape section")
    header = machine_header()
    print("# rocm-watchdog performance suite\n")
    print("\n".join(f"- {k}: {v}" for k, v in header.items()))
    print(f"- settings: sections {','.join(args.sections)}; wrk {args.duration} s x {args.repeats}; idle "
          f"{args.idle_seconds:g} s; lines {args.lines:,}; latency samples {args.samples}; start-up runs "
          f"{args.startup_runs}\n", flush=True)  # fmt: skip
    compileall.compile_dir(ROOT / "exporter", quiet=1)  # as installed: .pyc files present (child_env keeps them)
    figures: dict[str, Any] = {"header": header, "settings": {k: v for k, v in vars(args).items() if k != "json"}}
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="rocm-watchdog-suite-") as tmp:
            base = Path(tmp)
            logs = base / "logs"
            needs_64 = {"scrape", "idle", "series"} & set(args.sections)
            hosts = {label: build_host(base, label) for label in HOSTS if label == "8 GPUs" or needs_64}
            runners: dict[str, tuple[str, Callable[[], Any], Callable[[Any], str]]] = {
                "scrape": ("1. Scrape latency under load", lambda: section_scrape(hosts, args, logs), report_scrape),
                "idle": ("2. Idle cost at the default intervals", lambda: section_idle(hosts, args, logs), report_idle),
                "latency": ("3. Kernel-log record to counter", lambda: section_latency(hosts, args, logs),
                            report_latency),
                "throughput": ("4. Kernel-log throughput", lambda: section_throughput(args), report_throughput),
                "startup": ("5. Start-up time", lambda: section_startup(hosts, args), report_startup),
                "series": ("6. Series per GPU", lambda: section_series(hosts, logs), report_series),
            }  # fmt: skip
            for name in SECTIONS:
                if name not in args.sections:
                    continue
                title, run, report = runners[name]
                print(f"## {title}\n", flush=True)
                section_start = time.monotonic()
                result = run()
                figures[name] = result
                print(f"\n{report(result)}\n\n({time.monotonic() - section_start:.0f} s)\n", flush=True)
    finally:
        figures["elapsed_s"] = time.monotonic() - started
        if args.json:
            args.json.write_text(json.dumps(to_json(figures), indent=1) + "\n")
            print(f"raw figures: {args.json}")
    print(f"total {figures['elapsed_s']:.0f} s")


if __name__ == "__main__":
    main()
