"""Configuration: flags and an optional YAML file become one frozen Config. Flags win over the file."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

# Every source the CLI knows; --collector.<name> / --no-collector.<name> and --collector.<name>.interval.
SOURCE_NAMES = ("rocm-smi", "amd-smi", "sysfs", "devices", "kernel-log", "processes", "kubernetes")
# Sources that run only when asked for (--collector.kubernetes): they need something a plain host lacks.
OPT_IN_SOURCES = frozenset({"kubernetes"})

DEFAULT_INTERVALS_SECONDS = {
    "rocm-smi": 30.0,
    "amd-smi": 30.0,
    "sysfs": 15.0,
    # device-node drift comes from boots, udev and driver reloads: 30 s keeps detection well inside the drift
    # alerts' for: 1m at half the cost of the 15 s telemetry walk (BENCHMARKS.md, idle cost)
    "devices": 30.0,
    "kernel-log": 15.0,  # the heartbeat: records are read as they arrive (scheduler.WaitingSource)
    "processes": 30.0,
    "kubernetes": 15.0,
}


class Config(msgspec.Struct, frozen=True):
    listen_address: str = ":9862"
    web_config_file: Path | None = None
    web_max_requests: int = 40  # /metrics requests in flight; 503 beyond; 0: no limit (node_exporter's default)
    web_systemd_socket: bool = False  # serve on the sockets systemd passed instead of listen_address
    web_telemetry_path: str = "/metrics"  # where the exposition is served
    # drop the exporter's own process_*, python_* and scrape-duration series (node_exporter's flag of that name)
    web_disable_exporter_metrics: bool = False
    rootfs: Path = Path("/")
    sysfs: Path = Path("/sys")
    devfs: Path = Path("/dev")
    procfs: Path = Path("/proc")
    kernel_log_path: Path = Path("/dev/kmsg")
    kernel_log_rules: Path | None = None  # overrides the rules shipped in exporter/data
    rocm_smi_path: str = "rocm-smi"
    amd_smi_path: str = "amd-smi"
    smi_backend: str = "auto"  # auto | rocm-smi | amd-smi | both
    smi_timeout_seconds: float = 20.0
    state_dir: Path = Path("/var/lib/rocm-watchdog")
    # the sources switched on or off; a source not listed is off (the opt-in ones, until asked for)
    collectors: dict[str, bool] = msgspec.field(
        default_factory=lambda: {s: True for s in SOURCE_NAMES if s not in OPT_IN_SOURCES}
    )
    intervals_seconds: dict[str, float] = msgspec.field(default_factory=lambda: dict(DEFAULT_INTERVALS_SECONDS))
    top_processes: int = 20
    # --metrics.disable / --metrics.enable / --metrics.enable-only, resolved: the metric groups not exported
    # (exporter.metrics.groups; by default those off by default, the per-pair topology)
    metric_groups_disabled: frozenset[str] = frozenset({"gpu.topology.pairs"})
    # --collector.kubernetes: the kubelet's pod-resources socket (not under --path.rootfs: mount it where it is)
    kubernetes_socket: Path = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    kubernetes_timeout_seconds: float = 2.0  # deadline of one pod-resources List call
    baseline_auto_accept_boots: int = 0  # 0: never; N: accept after N healthy boots
    log_level: str = "info"
    log_format: str = "json"
    nodename: str = ""  # the host's name on every alert and in rocm_watchdog_host_info ($NODE_NAME or hostname)
    # --alertmanager.url: push active conditions to these Alertmanagers (v2 API); empty: no push
    alertmanager_urls: tuple[str, ...] = ()
    alertmanager_labels: tuple[tuple[str, str], ...] = ()  # extra labels on every pushed alert
    alertmanager_resend_seconds: float = 60.0  # re-send active alerts this often (endsAt is 3x ahead)
    alertmanager_timeout_seconds: float = 10.0
    # a critical kernel event keeps its GPU unhealthy this long after its own timestamp (rocm_gpu_health)
    health_event_window_seconds: float = 600.0
    once_output: Path | None = None  # once --output: the textfile to write atomically
    check_json: bool = False  # check --json
    # check --no-probe: do not open /dev/kfd and the render nodes to ask the kernel (exporter.sources.probe)
    check_probe: bool = True
    # serve/once --devices.probe: the devices source opens them too (a KFD process per open, a suspended GPU woken)
    devices_probe: bool = False

    def enabled(self, source: str) -> bool:
        return self.collectors.get(source, False)

    def host_path(self, path: Path) -> str:
        """The path as the host names it: ``<devfs>/dri/card0`` -> ``/dev/dri/card0``.

        Labels carry host paths whatever --path.devfs or --path.rootfs point at (contract section 4).
        """
        for root, host in ((self.devfs, "/dev"), (self.sysfs, "/sys"), (self.procfs, "/proc")):
            try:
                rel = path.relative_to(root)
            except ValueError:
                continue
            return host if str(rel) == "." else f"{host}/{rel.as_posix()}"
        return path.as_posix()


# Prometheus' duration syntax (model.ParseDuration): a whole number per unit, the units from the largest to the
# smallest, each at most once. "1s1s", "1.5s" and "15" are not durations.
_DURATION = re.compile(r"(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?")
_UNIT_SECONDS = (31536000, 604800, 86400, 3600, 60, 1, 0.001)


def parse_duration(text: str) -> float:
    """Prometheus duration syntax (``500ms``, ``15s``, ``1m30s``) -> seconds; ValueError otherwise."""
    value = str(text)
    match = _DURATION.fullmatch(value) if value else None
    if match is None:
        raise ValueError(
            f"not a duration: {text!r} (whole numbers with units y w d h m s ms, largest first, each once: "
            "e.g. 500ms, 15s, 1m30s)"
        )
    total = sum(int(n) * unit for n, unit in zip(match.groups(), _UNIT_SECONDS, strict=True) if n is not None)
    if total <= 0:
        raise ValueError(f"not a positive duration: {text!r}")
    return float(total)
