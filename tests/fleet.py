"""A fleet on loopback: N real ``rocm-watchdog serve`` processes, each watching its own fake host, scraped by one
real Prometheus that evaluates the shipped alert rules and notifies one real Alertmanager running the shipped
example config, whose receivers are webhooks in this process.

Used by tests/test_fleet.py (assertions) and benchmarks/fleet.py (figures). What is changed from what ships, and
only that:

- the rules (``alerts/rocm-watchdog.rules.yml``): every group evaluates every second, every ``for:`` and
  ``keep_firing_for:`` is shortened, so a test waits seconds instead of minutes;
- the Alertmanager config (``alerts/alertmanager.example.yml``): each receiver's webhook URL points at a
  ``Webhook`` of the same name here, and every ``group_wait``/``group_interval`` is shortened.

Every host is its own ``FakeRoot`` (tests/fakeroot.py) named ``host-NN``, with its own state dir and its own
(empty) kernel-log file outside the root, so no exporter reads the machine's ``/dev/kmsg``; ``NODE_NAME`` names
the host in ``rocm_watchdog_host_info``. Every wait is bounded; ``Fleet.close`` stops every process it started
(SIGTERM, then SIGKILL after a bounded wait).
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil
import requests
import yaml
from fakeroot import FakeGpu, FakeRoot, build_root
from webhook import Webhook

PROJECT = Path(__file__).resolve().parents[1]
RULES = PROJECT / "alerts" / "rocm-watchdog.rules.yml"
ALERTMANAGER_CONFIG = PROJECT / "alerts" / "alertmanager.example.yml"
JOB = "rocm-watchdog"

# Two GPUs a host, numbered as the kernel does without a BMC: card0/renderD128/KFD node 1, card1/renderD129/node 2.
GPU_BDFS = ("0000:03:00.0", "0000:83:00.0")


class MissingBinary(RuntimeError):
    pass


def binary(*candidates: str) -> str:
    """The first of ``candidates`` on PATH; raises MissingBinary naming what installs it."""
    for name in candidates:
        path = shutil.which(name)
        if path:
            return path
    raise MissingBinary(f"{candidates[0]} is not installed: scripts/test installs it (Debian packages)")


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (all held open while choosing, so none repeats)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_until(predicate: Callable[[], bool], limit_seconds: float, interval: float = 0.2) -> bool:
    """Poll ``predicate`` until it holds or ``limit_seconds`` pass; whether it held."""
    deadline = time.monotonic() + limit_seconds
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def stop(procs: list[subprocess.Popen[bytes]], limit_seconds: float = 15) -> None:
    """SIGTERM every process, wait for all of them together at most ``limit_seconds``, then SIGKILL the rest."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + limit_seconds
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


# ---- the shipped configs, changed only where a test must --------------------------------------------------


def fast_rules(doc: dict[str, Any], for_: str, keep_firing_for: str) -> dict[str, Any]:
    """The rules document with every group evaluated each second and every ``for``/``keep_firing_for`` shortened."""
    for group in doc["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = for_
            if "keep_firing_for" in rule:
                rule["keep_firing_for"] = keep_firing_for
    return doc


def redirect_alertmanager_config(doc: dict[str, Any], urls: Mapping[str, str], wait: str = "1s") -> dict[str, Any]:
    """The Alertmanager config with each receiver's webhook URLs replaced by ``urls[receiver name]`` and every
    ``group_wait``/``group_interval`` set to ``wait``; routing, grouping and inhibition are kept."""

    def shorten(route: dict[str, Any], top: bool) -> None:
        for key in ("group_wait", "group_interval"):
            if top or key in route:
                route[key] = wait
        for child in route.get("routes", []):
            shorten(child, False)

    shorten(doc["route"], True)
    for receiver in doc["receivers"]:
        others = set(receiver) - {"name", "webhook_configs"}
        if others:
            raise ValueError(f"receiver {receiver['name']} has {sorted(others)}: only webhooks can be redirected")
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = urls[receiver["name"]]
    return doc


def start_alertmanager(config: Path, port: int, workdir: Path, log: IO[bytes]) -> subprocess.Popen[bytes]:
    """A real Alertmanager on 127.0.0.1:port, without clustering (no gossip port)."""
    return subprocess.Popen(
        [
            binary("prometheus-alertmanager", "alertmanager"),
            f"--config.file={config}",
            f"--storage.path={workdir}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def ready(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def exited_or_ready(proc: subprocess.Popen[bytes], url: str) -> bool:
    """Stop waiting for a server that answers ``url`` with 200, or that died (the caller says which)."""
    return proc.poll() is not None or ready(url)


# ---- hosts --------------------------------------------------------------------------------------------------


@dataclass
class Host:
    index: int
    root: FakeRoot
    port: int
    kernel_log: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = None

    @property
    def name(self) -> str:
        return f"host-{self.index:02d}"

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "exporter",
            "serve",
            "--no-collector.rocm-smi",
            "--no-collector.amd-smi",
            "--no-collector.processes",
            "--collector.devices.interval=1s",
            "--log.level=error",
            f"--web.listen-address={self.instance}",
            f"--path.rootfs={self.root.root}",
            f"--state.dir={self.root.state_dir}",
            f"--kernel-log.path={self.kernel_log}",
        ]

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(PROJECT), "NODE_NAME": self.name}

    def start(self) -> None:
        if self.log_file is None:
            self.log_file = self.log_path.open("ab")
        self.proc = subprocess.Popen(self.argv(), env=self.env(), stdout=self.log_file, stderr=subprocess.STDOUT)

    def serving(self) -> bool:
        """The exporter answers and names this host; its first baseline is on disk."""
        if not (self.root.state_dir / "baseline.json").exists():
            return False
        try:
            text = requests.get(f"http://{self.instance}/metrics", timeout=2).text
        except requests.RequestException:
            return False
        return f'rocm_watchdog_host_info{{nodename="{self.name}"}} 1.0' in text

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"<{exc}>"


def two_gpu_host(base: Path, index: int) -> FakeRoot:
    a, b = GPU_BDFS
    return build_root(
        base,
        [FakeGpu(a, card=0, render=128, kfd_node=1), FakeGpu(b, card=1, render=129, kfd_node=2, unique_id=0x1234)],
        name=f"host-{index:02d}",
    )


def remove_first_gpu(root: FakeRoot) -> FakeGpu:
    """The first GPU is gone after a reboot; the kernel gives the others the lower card/render/KFD numbers."""
    gone = root.gpus[0]
    root.gpus.remove(gone)
    for i, gpu in enumerate(root.gpus):
        gpu.card, gpu.render, gpu.kfd_node = i, 128 + i, 1 + i
    root.reboot()
    return gone


# ---- the fleet ----------------------------------------------------------------------------------------------


@dataclass
class Usage:
    """CPU (cores, averaged over a window) and RSS of the processes a fleet started."""

    window_seconds: float
    exporter_cpu: list[float]
    exporter_rss: list[int]
    prometheus_cpu: float
    prometheus_rss: int
    alertmanager_cpu: float
    alertmanager_rss: int


@dataclass
class Fleet:
    base: Path
    hosts_count: int = 50
    scrape_interval: str = "1s"
    for_: str = "3s"
    keep_firing_for: str = "5s"
    self_scrape: bool = False  # also scrape Prometheus' own /metrics (job "prometheus"), for the benchmark
    hosts: list[Host] = field(default_factory=list)
    hooks: dict[str, Webhook] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    prometheus: subprocess.Popen[bytes] | None = None
    alertmanager: subprocess.Popen[bytes] | None = None
    prom_port: int = 0
    am_port: int = 0
    _logs: list[IO[bytes]] = field(default_factory=list)

    # -- lifecycle --

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, limit_seconds: float = 120) -> None:
        """Build the hosts, start every exporter at once, then Alertmanager and Prometheus once every exporter
        serves (so no target is ever scraped down by accident); return when every target is up."""
        prometheus = binary("prometheus")
        binary("prometheus-alertmanager", "alertmanager")
        started = time.monotonic()
        deadline = started + limit_seconds
        logs = self.base / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        ports = free_ports(self.hosts_count + 2)
        self.prom_port, self.am_port = ports[-2], ports[-1]
        for i in range(self.hosts_count):
            kernel_log = logs / f"host-{i:02d}.kern.log"
            kernel_log.write_text("")
            self.hosts.append(
                Host(i, two_gpu_host(self.base / "hosts", i), ports[i], kernel_log, logs / f"host-{i:02d}.log")
            )
        self.timings["build_roots"] = time.monotonic() - started

        t = time.monotonic()
        for host in self.hosts:
            host.start()
        waiting = list(self.hosts)
        while waiting and time.monotonic() < deadline:
            for host in waiting:
                code = host.proc.poll() if host.proc is not None else None
                if code is not None:
                    raise RuntimeError(f"{host.name}'s exporter exited {code}:\n{host.log_tail()}")
            waiting = [h for h in waiting if not h.serving()]
            if waiting:
                time.sleep(0.3)
        if waiting:
            raise RuntimeError(f"exporters not serving after {limit_seconds}s: {[h.name for h in waiting]}")
        self.timings["exporters_serving"] = time.monotonic() - t

        t = time.monotonic()
        self.hooks = {name: Webhook(name) for name in ("pager", "tickets", "remediation")}
        am_config = self.base / "alertmanager.yml"
        doc = redirect_alertmanager_config(
            yaml.safe_load(ALERTMANAGER_CONFIG.read_text()), {name: hook.url for name, hook in self.hooks.items()}
        )
        am_config.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.alertmanager = start_alertmanager(am_config, self.am_port, self.base / "am", self._log("alertmanager"))

        rules = self.base / "rules.yml"
        rules.write_text(
            yaml.safe_dump(
                fast_rules(yaml.safe_load(RULES.read_text()), self.for_, self.keep_firing_for), sort_keys=False
            )
        )
        scrape_configs: list[dict[str, Any]] = [
            {"job_name": JOB, "static_configs": [{"targets": [h.instance for h in self.hosts]}]}
        ]
        if self.self_scrape:
            scrape_configs.append(
                {"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{self.prom_port}"]}]}
            )
        prom_config = self.base / "prometheus.yml"
        prom_config.write_text(
            yaml.safe_dump(
                {
                    "global": {
                        "scrape_interval": self.scrape_interval,
                        "scrape_timeout": self.scrape_interval,
                        "evaluation_interval": "1s",
                    },
                    "rule_files": [str(rules)],
                    "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{self.am_port}"]}]}]},
                    "scrape_configs": scrape_configs,
                },
                sort_keys=False,
            )
        )
        self.prometheus = subprocess.Popen(
            [
                prometheus,
                f"--config.file={prom_config}",
                f"--storage.tsdb.path={self.base / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.prom_port}",
            ],
            stdout=self._log("prometheus"),
            stderr=subprocess.STDOUT,
        )
        for name, proc, url in (
            ("alertmanager", self.alertmanager, f"http://127.0.0.1:{self.am_port}/-/ready"),
            ("prometheus", self.prometheus, f"http://127.0.0.1:{self.prom_port}/-/ready"),
        ):
            if not wait_until(functools.partial(exited_or_ready, proc, url), max(1.0, deadline - time.monotonic())):
                raise RuntimeError(f"{name} not ready:\n{self.log_tail(name)}")
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited {proc.returncode}:\n{self.log_tail(name)}")
        if not wait_until(lambda: len(self.targets_up()) == len(self.hosts), max(1.0, deadline - time.monotonic())):
            up = self.targets_up()
            raise RuntimeError(
                f"targets not up: {[f'{h.name} {h.instance}' for h in self.hosts if h.instance not in up]}"
            )
        self.timings["prometheus_all_up"] = time.monotonic() - t

    def close(self) -> None:
        """Stop every process this fleet started; then the webhooks and the log files."""
        procs = [p for p in (self.prometheus, self.alertmanager) if p is not None]
        procs += [h.proc for h in self.hosts if h.proc is not None]
        try:
            stop(procs)
        finally:
            for hook in self.hooks.values():
                hook.close()
            for f in [*self._logs, *(h.log_file for h in self.hosts if h.log_file is not None)]:
                f.close()

    def _log(self, name: str) -> IO[bytes]:
        f = (self.base / "logs" / f"{name}.log").open("ab")
        self._logs.append(f)
        return f

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            return "\n".join((self.base / "logs" / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"<{exc}>"

    # -- acting on hosts --

    def kill(self, host: Host) -> None:
        """SIGKILL: the exporter vanishes without a goodbye, as on an OOM kill or a node hang."""
        assert host.proc is not None
        host.proc.send_signal(signal.SIGKILL)
        host.proc.wait(timeout=10)

    def restart(self, host: Host, limit_seconds: float = 30) -> None:
        """Start the host's exporter again on the same address (same Prometheus target); wait until it serves."""
        assert host.proc is None or host.proc.poll() is not None, f"{host.name}'s exporter is still running"
        host.start()
        if not wait_until(host.serving, limit_seconds):
            raise RuntimeError(f"{host.name} did not come back:\n{host.log_tail()}")

    def baseline_accept(self, host: Host) -> subprocess.CompletedProcess[str]:
        """``rocm-watchdog baseline accept`` on the host, as an operator would run it next to the daemon."""
        argv = [
            sys.executable,
            "-m",
            "exporter",
            "baseline",
            "accept",
            f"--path.rootfs={host.root.root}",
            f"--state.dir={host.root.state_dir}",  # baseline accept reads no kernel log: no --kernel-log.path
            "--log.level=error",
        ]
        return subprocess.run(argv, env=host.env(), capture_output=True, text=True, timeout=60)

    def host_of(self, instance: str | None) -> Host | None:
        return next((h for h in self.hosts if h.instance == instance), None)

    # -- Prometheus and Alertmanager --

    @property
    def prom_url(self) -> str:
        return f"http://127.0.0.1:{self.prom_port}"

    @property
    def am_url(self) -> str:
        return f"http://127.0.0.1:{self.am_port}"

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant PromQL query; the result vector."""
        response = requests.get(f"{self.prom_url}/api/v1/query", params={"query": expr}, timeout=10)
        response.raise_for_status()
        result: list[dict[str, Any]] = response.json()["data"]["result"]
        return result

    def targets_up(self) -> set[str]:
        try:
            response = requests.get(f"{self.prom_url}/api/v1/targets", params={"state": "active"}, timeout=5)
            targets = response.json()["data"]["activeTargets"]
        except (requests.RequestException, ValueError, KeyError):
            return set()
        return {t["labels"]["instance"] for t in targets if t["labels"].get("job") == JOB and t["health"] == "up"}

    def prometheus_alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = requests.get(f"{self.prom_url}/api/v1/alerts", timeout=5).json()["data"][
            "alerts"
        ]
        return alerts

    def alertmanager_alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = requests.get(f"{self.am_url}/api/v2/alerts", timeout=5).json()
        return alerts

    def received(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(receiver, alert) for every alert every webhook received, repeats included."""
        for name, hook in self.hooks.items():
            for alert in hook.alerts():
                yield name, alert

    def diagnostics(self, hosts: list[Host] | None = None) -> str:
        """What Prometheus, Alertmanager and the webhooks had, and the logs of ``hosts``: for a failure message."""
        out: list[str] = []

        def section(title: str, fetch: Callable[[], list[str]]) -> None:
            try:
                lines = fetch()
            except (requests.RequestException, ValueError, KeyError) as exc:
                lines = [f"<{exc!r}>"]
            out.append(f"--- {title} ({len(lines)})")
            out.extend(lines[:80])

        def label_text(labels: Mapping[str, str]) -> str:
            """``alertname {labels}``, with the host's name for its instance."""
            host = self.host_of(labels.get("instance"))
            text = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "alertname")
            return f"{labels['alertname']} {{{text}}}" + (f" [{host.name}]" if host else "")

        section(
            "Prometheus /api/v1/alerts",
            lambda: [f"{a['state']:8} {label_text(a['labels'])}" for a in self.prometheus_alerts()],
        )
        section(
            "Alertmanager /api/v2/alerts",
            lambda: [
                f"{a['status']['state']:10} {label_text(a['labels'])}"
                f"{' inhibited by ' + str(a['status']['inhibitedBy']) if a['status']['inhibitedBy'] else ''}"
                for a in self.alertmanager_alerts()
            ],
        )
        section(
            "webhooks (distinct)",
            lambda: sorted({f"{r:7} {a['status']:8} {label_text(a['labels'])}" for r, a in self.received()}),
        )

        def down() -> list[str]:
            up = self.targets_up()
            return [f"{h.name} {h.instance}" for h in self.hosts if h.instance not in up]

        section("targets down", down)
        for host in hosts or []:
            out.append(f"--- {host.name} ({host.instance}) exporter log, last lines")
            out.append(host.log_tail())
        for name in ("prometheus", "alertmanager"):
            out.append(f"--- {name} log, last lines")
            out.append(self.log_tail(name, 10))
        return "\n".join(out)

    # -- resources --

    def usage(self, window_seconds: float) -> Usage:
        """CPU over a window (cores: CPU seconds / wall seconds) and RSS at its end, per process."""
        exporters = [psutil.Process(h.proc.pid) for h in self.hosts if h.proc is not None and h.proc.poll() is None]
        assert self.prometheus is not None and self.alertmanager is not None
        prom, am = psutil.Process(self.prometheus.pid), psutil.Process(self.alertmanager.pid)
        everyone = [*exporters, prom, am]

        def cpu(p: psutil.Process) -> float:
            t = p.cpu_times()
            return float(t.user + t.system)

        before = [cpu(p) for p in everyone]
        t0 = time.monotonic()
        time.sleep(window_seconds)
        elapsed = time.monotonic() - t0
        cores = [(cpu(p) - b) / elapsed for p, b in zip(everyone, before, strict=True)]
        rss = [int(p.memory_info().rss) for p in everyone]
        return Usage(elapsed, cores[:-2], rss[:-2], cores[-2], rss[-2], cores[-1], rss[-1])
